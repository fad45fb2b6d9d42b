//===- GlooRegistration.cpp - Gloo collectives under the name "gloo" ------===//

#include "merak/Runtime/Registry.h"

namespace merak::runtime {

void registerGlooCommunicator() {
  registerCommunicator(
      {"gloo",
       "Gloo over TCP (c10d), rendezvous through a TCPStore at "
       "MASTER_ADDR:MASTER_PORT",
       [](const RendezvousOptions &options,
          DistributedJob::FailureHandler onFailure) {
         return DistributedJob::join(options, std::move(onFailure));
       }});
}

} // namespace merak::runtime
