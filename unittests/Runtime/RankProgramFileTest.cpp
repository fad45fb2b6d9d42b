//===- RankProgramFileTest.cpp - the rank-program file round trip and errors =//

#include "merak/Runtime/RankProgramFile.h"
#include "merak/Runtime/Fusion.h"

#include "gtest/gtest.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <set>

using namespace merak::runtime;
using json = nlohmann::json;

namespace {

/// A value other than `def`, of its type.
int64_t changed(int64_t def) { return def + 7; }
int changed(int def) { return def + 5; }
double changed(double def) { return def + 0.25; }
bool changed(bool def) { return !def; }
std::optional<int64_t> changed(const std::optional<int64_t> &) { return 3; }
std::optional<double> changed(const std::optional<double> &) { return -1.5; }
std::vector<int64_t> changed(const std::vector<int64_t> &def) {
  std::vector<int64_t> v = def;
  v.insert(v.end(), {1, 2, 3});
  return v;
}
template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
E changed(E def) {
  return E(int(def) == 0 ? 1 : 0);
}

/// x, y -> add -> mul -> loss-like result, on a 2x2 mesh, planned.
Program sampleProgram() {
  Program p;
  p.function = "train_step";
  p.mesh = MeshLayout{"mesh", {2, 2}, {"dp", "tp"}};
  TensorType t{DType::F32, {4, 6}};
  p.values = {ValueInfo{t},
              ValueInfo{t},
              ValueInfo{t},
              ValueInfo{t},
              ValueInfo{TensorType{DType::I64, {2}}},
              ValueInfo{TensorType{DType::F32, {}}}};
  Argument x;
  x.value = 0;
  x.role = ArgumentRole::Param;
  x.name = "w";
  x.sharding.splitAxes = {{0}, {1}};
  x.defaultLearningRate = 1e-3;
  x.storedShape = {2, 2, 6};
  x.init = "kaiming_uniform";
  Argument y;
  y.value = 1;
  y.role = ArgumentRole::Input;
  y.name = "x";
  Argument scale;
  scale.value = 5;
  scale.role = ArgumentRole::LossScale;
  scale.name = "loss_scale";
  scale.lossScaling = {/*dynamic=*/false, /*init=*/512.0, /*window=*/7};
  p.arguments = {x, y, scale};
  ProgramConstant c;
  c.value = 4;
  c.data = HostTensor::allocate(TensorType{DType::I64, {2}});
  int64_t data[2] = {11, -3};
  std::memcpy(c.data.mutableBytes(), data, sizeof(data));
  p.constants = {c};
  Instruction add;
  add.kind = OpKind::Add;
  add.operands = {0, 1};
  add.results = {2};
  add.location = "model.py:12:4";
  Instruction mul;
  mul.kind = OpKind::Mul;
  mul.operands = {2, 2};
  mul.results = {3};
  // Every attribute field differs from its default, so each is written
  // and must be read back.
#define MERAK_CHANGE_ATTR(Type, Name, Default)                                 \
  mul.attrs.Name = changed(mul.attrs.Name);
  MERAK_OP_ATTRS(MERAK_CHANGE_ATTR)
#undef MERAK_CHANGE_ATTR
  mul.attrs.meshAxes = {1};
  p.instructions = {add, mul};
  ResultInfo r;
  r.value = 3;
  r.isLoss = true;
  r.sharding.splitAxes = {{0}};
  r.gradName = "w";
  p.results = {r};
  p.lossResult = 0;
  p.nonFiniteGradsResult = 0;
  EXPECT_TRUE(planProgram(p).ok());
  return p;
}

RankPrograms samplePrograms() {
  RankPrograms programs;
  programs.source = "plan.mlir";
  programs.step = sampleProgram();
  for (int64_t r = 0; r < 2; ++r) {
    PipelinePlan plan;
    plan.kind = "1f1b";
    plan.pp = 2;
    plan.stages = 2;
    plan.microbatches = 3;
    plan.splitBackward = r == 1;
    plan.inflightLimit = {2, 1};
    plan.unitTimeBubble = 0.125;
    plan.rank = r;
    PipelineTask f;
    f.kind = PipelineTask::Kind::Forward;
    f.stage = r;
    f.microbatch = 2;
    f.text = "F(" + std::to_string(r) + ",2)";
    PipelineTask send;
    send.kind = PipelineTask::Kind::Send;
    send.stage = r;
    send.payload = PipelineTask::Kind::Backward;
    send.peer = 1 - r;
    send.text = "send";
    plan.tasks = {f, send};
    plan.functions.push_back({r, StagePhase::BackwardWeight, sampleProgram()});
    plan.forwardSends = {{{5}, {TensorType{DType::BF16, {2, 3}}}}, {}};
    plan.backwardSends = {{}, {{7, 8}, {TensorType{}, TensorType{}}}};
    plan.tied = {{"wte", {0, 1}}};
    plan.stateStage = {{"wte", 0}, {"ln.weight", 1}};
    plan.lossStage = 1;
    programs.pipeline.push_back(std::move(plan));
  }
  return programs;
}

std::string bytesOf(const RankPrograms &programs) {
  absl::StatusOr<std::string> bytes = serializeRankPrograms(programs);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

/// `bytes` with its payload replaced by the bytes `cbor` and the header's
/// size and checksums made to match.
std::string resealBytes(const std::string &bytes, std::string_view cbor) {
  std::string out = bytes.substr(0, kRankProgramHeaderBytes);
  uint64_t size = cbor.size();
  std::memcpy(&out[16], &size, 8);
  out.append(cbor);
  uint32_t payloadCrc = crc32c(std::string_view(out).substr(32));
  std::memcpy(&out[24], &payloadCrc, 4);
  uint32_t headerCrc = crc32c(std::string_view(out).substr(0, 28));
  std::memcpy(&out[28], &headerCrc, 4);
  return out;
}

/// `bytes` with its payload replaced by `payload`: a well-formed file with
/// that content.
std::string reseal(const std::string &bytes, const json &payload) {
  std::vector<uint8_t> cbor = json::to_cbor(payload);
  return resealBytes(
      bytes, std::string_view(reinterpret_cast<const char *>(cbor.data()),
                              cbor.size()));
}

json payloadOf(const std::string &bytes) {
  return json::from_cbor(bytes.begin() + kRankProgramHeaderBytes, bytes.end());
}

std::string errorOf(const std::string &bytes) {
  absl::StatusOr<RankPrograms> read = parseRankPrograms(bytes, "plan.mrp");
  EXPECT_FALSE(read.ok());
  return read.ok() ? std::string() : std::string(read.status().message());
}

TEST(RankProgramFileTest, Crc32cKnownValue) {
  // The check value of CRC-32C (RFC 3720, appendix B.4).
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
}

TEST(RankProgramFileTest, RoundTripKeepsEveryField) {
  RankPrograms programs = samplePrograms();
  std::string bytes = bytesOf(programs);
  ASSERT_TRUE(isRankProgramFile(bytes));
  absl::StatusOr<RankPrograms> read = parseRankPrograms(bytes, "plan.mrp");
  ASSERT_TRUE(read.ok()) << read.status();
  // Written again, the same bytes.
  EXPECT_EQ(bytesOf(*read), bytes);

  const Program &a = programs.step, &b = read->step;
  EXPECT_EQ(printProgram(a), printProgram(b));
  EXPECT_EQ(b.function, "train_step");
  ASSERT_TRUE(b.mesh);
  EXPECT_EQ(b.mesh->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(b.mesh->axisNames, (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(b.arguments[0].sharding, a.arguments[0].sharding);
  EXPECT_EQ(b.arguments[0].defaultLearningRate, 1e-3);
  EXPECT_EQ(b.arguments[0].storedShape, (std::vector<int64_t>{2, 2, 6}));
  EXPECT_EQ(b.arguments[0].role, ArgumentRole::Param);
  EXPECT_EQ(b.arguments[0].init, "kaiming_uniform");
  EXPECT_EQ(b.arguments[2].role, ArgumentRole::LossScale);
  EXPECT_FALSE(b.arguments[2].lossScaling.dynamic);
  EXPECT_EQ(b.arguments[2].lossScaling.init, 512.0);
  EXPECT_EQ(b.arguments[2].lossScaling.window, 7);
  EXPECT_EQ(b.nonFiniteGradsResult, 0);
  EXPECT_EQ(b.results[0].gradName, "w");
  EXPECT_TRUE(b.results[0].isLoss);
  EXPECT_EQ(b.results[0].sharding, a.results[0].sharding);
  ASSERT_EQ(b.constants.size(), 1u);
  EXPECT_EQ(b.constants[0].data.elementAsDouble(0), 11);
  EXPECT_EQ(b.constants[0].data.elementAsDouble(1), -3);
  EXPECT_EQ(b.instructions[0].location, "model.py:12:4");
  EXPECT_EQ(b.arenaBytes, a.arenaBytes);
  EXPECT_EQ(b.plannedPeakBytes, a.plannedPeakBytes);
  for (size_t i = 0; i < a.instructions.size(); ++i) {
    EXPECT_EQ(b.instructions[i].kind, a.instructions[i].kind);
    EXPECT_EQ(b.instructions[i].release, a.instructions[i].release);
    ASSERT_EQ(b.instructions[i].storage.size(),
              a.instructions[i].storage.size());
    for (size_t k = 0; k < a.instructions[i].storage.size(); ++k) {
      EXPECT_EQ(b.instructions[i].storage[k].kind,
                a.instructions[i].storage[k].kind);
      EXPECT_EQ(b.instructions[i].storage[k].arenaOffset,
                a.instructions[i].storage[k].arenaOffset);
    }
  }
  const OpAttrs &x = a.instructions[1].attrs, &y = b.instructions[1].attrs;
#define MERAK_EXPECT_ATTR(Type, Name, Default)                                 \
  EXPECT_TRUE(x.Name == y.Name) << #Name;
  MERAK_OP_ATTRS(MERAK_EXPECT_ATTR)
#undef MERAK_EXPECT_ATTR

  ASSERT_EQ(read->pipeline.size(), 2u);
  const PipelinePlan &p = read->pipeline[1];
  EXPECT_EQ(p.kind, "1f1b");
  EXPECT_EQ(p.rank, 1);
  EXPECT_TRUE(p.splitBackward);
  EXPECT_EQ(p.inflightLimit, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(p.unitTimeBubble, 0.125);
  ASSERT_EQ(p.tasks.size(), 2u);
  EXPECT_EQ(p.tasks[1].kind, PipelineTask::Kind::Send);
  EXPECT_EQ(p.tasks[1].payload, PipelineTask::Kind::Backward);
  EXPECT_EQ(p.tasks[1].peer, 0);
  ASSERT_EQ(p.functions.size(), 1u);
  EXPECT_EQ(p.functions[0].phase, StagePhase::BackwardWeight);
  EXPECT_EQ(p.backwardSends[1].values, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(read->pipeline[0].forwardSends[0].types[0].dtype, DType::BF16);
  EXPECT_EQ(p.tied.at("wte"), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p.stateStage.at("ln.weight"), 1);
  EXPECT_EQ(read->source, "plan.mlir");
}

TEST(RankProgramFileTest, EveryTruncationIsRefused) {
  std::string bytes = bytesOf(samplePrograms());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::string message = errorOf(bytes.substr(0, n));
    EXPECT_NE(message.find("plan.mrp: "), std::string::npos) << message;
    if (n > 0)
      EXPECT_NE(message.find("truncated"), std::string::npos)
          << n << ": " << message;
  }
}

TEST(RankProgramFileTest, EveryFlippedByteIsRefused) {
  std::string bytes = bytesOf(samplePrograms());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = char(damaged[i] ^ 0x10);
    std::string message = errorOf(damaged);
    if (i < 8)
      EXPECT_NE(message.find("not a rank-program file"), std::string::npos)
          << i << ": " << message;
    else if (i < 32)
      EXPECT_NE(message.find("corrupted rank-program header"),
                std::string::npos)
          << i << ": " << message;
    else
      EXPECT_NE(message.find("the payload's checksum"), std::string::npos)
          << i << ": " << message;
  }
}

TEST(RankProgramFileTest, ForeignNewerAndPaddedFilesAreRefused) {
  EXPECT_NE(
      errorOf("module {\n}\n")
          .find("not a rank-program file (it starts with 6d 6f 64 75 6c 65 "
                "20 7b"),
      std::string::npos);
  EXPECT_NE(errorOf("").find("not a rank-program file (it is empty"),
            std::string::npos);

  std::string bytes = bytesOf(samplePrograms());
  std::string newer = bytes;
  uint32_t version = kRankProgramFormatVersion + 1;
  std::memcpy(&newer[8], &version, 4);
  uint32_t headerCrc = crc32c(std::string_view(newer).substr(0, 28));
  std::memcpy(&newer[28], &headerCrc, 4);
  EXPECT_NE(errorOf(newer).find("rank-program format version 2 is newer "
                                "than this runtime reads (1 to 1)"),
            std::string::npos)
      << errorOf(newer);

  EXPECT_NE(errorOf(bytes + "xyz")
                .find("3 unexpected bytes after the "
                      "payload"),
            std::string::npos);
}

TEST(RankProgramFileTest, FusedProgramsAreNotWritten) {
  RankPrograms programs = samplePrograms();
  fuseElementwise(programs.step);
  Instruction fused;
  fused.kind = OpKind::Fused;
  programs.step.instructions.push_back(fused);
  absl::StatusOr<std::string> bytes = serializeRankPrograms(programs);
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("fused when a program is bound"),
            std::string::npos)
      << bytes.status();
}

TEST(RankProgramFileTest, InconsistentContentIsRefusedWithItsPath) {
  std::string bytes = bytesOf(samplePrograms());
  json payload = payloadOf(bytes);
  // The same file, resealed unchanged, reads.
  EXPECT_TRUE(parseRankPrograms(reseal(bytes, payload), "plan.mrp").ok());

  json bad = payload;
  bad["step"]["instructions"][1]["operands"][0] = 99;
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("plan.mrp: inconsistent rank program: "
                      "step.instructions[1] (merak.mul): value %99 out of "
                      "range (6 values)"),
            std::string::npos)
      << errorOf(reseal(bytes, bad));

  // An instruction with fewer operands than its op takes (MerakOps.td's
  // count) would make a kernel read past them.
  bad = payload;
  bad["step"]["instructions"][1]["operands"] = json::array({2});
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.instructions[1] (merak.mul): 1 operand, the op "
                      "takes 2"),
            std::string::npos)
      << errorOf(reseal(bytes, bad));
  bad = payload;
  bad["step"]["instructions"][0]["results"] = json::array();
  bad["step"]["instructions"][0]["storage"] = json::array();
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.instructions[0] (merak.add): 0 results, the op "
                      "has 1"),
            std::string::npos)
      << errorOf(reseal(bytes, bad));

  // The plan's all-reduce algorithm is ring or tree.
  json tree = payload;
  tree["step"]["mesh"]["all_reduce_algorithm"] = "tree";
  absl::StatusOr<RankPrograms> withTree =
      parseRankPrograms(reseal(bytes, tree), "plan.mrp");
  ASSERT_TRUE(withTree.ok()) << withTree.status();
  EXPECT_EQ(withTree->step.mesh->allReduceAlgorithm, "tree");
  EXPECT_EQ(parseRankPrograms(bytes, "plan.mrp")->step.mesh->allReduceAlgorithm,
            "");
  bad = payload;
  bad["step"]["mesh"]["all_reduce_algorithm"] = "star";
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.mesh.all_reduce_algorithm: must be \"ring\" or "
                      "\"tree\", not \"star\""),
            std::string::npos)
      << errorOf(reseal(bytes, bad));

  bad = payload;
  bad["step"]["instructions"][0]["op"] = "merak.frobnicate";
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.instructions[0]: unknown op 'merak.frobnicate'"),
            std::string::npos);

  // Fused instructions are made at binding, never read from a file.
  bad = payload;
  bad["step"]["instructions"][0]["op"] = "fused";
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.instructions[0]: unknown op 'fused'"),
            std::string::npos)
      << errorOf(reseal(bytes, bad));

  bad = payload;
  bad["step"]["instructions"][1]["attrs"]["predicate"] = 42;
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.instructions[1].attrs.predicate: unknown value "
                      "42"),
            std::string::npos);

  bad = payload;
  bad["step"]["instructions"][1]["operands"] = json::array({3, 2});
  EXPECT_NE(errorOf(reseal(bytes, bad)).find("reads %3 before it is defined"),
            std::string::npos);

  bad = payload;
  bad["step"]["constants"][0]["data"] = json::binary({1, 2, 3});
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.constants[0].data: 3 bytes for a tensor of type "
                      "2xi64 (16 bytes)"),
            std::string::npos);

  bad = payload;
  bad["step"]["arguments"][0]["sharding"] = json::array({{5}});
  EXPECT_NE(errorOf(reseal(bytes, bad)).find("step.arguments[0]"),
            std::string::npos);

  // Each pipeline rank's plan is a CBOR document embedded as bytes.
  bad = payload;
  json plan = json::from_cbor(payload["pipeline"][1].get_binary());
  plan["tasks"][1][4] = 9;
  bad["pipeline"][1] = json::binary(json::to_cbor(plan));
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("pipeline[1].tasks[1]: task 'send' names a peer out of "
                      "range"),
            std::string::npos);

  bad = payload;
  bad["pipeline"].erase(0);
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("plan for pipeline rank 1 of 2 "
                      "stored at position 0 of 1"),
            std::string::npos);

  bad = payload;
  bad["step"].erase("values");
  EXPECT_NE(errorOf(reseal(bytes, bad)).find("step: missing field 'values'"),
            std::string::npos);

  bad = payload;
  bad["step"]["function"] = 3;
  EXPECT_NE(
      errorOf(reseal(bytes, bad)).find("step.function: expected a string"),
      std::string::npos);
}

TEST(RankProgramFileTest, SizesThatOverflowOrLeaveTheArenaAreRefused) {
  std::string bytes = bytesOf(samplePrograms());
  json payload = payloadOf(bytes);

  // 2^62 x 4 f32 elements: more bytes than 64 bits count.
  json bad = payload;
  bad["step"]["values"][3][1] = json::array({int64_t(1) << 62, 4});
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.values[3][1]: its shape "
                      "4611686018427387904x4xf32 has more bytes than a "
                      "64-bit size can count"),
            std::string::npos)
      << errorOf(reseal(bytes, bad));

  bad = payload;
  bad["step"]["arguments"][0]["stored_shape"] =
      json::array({int64_t(1) << 40, int64_t(1) << 40});
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.arguments[0].stored_shape: its shape"),
            std::string::npos)
      << errorOf(reseal(bytes, bad));

  // A result placed in the arena must fit in it: add's 4x6xf32 result at
  // offset 8 of a 64-byte arena would end at byte 104.
  bad = payload;
  bad["step"]["arena_bytes"] = 64;
  bad["step"]["planned_peak_bytes"] = 1000;
  bad["step"]["instructions"][0]["storage"][0][2] = 8;
  EXPECT_NE(errorOf(reseal(bytes, bad))
                .find("step.instructions[0] (merak.add): arena offset "),
            std::string::npos)
      << errorOf(reseal(bytes, bad));

  bad = payload;
  bad["step"]["mesh"]["shape"] =
      json::array({int64_t(1) << 40, int64_t(1) << 40});
  EXPECT_NE(errorOf(reseal(bytes, bad)).find("the mesh's size overflows"),
            std::string::npos)
      << errorOf(reseal(bytes, bad));
}

TEST(RankProgramFileTest, OpenedPlansDecodeEachPipelineRankOnDemand) {
  std::string bytes = bytesOf(samplePrograms());
  json payload = payloadOf(bytes);
  // Rank 1's plan damaged: the file opens, rank 0's plan reads, rank 1's
  // is refused when asked for.
  json bad = payload;
  bad["pipeline"][1] = json::binary({0xa1, 0x61});
  absl::StatusOr<std::unique_ptr<CompiledPlan>> opened =
      openRankPrograms(reseal(bytes, bad), "plan.mrp");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_TRUE((*opened)->pipelined());
  EXPECT_EQ((*opened)->pipelineRanks(), 2);
  EXPECT_EQ((*opened)->step().function, "train_step");
  EXPECT_EQ((*opened)->source(), "plan.mlir");
  absl::StatusOr<PipelinePlan> first = (*opened)->pipelinePlan(0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->rank, 0);
  absl::StatusOr<PipelinePlan> second = (*opened)->pipelinePlan(1);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(
                "plan.mrp: malformed plan of pipeline rank 1"),
            std::string::npos)
      << second.status();
  absl::StatusOr<PipelinePlan> none = (*opened)->pipelinePlan(2);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(),
            "plan.mrp: no plan for pipeline rank 2 (the file has 2)");

  // In memory, the same interface.
  std::unique_ptr<CompiledPlan> held = inMemoryPlan(samplePrograms());
  EXPECT_EQ(held->pipelineRanks(), 2);
  absl::StatusOr<PipelinePlan> held1 = held->pipelinePlan(1);
  ASSERT_TRUE(held1.ok());
  EXPECT_EQ(held1->tasks.size(), 2u);
  std::unique_ptr<CompiledPlan> single = inMemoryPlan(RankPrograms());
  EXPECT_FALSE(single->pipelined());
  EXPECT_EQ(single->pipelineRanks(), 1);
}

TEST(RankProgramFileTest, TextGeneratorsKeepTheirDecodeStep) {
  RankPrograms programs;
  programs.source = "gen.mlir";
  programs.step = sampleProgram();
  programs.step.function = "prefill";
  Program decode = sampleProgram();
  decode.function = "decode";
  decode.arguments[1].role = ArgumentRole::Position;
  decode.arguments[1].name = "position";
  decode.arguments[2].role = ArgumentRole::KvCache;
  decode.arguments[2].name = "kv.0";
  programs.decode = decode;
  std::string bytes = bytesOf(programs);
  absl::StatusOr<std::unique_ptr<CompiledPlan>> opened =
      openRankPrograms(bytes, "gen.mrp");
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->step().function, "prefill");
  ASSERT_NE((*opened)->decode(), nullptr);
  const Program &read = *(*opened)->decode();
  EXPECT_EQ(printProgram(read), printProgram(decode));
  EXPECT_EQ(read.arguments[1].role, ArgumentRole::Position);
  EXPECT_EQ(read.arguments[2].role, ArgumentRole::KvCache);
  EXPECT_EQ(read.arguments[2].name, "kv.0");
  absl::StatusOr<RankPrograms> parsed = parseRankPrograms(bytes, "gen.mrp");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_TRUE(parsed->decode);
  EXPECT_EQ(bytesOf(*parsed), bytes);
  // A step without one has none.
  absl::StatusOr<std::unique_ptr<CompiledPlan>> step =
      openRankPrograms(bytesOf(samplePrograms()), "plan.mrp");
  ASSERT_TRUE(step.ok());
  EXPECT_EQ((*step)->decode(), nullptr);
}

TEST(RankProgramFileTest, MalformedCborIsRefusedWithItsOffset) {
  std::string bytes = bytesOf(samplePrograms());
  // A map whose key string is cut short.
  std::string file = resealBytes(bytes, "\xa1\x61");
  EXPECT_NE(errorOf(file).find("malformed payload at byte 3"),
            std::string::npos)
      << errorOf(file);
}

TEST(RankProgramFileTest, ImpossibleCborSizesAreRefused) {
  // An array announcing 2^63 elements, more than a vector can hold: the
  // decoder throws out_of_range rather than a parse error (found by
  // fuzz-rank-program).
  std::string bytes = bytesOf(samplePrograms());
  std::string file = resealBytes(
      bytes, std::string_view("\x81\x9b\x80\x00\x00\x00\x00\x00\x00\x00", 10));
  EXPECT_NE(errorOf(file).find("plan.mrp: malformed payload"),
            std::string::npos)
      << errorOf(file);
  absl::StatusOr<std::unique_ptr<CompiledPlan>> plan =
      openRankPrograms(file, "plan.mrp");
  EXPECT_FALSE(plan.ok());
}

} // namespace
