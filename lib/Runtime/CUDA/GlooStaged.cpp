//===- GlooStaged.cpp - the CUDA backend's collectives on Gloo, staged ----===//
//
// Built in the runtime alone where the Gloo library is
// (MERAK_HAVE_STAGED_GLOO):
// `--comm=gloo` on the CUDA backend's tensors. Each collective's operands
// are copied to host memory once the communication stream has reached them
// (after the compute work the communicator ordered it behind), moved by
// Gloo's own calls (HostGloo.h), and copied back before the call returns.
// NCCL refuses two ranks on one GPU; this runs any number of them, so every
// partitioned plan runs on GPU kernels on one GPU (scripts/gpu-check.sh).
// A collective blocks its rank's host thread until its results are back on
// the device: it overlaps nothing, a test and fallback mode. The full build
// runs the same through the CPU backend and c10d (Staged.h).
//
//===----------------------------------------------------------------------===//

#include "CudaKernels.h"
#include "StreamChannel.h"
#include "merak/Runtime/Comm/DeviceCollectives.h"
#include "merak/Runtime/Comm/FileRendezvous.h"
#include "merak/Runtime/Comm/HostGloo.h"
#include "merak/Runtime/Registry.h"

#include "absl/strings/str_cat.h"

#include <functional>

namespace merak::runtime {

absl::StatusOr<std::unique_ptr<Communicator>>
createStagedGlooCommunicator(DistributedJob &job, const Program &program,
                             Backend &backend,
                             std::chrono::milliseconds timeout);
void registerStagedGlooCommunicator();

namespace {

using cuda::cudaStatus;
using cuda::DeviceState;

/// Device memory a staged call reads or writes.
struct Region {
  void *data = nullptr;
  size_t bytes = 0;
};

class GlooStagedStream final : public cuda::CudaCollectiveStream {
public:
  GlooStagedStream(DeviceState &dev, cudaStream_t stream,
                   std::unique_ptr<HostGlooCollectives> host)
      : CudaCollectiveStream(dev, stream), host(std::move(host)) {}

  absl::Status enqueueAllReduce(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                DeviceReduction r) override {
    size_t bytes = size_t(count) * dtypeSize(dtype);
    return staged({{const_cast<void *>(send), bytes}}, {{recv, bytes}},
                  [&](const Hosts &in, const Hosts &out) {
                    return host->allReduce(group, in[0], out[0], count, dtype,
                                           r);
                  });
  }
  absl::Status enqueueAllGather(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype) override {
    size_t bytes = size_t(count) * dtypeSize(dtype);
    return staged({{const_cast<void *>(send), bytes}},
                  {{recv, bytes * size_t(host->groupSize(group))}},
                  [&](const Hosts &in, const Hosts &out) {
                    return host->allGather(group, in[0], out[0], count, dtype);
                  });
  }
  absl::Status enqueueReduceScatter(int64_t group, const void *send, void *recv,
                                    int64_t count, DType dtype,
                                    DeviceReduction r) override {
    size_t bytes = size_t(count) * dtypeSize(dtype);
    return staged(
        {{const_cast<void *>(send), bytes * size_t(host->groupSize(group))}},
        {{recv, bytes}}, [&](const Hosts &in, const Hosts &out) {
          return host->reduceScatter(group, in[0], out[0], count, dtype, r);
        });
  }
  absl::Status enqueueBroadcast(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                int64_t root) override {
    size_t bytes = size_t(count) * dtypeSize(dtype);
    return staged({{const_cast<void *>(send), send ? bytes : 0}},
                  {{recv, bytes}}, [&](const Hosts &in, const Hosts &out) {
                    return host->broadcast(group, in[0], out[0], count, dtype,
                                           root);
                  });
  }
  absl::Status
  enqueueExchange(int64_t group, DType dtype,
                  const std::vector<DeviceTransfer> &sends,
                  const std::vector<DeviceTransfer> &receives) override {
    size_t size = dtypeSize(dtype);
    std::vector<Region> in, out;
    for (const DeviceTransfer &t : sends)
      in.push_back({t.data, size_t(t.count) * size});
    for (const DeviceTransfer &t : receives)
      out.push_back({t.data, size_t(t.count) * size});
    return staged(in, out, [&](const Hosts &hostIn, const Hosts &hostOut) {
      std::vector<DeviceTransfer> s = sends, r = receives;
      for (size_t k = 0; k < s.size(); ++k)
        s[k].data = hostIn[k];
      for (size_t k = 0; k < r.size(); ++k)
        r[k].data = hostOut[k];
      return host->exchange(group, dtype, s, r);
    });
  }

  absl::Status asyncError() override { return absl::OkStatus(); }
  // Each call ends by itself (its data moved, or Gloo's time-out).
  void abort() override {}

private:
  using Hosts = std::vector<void *>;

  /// Copies `in` to host buffers once the stream has reached them, runs
  /// `run` on them, and copies its results back to `out`.
  absl::Status
  staged(const std::vector<Region> &in, const std::vector<Region> &out,
         const std::function<absl::Status(const Hosts &, const Hosts &)> &run) {
    if (absl::Status s = cudaStatus(cudaStreamSynchronize(stream),
                                    "a staged collective's wait for the GPU");
        !s.ok())
      return s;
    Hosts hostIn = buffers(inBuffers, in), hostOut = buffers(outBuffers, out);
    for (size_t k = 0; k < in.size(); ++k)
      if (in[k].bytes)
        if (absl::Status s =
                cudaStatus(cudaMemcpyAsync(hostIn[k], in[k].data, in[k].bytes,
                                           cudaMemcpyDeviceToHost, stream),
                           "a staged collective's copy to the host");
            !s.ok())
          return s;
    if (absl::Status s = cudaStatus(cudaStreamSynchronize(stream),
                                    "a staged collective's copy to the host");
        !s.ok())
      return s;
    if (absl::Status s = run(hostIn, hostOut); !s.ok())
      return s;
    for (size_t k = 0; k < out.size(); ++k)
      if (out[k].bytes)
        if (absl::Status s = cudaStatus(
                cudaMemcpyAsync(out[k].data, hostOut[k], out[k].bytes,
                                cudaMemcpyHostToDevice, stream),
                "a staged collective's copy to the GPU");
            !s.ok())
          return s;
    // The host buffers are reused by the next call.
    return cudaStatus(cudaStreamSynchronize(stream),
                      "a staged collective's copy to the GPU");
  }

  /// Host buffers of `regions`' sizes, reused from call to call.
  static Hosts buffers(std::vector<std::vector<char>> &pool,
                       const std::vector<Region> &regions) {
    if (pool.size() < regions.size())
      pool.resize(regions.size());
    Hosts hosts;
    for (size_t k = 0; k < regions.size(); ++k) {
      if (pool[k].size() < regions[k].bytes)
        pool[k].resize(regions[k].bytes);
      hosts.push_back(pool[k].data());
    }
    return hosts;
  }

  std::unique_ptr<HostGlooCollectives> host;
  std::vector<std::vector<char>> inBuffers, outBuffers;
};

} // namespace

absl::StatusOr<std::unique_ptr<Communicator>>
createStagedGlooCommunicator(DistributedJob &job, const Program &program,
                             Backend &backend,
                             std::chrono::milliseconds timeout) {
  DeviceState *dev = cuda::deviceStateOf(backend);
  if (!dev)
    return absl::InvalidArgumentError(absl::StrCat(
        "--comm=gloo here moves host copies of the CUDA backend's tensors, "
        "not the ",
        backend.name(), " backend's: run with --device=cuda"));
  if (absl::Status s = cudaStatus(cudaSetDevice(dev->device), "cudaSetDevice");
      !s.ok())
    return s;
  absl::StatusOr<std::unique_ptr<HostGlooCollectives>> host =
      connectHostGloo(job, program.groups, timeout);
  if (!host.ok())
    return host.status();
  cudaStream_t stream = nullptr;
  if (absl::Status s =
          cudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                     "creating the communication stream");
      !s.ok())
    return s;
  return makeDeviceCommunicator(
      std::make_unique<GlooStagedStream>(*dev, stream, *std::move(host)),
      deviceCommunicatorOptions(job, program, timeout,
                                "Gloo (staged through the host)"));
}

void registerStagedGlooCommunicator() {
  CommunicatorEntry entry;
  entry.name = "gloo";
  entry.description =
      "the Gloo library on host copies of the CUDA backend's tensors (any "
      "number of ranks per GPU; pipeline transfers with --p2p=shm); "
      "rendezvous in MERAK_RENDEZVOUS_DIR (else a directory under TMPDIR "
      "named after MASTER_ADDR:MASTER_PORT)";
  entry.join = joinRunDirectory;
  entry.create = createStagedGlooCommunicator;
  entry.device = "cuda";
  entry.stagedThroughHost = true;
  registerCommunicator(std::move(entry));
}

} // namespace merak::runtime
