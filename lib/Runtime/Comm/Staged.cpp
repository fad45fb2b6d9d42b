//===- Staged.cpp - collectives of device tensors through the host --------===//
//
// See Staged.h. A staged collective keeps the host copies of its operands
// alive until it is finished (the host communicator reads them in the
// background), and copies its results to the device in `finish`.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/Staged.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime {
namespace {

absl::Status staged(const absl::Status &s, const char *where) {
  return absl::Status(s.code(), absl::StrCat("staging through the host (",
                                             where, "): ", s.message()));
}

/// `tensor` (of `type`) of the device as a host backend tensor.
absl::StatusOr<TensorHandle> toHost(Staging &st, const DeviceTensor &tensor,
                                    const TensorType &type) {
  absl::StatusOr<HostTensor> bytes = st.device.download(tensor, type);
  if (!bytes.ok())
    return staged(bytes.status(), "device to host");
  absl::StatusOr<TensorHandle> copy = st.host.upload(*bytes);
  if (!copy.ok())
    return staged(copy.status(), "device to host");
  ++st.toHost;
  st.bytesToHost += type.byteSize();
  return copy;
}

/// A host backend tensor (of `type`) as a device tensor.
absl::StatusOr<TensorHandle> toDevice(Staging &st, const DeviceTensor &tensor,
                                      const TensorType &type) {
  absl::StatusOr<HostTensor> bytes = st.host.download(tensor, type);
  if (!bytes.ok())
    return staged(bytes.status(), "host to device");
  absl::StatusOr<TensorHandle> copy = st.device.upload(*bytes);
  if (!copy.ok())
    return staged(copy.status(), "host to device");
  ++st.toDevice;
  st.bytesToDevice += type.byteSize();
  return copy;
}

/// A host collective or transfer whose results go to the device.
class StagedPending final : public PendingCollective {
public:
  StagedPending(Staging &st, std::unique_ptr<PendingCollective> inner,
                std::vector<TensorHandle> hostOperands,
                std::vector<TensorType> resultTypes)
      : st(st), inner(std::move(inner)), hostOperands(std::move(hostOperands)),
        resultTypes(std::move(resultTypes)) {}

  bool ready() override { return inner->ready(); }
  absl::Status wait() override { return inner->wait(); }
  absl::StatusOr<std::vector<TensorHandle>> finish() override {
    absl::StatusOr<std::vector<TensorHandle>> host = inner->finish();
    hostOperands.clear();
    if (!host.ok())
      return host.status();
    std::vector<TensorHandle> out;
    for (size_t r = 0; r < host->size(); ++r) {
      if (!(*host)[r]) {
        out.push_back(nullptr);
        continue;
      }
      if (r >= resultTypes.size())
        return absl::InternalError(absl::StrCat(
            "staging through the host: the host communicator returned ",
            host->size(), " results, the instruction has ",
            resultTypes.size()));
      absl::StatusOr<TensorHandle> device =
          toDevice(st, *(*host)[r], resultTypes[r]);
      if (!device.ok())
        return device.status();
      out.push_back(*std::move(device));
    }
    return out;
  }

private:
  Staging &st;
  std::unique_ptr<PendingCollective> inner;
  std::vector<TensorHandle> hostOperands;
  std::vector<TensorType> resultTypes;
};

class StagedCommunicator final : public Communicator {
public:
  StagedCommunicator(std::unique_ptr<Communicator> hostComm, Staging &st)
      : hostComm(std::move(hostComm)), st(st) {}

  int64_t rank() const override { return hostComm->rank(); }
  int64_t worldSize() const override { return hostComm->worldSize(); }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  start(KernelCall &call) override {
    const Instruction &inst = *call.instruction;
    const Program &program = *call.program;
    KernelCall hostCall;
    hostCall.instruction = call.instruction;
    hostCall.program = call.program;
    hostCall.step = call.step;
    hostCall.hostScalars = call.hostScalars;
    // Results are new host tensors: in-place targets and the arena are
    // the device's.
    hostCall.inPlace.assign(inst.results.size(), nullptr);
    std::vector<TensorHandle> hostOperands;
    for (size_t k = 0; k < call.operands.size(); ++k) {
      if (!call.operands[k]) {
        hostCall.operands.push_back(nullptr);
        continue;
      }
      absl::StatusOr<TensorHandle> copy =
          toHost(st, *call.operands[k], program.values[inst.operands[k]].type);
      if (!copy.ok())
        return copy.status();
      hostCall.operands.push_back(copy->get());
      hostOperands.push_back(*std::move(copy));
    }
    absl::StatusOr<std::unique_ptr<PendingCollective>> pending =
        hostComm->start(hostCall);
    if (!pending.ok())
      return pending.status();
    std::vector<TensorType> types;
    for (ValueId v : inst.results)
      types.push_back(program.values[v].type);
    return std::unique_ptr<PendingCollective>(std::make_unique<StagedPending>(
        st, *std::move(pending), std::move(hostOperands), std::move(types)));
  }

private:
  std::unique_ptr<Communicator> hostComm;
  Staging &st;
};

class StagedPeerLink final : public PeerLink {
public:
  StagedPeerLink(std::unique_ptr<PeerLink> hostLink, Staging &st)
      : hostLink(std::move(hostLink)), st(st) {}

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  send(int64_t peer, int64_t tag, const std::vector<DeviceTensor *> &tensors,
       const std::vector<TensorType> &types) override {
    if (tensors.size() != types.size())
      return absl::InvalidArgumentError(
          absl::StrCat("a transfer of ", tensors.size(), " tensors with ",
                       types.size(), " types"));
    std::vector<TensorHandle> hostTensors;
    std::vector<DeviceTensor *> pointers;
    for (size_t k = 0; k < tensors.size(); ++k) {
      absl::StatusOr<TensorHandle> copy = toHost(st, *tensors[k], types[k]);
      if (!copy.ok())
        return copy.status();
      pointers.push_back(copy->get());
      hostTensors.push_back(*std::move(copy));
    }
    // The host link keeps what it sends.
    return hostLink->send(peer, tag, pointers, types);
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  recv(int64_t peer, int64_t tag,
       const std::vector<TensorType> &types) override {
    absl::StatusOr<std::unique_ptr<PendingCollective>> pending =
        hostLink->recv(peer, tag, types);
    if (!pending.ok())
      return pending.status();
    return std::unique_ptr<PendingCollective>(std::make_unique<StagedPending>(
        st, *std::move(pending), std::vector<TensorHandle>{}, types));
  }

  int64_t finished() override { return hostLink->finished(); }
  void waitForProgress(int64_t since,
                       std::chrono::microseconds limit) override {
    hostLink->waitForProgress(since, limit);
  }

private:
  std::unique_ptr<PeerLink> hostLink;
  Staging &st;
};

} // namespace

std::unique_ptr<Communicator>
makeStagedCommunicator(std::unique_ptr<Communicator> hostComm,
                       Staging &staging) {
  return std::make_unique<StagedCommunicator>(std::move(hostComm), staging);
}

std::unique_ptr<PeerLink> makeStagedPeerLink(std::unique_ptr<PeerLink> hostLink,
                                             Staging &staging) {
  return std::make_unique<StagedPeerLink>(std::move(hostLink), staging);
}

} // namespace merak::runtime
