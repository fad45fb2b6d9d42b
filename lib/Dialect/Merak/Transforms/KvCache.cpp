//===- KvCache.cpp - --merak-kv-cache
//---------------------------------------===//
//
// The forward program as the two steps of a text generator: @prefill runs
// the whole window of positions and returns, besides the logits, the keys
// and values each attention layer reads; @decode runs the token at one
// position against those, writing its own into them. Positions are found
// by following the token input's sequence dimension through the program,
// so no layer is matched by name or pattern. See Passes.td.
//
//===----------------------------------------------------------------------===//

#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakOps.h"
#include "merak/Dialect/Merak/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

namespace merak {
#define GEN_PASS_DEF_KVCACHE
#include "merak/Dialect/Merak/Transforms/Passes.h.inc"
} // namespace merak

using namespace mlir;
using namespace merak;

namespace {

/// What a dimension of a value indexes: the positions the step computes
/// (one in @decode), the positions it attends to (the whole cache), or
/// neither.
enum class Seq : uint8_t { None, Query, Key };
using Labels = SmallVector<Seq, 6>;

RankedTensorType typeOf(Value v) {
  return llvm::cast<RankedTensorType>(v.getType());
}

int64_t numElements(Value v) { return typeOf(v).getNumElements(); }

int64_t wrap(int64_t dim, int64_t rank) { return dim < 0 ? dim + rank : dim; }

/// How positions move through the forward program: the labels of every
/// value computed from the tokens, the constant operands the decode step
/// reads at its position, and where keys and values are cached.
struct PositionFlow {
  DenseMap<Value, Labels> labels;
  /// Operands (of ops reading the tokens) computed without them whose
  /// dimension `second` lines up with the query positions: @decode reads
  /// them at its position.
  SmallVector<std::pair<OpOperand *, int64_t>> rowReads;
  /// Operands whose query dimension `second` an op reads as keys: each
  /// needs the cache.
  SmallVector<std::pair<OpOperand *, int64_t>> keyUses;
  /// Cache points and their position dimension, which the analysis labels
  /// Key (the whole cache) from there on.
  llvm::MapVector<Value, int64_t> cached;

  bool dependent(Value v) const { return labels.count(v); }
  Labels of(Value v) const {
    auto it = labels.find(v);
    if (it != labels.end())
      return it->second;
    return Labels(typeOf(v).getRank(), Seq::None);
  }
};

class FlowBuilder {
public:
  FlowBuilder(PositionFlow &flow) : flow(flow) {}

  LogicalResult visit(Operation *op) {
    if (llvm::none_of(op->getOperands(),
                      [&](Value v) { return flow.dependent(v); }))
      return success();
    FailureOr<SmallVector<Labels>> results = rule(op);
    if (failed(results))
      return failure();
    for (auto [r, l] : llvm::zip(op->getResults(), *results)) {
      auto c = flow.cached.find(r);
      if (c != flow.cached.end())
        l[c->second] = Seq::Key;
      flow.labels[r] = l;
    }
    return success();
  }

private:
  InFlightDiagnostic fail(Operation *op, const Twine &why) {
    return op->emitError() << "--merak-kv-cache: '" << op->getName() << "' "
                           << why;
  }

  bool hasPositions(const Labels &l) const {
    return llvm::any_of(l, [](Seq s) { return s != Seq::None; });
  }

  /// NumPy broadcasting over `operands` (aligned from the right) into a
  /// result of `rank` dimensions: the result's labels, and the rows of the
  /// constant operands the decode step reads.
  FailureOr<Labels> broadcast(Operation *op, ArrayRef<OpOperand *> operands,
                              int64_t rank) {
    Labels out(rank, Seq::None);
    for (OpOperand *use : operands) {
      Value v = use->get();
      if (!flow.dependent(v))
        continue;
      Labels l = flow.of(v);
      int64_t shift = rank - int64_t(l.size());
      for (auto [i, s] : llvm::enumerate(l)) {
        if (s == Seq::None)
          continue;
        Seq &o = out[shift + int64_t(i)];
        if (o != Seq::None && o != s) {
          fail(op, "combines the positions it computes with the positions it "
                   "attends to in one dimension");
          return failure();
        }
        o = s;
      }
    }
    for (OpOperand *use : operands) {
      Value v = use->get();
      if (flow.dependent(v))
        continue;
      ArrayRef<int64_t> shape = typeOf(v).getShape();
      int64_t shift = rank - int64_t(shape.size());
      for (auto [i, size] : llvm::enumerate(shape))
        if (out[shift + int64_t(i)] == Seq::Query && size != 1)
          flow.rowReads.push_back({use, int64_t(i)});
    }
    return out;
  }

  FailureOr<Labels> broadcastAll(Operation *op) {
    SmallVector<OpOperand *> uses;
    for (OpOperand &use : op->getOpOperands())
      uses.push_back(&use);
    return broadcast(op, uses, typeOf(op->getResult(0)).getRank());
  }

  /// Fails when one of `dims` of `v` indexes positions.
  LogicalResult keepsPositions(Operation *op, Value v, ArrayRef<int64_t> dims,
                               const Twine &what) {
    Labels l = flow.of(v);
    for (int64_t d : dims)
      if (l[wrap(d, l.size())] != Seq::None) {
        fail(op, what);
        return failure();
      }
    return success();
  }

  FailureOr<Labels> matmul(MatmulOp op) {
    Labels lhs = flow.of(op.getLhs()), rhs = flow.of(op.getRhs());
    int64_t rl = lhs.size(), rr = rhs.size();
    if (rl < 2 || rr < 2) {
      fail(op, "has an operand of rank below 2");
      return failure();
    }
    for (int64_t i = 0; i < rl - 2; ++i)
      if (lhs[i] != Seq::None) {
        fail(op, "batches over positions");
        return failure();
      }
    for (int64_t i = 0; i < rr - 2; ++i)
      if (rhs[i] != Seq::None) {
        fail(op, "batches over positions");
        return failure();
      }
    Seq m = lhs[rl - 2], kl = lhs[rl - 1], kr = rhs[rr - 2], n = rhs[rr - 1];
    if (m == Seq::Key) {
      fail(op, "has the attended positions as its rows");
      return failure();
    }
    // The product over the attended positions (probabilities @ values).
    if (kl == Seq::Key && kr == Seq::Query) {
      flow.keyUses.push_back({&op->getOpOperand(1), rr - 2});
      kr = Seq::Key;
    }
    if (kl != kr) {
      fail(op, "sums over positions that are not the attended ones");
      return failure();
    }
    if (kl == Seq::Query) {
      fail(op, "sums over the positions it computes");
      return failure();
    }
    // The scores (queries @ keys^T).
    if (m == Seq::Query && n == Seq::Query) {
      flow.keyUses.push_back({&op->getOpOperand(1), rr - 1});
      n = Seq::Key;
    }
    if (m == Seq::Query && n == Seq::Key && !flow.dependent(op.getLhs())) {
      fail(op, "has no queries");
      return failure();
    }
    Labels out(std::max(rl, rr) - 2, Seq::None);
    out.push_back(m);
    out.push_back(n);
    return out;
  }

  FailureOr<Labels> reshape(ReshapeOp op) {
    Labels in = flow.of(op.getInput());
    ArrayRef<int64_t> inShape = typeOf(op.getInput()).getShape();
    ArrayRef<int64_t> outShape = op.getShape();
    Labels out(outShape.size(), Seq::None);
    for (auto [i, s] : llvm::enumerate(in)) {
      if (s == Seq::None)
        continue;
      int64_t before = 1;
      for (size_t k = 0; k < i; ++k)
        before *= inShape[k];
      std::optional<size_t> found;
      int64_t prefix = 1;
      for (size_t j = 0; j < outShape.size() && prefix <= before; ++j) {
        if (prefix == before && outShape[j] == inShape[i]) {
          found = j;
          break;
        }
        prefix *= outShape[j];
      }
      if (!found) {
        fail(op, "merges the positions with another dimension (or splits "
                 "them): decoding one position needs them apart");
        return failure();
      }
      out[*found] = s;
    }
    return out;
  }

  FailureOr<Labels> reduce(Operation *op, Value input, ArrayRef<int64_t> dims,
                           bool keepdim) {
    Labels in = flow.of(input);
    int64_t rank = in.size();
    SmallVector<bool> reduced(rank, dims.empty());
    for (int64_t d : dims)
      reduced[wrap(d, rank)] = true;
    Labels out;
    for (int64_t i = 0; i < rank; ++i) {
      if (!reduced[i]) {
        out.push_back(in[i]);
        continue;
      }
      if (in[i] == Seq::Query) {
        fail(op, "reduces over the positions it computes");
        return failure();
      }
      if (keepdim)
        out.push_back(Seq::None);
    }
    return out;
  }

  FailureOr<SmallVector<Labels>> rule(Operation *op) {
    auto one = [](FailureOr<Labels> l) -> FailureOr<SmallVector<Labels>> {
      if (failed(l))
        return failure();
      return SmallVector<Labels>{*l};
    };
    auto same = [&](Value v) { return one(flow.of(v)); };
    return llvm::TypeSwitch<Operation *, FailureOr<SmallVector<Labels>>>(op)
        .Case<NegOp, AbsOp, ExpOp, LogOp, SinOp, CosOp, SqrtOp, RsqrtOp,
              ReciprocalOp, ErfOp, TanhOp, SigmoidOp, SiluOp, ReluOp, NotOp,
              GeluOp, ClampOp, CastOp, DropoutOp>(
            [&](Operation *o) { return same(o->getOperand(0)); })
        .Case<AddOp, SubOp, MulOp, DivOp, PowOp, RemainderOp, FloorDivideOp,
              MinimumOp, MaximumOp, AndOp, OrOp, CompareOp, WhereOp, ConcatOp>(
            [&](Operation *o) -> FailureOr<SmallVector<Labels>> {
              if (auto cat = dyn_cast<ConcatOp>(o)) {
                int64_t rank = typeOf(cat.getResult()).getRank();
                for (Value v : cat.getInputs())
                  if (failed(keepsPositions(o, v, {wrap(cat.getDim(), rank)},
                                            "joins along the positions")))
                    return failure();
              }
              return one(broadcastAll(o));
            })
        .Case<SoftmaxOp, LogSoftmaxOp>(
            [&](Operation *o) -> FailureOr<SmallVector<Labels>> {
              // Over the attended positions (attention's softmax) it may.
              Labels in = flow.of(o->getOperand(0));
              int64_t dim = o->getAttrOfType<IntegerAttr>("dim").getInt();
              if (in[wrap(dim, in.size())] == Seq::Query) {
                fail(o, "normalizes over the positions it computes");
                return failure();
              }
              return one(in);
            })
        .Case<LayerNormOp, RmsNormOp>(
            [&](Operation *o) -> FailureOr<SmallVector<Labels>> {
              int64_t n =
                  o->getAttrOfType<IntegerAttr>("normalized_rank").getInt();
              SmallVector<int64_t> dims;
              for (int64_t i = 1; i <= n; ++i)
                dims.push_back(-i);
              for (unsigned k = 1; k < o->getNumOperands(); ++k)
                if (flow.dependent(o->getOperand(k))) {
                  fail(o, "normalizes with a weight computed from the tokens");
                  return failure();
                }
              if (failed(keepsPositions(o, o->getOperand(0), dims,
                                        "normalizes over positions")))
                return failure();
              return same(o->getOperand(0));
            })
        .Case([&](LinearOp o) -> FailureOr<SmallVector<Labels>> {
          if (flow.dependent(o.getWeight()) ||
              (o.getBias() && flow.dependent(o.getBias()))) {
            fail(o, "has a weight computed from the tokens");
            return failure();
          }
          Labels l = flow.of(o.getInput());
          if (l.back() != Seq::None) {
            fail(o, "sums over positions");
            return failure();
          }
          return one(l);
        })
        .Case([&](MatmulOp o) { return one(matmul(o)); })
        .Case([&](EmbeddingOp o) -> FailureOr<SmallVector<Labels>> {
          if (flow.dependent(o.getWeight())) {
            fail(o, "has a table computed from the tokens");
            return failure();
          }
          Labels l = flow.of(o.getIndices());
          l.push_back(Seq::None);
          return one(l);
        })
        .Case([&](IndexOp o) -> FailureOr<SmallVector<Labels>> {
          Labels in = flow.of(o.getInput());
          int64_t d = wrap(o.getDim(), in.size());
          if (in[d] != Seq::None) {
            fail(o, "picks positions by index");
            return failure();
          }
          Labels out(in.begin(), in.begin() + d);
          llvm::append_range(out, flow.of(o.getIndices()));
          out.append(in.begin() + d + 1, in.end());
          return one(out);
        })
        .Case([&](ReshapeOp o) { return one(reshape(o)); })
        .Case([&](PermuteOp o) -> FailureOr<SmallVector<Labels>> {
          Labels in = flow.of(o.getInput()), out;
          for (int64_t p : o.getPermutation())
            out.push_back(in[wrap(p, in.size())]);
          return one(out);
        })
        .Case([&](ExpandOp o) -> FailureOr<SmallVector<Labels>> {
          Labels in = flow.of(o.getInput());
          Labels out(o.getShape().size() - in.size(), Seq::None);
          llvm::append_range(out, in);
          return one(out);
        })
        .Case([&](SliceOp o) -> FailureOr<SmallVector<Labels>> {
          Labels in = flow.of(o.getInput());
          int64_t d = wrap(o.getDim(), in.size());
          bool whole = o.getStart() == 0 && o.getStep() == 1 &&
                       o.getEnd() == typeOf(o.getInput()).getDimSize(d);
          if (in[d] != Seq::None && !whole) {
            fail(o, "takes some of the positions");
            return failure();
          }
          return one(in);
        })
        .Case([&](SelectOp o) -> FailureOr<SmallVector<Labels>> {
          Labels in = flow.of(o.getInput());
          int64_t d = wrap(o.getDim(), in.size());
          if (in[d] != Seq::None) {
            fail(o, "takes one of the positions");
            return failure();
          }
          in.erase(in.begin() + d);
          return one(in);
        })
        .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp>(
            [&](Operation *o) -> FailureOr<SmallVector<Labels>> {
              auto dims = o->getAttrOfType<DenseI64ArrayAttr>("dims");
              auto keep = o->getAttrOfType<BoolAttr>("keepdim");
              return one(reduce(o, o->getOperand(0), dims.asArrayRef(),
                                keep && keep.getValue()));
            })
        .Case<TrilOp, TriuOp>(
            [&](Operation *o) -> FailureOr<SmallVector<Labels>> {
              if (failed(keepsPositions(o, o->getOperand(0), {-2, -1},
                                        "masks across positions")))
                return failure();
              return same(o->getOperand(0));
            })
        .Case([&](PadOp o) -> FailureOr<SmallVector<Labels>> {
          SmallVector<int64_t> dims;
          for (auto [i, lh] :
               llvm::enumerate(llvm::zip(o.getLow(), o.getHigh())))
            if (std::get<0>(lh) != 0 || std::get<1>(lh) != 0)
              dims.push_back(i);
          if (failed(
                  keepsPositions(o, o.getInput(), dims, "pads the positions")))
            return failure();
          return same(o.getInput());
        })
        .Case([&](RollOp o) -> FailureOr<SmallVector<Labels>> {
          if (failed(keepsPositions(o, o.getInput(), o.getDims(),
                                    "shifts the positions")))
            return failure();
          return same(o.getInput());
        })
        .Case([&](MaskedAttentionOp o) -> FailureOr<SmallVector<Labels>> {
          fail(o, "is fused attention: run --merak-kv-cache on the forward "
                  "program, before --merak-fuse-attention");
          return failure();
        })
        .Default([&](Operation *o) -> FailureOr<SmallVector<Labels>> {
          fail(o, "has no rule for how positions move through it");
          return failure();
        });
  }

  PositionFlow &flow;
};

/// Labels every value of `ops` (in program order) computed from `tokens`,
/// whose dimension `seqDim` holds the positions.
LogicalResult analyze(ArrayRef<Operation *> ops, Value tokens, int64_t seqDim,
                      PositionFlow &flow) {
  flow.labels.clear();
  flow.rowReads.clear();
  flow.keyUses.clear();
  Labels l(typeOf(tokens).getRank(), Seq::None);
  l[seqDim] = Seq::Query;
  flow.labels[tokens] = l;
  FlowBuilder builder(flow);
  for (Operation *op : ops)
    if (failed(builder.visit(op)))
      return failure();
  return success();
}

/// Where to cache an operand read as keys: up from it through reshapes,
/// permutes, broadcasts and casts of a value nothing else reads, to the
/// smallest such value (a grouped-query layer caches its keys before they
/// are repeated over the heads). Returns the value and its position
/// dimension.
std::pair<Value, int64_t> cachePoint(Value v, int64_t dim,
                                     const PositionFlow &flow) {
  std::pair<Value, int64_t> best{v, dim};
  while (Operation *def = v.getDefiningOp()) {
    Value in;
    int64_t inDim = -1;
    if (auto p = dyn_cast<PermuteOp>(def)) {
      in = p.getInput(),
      inDim = wrap(p.getPermutation()[dim], typeOf(in).getRank());
    } else if (auto c = dyn_cast<CastOp>(def)) {
      in = c.getInput(), inDim = dim;
    } else if (auto e = dyn_cast<ExpandOp>(def)) {
      in = e.getInput();
      inDim = dim - (int64_t(e.getShape().size()) - typeOf(in).getRank());
    } else if (auto r = dyn_cast<ReshapeOp>(def)) {
      in = r.getInput();
      Labels l = flow.of(in);
      // The input dimension the reshape's analysis mapped to `dim`.
      ArrayRef<int64_t> inShape = typeOf(in).getShape();
      int64_t after = 1;
      for (int64_t k = dim + 1; k < typeOf(v).getRank(); ++k)
        after *= typeOf(v).getDimSize(k);
      for (int64_t i = 0; i < int64_t(l.size()); ++i) {
        int64_t inAfter = 1;
        for (int64_t k = i + 1; k < int64_t(inShape.size()); ++k)
          inAfter *= inShape[k];
        if (l[i] == Seq::Query && inAfter == after)
          inDim = i;
      }
    }
    if (!in || inDim < 0 || !flow.dependent(in) || !in.hasOneUse() ||
        flow.of(in)[inDim] != Seq::Query)
      break;
    v = in, dim = inDim;
    if (numElements(v) < numElements(best.first))
      best = {v, dim};
  }
  return best;
}

struct KvCachePass : public merak::impl::KvCacheBase<KvCachePass> {
  using KvCacheBase::KvCacheBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>(funcName);
    if (!forward) {
      emitError(module.getLoc(), "--merak-kv-cache: no @") << funcName;
      return signalPassFailure();
    }
    if (failed(run(module, forward)))
      return signalPassFailure();
  }

  LogicalResult run(ModuleOp module, func::FuncOp forward) {
    for (StringRef name : {"prefill", "decode"})
      if (module.lookupSymbol(name))
        return emitError(module.getLoc(), "--merak-kv-cache: the module "
                                          "already has @")
               << name;
    if (!forward.getBody().hasOneBlock())
      return forward.emitError("--merak-kv-cache: @")
             << funcName << " has more than one block";
    Block &body = forward.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());

    // The token input.
    BlockArgument tokens;
    for (BlockArgument arg : body.getArguments()) {
      auto name =
          forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kInputAttr);
      if (name && name.getValue() == input)
        tokens = arg;
    }
    if (!tokens) {
      SmallVector<std::string> names;
      for (unsigned i = 0; i < forward.getNumArguments(); ++i)
        if (auto n = forward.getArgAttrOfType<StringAttr>(i, kInputAttr))
          names.push_back(n.str());
      return forward.emitError("--merak-kv-cache: @")
             << funcName << " has no input '" << input
             << "' (its inputs: " << llvm::join(names, ", ") << ")";
    }
    auto tokenType = typeOf(tokens);
    if (!tokenType.getElementType().isInteger(64) || tokenType.getRank() != 2)
      return forward.emitError("--merak-kv-cache: input '")
             << input << "' is " << tokenType
             << ", not token ids [batch, positions] of i64";
    int64_t length = tokenType.getDimSize(1);
    if (length < 2)
      return forward.emitError("--merak-kv-cache: input '")
             << input << "' has " << length
             << " position; trace the model with its whole context";

    // The logits.
    int64_t result = logits;
    if (result < 0 || result >= int64_t(ret.getNumOperands()))
      return forward.emitError("--merak-kv-cache: logits=")
             << result << ", but @" << funcName << " has "
             << ret.getNumOperands() << " results";
    Value out = ret.getOperand(result);
    auto outType = typeOf(out);
    if (outType.getRank() != 3 || !isa<FloatType>(outType.getElementType()) ||
        outType.getDimSize(0) != tokenType.getDimSize(0) ||
        outType.getDimSize(1) != length)
      return forward.emitError("--merak-kv-cache: result #")
             << result << " is " << out.getType()
             << ", not logits [batch, positions, vocabulary]";

    // The ops the logits need, in program order.
    llvm::DenseSet<Operation *> needed;
    SmallVector<Value> work{out};
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || !needed.insert(def).second)
        continue;
      llvm::append_range(work, def->getOperands());
    }
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      if (needed.contains(&op))
        ops.push_back(&op);

    // Positions, the key uses, their cache points; then again with the
    // cache points known.
    PositionFlow flow;
    if (failed(analyze(ops, tokens, 1, flow)))
      return failure();
    for (auto [use, dim] : flow.keyUses) {
      auto [point, pointDim] = cachePoint(use->get(), dim, flow);
      flow.cached.insert({point, pointDim});
    }
    if (flow.cached.empty())
      return forward.emitError("--merak-kv-cache: @")
             << funcName
             << " has no attention (no product of queries and keys over the "
                "positions): there is nothing to cache";
    DenseMap<Value, Labels> before = flow.labels;
    if (failed(analyze(ops, tokens, 1, flow)))
      return failure();
    if (!flow.keyUses.empty())
      return flow.keyUses.front().first->getOwner()->emitError(
          "--merak-kv-cache: keys read here are not the cached ones");
    if (flow.of(out)[1] != Seq::Query)
      return forward.emitError("--merak-kv-cache: result #")
             << result << " does not hold the positions in dimension 1";

    // One name per cache.
    SmallVector<std::string> names;
    for (unsigned i = 0; i < flow.cached.size(); ++i)
      names.push_back("kv." + std::to_string(i));

    OpBuilder b(module.getContext());
    b.setInsertionPointAfter(forward);
    buildPrefill(b, forward, ops, out, flow, names);
    buildDecode(b, forward, ops, tokens, out, flow, before, names);
    forward.erase();
    return success();
  }

  /// The arguments of `forward` that `ops` read.
  static SmallVector<BlockArgument> usedArguments(func::FuncOp forward,
                                                  ArrayRef<Operation *> ops) {
    llvm::DenseSet<Value> read;
    for (Operation *op : ops)
      for (Value v : op->getOperands())
        read.insert(v);
    SmallVector<BlockArgument> used;
    for (BlockArgument arg : forward.getArguments())
      if (read.contains(arg))
        used.push_back(arg);
    return used;
  }

  void buildPrefill(OpBuilder &b, func::FuncOp forward,
                    ArrayRef<Operation *> ops, Value out,
                    const PositionFlow &flow, ArrayRef<std::string> names) {
    SmallVector<BlockArgument> args = usedArguments(forward, ops);
    SmallVector<Type> argTypes, resultTypes{out.getType()};
    for (BlockArgument a : args)
      argTypes.push_back(a.getType());
    for (auto &entry : flow.cached)
      resultTypes.push_back(entry.first.getType());
    auto func = b.create<func::FuncOp>(
        forward.getLoc(), "prefill", b.getFunctionType(argTypes, resultTypes));
    for (auto [i, a] : llvm::enumerate(args))
      func.setArgAttrs(i, forward.getArgAttrDict(a.getArgNumber()));
    Block *block = func.addEntryBlock();
    OpBuilder fb = OpBuilder::atBlockEnd(block);
    IRMapping map;
    for (auto [a, n] : llvm::zip(args, block->getArguments()))
      map.map(a, n);
    for (Operation *op : ops) {
      if (auto drop = dyn_cast<DropoutOp>(op)) {
        map.map(drop.getResult(), map.lookup(drop.getInput()));
        continue;
      }
      fb.clone(*op, map);
    }
    SmallVector<Value> results{map.lookup(out)};
    for (auto &entry : flow.cached)
      results.push_back(map.lookup(entry.first));
    fb.create<func::ReturnOp>(forward.getLoc(), results);
    for (auto [i, name] : llvm::enumerate(names))
      func.setResultAttr(i + 1, kKvCacheAttr, fb.getStringAttr(name));
  }

  /// `type` with every query dimension of `labels` of size one.
  static RankedTensorType oneQuery(RankedTensorType type,
                                   const Labels &labels) {
    SmallVector<int64_t> shape(type.getShape());
    for (auto [i, s] : llvm::enumerate(labels))
      if (s == Seq::Query)
        shape[i] = 1;
    return type.clone(shape);
  }

  void buildDecode(OpBuilder &b, func::FuncOp forward,
                   ArrayRef<Operation *> ops, Value tokens, Value out,
                   const PositionFlow &flow,
                   const DenseMap<Value, Labels> &before,
                   ArrayRef<std::string> names) {
    MLIRContext *ctx = b.getContext();
    SmallVector<BlockArgument> args = usedArguments(forward, ops);
    SmallVector<Type> argTypes;
    for (BlockArgument a : args)
      argTypes.push_back(a == tokens ? oneQuery(typeOf(a), flow.of(a))
                                     : a.getType());
    auto positionType = RankedTensorType::get({1}, IntegerType::get(ctx, 64));
    argTypes.push_back(positionType);
    for (auto &entry : flow.cached)
      argTypes.push_back(entry.first.getType());
    SmallVector<Type> resultTypes{oneQuery(typeOf(out), flow.of(out))};
    for (auto &entry : flow.cached)
      resultTypes.push_back(entry.first.getType());
    auto func = b.create<func::FuncOp>(
        forward.getLoc(), "decode", b.getFunctionType(argTypes, resultTypes));
    for (auto [i, a] : llvm::enumerate(args))
      func.setArgAttrs(i, forward.getArgAttrDict(a.getArgNumber()));
    unsigned positionArg = args.size();
    func.setArgAttr(positionArg, kPositionAttr, UnitAttr::get(ctx));
    for (auto [i, name] : llvm::enumerate(names)) {
      func.setArgAttr(positionArg + 1 + i, kKvCacheAttr,
                      StringAttr::get(ctx, name));
      func.setResultAttr(i + 1, kKvCacheAttr, StringAttr::get(ctx, name));
    }
    Block *block = func.addEntryBlock();
    Value position = block->getArgument(positionArg);
    OpBuilder fb = OpBuilder::atBlockEnd(block);
    IRMapping map;
    for (auto [a, n] : llvm::zip(args, block->getArguments()))
      map.map(a, n);

    DenseMap<Operation *, SmallVector<std::pair<unsigned, int64_t>>> reads;
    for (auto [use, dim] : flow.rowReads)
      reads[use->getOwner()].push_back({use->getOperandNumber(), dim});

    for (Operation *op : ops) {
      if (auto drop = dyn_cast<DropoutOp>(op)) {
        map.map(drop.getResult(), map.lookup(drop.getInput()));
        continue;
      }
      Operation *copy = fb.clone(*op, map);
      if (!llvm::any_of(op->getResults(),
                        [&](Value r) { return flow.dependent(r); }))
        continue;
      // Constant operands lined up with the queries: their row at the
      // position.
      OpBuilder rb(copy);
      for (auto [k, dim] : reads.lookup(op))
        copy->setOperand(k, rb.create<IndexOp>(op->getLoc(),
                                               copy->getOperand(k), position,
                                               rb.getI64IntegerAttr(dim)));
      for (auto [orig, res] : llvm::zip(op->getResults(), copy->getResults())) {
        auto point = flow.cached.find(orig);
        Labels labels =
            point == flow.cached.end() ? flow.of(orig) : before.lookup(orig);
        res.setType(oneQuery(typeOf(orig), labels));
      }
      ArrayRef<int64_t> shape = typeOf(copy->getResult(0)).getShape();
      if (auto r = dyn_cast<ReshapeOp>(copy))
        r.setShape(shape);
      if (auto e = dyn_cast<ExpandOp>(copy))
        e.setShape(shape);
      // A cache point: this position's rows written into the cache.
      fb.setInsertionPointAfter(copy);
      for (auto [orig, res] : llvm::zip(op->getResults(), copy->getResults())) {
        auto point = flow.cached.find(orig);
        if (point == flow.cached.end())
          continue;
        unsigned index = std::distance(flow.cached.begin(), point);
        Value cache = block->getArgument(positionArg + 1 + index);
        Value full =
            fb.create<UpdateSliceOp>(op->getLoc(), cache, res, position,
                                     fb.getI64IntegerAttr(point->second));
        map.map(orig, full);
      }
      fb.setInsertionPointToEnd(block);
    }
    SmallVector<Value> results{map.lookup(out)};
    for (auto &entry : flow.cached)
      results.push_back(map.lookup(entry.first));
    fb.create<func::ReturnOp>(forward.getLoc(), results);
  }
};

} // namespace
