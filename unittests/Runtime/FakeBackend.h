//===- FakeBackend.h - a backend for tests that run no kernel -*- C++ -*-===//
#ifndef MERAK_UNITTESTS_RUNTIME_FAKEBACKEND_H
#define MERAK_UNITTESTS_RUNTIME_FAKEBACKEND_H

#include "merak/Runtime/Backend.h"

namespace merak::runtime {

/// Has kernels for `add` and `mul` only and runs none; its memory
/// statistics are whatever the test sets.
class FakeBackend final : public Backend {
public:
  std::string name() const override { return "fake"; }
  bool supports(OpKind kind) const override {
    return kind == OpKind::Add || kind == OpKind::Mul;
  }
  absl::StatusOr<TensorHandle> upload(const HostTensor &) override {
    return unimplemented();
  }
  absl::StatusOr<HostTensor> download(const DeviceTensor &,
                                      const TensorType &) override {
    return unimplemented();
  }
  absl::StatusOr<TensorHandle> zeros(const TensorType &) override {
    return unimplemented();
  }
  absl::StatusOr<TensorHandle> convert(const DeviceTensor &, DType) override {
    return unimplemented();
  }
  absl::Status accumulate(DeviceTensor &, const DeviceTensor &) override {
    return unimplemented();
  }
  absl::Status scale(DeviceTensor &, double) override {
    return unimplemented();
  }
  absl::Status beginStep(const StepContext &) override {
    return absl::OkStatus();
  }
  absl::Status execute(KernelCall &) override { return unimplemented(); }
  MemoryStats memoryStats() const override { return stats; }
  void resetPeak() override {}

  MemoryStats stats;

private:
  static absl::Status unimplemented() {
    return absl::UnimplementedError("the fake backend runs nothing");
  }
};

} // namespace merak::runtime

#endif // MERAK_UNITTESTS_RUNTIME_FAKEBACKEND_H
