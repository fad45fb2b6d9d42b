//===- Staged.h - collectives of device tensors through the host -*- C++
//-*-===//
//
// A communicator and a pipeline link for a backend whose tensors the host
// communicator cannot move (the CUDA backend's, where NCCL is not used):
// each operand is copied to a host backend (the CPU backend), the host
// communicator (Gloo) runs the collective or the transfer, and the results
// are copied back to the device. `merak-exec --comm-staging=host`; with a
// device other than the CPU, `auto` (the default) takes it too. It is what
// runs several ranks of a plan on one GPU (NCCL refuses two ranks on one
// device), so every partitioned plan can be checked on GPU kernels; and
// what runs ranks on several GPUs until NCCL does.
//
// The copies are synchronous (a download waits for the device's queued
// work), so a staged collective overlaps nothing on the device: a test and
// fallback mode, not a fast one.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMM_STAGED_H
#define MERAK_RUNTIME_COMM_STAGED_H

#include "merak/Runtime/Communicator.h"
#include "merak/Runtime/Pipeline.h"

#include <memory>

namespace merak::runtime {

/// Copies between a device backend and a host backend, counted.
struct Staging {
  Backend &device;
  Backend &host;
  /// Tensors and bytes copied each way so far.
  int64_t toHost = 0, toDevice = 0;
  int64_t bytesToHost = 0, bytesToDevice = 0;
};

/// `hostComm`'s collectives on `staging.device`'s tensors. `staging`
/// outlives the communicator.
std::unique_ptr<Communicator>
makeStagedCommunicator(std::unique_ptr<Communicator> hostComm,
                       Staging &staging);

/// `hostLink`'s transfers of `staging.device`'s tensors.
std::unique_ptr<PeerLink> makeStagedPeerLink(std::unique_ptr<PeerLink> hostLink,
                                             Staging &staging);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMM_STAGED_H
