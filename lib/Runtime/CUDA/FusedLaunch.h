//===- FusedLaunch.h - the launch parameters of a fused chain -*- C++ -*-===//
//
// Private to lib/Runtime/CUDA: how FusedKernels.cpp turns a chain's operands
// into its kernel's `FusedParams` (DeviceMath.h), host arithmetic that the
// unit tests check without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MERAK_LIB_RUNTIME_CUDA_FUSEDLAUNCH_H
#define MERAK_LIB_RUNTIME_CUDA_FUSEDLAUNCH_H

#include "CudaCommon.h"
#include "merak/Runtime/Program.h"

#include <cstddef>
#include <vector>

namespace merak::runtime::cuda {

/// The launch parameters of a chain of `shape`: `views` are its inputs
/// (the first `inputs`, broadcast to `shape`) and then its dense outputs,
/// all merged into as few dimensions as they allow; `dense` where every
/// one is then one dense run. Throws `CudaError` for an input that does
/// not broadcast. Host arithmetic only (unit-tested without a GPU).
FusedParams fusedParams(std::vector<View> views, size_t inputs,
                        const std::vector<int64_t> &shape);

/// Sets `p.key` and `p.dropout` for the members of `chain` (an elementwise
/// chain of `program`) that draw a dropout mask, in order, as the unfused
/// kernels would draw them (Elementwise.cpp): each from the counter
/// `offset`, which then moves past its mask's words unless it keeps or
/// drops every element without drawing (p = 0 or 1, or an `evaluating`
/// step, whose masks are ones); every offset is a multiple of four (each
/// mask's words are rounded up to whole Philox blocks), so that one block
/// serves four consecutive elements of the chain. Returns how many members
/// draw a mask (the kernel then takes four elements a thread). Throws
/// `CudaError` for more members than the parameters hold, or an offset
/// inside a block.
int fusedDropouts(FusedParams &p, const Program &program,
                  const FusedKernel &chain, uint64_t key, uint64_t &offset,
                  bool evaluating);

} // namespace merak::runtime::cuda

#endif // MERAK_LIB_RUNTIME_CUDA_FUSEDLAUNCH_H
