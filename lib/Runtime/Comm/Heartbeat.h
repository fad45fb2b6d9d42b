//===- Heartbeat.h - what the rendezvous jobs' heartbeats share -*- C++ -*-===//
//
// Private to lib/Runtime/Comm: both jobs (the TCPStore's, GlooRendezvous.cpp,
// and the directory's, FileRendezvous.cpp) keep each rank's heartbeat as
// `<count> <step> <instruction>` and explain a collective that does not
// finish the same way.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_LIB_RUNTIME_COMM_HEARTBEAT_H
#define MERAK_LIB_RUNTIME_COMM_HEARTBEAT_H

#include <cstdint>
#include <map>
#include <string>

namespace merak::runtime {

/// Of live peers (rank -> its last heartbeat), the ones that have not
/// started the collective at (myStep, myInstruction): alive but stuck
/// before the collective this rank waits in; empty when there are none.
std::string ranksBehind(const std::map<int64_t, std::string> &beats,
                        int64_t myStep, int64_t myInstruction);

} // namespace merak::runtime

#endif // MERAK_LIB_RUNTIME_COMM_HEARTBEAT_H
