//===- Runtime.cpp - the CUDA runtime API of the CUDA emulator ------------===//
//
// The functions of cuda_runtime_api.h the CUDA backend calls, on the
// host: one emulated device whose memory is host memory, streams on which
// everything runs at once (a launch has finished when it returns), and
// the CUDA runtime's error rules (a launch refused for its configuration
// is reported once; a kernel that fails makes every later call fail).
// What an emulator cannot do (CUDA IPC, the driver's entry points,
// loading compiled device code) fails with cudaErrorNotSupported.
//
//===----------------------------------------------------------------------===//

#include "Emulation/Emulator.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>

namespace merak::runtime::cuda::emulation {
namespace {

struct State {
  std::mutex mutex;
  /// cudaGetLastError's next answer.
  cudaError_t last = cudaSuccess;
  /// The failure every call returns after a kernel failed.
  cudaError_t sticky = cudaSuccess;
  std::string stickyMessage;
  /// The latest failure's text of each error code, which
  /// cudaGetErrorString gives for that code.
  std::unordered_map<int, std::string> messages;
  std::unordered_map<void *, size_t> allocations;
  size_t allocated = 0;
};

State &state() {
  static State *s = new State();
  return *s;
}

constexpr size_t kDeviceBytes = size_t(16) << 30;

cudaError_t sticky() { return state().sticky; }

cudaError_t fail(cudaError_t error, const std::string &message) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.sticky == cudaSuccess) {
    s.last = error;
    s.messages[int(error)] = message;
  }
  return error;
}

void *allocate(size_t bytes) {
  size_t rounded = (bytes + 255) / 256 * 256;
  if (rounded == 0)
    rounded = 256;
    // 256-byte aligned, as cudaMalloc's; exactly `bytes` long under
    // AddressSanitizer, so that a kernel's access past the end is reported.
#if defined(__SANITIZE_ADDRESS__)
  void *p = nullptr;
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0)
    return nullptr;
#else
  void *p = std::aligned_alloc(256, rounded);
  if (!p)
    return nullptr;
#endif
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.allocations[p] = rounded;
  s.allocated += rounded;
  return p;
}

cudaError_t release(void *p) {
  if (!p)
    return sticky();
  State &s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.allocations.find(p);
    if (it == s.allocations.end())
      return cudaErrorInvalidValue;
    s.allocated -= it->second;
    s.allocations.erase(it);
  }
  std::free(p);
  return sticky();
}

/// A stream or an event: a distinct non-null handle.
template <typename H> H newHandle() { return reinterpret_cast<H>(new char[1]); }
template <typename H> void deleteHandle(H h) {
  delete[] reinterpret_cast<char *>(h);
}

cudaError_t notSupported(const char *what) {
  return fail(cudaErrorNotSupported,
              std::string(what) + " is not supported by the CUDA emulator");
}

} // namespace

void recordLaunchError(cudaError_t error, const std::string &message) {
  fail(error, message);
}

void recordKernelFailure(const std::string &message) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.sticky != cudaSuccess)
    return;
  s.sticky = cudaErrorLaunchFailure;
  s.stickyMessage = message;
  s.last = cudaErrorLaunchFailure;
}

bool launchesAllowed() { return sticky() == cudaSuccess; }

} // namespace merak::runtime::cuda::emulation

using namespace merak::runtime::cuda::emulation;

extern "C" {

cudaError_t cudaGetLastError(void) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  cudaError_t e = s.last;
  if (s.sticky == cudaSuccess)
    s.last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.last;
}

const char *cudaGetErrorName(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorInvalidValue:
    return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration:
    return "cudaErrorInvalidConfiguration";
  case cudaErrorLaunchFailure:
    return "cudaErrorLaunchFailure";
  case cudaErrorNotSupported:
    return "cudaErrorNotSupported";
  case cudaErrorInvalidDevice:
    return "cudaErrorInvalidDevice";
  case cudaErrorNotReady:
    return "cudaErrorNotReady";
  default:
    return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t error) {
  // The last failure's own text where it is the error asked about: the
  // kernel, its block and thread, and why.
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (error == s.sticky && !s.stickyMessage.empty())
    return s.stickyMessage.c_str();
  if (auto it = s.messages.find(int(error)); it != s.messages.end())
    return it->second.c_str();
  switch (error) {
  case cudaSuccess:
    return "no error";
  case cudaErrorInvalidValue:
    return "invalid argument";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  case cudaErrorNotSupported:
    return "operation not supported by the CUDA emulator";
  default:
    return "CUDA emulator error";
  }
}

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? sticky() : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDevice(int *device) {
  *device = 0;
  return sticky();
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (device != 0)
    return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp();
  std::strncpy(prop->name, "CUDA emulator (host threads)",
               sizeof prop->name - 1);
  prop->totalGlobalMem = kDeviceBytes;
  prop->sharedMemPerBlock = 48 << 10;
  prop->sharedMemPerBlockOptin = kMaxSharedBytes;
  prop->sharedMemPerMultiprocessor = 228 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 8;
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  prop->maxThreadsPerMultiProcessor = 2048;
  return sticky();
}

cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr,
                                   int device) {
  if (device != 0)
    return cudaErrorInvalidDevice;
  switch (attr) {
  case cudaDevAttrComputeCapabilityMajor:
    *value = 8;
    return sticky();
  case cudaDevAttrComputeCapabilityMinor:
    *value = 0;
    return sticky();
  case cudaDevAttrMultiProcessorCount:
    *value = 4;
    return sticky();
  case cudaDevAttrMaxSharedMemoryPerBlockOptin:
    *value = int(kMaxSharedBytes);
    return sticky();
  case cudaDevAttrMaxThreadsPerBlock:
    *value = 1024;
    return sticky();
  case cudaDevAttrWarpSize:
    *value = 32;
    return sticky();
  default:
    return notSupported("this device attribute");
  }
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
  // One pool, whose settings change nothing: memory is the host's.
  static char thePool;
  *pool = reinterpret_cast<cudaMemPool_t>(&thePool);
  return device == 0 ? sticky() : cudaErrorInvalidDevice;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void *) {
  return sticky();
}

cudaError_t cudaDeviceSynchronize(void) { return sticky(); }

cudaError_t cudaDriverGetVersion(int *version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t size) {
  if (cudaError_t e = sticky())
    return e;
  State &s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.allocated + size > kDeviceBytes) {
      s.last = cudaErrorMemoryAllocation;
      s.messages[int(cudaErrorMemoryAllocation)] =
          "out of memory: the CUDA emulator's device has 16 GiB";
      return cudaErrorMemoryAllocation;
    }
  }
  *p = allocate(size);
  return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation, "out of memory");
}

cudaError_t cudaFree(void *p) { return release(p); }

cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t) {
  return cudaMalloc(p, size);
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t) { return release(p); }

cudaError_t cudaMallocHost(void **p, size_t size) {
  *p = std::aligned_alloc(256, (size + 255) / 256 * 256 + 256);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void *, size_t, unsigned) { return sticky(); }

cudaError_t cudaHostUnregister(void *) { return sticky(); }

cudaError_t cudaHostGetDevicePointer(void **device, void *host, unsigned) {
  *device = host;
  return sticky();
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *total = kDeviceBytes;
  *free = kDeviceBytes - s.allocated;
  return s.sticky;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                       cudaMemcpyKind) {
  if (cudaError_t e = sticky())
    return e;
  if (count)
    std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t count, cudaStream_t) {
  if (cudaError_t e = sticky())
    return e;
  if (count)
    std::memset(p, value, count);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned) {
  *stream = newHandle<cudaStream_t>();
  return sticky();
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  deleteHandle(stream);
  return sticky();
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return sticky(); }

cudaError_t cudaStreamQuery(cudaStream_t) { return sticky(); }

cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
  return sticky();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned) {
  *event = newHandle<cudaEvent_t>();
  return sticky();
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  deleteHandle(event);
  return sticky();
}

cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return sticky(); }

cudaError_t cudaEventQuery(cudaEvent_t) { return sticky(); }

cudaError_t cudaFuncSetAttribute(const void *, cudaFuncAttribute attr,
                                 int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize &&
      (value < 0 || size_t(value) > kMaxSharedBytes))
    return fail(cudaErrorInvalidValue,
                "more dynamic shared memory than a block may have");
  return sticky();
}

cudaError_t cudaLaunchKernel(const void *, dim3, dim3, void **, size_t,
                             cudaStream_t) {
  return notSupported("launching compiled device code");
}

cudaError_t cudaLibraryLoadData(cudaLibrary_t *, const void *, cudaJitOption *,
                                void **, unsigned, cudaLibraryOption *, void **,
                                unsigned) {
  return notSupported("loading compiled device code");
}

cudaError_t cudaLibraryUnload(cudaLibrary_t) {
  return notSupported("loading compiled device code");
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t *, cudaLibrary_t, const char *) {
  return notSupported("loading compiled device code");
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *, void *) {
  return notSupported("CUDA IPC");
}

cudaError_t cudaIpcOpenMemHandle(void **, cudaIpcMemHandle_t, unsigned) {
  return notSupported("CUDA IPC");
}

cudaError_t cudaIpcCloseMemHandle(void *) { return notSupported("CUDA IPC"); }

cudaError_t
cudaGetDriverEntryPointByVersion(const char *, void **fn, unsigned,
                                 unsigned long long,
                                 cudaDriverEntryPointQueryResult *status) {
  *fn = nullptr;
  if (status)
    *status = cudaDriverEntryPointSymbolNotFound;
  return notSupported("the CUDA driver's entry points");
}

} // extern "C"
