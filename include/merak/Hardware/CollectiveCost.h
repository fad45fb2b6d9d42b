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

} // namespace merak

#endif // MERAK_ANALYSIS_COLLECTIVECOST_H
