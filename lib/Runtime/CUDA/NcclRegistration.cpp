//===- NcclRegistration.cpp - NCCL collectives under the name "nccl" ------===//

#include "merak/Runtime/CUDA/Nccl.h"
#include "merak/Runtime/Comm/FileRendezvous.h"
#include "merak/Runtime/Registry.h"

namespace merak::runtime {

void registerNcclCommunicator() {
  CommunicatorEntry entry;
  entry.name = "nccl";
#if MERAK_NCCL_TCPSTORE
  entry.description =
      ncclDescription() +
      " on the CUDA backend's memory, one GPU per rank; rendezvous through "
      "the TCPStore at MASTER_ADDR:MASTER_PORT, as Gloo's";
  entry.join = [](const RendezvousOptions &options,
                  DistributedJob::FailureHandler onFailure) {
    return DistributedJob::join(options, std::move(onFailure));
  };
#else
  // The runtime built alone has no TCPStore (LibTorch's): its ranks meet
  // in a directory they share.
  entry.description =
      ncclDescription() +
      " on the CUDA backend's memory, one GPU per rank; rendezvous in "
      "MERAK_RENDEZVOUS_DIR (else a directory under TMPDIR named after "
      "MASTER_ADDR:MASTER_PORT)";
  entry.join = joinRunDirectory;
#endif
  entry.create = createNcclCommunicator;
  entry.createLink = createNcclPeerLink;
  entry.device = "cuda";
  entry.available = ncclUsable;
  registerCommunicator(std::move(entry));
}

} // namespace merak::runtime
