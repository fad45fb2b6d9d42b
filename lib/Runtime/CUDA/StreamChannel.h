//===- StreamChannel.h - pipeline channels on a CUDA stream -----*- C++ -*-===//
//
// What the pipeline channels of the CUDA backend share, whatever moves
// their bytes (NCCL's point-to-point calls, Nccl.cpp; a ring in the
// receiver's memory through CUDA IPC, IpcLink.cpp): a stream of the
// channel's own, events as markers, packing copies, buffers from the
// backend's pool, and the backend's tensors as the link reads them.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_STREAMCHANNEL_H
#define MERAK_LIB_RUNTIME_CUDA_STREAMCHANNEL_H

#include "CudaKernels.h"
#include "merak/Runtime/Comm/DeviceCollectives.h"
#include "merak/Runtime/Comm/DevicePeerLink.h"
#include "merak/Runtime/Comm/Distributed.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cuda_runtime.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>

namespace merak::runtime::cuda {

/// `s` as text: its description and name.
std::string cudaText(cudaError_t s);
/// `s` as a status that says what failed.
absl::Status cudaStatus(cudaError_t s, const char *what);

/// A buffer of the device libraries as a kernel's view.
View viewOf(const DeviceBuffer &b);

/// Queues on `stream` a wait for the work queued so far on the compute
/// stream, through `event`.
absl::Status waitForCompute(DeviceState &dev, cudaEvent_t event,
                            cudaStream_t stream);
/// Queues a copy of `from` to `to` (any strides) on `stream`.
absl::Status stridedCopy(const DeviceBuffer &from, const DeviceBuffer &to,
                         cudaStream_t stream, const char *what);
/// Records a fresh event on `stream` as marker `next` (then advanced).
absl::StatusOr<int64_t> recordMarker(cudaStream_t stream,
                                     std::map<int64_t, cudaEvent_t> &events,
                                     int64_t &next);

/// The CUDA backend's tensors as the pipeline link reads and makes them.
class CudaPeerDevice final : public PeerDevice {
public:
  absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) override;
  absl::StatusOr<TensorHandle> view(const TensorHandle &buffer,
                                    int64_t byteOffset,
                                    const TensorType &type) override;
};

/// A channel's queue: `stream` (the channel's, destroyed with it), events
/// as markers, and the compute stream's ordering around it. Subclasses
/// move the bytes.
class StreamChannel : public PeerChannel {
public:
  StreamChannel(DeviceState &dev, cudaStream_t stream);
  /// Waits for the stream's work, then releases the events and the stream.
  ~StreamChannel() override;

  /// The ordering event.
  absl::Status init();

  absl::Status enqueueWaitForCompute() override;
  absl::Status enqueueCopy(const DeviceBuffer &from,
                           const DeviceBuffer &to) override;
  absl::StatusOr<TensorHandle> allocate(int64_t bytes) override;
  absl::StatusOr<int64_t> mark() override;
  absl::StatusOr<bool> reached(int64_t marker) override;
  absl::Status joinCompute(int64_t marker) override;

protected:
  /// The stream is stuck for good (on a peer gone astray): neither waited
  /// for nor destroyed.
  void abandonStream() { abandoned = true; }

  DeviceState &dev;
  cudaStream_t stream;

private:
  bool abandoned = false;
  cudaEvent_t computeDone = nullptr;
  std::map<int64_t, cudaEvent_t> events;
  int64_t next = 0;
};

/// A rank's collectives on the CUDA backend (DeviceCollectives.h), all but
/// the library's calls, which subclasses make: a communication stream of
/// its own (destroyed with it), events as markers, the backend's tensors
/// and buffers, and the compute stream's ordering around it.
class CudaCollectiveStream : public CollectiveStream {
public:
  CudaCollectiveStream(DeviceState &dev, cudaStream_t stream);
  /// Waits for the stream's work, then releases the events and the stream.
  ~CudaCollectiveStream() override;

  absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) override;
  absl::StatusOr<TensorHandle> alias(DeviceTensor &tensor) override;
  absl::StatusOr<TensorHandle> allocate(const TensorType &type) override;
  absl::Status enqueueWaitForCompute() override;
  absl::Status enqueueCopy(const DeviceBuffer &from,
                           const DeviceBuffer &to) override;
  absl::Status enqueueDivide(const DeviceBuffer &buffer, int64_t n) override;
  absl::StatusOr<int64_t> mark() override;
  absl::StatusOr<bool> reached(int64_t marker) override;
  absl::Status joinCompute(int64_t marker) override;

protected:
  DeviceState &dev;
  cudaStream_t stream;

private:
  cudaEvent_t computeDone = nullptr;
  std::map<int64_t, cudaEvent_t> events;
  int64_t next = 0;
};

/// The device link of `dev`'s rank `rank` over `outgoing` and `incoming`
/// channels of `library`, its thread on the rank's GPU, failures
/// diagnosed by `job`.
std::unique_ptr<PeerLink>
makeCudaPeerLink(DistributedJob &job, DeviceState &dev,
                 std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing,
                 std::map<int64_t, std::unique_ptr<PeerChannel>> incoming,
                 std::chrono::milliseconds timeout, const std::string &library);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_STREAMCHANNEL_H
