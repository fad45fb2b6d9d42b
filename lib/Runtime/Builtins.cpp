//===- Builtins.cpp - the components this build registers ----------------===//
//
// Compiled with one definition per optional component the build has
// (MERAK_HAVE_CPU_BACKEND, MERAK_HAVE_GLOO,
// MERAK_HAVE_CUDA_BACKEND, MERAK_HAVE_NCCL, MERAK_HAVE_STAGED_GLOO), so the
// registry holds exactly what was built.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Registry.h"

namespace merak::runtime {

#if MERAK_HAVE_CPU_BACKEND
void registerCpuBackend();
#endif
#if MERAK_HAVE_GLOO
void registerGlooCommunicator();
#endif
#if MERAK_HAVE_CUDA_BACKEND
void registerCudaBackend();
#endif
#if MERAK_HAVE_NCCL
void registerNcclCommunicator();
#endif
#if MERAK_HAVE_STAGED_GLOO
void registerStagedGlooCommunicator();
#endif

void registerBuiltinComponents() {
  static const bool registered = [] {
#if MERAK_HAVE_CPU_BACKEND
    registerCpuBackend();
#endif
#if MERAK_HAVE_GLOO
    registerGlooCommunicator();
#endif
#if MERAK_HAVE_CUDA_BACKEND
    registerCudaBackend();
#endif
#if MERAK_HAVE_NCCL
    registerNcclCommunicator();
#endif
#if MERAK_HAVE_STAGED_GLOO
    registerStagedGlooCommunicator();
#endif
    return true;
  }();
  (void)registered;
}

} // namespace merak::runtime
