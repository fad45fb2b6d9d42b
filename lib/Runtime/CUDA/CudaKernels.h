//===- CudaKernels.h - the CUDA backend's tensors, context and table -*- C++
//-*-===//
//
// Private to lib/Runtime/CUDA: what the host side of each kernel family
// shares. A `CudaTensor` is a strided view of device memory; views
// (reshape, permute, slice, select, expand) share their operand's storage.
// Each family file (Elementwise.cpp, Shape.cpp, ...) registers host
// kernels in a `KernelTable`; a host kernel reads its operands through
// `Ctx`, asks it for its results' memory (the in-place operand, the arena
// slot or the stream-ordered pool) and launches device kernels (the
// family's .cu file, through launchers declared in the family's header)
// on the backend's stream. Nothing here synchronizes with the host except
// `Ctx::scalar` on an operand the executor has no host value for.
//
// Numerics: the kernels compute in float for f32, bf16 and f16 (double
// for f64), so a bf16 program accumulates in fp32; reductions run in a
// fixed order, so a program gives the same results run after run.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_CUDAKERNELS_H
#define MERAK_LIB_RUNTIME_CUDA_CUDAKERNELS_H

#include "../KernelTable.h"
#include "CudaCommon.h"
#include "merak/Runtime/Backend.h"
#include "merak/Runtime/Program.h"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace merak::runtime::cuda {

inline ElemType elemTypeOf(DType dtype) { return ElemType(uint8_t(dtype)); }

/// Throws unless `type` (`what`: an operand or result) has the element type
/// its op computes in, or bf16 or f16 where that is f32: a cast folded into
/// the op (Fusion.h's `castFolding`).
void expectFoldable(const TensorType &type, DType compute,
                    const std::string &what);

/// Device memory: freed (back to the stream-ordered pool) when the last
/// tensor using it goes away.
struct CudaStorage {
  void *ptr = nullptr;
  int64_t bytes = 0;
  std::function<void(void *, int64_t)> release;
  ~CudaStorage() {
    if (release && ptr)
      release(ptr, bytes);
  }
};

class CudaTensor final : public DeviceTensor {
public:
  CudaTensor(std::shared_ptr<CudaStorage> storage, int64_t byteOffset,
             TensorType type, std::vector<int64_t> strides = {});

  std::shared_ptr<CudaStorage> storage;
  int64_t byteOffset = 0;
  TensorType type;
  /// In elements, one per dimension (row-major when made contiguous).
  std::vector<int64_t> strides;

  void *data() const { return static_cast<char *>(storage->ptr) + byteOffset; }
  bool isContiguous() const { return view().isContiguous(); }
  /// The tensor as kernels read it; throws `CudaError` for a rank above
  /// `kMaxDims`.
  View view() const;
};

inline CudaTensor &unwrap(DeviceTensor &t) {
  return static_cast<CudaTensor &>(t);
}
inline const CudaTensor &unwrap(const DeviceTensor &t) {
  return static_cast<const CudaTensor &>(t);
}

/// What one backend holds for its kernels: the device, its stream, the
/// libraries' handles, the pool allocations come from and the random
/// state of the step.
struct FusedKernelCache; // FusedKernels.cpp

struct DeviceState {
  int device = 0;
  cudaStream_t stream = nullptr;
  /// Allocates `bytes` of device memory on the stream (never null: throws
  /// `CudaError` naming the size when the device is out of memory).
  std::function<std::shared_ptr<CudaStorage>(int64_t bytes)> allocate;
  /// The same, ordered on `stream` (a communication queue's) instead; the
  /// memory goes back to the pool in the compute stream's order, so the
  /// compute stream must wait for `stream`'s use of it first.
  std::function<std::shared_ptr<CudaStorage>(int64_t bytes,
                                             cudaStream_t stream)>
      allocateOn;

  /// cuBLASLt (created with the backend) and its workspace.
  void *cublasLt = nullptr;
  void *gemmWorkspace = nullptr;
  size_t gemmWorkspaceBytes = 0;
  /// TF32 tensor cores for float32 GEMMs (`--tf32`); off by default.
  bool tf32 = false;
  /// GEMMs stage misaligned large matrices (`--gemm-staging`).
  bool gemmStaging = true;
  /// The FlashAttention form's tensor-core kernels keep their tiles in
  /// registers (`--flash-kernels=registers`), else WMMA fragments through
  /// shared memory (`wmma`).
  bool flashRegisterTiles = true;
  /// cuDNN, created by the first convolution or batch norm.
  void *cudnn = nullptr;

  /// Dropout: the step's key and the counter offset of the next mask
  /// (each mask takes as many counters as it has elements).
  uint64_t dropoutKey = 0;
  uint64_t dropoutOffset = 0;

  /// The fused elementwise kernels compiled so far (FusedKernels.cpp).
  std::shared_ptr<FusedKernelCache> fusedKernels;

  /// Kernels launched, by family (for --profile): incremented by hosts.
  int64_t gemmCalls = 0;
  int64_t attentionCalls = 0;
};

/// The state of `backend` when it is the CUDA backend, else null (the
/// NCCL communicator queues on its stream and allocates from its pool).
DeviceState *deviceStateOf(Backend &backend);

/// One instruction's call as a host kernel sees it.
struct Ctx {
  KernelCall &call;
  const Instruction &inst;
  const OpAttrs &a;
  const Program &program;
  DeviceState &dev;
  /// The results (set by the kernel) and device memory that lives until
  /// the call's kernels have been issued (the pool reuses it only for
  /// later work on the same stream).
  std::vector<TensorHandle> out;
  std::vector<TensorHandle> temps;

  cudaStream_t stream() const { return dev.stream; }
  bool has(size_t k) const {
    return k < call.operands.size() && call.operands[k];
  }
  CudaTensor &in(size_t k) const;
  /// Operand `k` as it is laid out (any strides).
  View view(size_t k) const { return in(k).view(); }
  /// Operand `k` dense and row-major: itself, or a copy made on the
  /// stream.
  View contiguous(size_t k);
  /// A dense row-major copy of `t` unless it already is one.
  View contiguous(const CudaTensor &t);
  const TensorType &resultType(size_t r) const {
    return program.values[inst.results[r]].type;
  }
  const TensorType &operandType(size_t k) const {
    return program.values[inst.operands[k]].type;
  }
  /// Whether anything reads result `r`.
  bool needed(size_t r) const {
    return program.values[inst.results[r]].lastUse >= 0;
  }
  /// A scalar operand: the executor's exact value where it has one, else
  /// the element read back from the device (a synchronization).
  double scalar(size_t k);
  bool evaluating() const { return call.step && call.step->evaluate; }

  /// Result `r`, dense row-major, of its planned type: the operand the
  /// plan writes it into (when `allowInPlace` and that operand is dense),
  /// its slot in the program's arena, or new memory from the pool.
  CudaTensor &result(size_t r, bool allowInPlace = true);
  /// Result `r` as a view of operand `k`'s storage: `byteOffset` from the
  /// operand's data, with `strides` (row-major when empty).
  void viewResult(size_t r, size_t k, int64_t byteOffset,
                  std::vector<int64_t> strides = {});
  /// Device memory for this call only (an operand of a library call, a
  /// partial reduction), dense row-major.
  CudaTensor &scratch(const TensorType &type);
};

/// The view of a dense row-major tensor of `type` at `data`.
View denseView(void *data, const TensorType &type);

/// A host kernel for each op kind (the collectives and `wait` have none).
using KernelTable = runtime::KernelTable<Ctx>;
using Kernel = KernelTable::Kernel;

/// Every family's kernels, registered once (CudaBackend.cpp).
const KernelTable &kernelTable();

void registerElementwiseKernels(KernelTable &table);
void registerShapeKernels(KernelTable &table);
void registerReductionKernels(KernelTable &table);
void registerNormalizationKernels(KernelTable &table);
void registerLossKernels(KernelTable &table);
void registerOptimizerKernels(KernelTable &table);
void registerLinearAlgebraKernels(KernelTable &table);
void registerAttentionKernels(KernelTable &table);
void registerConvolutionKernels(KernelTable &table);
void registerFusedKernels(KernelTable &table);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_CUDAKERNELS_H
