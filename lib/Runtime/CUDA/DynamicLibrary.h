//===- DynamicLibrary.h - CUDA libraries opened on first use ----*- C++ -*-===//
//
// The CUDA libraries the backend calls only on a GPU (NVRTC, cuBLASLt) are
// opened with dlopen when first needed rather than linked: cuBLASLt alone
// takes half a second of relocations at every start, which every process
// of a CPU run would pay.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_DYNAMICLIBRARY_H
#define MERAK_LIB_RUNTIME_CUDA_DYNAMICLIBRARY_H

#include <dlfcn.h>

#include <initializer_list>
#include <string>
#include <type_traits>

namespace merak::runtime::cuda {

/// The first of `names` dlopen finds (RTLD_NOW | RTLD_LOCAL); nullptr, with
/// dlerror's text for the last name in `why`, when none is found.
inline void *openFirstLibrary(std::initializer_list<const char *> names,
                              std::string &why) {
  for (const char *name : names) {
    if (void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL))
      return handle;
    const char *error = dlerror();
    why = error ? error : "not found";
  }
  return nullptr;
}

/// Sets `fn` to `symbol` in `handle`; false where the library lacks it.
template <typename Fn>
bool bindSymbol(void *handle, Fn &fn, const char *symbol) {
  fn = reinterpret_cast<std::remove_reference_t<Fn>>(dlsym(handle, symbol));
  return fn != nullptr;
}

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_DYNAMICLIBRARY_H
