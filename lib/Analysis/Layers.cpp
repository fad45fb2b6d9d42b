//===- Layers.cpp - layers of a model and stage balancing -----------------===//

#include "merak/Analysis/Layers.h"
#include "merak/Analysis/TrainStep.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <limits>

using namespace mlir;
using namespace merak;

LayerAnalysis::LayerAnalysis(func::FuncOp func, const CostModel &model)
    : costs(model.analyze(func)) {
  llvm::DenseMap<Operation *, unsigned> position;
  llvm::DenseMap<Operation *, const ForwardOpCost *> costOf;
  llvm::DenseSet<Operation *> invariant = invariantOps(func);
  for (const ForwardOpCost &c : costs) {
    costOf[c.op] = &c;
    if (isConstantLike(c.op) || invariant.contains(c.op))
      continue;
    position[c.op] = ops.size();
    ops.push_back(c.op);
  }
  unsigned n = ops.size();
  if (n == 0)
    return;

  // Contractions before each position, to tell how far apart uses are.
  SmallVector<unsigned> contractions(n + 1, 0);
  for (unsigned p = 0; p < n; ++p)
    contractions[p + 1] = contractions[p] + (isContraction(ops[p]) ? 1 : 0);

  // Live values across each position, by difference arrays over the span
  // from a value's definition to its last forward use. A value read by
  // several layers (a bias computed once and added in every block, an
  // encoder output read by every decoder block) crosses every cut in its
  // span, so it does not count where to cut; its bytes do.
  SmallVector<int64_t> countDelta(n + 1, 0), bytesDelta(n + 1, 0);
  for (unsigned p = 0; p < n; ++p) {
    for (Value result : ops[p]->getResults()) {
      SmallVector<unsigned> uses;
      for (Operation *user : result.getUsers()) {
        auto it = position.find(user);
        if (it != position.end())
          uses.push_back(it->second);
      }
      llvm::sort(uses);
      uses.erase(std::unique(uses.begin(), uses.end()), uses.end());
      unsigned last = uses.empty() ? p : std::max(p, uses.back());
      if (last == p)
        continue;
      unsigned separated = 0;
      for (unsigned i = 1; i < uses.size(); ++i)
        if (contractions[uses[i]] > contractions[uses[i - 1] + 1])
          ++separated;
      bool broadcast = uses.size() >= 3 && separated >= 2;
      // Live at positions p .. last-1 (after op p, before op last).
      countDelta[p] += broadcast ? 0 : 1;
      countDelta[last] -= broadcast ? 0 : 1;
      bytesDelta[p] += tensorBytes(result.getType());
      bytesDelta[last] -= tensorBytes(result.getType());
    }
  }
  counts.resize(n);
  bytes.resize(n);
  int64_t c = 0, b = 0;
  for (unsigned p = 0; p < n; ++p) {
    c += countDelta[p];
    b += bytesDelta[p];
    counts[p] = unsigned(c);
    bytes[p] = b;
  }

  // Cut candidates: interior positions with the fewest live values (a
  // single stream counts as the fewest: where only broadcast values are
  // live, as many as zero are counted).
  unsigned minCount = std::numeric_limits<unsigned>::max();
  for (unsigned p = 0; p + 1 < n; ++p)
    minCount = std::min(minCount, counts[p]);
  minCount = std::max(minCount, 1u);
  SmallVector<unsigned> cuts; // a cut after position p
  for (unsigned p = 0; p + 1 < n; ++p)
    if (counts[p] <= minCount)
      cuts.push_back(p);

  // Segments between cuts; one without a contraction joins the previous
  // one (a linear's activation stays with it), leading ones join the first
  // with a contraction.
  SmallVector<std::pair<unsigned, unsigned>> segments;
  unsigned start = 0;
  for (unsigned p : cuts) {
    segments.push_back({start, p + 1});
    start = p + 1;
  }
  segments.push_back({start, n});
  auto anchored = [&](std::pair<unsigned, unsigned> s) {
    for (unsigned p = s.first; p < s.second; ++p)
      if (isContraction(ops[p]))
        return true;
    return false;
  };
  SmallVector<std::pair<unsigned, unsigned>> merged;
  for (auto s : segments) {
    if (!merged.empty() && (!anchored(s) || !anchored(merged.back()))) {
      merged.back().second = s.second;
      continue;
    }
    merged.push_back(s);
  }

  for (auto [begin, end] : merged) {
    Layer layer;
    layer.begin = begin;
    layer.end = end;
    layer.firstId = costOf[ops[begin]]->id;
    layer.lastId = costOf[ops[end - 1]]->id;
    llvm::SmallDenseSet<Value, 8> params;
    for (unsigned p = begin; p < end; ++p) {
      const ForwardOpCost &oc = *costOf[ops[p]];
      layer.forwardTime += model.time(oc.forward);
      layer.backwardTime += model.time(oc.backward) + model.time(oc.recompute);
      layer.savedBytes += oc.savedBytes;
      layer.flops += oc.forward.flops + oc.backward.flops + oc.recompute.flops;
      for (Value operand : ops[p]->getOperands()) {
        auto arg = dyn_cast<BlockArgument>(operand);
        if (arg && func.getArgAttr(arg.getArgNumber(), kParamAttr) &&
            params.insert(operand).second)
          layer.paramBytes += tensorBytes(operand.getType());
      }
      layerIndex[ops[p]] = layerList.size();
    }
    layer.outBytes = end < n ? bytes[end - 1] : 0;
    layerList.push_back(layer);
  }

  // The W of a split backward, per layer: the cost model finds the
  // weight-gradient ops on the whole unstaged step, where nothing flows
  // back past the first layer's input, so every activation gradient feeds
  // only weights. Found again with every layer boundary taken for a stage
  // cut, as a pipeline of these layers would run them.
  llvm::DenseMap<int64_t, int64_t> layerOfId;
  llvm::DenseMap<int64_t, ForwardOpCost *> costOfId;
  for (ForwardOpCost &c : costs) {
    costOfId[c.id] = &c;
    c.backwardWeight = OpCost();
    if (auto it = layerIndex.find(c.op); it != layerIndex.end())
      layerOfId[c.id] = it->second;
  }
  llvm::DenseSet<Operation *> weight =
      weightGradientOps(func, [&](Operation *op) -> std::optional<int64_t> {
        std::optional<int64_t> of = getGradOf(op);
        auto it = of ? layerOfId.find(*of) : layerOfId.end();
        if (it == layerOfId.end())
          return std::nullopt;
        return it->second;
      });
  for (Operation &op : func.getBody().front())
    if (weight.contains(&op))
      if (std::optional<int64_t> of = getGradOf(&op))
        if (ForwardOpCost *c = costOfId.lookup(*of))
          c->backwardWeight += estimateOp(&op);
}

int LayerAnalysis::layerOf(Operation *op) const {
  auto it = layerIndex.find(op);
  return it == layerIndex.end() ? -1 : it->second;
}

SmallVector<unsigned> merak::balanceStages(ArrayRef<double> layerTime,
                                           ArrayRef<double> cutBytes,
                                           unsigned stages, double tolerance) {
  unsigned n = layerTime.size();
  SmallVector<unsigned> firsts;
  if (stages == 0 || n < stages)
    return firsts;
  SmallVector<double> prefix(n + 1, 0);
  for (unsigned i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + layerTime[i];

  // best[k][j]: the best split of layers [0, j) into k stages, as (slowest
  // stage, bytes crossing its cuts); from[k][j] the first layer of its last
  // stage.
  struct Best {
    double slowest = std::numeric_limits<double>::infinity();
    double bytes = std::numeric_limits<double>::infinity();
  };
  auto better = [&](const Best &a, const Best &b) {
    if (b.slowest == std::numeric_limits<double>::infinity())
      return a.slowest < b.slowest;
    double slack = tolerance * std::max(a.slowest, b.slowest);
    if (a.slowest < b.slowest - slack)
      return true;
    if (a.slowest > b.slowest + slack)
      return false;
    if (a.bytes != b.bytes)
      return a.bytes < b.bytes;
    return a.slowest < b.slowest;
  };
  std::vector<std::vector<Best>> best(stages + 1, std::vector<Best>(n + 1));
  std::vector<std::vector<unsigned>> from(stages + 1,
                                          std::vector<unsigned>(n + 1, 0));
  best[0][0] = Best{0, 0};
  for (unsigned k = 1; k <= stages; ++k) {
    for (unsigned j = k; j <= n - (stages - k); ++j) {
      for (unsigned i = k - 1; i < j; ++i) {
        const Best &prev = best[k - 1][i];
        if (prev.slowest == std::numeric_limits<double>::infinity())
          continue;
        Best candidate{std::max(prev.slowest, prefix[j] - prefix[i]),
                       prev.bytes + (j < n ? cutBytes[j - 1] : 0)};
        if (better(candidate, best[k][j])) {
          best[k][j] = candidate;
          from[k][j] = i;
        }
      }
    }
  }
  firsts.resize(stages);
  unsigned j = n;
  for (unsigned k = stages; k >= 1; --k) {
    firsts[k - 1] = from[k][j];
    j = from[k][j];
  }
  return firsts;
}
