//===- CollectiveCost.h - what a collective sends, once --------*- C++ -*-===//
//
// The bytes one rank sends in a collective over a group of `n` ranks, as
// ring algorithms move them. Sharding propagation prices reshardings with
// it and the cost model prices the plan's collectives with it, so both
// agree. Plain C++: no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_ANALYSIS_COLLECTIVECOST_H
#define MERAK_ANALYSIS_COLLECTIVECOST_H

#include <cstdint>

namespace merak {

enum class CollectiveKind {
  AllReduce,     // 2 (n - 1) / n of the tensor
  ReduceScatter, // (n - 1) / n of the input
  AllToAll,      // (n - 1) / n of the input
  AllGather,     // (n - 1) / n of the result: (n - 1) local shards
  AllSlice,      // nothing: each rank keeps its block
};

/// Bytes one rank sends; `inputBytes` and `resultBytes` are its local
/// operand's and result's. A group of one sends nothing.
inline double collectiveBytes(CollectiveKind kind, int64_t n, double inputBytes,
                              double resultBytes) {
  if (n <= 1)
    return 0;
  double share = double(n - 1) / double(n);
  switch (kind) {
  case CollectiveKind::AllReduce:
    return 2 * share * inputBytes;
  case CollectiveKind::ReduceScatter:
  case CollectiveKind::AllToAll:
    return share * inputBytes;
  case CollectiveKind::AllGather:
    return share * resultBytes;
  case CollectiveKind::AllSlice:
    return 0;
  }
  return 0;
}

/// How an all-reduce moves its data. Ring: each rank sends 2 (n - 1) / n
/// of the tensor in 2 (n - 1) steps (NCCL's and Gloo's default). Tree: a
/// logarithmic number of steps, 2 ceil(log2 n): NCCL's double binary tree,
/// Gloo's halving-doubling; the same bytes as the ring where n is a power
/// of two (recursive halving, then doubling), twice the tensor otherwise
/// (the blocks of an uneven split travel whole).
enum class CollectiveAlgorithm { Ring, Tree };

inline const char *collectiveAlgorithmName(CollectiveAlgorithm a) {
  return a == CollectiveAlgorithm::Ring ? "ring" : "tree";
}

/// Messages one rank sends, one after the other, in an all-reduce over `n`.
inline int64_t allReduceSteps(CollectiveAlgorithm a, int64_t n) {
  if (n <= 1)
    return 0;
  if (a == CollectiveAlgorithm::Ring)
    return 2 * (n - 1);
  int64_t depth = 0;
  while ((int64_t(1) << depth) < n)
    ++depth;
  return 2 * depth;
}

/// Bytes one rank sends in an all-reduce of a `bytes` tensor over `n`.
inline double allReduceBytes(CollectiveAlgorithm a, int64_t n, double bytes) {
  if (n <= 1)
    return 0;
  bool powerOfTwo = (n & (n - 1)) == 0;
  if (a == CollectiveAlgorithm::Tree && !powerOfTwo)
    return 2 * bytes;
  return collectiveBytes(CollectiveKind::AllReduce, n, bytes, bytes);
}

} // namespace merak

#endif // MERAK_ANALYSIS_COLLECTIVECOST_H
