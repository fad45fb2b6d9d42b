//===- PlanSummary.cpp - a partitioned module summarized as JSON ----------===//
//
// The memory figures come from the lowered rank programs (each pipeline
// rank's stage functions, local shapes after sharding), the layers from the
// layer analysis of @train_step (the pipeline partition's own), the
// collectives from @train_step's mesh ops (`merak.id`: forward,
// `merak.grad_of`: backward, neither: the update), and the schedule's dates
// from its unit-time simulation.
//
//===----------------------------------------------------------------------===//

#include "merak/Target/RankProgram/PlanSummary.h"

#include "merak/Analysis/CostModel.h"
#include "merak/Analysis/Layers.h"
#include "merak/Analysis/PipelineAttrNames.h"
#include "merak/Analysis/PipelineInfo.h"
#include "merak/Analysis/PipelineSchedule.h"
#include "merak/Dialect/Merak/IR/AttrNames.h"
#include "merak/Dialect/Merak/IR/MerakDialect.h"
#include "merak/Target/RankProgram/RankProgramLowering.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Tools/mlir-translate/Translation.h"

#include <nlohmann/json.hpp>

#include <map>
#include <set>
#include <tuple>

using namespace mlir;

namespace merak::runtime {

namespace {

using json = nlohmann::ordered_json;

const char *kindName(pipeline::TaskKind kind) {
  switch (kind) {
  case pipeline::TaskKind::Forward:
    return "F";
  case pipeline::TaskKind::ForwardKeep:
    return "FK";
  case pipeline::TaskKind::Recompute:
    return "R";
  case pipeline::TaskKind::Backward:
    return "B";
  case pipeline::TaskKind::Weight:
    return "W";
  default:
    return "?";
  }
}

int64_t typeBytes(Type type) {
  auto shaped = dyn_cast<ShapedType>(type);
  if (!shaped || !shaped.hasStaticShape())
    return 0;
  int64_t bits = shaped.getElementTypeBitWidth();
  return shaped.getNumElements() * std::max<int64_t>(1, bits / 8);
}

/// `transformer.h.0.attn.c_attn.weight` -> `transformer.h.0.attn.c_attn`.
std::string modulePath(llvm::StringRef param) {
  size_t dot = param.rfind('.');
  return dot == llvm::StringRef::npos ? param.str()
                                      : param.substr(0, dot).str();
}

/// Mesh ops that move data between ranks (not slicing, not declarations).
bool communicates(Operation *op) {
  if (op->getDialect() == nullptr || op->getDialect()->getNamespace() != "mesh")
    return false;
  llvm::StringRef name = op->getName().stripDialect();
  return name != "all_slice" && name != "shard" && name != "mesh" &&
         name != "sharding" && name != "mesh_shape" &&
         name != "process_multi_index" && name != "process_linear_index" &&
         op->getNumOperands() > 0;
}

std::optional<int64_t> stageOf(Operation *op) {
  if (auto s = op->getAttrOfType<IntegerAttr>(kStageAttr))
    return s.getInt();
  return std::nullopt;
}

} // namespace

FailureOr<std::string> planSummaryJson(ModuleOp module,
                                       llvm::StringRef source) {
  FailureOr<RankPrograms> programs = lowerToRankPrograms(module, "", source);
  if (failed(programs))
    return failure();
  const Program &step = programs->step;
  auto func = module.lookupSymbol<func::FuncOp>("train_step");
  if (!func)
    func = module.lookupSymbol<func::FuncOp>("forward");

  json doc;
  doc["format"] = "merak-plan-v1";
  doc["source"] = source.str();

  // The mesh of one pipeline stage, and every rank's place.
  MeshLayout mesh = step.mesh.value_or(MeshLayout{});
  std::vector<std::string> axes;
  for (size_t a = 0; a < mesh.shape.size(); ++a)
    axes.push_back(mesh.axisName(int64_t(a)));
  int64_t meshSize = mesh.shape.empty() ? 1 : mesh.size();
  int64_t pp = programs->pipeline.empty() ? 1 : programs->pipeline.front().pp;
  doc["mesh"] = {{"axes", axes}, {"shape", mesh.shape}};
  doc["ranks"] = meshSize * pp;
  json layout = json::array();
  for (int64_t r = 0; r < meshSize * pp; ++r) {
    int64_t meshRank = r % meshSize;
    std::vector<int64_t> coords(mesh.shape.size());
    for (size_t a = mesh.shape.size(); a-- > 0;) {
      coords[a] = meshRank % mesh.shape[a];
      meshRank /= mesh.shape[a];
    }
    layout.push_back(
        {{"rank", r}, {"pipeline_rank", r / meshSize}, {"coords", coords}});
  }
  doc["rank_layout"] = layout;

  // Layers, found on @forward (the unpartitioned model; its k-th op is the
  // step's op with `merak.id = k`), named after the modules of the
  // parameters they read, each on the stage of its first op in the step.
  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward)
    forward = func;
  std::map<int64_t, Operation *> stepOpOfId;
  func.walk([&](Operation *op) {
    if (auto id = op->getAttrOfType<IntegerAttr>(kIdAttr))
      stepOpOfId.emplace(id.getInt(), op);
  });
  std::map<Operation *, int64_t> positionOf;
  if (forward != func) {
    int64_t position = 0;
    for (Operation &op : forward.getBody().front().without_terminator())
      positionOf[&op] = position++;
  }
  auto idOf = [&](Operation *op) -> std::optional<int64_t> {
    if (forward != func) {
      auto it = positionOf.find(op);
      return it == positionOf.end() ? std::nullopt
                                    : std::optional<int64_t>(it->second);
    }
    if (auto id = op->getAttrOfType<IntegerAttr>(kIdAttr))
      return id.getInt();
    return std::nullopt;
  };
  CostModel model;
  LayerAnalysis analysis(forward, model);
  std::map<int64_t, int> layerOfId;
  std::vector<int64_t> layerStage;
  std::vector<int64_t> savedBytes;
  json layers = json::array();
  for (auto [index, layer] : llvm::enumerate(analysis.layers())) {
    std::vector<std::string> modules;
    std::optional<int64_t> stage;
    for (Operation *op :
         analysis.forwardOps().slice(layer.begin, layer.end - layer.begin)) {
      std::optional<int64_t> id = idOf(op);
      if (id) {
        layerOfId[*id] = int(index);
        auto step = stepOpOfId.find(*id);
        if (!stage && step != stepOpOfId.end())
          stage = stageOf(step->second);
      }
      for (Value operand : op->getOperands()) {
        auto arg = dyn_cast<BlockArgument>(operand);
        if (!arg || arg.getOwner()->getParentOp() != forward)
          continue;
        if (auto name = forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                             kParamAttr)) {
          std::string m = modulePath(name.getValue());
          if (std::find(modules.begin(), modules.end(), m) == modules.end())
            modules.push_back(m);
        }
      }
    }
    std::string name = modules.empty() ? "layer " + std::to_string(index)
                       : modules.size() == 1
                           ? modules.front()
                           : modules.front() + " .. " + modules.back();
    layerStage.push_back(stage.value_or(0));
    savedBytes.push_back(layer.savedBytes);
    layers.push_back(
        {{"index", index}, {"name", name}, {"stage", stage.value_or(0)}});
  }
  doc["layers"] = layers;

  // The pipeline: stages, and the tasks dated in unit time.
  std::optional<pipeline::Schedule> schedule;
  if (auto dict =
          module->getAttrOfType<DictionaryAttr>(kPipelineScheduleAttr)) {
    FailureOr<pipeline::Schedule> s = scheduleFromAttr(module, dict);
    if (failed(s))
      return failure();
    schedule = *std::move(s);
  }
  if (schedule && !programs->pipeline.empty()) {
    const PipelinePlan &plan = programs->pipeline.front();
    llvm::Expected<pipeline::Simulation> sim = pipeline::simulate(*schedule);
    if (!sim)
      return emitError(module.getLoc()) << "the schedule cannot be simulated: "
                                        << llvm::toString(sim.takeError());
    json stages = json::array();
    for (int64_t s = 0; s < schedule->shape.stages(); ++s) {
      std::vector<int64_t> held;
      for (size_t l = 0; l < layerStage.size(); ++l)
        if (layerStage[l] == s)
          held.push_back(int64_t(l));
      stages.push_back({{"stage", s},
                        {"pipeline_rank", schedule->shape.rankOf(int(s))},
                        {"layers", held}});
    }
    json tasks = json::array();
    for (size_t r = 0; r < sim->tasks.size(); ++r) {
      json row = json::array();
      for (size_t i = 0; i < sim->tasks[r].size(); ++i) {
        const pipeline::Task &t = sim->tasks[r][i];
        row.push_back({{"kind", kindName(t.kind)},
                       {"stage", t.stage},
                       {"micro", t.microbatch},
                       {"start", sim->spans[r][i].first},
                       {"end", sim->spans[r][i].second}});
      }
      tasks.push_back(row);
    }
    doc["pipeline"] = {{"schedule", plan.kind},
                       {"pp", plan.pp},
                       {"virtual", plan.virtualStages},
                       {"microbatches", plan.microbatches},
                       {"bubble", sim->bubble()},
                       {"stages", stages},
                       {"tasks", tasks}};
  } else {
    doc["pipeline"] = nullptr;
  }

  // Memory per pipeline rank: the state of its functions (local shapes),
  // gradients (a pipeline's accumulators; else one per local parameter),
  // and the activations its forwards keep for backward at the schedule's
  // peak of micro-batches in flight.
  // The layers' figures are @forward's, at the traced batch; a rank keeps
  // its share of it (inputs split over dp and sp; tensor-parallel splits of
  // activations are not counted).
  double batchShare = 1;
  {
    // A pipeline's stage functions take one micro-batch.
    const Program *takesInputs = &step;
    if (!programs->pipeline.empty())
      for (const StageFunction &f : programs->pipeline.front().functions)
        if (f.program.findArgument(ArgumentRole::Input)) {
          takesInputs = &f.program;
          break;
        }
    int64_t local = 0, traced = 0;
    for (const Argument &arg : takesInputs->arguments)
      if (arg.role == ArgumentRole::Input)
        local += takesInputs->values[arg.value].type.numElements();
    for (unsigned i = 0; i < forward.getNumArguments(); ++i)
      if (forward.getArgAttr(i, kInputAttr))
        if (auto t = dyn_cast<ShapedType>(forward.getArgument(i).getType()))
          if (t.hasStaticShape())
            traced += t.getNumElements();
    if (local > 0 && traced > 0)
      batchShare = std::min(1.0, double(local) / double(traced));
  }
  for (int64_t &b : savedBytes)
    b = int64_t(double(b) * batchShare);
  std::vector<double> activations;
  if (schedule) {
    std::vector<double> perStage(size_t(schedule->shape.stages()), 0);
    for (size_t l = 0; l < layerStage.size(); ++l)
      if (layerStage[l] >= 0 && layerStage[l] < int64_t(perStage.size()))
        perStage[size_t(layerStage[l])] += double(savedBytes[l]);
    activations = pipeline::peakHeld(*schedule, perStage);
  } else {
    double total = 0;
    for (int64_t b : savedBytes)
      total += double(b);
    activations.push_back(total);
  }
  json memory = json::array();
  for (int64_t r = 0; r < pp; ++r) {
    std::vector<const Program *> functions;
    if (programs->pipeline.empty())
      functions.push_back(&step);
    else
      for (const StageFunction &f : programs->pipeline[size_t(r)].functions)
        functions.push_back(&f.program);
    std::map<std::string, int64_t> params, state, grads, buffers;
    for (const Program *p : functions)
      for (const Argument &arg : p->arguments) {
        int64_t bytes = p->values[arg.value].type.byteSize();
        switch (arg.role) {
        case ArgumentRole::Param:
          params[arg.name] = bytes;
          break;
        case ArgumentRole::OptState:
          state[arg.name] = bytes;
          break;
        case ArgumentRole::Grad:
          grads[arg.name] = bytes;
          break;
        case ArgumentRole::Buffer:
          buffers[arg.name] = bytes;
          break;
        default:
          break;
        }
      }
    auto sum = [](const std::map<std::string, int64_t> &m) {
      int64_t total = 0;
      for (const auto &[name, bytes] : m)
        total += bytes;
      return total;
    };
    int64_t gradients = programs->pipeline.empty() ? sum(params) : sum(grads);
    memory.push_back({{"pipeline_rank", r},
                      {"parameters", sum(params)},
                      {"gradients", gradients},
                      {"optimizer_state", sum(state)},
                      {"buffers", sum(buffers)},
                      {"activations", int64_t(r < int64_t(activations.size())
                                                  ? activations[size_t(r)]
                                                  : 0)}});
  }
  doc["memory"] = memory;

  // Collectives of @train_step by layer, phase, op, axes and stage.
  using Key = std::tuple<std::string, int64_t, std::string, std::string,
                         std::vector<std::string>>;
  std::map<Key, std::pair<int64_t, int64_t>> totals;
  std::vector<Key> order;
  auto layerName = [&](int64_t id) -> std::string {
    auto it = layerOfId.upper_bound(id);
    if (it == layerOfId.begin())
      return "(before the layers)";
    --it;
    return layers[size_t(it->second)]["name"].get<std::string>();
  };
  auto isUpdate = [](Operation *op) {
    return op->getDialect() &&
           op->getDialect()->getNamespace() ==
               MerakDialect::getDialectNamespace() &&
           op->getName().stripDialect().ends_with("_update");
  };
  // A collective without `merak.id` or `merak.grad_of` (inserted by the
  // partitioning) belongs where it stands: to the update once an optimizer
  // op has run or when one reads it, else to the layer of the last op
  // before it that has one.
  std::string phaseHere = "forward", layerHere = "(before the layers)";
  bool updating = false;
  func.walk([&](Operation *op) {
    if (isUpdate(op))
      updating = true;
    std::optional<int64_t> id;
    std::string phase;
    if (auto a = op->getAttrOfType<IntegerAttr>(kIdAttr)) {
      phase = "forward";
      id = a.getInt();
    } else if (auto a = op->getAttrOfType<IntegerAttr>(kGradOfAttr)) {
      phase = "backward";
      id = a.getInt();
    }
    if (id && !communicates(op)) {
      phaseHere = phase;
      layerHere = layerName(*id);
    }
    if (!communicates(op))
      return;
    std::string layer = id ? layerName(*id) : layerHere;
    if (!id) {
      phase = phaseHere;
      bool feedsUpdate = llvm::any_of(op->getUsers(), isUpdate);
      if (updating || feedsUpdate) {
        phase = "update";
        layer = "(update)";
      }
    }
    // An update's collective has no stage of its own: the first op using
    // its result (through unstaged ops) that has one.
    std::optional<int64_t> stage = stageOf(op);
    llvm::SmallVector<Operation *> frontier{op};
    std::set<Operation *> seen{op};
    while (!stage && !frontier.empty()) {
      Operation *next = frontier.front();
      frontier.erase(frontier.begin());
      for (Operation *user : next->getUsers()) {
        if ((stage = stageOf(user)))
          break;
        if (seen.insert(user).second && seen.size() < 64)
          frontier.push_back(user);
      }
    }
    std::vector<std::string> names;
    if (auto attr = op->getAttrOfType<DenseI16ArrayAttr>("mesh_axes"))
      for (int16_t a : attr.asArrayRef())
        names.push_back(mesh.axisName(a));
    Key key{layer, stage.value_or(0), phase, op->getName().stripDialect().str(),
            names};
    auto [it, fresh] = totals.try_emplace(key, 0, 0);
    if (fresh)
      order.push_back(key);
    it->second.first += 1;
    it->second.second += typeBytes(op->getOperand(0).getType());
  });
  json collectives = json::array();
  for (const Key &key : order) {
    const auto &[layer, stage, phase, opName, names] = key;
    collectives.push_back({{"layer", layer},
                           {"stage", stage},
                           {"phase", phase},
                           {"op", opName},
                           {"axes", names},
                           {"count", totals[key].first},
                           {"bytes", totals[key].second}});
  }
  doc["collectives"] = collectives;
  return doc.dump(2) + "\n";
}

void registerToPlanSummaryTranslation() {
  TranslateFromMLIRRegistration registration(
      "merak-to-plan-summary",
      "summarize a partitioned training step as JSON (merak-plan-v1): mesh, "
      "layers and stages, memory per rank, collectives per layer, the "
      "schedule in unit time",
      [](ModuleOp module, llvm::raw_ostream &os) -> LogicalResult {
        std::string source;
        if (auto loc = dyn_cast<FileLineColLoc>(module.getLoc()))
          source = loc.getFilename().str();
        FailureOr<std::string> text = planSummaryJson(module, source);
        if (failed(text))
          return failure();
        os << *text;
        return success();
      },
      [](DialectRegistry &registry) { registerMerakDialects(registry); });
}

} // namespace merak::runtime
