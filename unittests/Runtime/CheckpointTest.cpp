//===- CheckpointTest.cpp - shards of global state, sharded checkpoints ---===//

#include "merak/Runtime/Checkpoint.h"
#include "merak/Runtime/Safetensors.h"

#include "ScratchDir.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace merak::runtime;
using merak::testing::ScratchDir;

namespace {

using Shape = std::vector<int64_t>;

struct StateSpec {
  std::string name;
  Shape global;
  Sharding sharding;
};

/// A program whose only contents are parameters of `specs`, on `mesh`
/// (none: one process), bound to `rank`.
Program stateProgram(std::optional<Shape> mesh,
                     const std::vector<StateSpec> &specs, int64_t rank) {
  Program p;
  p.function = "train_step";
  if (mesh)
    p.mesh = MeshLayout{"mesh", *mesh, {}};
  for (const StateSpec &s : specs) {
    Shape local = s.global;
    for (size_t d = 0; d < local.size(); ++d)
      local[d] /= groupSize(mesh ? *mesh : Shape{}, s.sharding.axesOf(d));
    Argument arg;
    arg.value = ValueId(p.values.size());
    arg.role = ArgumentRole::Param;
    arg.name = s.name;
    arg.sharding = s.sharding;
    p.values.push_back(ValueInfo{TensorType{DType::F32, local}});
    p.arguments.push_back(arg);
  }
  EXPECT_TRUE(bindToRank(p, rank).ok());
  return p;
}

HostTensor iota(Shape shape, float start) {
  HostTensor t = HostTensor::allocate({DType::F32, shape});
  float *p = reinterpret_cast<float *>(t.mutableBytes());
  for (int64_t i = 0; i < t.type.numElements(); ++i)
    p[i] = start + float(i);
  return t;
}

bool sameBytes(const HostTensor &a, const HostTensor &b) {
  return a.type == b.type &&
         std::memcmp(a.bytes(), b.bytes(), a.byteSize()) == 0;
}

class CheckpointTest : public ::testing::Test {
protected:
  CheckpointTest() {
    global = {
        {"a", iota({4, 6}, 0)}, {"b", iota({4}, 100)}, {"c", iota({8}, 200)}};
  }

  /// Saves `global` as the sharded checkpoint `id` from every rank of 2x2:
  /// a split [[0], [1]], b replicated, c split over tp only.
  std::string saveSharded(const std::string &id = "x1", std::string path = "") {
    std::vector<StateSpec> specs = {{"a", {4, 6}, Sharding{{{0}, {1}}}},
                                    {"b", {4}, Sharding{}},
                                    {"c", {8}, Sharding{{{1}}}}};
    if (path.empty())
      path = dir + "/ckpt.safetensors";
    std::map<std::string, std::string> meta = {
        {"format", kCheckpointFormat}, {"step", "7"}, {"checkpoint_id", id}};
    for (int64_t r = 0; r < 4; ++r) {
      Program p = stateProgram(Shape{2, 2}, specs, r);
      std::map<std::string, HostTensor> local;
      for (const StateSpec &s : specs)
        local[s.name] = *cutShard(global[s.name], s.sharding, {2, 2}, r);
      EXPECT_TRUE(writeCheckpointShard(path, p, local, meta).ok());
    }
    EXPECT_TRUE(
        writeCheckpointIndex(path, stateProgram(Shape{2, 2}, specs, 0), meta)
            .ok());
    return path;
  }

  ScratchDir scratch{"merak-checkpoint"};
  std::string dir = scratch.path;
  std::map<std::string, HostTensor> global;
};

TEST_F(CheckpointTest, EachBlockIsWrittenOnce) {
  std::string path = saveSharded();
  // Rank 0 owns a's block (0, 0), b, and c's first half; rank 2 (dp 1,
  // tp 0) owns only a's block (1, 0).
  absl::StatusOr<SafetensorsFile> r0 =
      readSafetensors(shardFilePath(path, "x1", 0));
  absl::StatusOr<SafetensorsFile> r2 =
      readSafetensors(shardFilePath(path, "x1", 2));
  EXPECT_EQ(shardFilePath(path, "x1", 2), path + ".x1.rank2");
  ASSERT_TRUE(r0.ok() && r2.ok());
  EXPECT_EQ(r0->tensors.size(), 3u);
  EXPECT_EQ(r2->tensors.size(), 1u);
  EXPECT_EQ(r2->tensors.count("a"), 1u);
  EXPECT_EQ(r2->metadata.at("rank"), "2");
  std::ifstream index(path + ".index.json");
  std::stringstream text;
  text << index.rdbuf();
  EXPECT_NE(text.str().find("\"c\": {\"dtype\":\"F32\",\"shape\":[8],"
                            "\"sharding\":[[1]],\"blocks\":[{\"file\":"
                            "\"ckpt.safetensors.x1.rank0\",\"offsets\":[0],"
                            "\"shape\":[4]},{\"file\":\"ckpt.safetensors."
                            "x1.rank1\",\"offsets\":[4],\"shape\":[4]}]}"),
            std::string::npos)
      << text.str();
}

TEST_F(CheckpointTest, ReshardsToAnotherPlan) {
  std::string path = saveSharded();
  // `path` itself does not exist: the index is found next to it.
  absl::StatusOr<std::unique_ptr<GlobalState>> ckpt = openCheckpoint(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->metadata().at("step"), "7");
  EXPECT_EQ((*ckpt)->type("a")->shape, (Shape{4, 6}));
  // One process: whole tensors.
  absl::StatusOr<std::map<std::string, HostTensor>> whole = shardState(
      stateProgram(std::nullopt,
                   {{"a", {4, 6}, {}}, {"b", {4}, {}}, {"c", {8}, {}}}, 0),
      **ckpt);
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (const char *name : {"a", "b", "c"})
    EXPECT_TRUE(sameBytes(whole->at(name), global[name])) << name;
  // Four ranks of a 1-D mesh, with other shardings.
  std::vector<StateSpec> specs = {{"a", {4, 6}, Sharding{{{}, {}}}},
                                  {"b", {4}, Sharding{{{0}}}},
                                  {"c", {8}, Sharding{{{0}}}}};
  specs[0].sharding = Sharding{{{0}}};
  for (int64_t r = 0; r < 4; ++r) {
    Program p = stateProgram(Shape{4}, specs, r);
    absl::StatusOr<std::map<std::string, HostTensor>> shards =
        shardState(p, **ckpt);
    ASSERT_TRUE(shards.ok()) << shards.status();
    for (const StateSpec &s : specs)
      EXPECT_TRUE(sameBytes(shards->at(s.name),
                            *cutShard(global[s.name], s.sharding, {4}, r)))
          << s.name << " on rank " << r;
  }
}

TEST_F(CheckpointTest, SingleFileCheckpointsCutToo) {
  std::string path = dir + "/one.safetensors";
  ASSERT_TRUE(writeSafetensors(path, global, {{"step", "3"}}).ok());
  absl::StatusOr<std::unique_ptr<GlobalState>> ckpt = openCheckpoint(path);
  ASSERT_TRUE(ckpt.ok());
  Program p =
      stateProgram(Shape{2, 2}, {{"a", {4, 6}, Sharding{{{1}, {0}}}}}, 1);
  absl::StatusOr<std::map<std::string, HostTensor>> shards =
      shardState(p, **ckpt);
  ASSERT_TRUE(shards.ok());
  EXPECT_TRUE(
      sameBytes(shards->at("a"),
                *cutShard(global["a"], Sharding{{{1}, {0}}}, {2, 2}, 1)));
}

TEST_F(CheckpointTest, ShapeMismatchNamesArgumentShardingAndRank) {
  absl::StatusOr<std::unique_ptr<GlobalState>> weights =
      wholeTensors(global, "model.pt");
  // The program expects a 2x2 shard of a, which 4x6 cut by [[0], [1]]
  // does not give.
  Program p =
      stateProgram(Shape{2, 2}, {{"a", {4, 4}, Sharding{{{0}, {1}}}}}, 3);
  absl::StatusOr<std::map<std::string, HostTensor>> shards =
      shardState(p, **weights);
  ASSERT_FALSE(shards.ok());
  EXPECT_EQ(shards.status().message(),
            "parameter 'a' is 4x6xf32 in model.pt; sharding [[0], [1]] on "
            "mesh 2x2 gives rank 3 a 2x3xf32 block, but the program expects "
            "2x2xf32 (a global 4x4xf32)");
  Program q = stateProgram(Shape{4}, {{"c", {8}, Sharding{{{0}}}}}, 1);
  std::map<std::string, HostTensor> odd = {{"c", iota({6}, 0)}};
  shards = shardState(q, *wholeTensors(odd, "w.safetensors"));
  ASSERT_FALSE(shards.ok());
  EXPECT_EQ(shards.status().message(),
            "parameter 'c' is 6xf32 in w.safetensors; sharding [[0]] on mesh "
            "4 cannot cut it for rank 1: dimension 0 of size 6 does not split "
            "evenly into 4 shards");
}

TEST_F(CheckpointTest, StoredShapesAreViewedAndSavedAsStored) {
  // `a` (4x6 as stored) is a 2x2x6 view in the program, split along its
  // dimension 1 over a mesh of 2: rank r holds rows {r, 2 + r} of the
  // stored tensor, which no block of 4x6 is.
  std::vector<StateSpec> specs = {{"a", {2, 2, 6}, Sharding{{{}, {0}}}}};
  auto program = [&](int64_t rank) {
    Program p = stateProgram(Shape{2}, specs, rank);
    p.arguments[0].storedShape = {4, 6};
    return p;
  };
  HostTensor view = global["a"];
  view.type.shape = {2, 2, 6};
  std::unique_ptr<GlobalState> weights = wholeTensors(global, "model.pt");
  std::string path = dir + "/view.safetensors";
  std::map<std::string, std::string> meta = {{"format", kCheckpointFormat},
                                             {"checkpoint_id", "v"}};
  for (int64_t r = 0; r < 2; ++r) {
    absl::StatusOr<std::map<std::string, HostTensor>> shards =
        shardState(program(r), *weights);
    ASSERT_TRUE(shards.ok()) << shards.status();
    HostTensor expected = *cutShard(view, specs[0].sharding, {2}, r);
    const float *rows = reinterpret_cast<const float *>(expected.bytes());
    EXPECT_EQ(rows[0], float(6 * r));       // stored row r
    EXPECT_EQ(rows[6], float(6 * (2 + r))); // stored row 2 + r
    EXPECT_TRUE(sameBytes(shards->at("a"), expected)) << "rank " << r;
    ASSERT_TRUE(writeCheckpointShard(path, program(r), *shards, meta).ok());
  }
  ASSERT_TRUE(writeCheckpointIndex(path, program(0), meta).ok());
  // The sharded checkpoint lists blocks of the view and the stored shape;
  // a plan without the view (one process) reads the tensor as stored.
  std::ifstream index(path + ".index.json");
  std::stringstream text;
  text << index.rdbuf();
  EXPECT_NE(text.str().find("\"shape\":[2,2,6],\"sharding\":[[],[0]]"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("\"stored_shape\":[4,6]"), std::string::npos)
      << text.str();
  absl::StatusOr<std::unique_ptr<GlobalState>> ckpt = openCheckpoint(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->type("a")->shape, (Shape{4, 6}));
  absl::StatusOr<std::map<std::string, HostTensor>> whole =
      shardState(stateProgram(std::nullopt, {{"a", {4, 6}, {}}}, 0), **ckpt);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_TRUE(sameBytes(whole->at("a"), global["a"]));
  // A one-process run of the viewed program saves the tensor as stored.
  std::map<std::string, HostTensor> state = {{"a", view}};
  Program one = stateProgram(std::nullopt, {{"a", {2, 2, 6}, {}}}, 0);
  one.arguments[0].storedShape = {4, 6};
  toStoredShapes(one, state);
  EXPECT_TRUE(sameBytes(state.at("a"), global["a"]));
  // A stored tensor of another shape is named with both shapes.
  std::map<std::string, HostTensor> other = {{"a", iota({6, 4}, 0)}};
  absl::StatusOr<std::map<std::string, HostTensor>> bad =
      shardState(program(0), *wholeTensors(other, "w.safetensors"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "parameter 'a' is 6x4xf32 in w.safetensors, but the program "
            "stores it as 4x6xf32 (viewed as 2x2x6xf32)");
}

TEST_F(CheckpointTest, ANewSaveReplacesTheOldFilesAfterItsIndex) {
  std::string path = saveSharded("first");
  EXPECT_EQ(::access(shardFilePath(path, "first", 3).c_str(), F_OK), 0);
  saveSharded("second");
  EXPECT_NE(::access(shardFilePath(path, "first", 3).c_str(), F_OK), 0);
  EXPECT_EQ(::access(shardFilePath(path, "second", 3).c_str(), F_OK), 0);
  absl::StatusOr<std::unique_ptr<GlobalState>> ckpt = openCheckpoint(path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->metadata().at("checkpoint_id"), "second");
}

TEST_F(CheckpointTest, MixedSavesAreRejected) {
  std::string path = saveSharded();
  // Rank 1's file from another save: its id differs from the index's.
  absl::StatusOr<SafetensorsFile> r1 =
      readSafetensors(shardFilePath(path, "x1", 1));
  ASSERT_TRUE(r1.ok());
  std::map<std::string, std::string> meta = r1->metadata;
  meta["checkpoint_id"] = "other";
  std::map<std::string, HostTensor> copy;
  for (const auto &[k, v] : r1->tensors)
    copy[k] = *cutShard(v, Sharding{}, {}, 0);
  ASSERT_TRUE(writeSafetensors(shardFilePath(path, "x1", 1), copy, meta).ok());
  absl::StatusOr<std::unique_ptr<GlobalState>> ckpt = openCheckpoint(path);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_NE(ckpt.status().message().find("belongs to another save"),
            std::string::npos)
      << ckpt.status();
}

TEST_F(CheckpointTest, SavingInOneLayoutRemovesTheOther) {
  std::string path = saveSharded();
  ASSERT_TRUE(
      writeSafetensors(path, global, {{"format", kCheckpointFormat}}).ok());
  removeStaleCheckpoint(path, /*sharded=*/false);
  EXPECT_NE(::access((path + ".index.json").c_str(), F_OK), 0);
  EXPECT_NE(::access(shardFilePath(path, "x1", 0).c_str(), F_OK), 0);
  saveSharded();
  ASSERT_TRUE(
      writeSafetensors(path, global, {{"format", kCheckpointFormat}}).ok());
  removeStaleCheckpoint(path, /*sharded=*/true);
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  // openCheckpoint finds the sharded one.
  EXPECT_TRUE(openCheckpoint(path).ok());
}

TEST_F(CheckpointTest, SavesRemoveWhatKilledSavesLeft) {
  std::string path = saveSharded("0123456789abcdef");
  auto touch = [&](const std::string &name, const std::string &text = "") {
    std::ofstream(dir + "/" + name) << text;
  };
  auto present = [&](const std::string &name) {
    return ::access((dir + "/" + name).c_str(), F_OK) == 0;
  };
  // A killed single-file save, a killed sharded save (temporaries, and
  // rank 1's complete file of a save whose index never came), and files
  // that only look like theirs.
  touch(".ckpt.safetensors.Ab12Cd");
  touch(".ckpt.safetensors.index.json.Qw34Er");
  touch(".ckpt.safetensors.fedcba9876543210.rank0.Xy12Zz");
  absl::StatusOr<SafetensorsFile> rank1 =
      readSafetensors(shardFilePath(path, "0123456789abcdef", 1));
  ASSERT_TRUE(rank1.ok());
  std::map<std::string, std::string> meta = rank1->metadata;
  meta["checkpoint_id"] = "fedcba9876543210";
  ASSERT_TRUE(writeSafetensors(shardFilePath(path, "fedcba9876543210", 1),
                               rank1->tensors, meta)
                  .ok());
  ASSERT_TRUE(writeSafetensors(shardFilePath(path, "00000000000000cc", 1),
                               rank1->tensors, rank1->metadata)
                  .ok());
  touch("ckpt.safetensors.0000000000000aaa.rank3", "not a checkpoint");
  touch(".ckpt.safetensors.notmine");
  touch(".other.safetensors.Ab12Cd");

  saveSharded("1111111111111111");
  EXPECT_FALSE(present(".ckpt.safetensors.Ab12Cd"));
  EXPECT_FALSE(present(".ckpt.safetensors.index.json.Qw34Er"));
  EXPECT_FALSE(present(".ckpt.safetensors.fedcba9876543210.rank0.Xy12Zz"));
  EXPECT_FALSE(present("ckpt.safetensors.fedcba9876543210.rank1"));
  EXPECT_TRUE(present("ckpt.safetensors.00000000000000cc.rank1"));
  EXPECT_TRUE(present("ckpt.safetensors.0000000000000aaa.rank3"));
  EXPECT_TRUE(present(".ckpt.safetensors.notmine"));
  EXPECT_TRUE(present(".other.safetensors.Ab12Cd"));
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_TRUE(
        present("ckpt.safetensors.1111111111111111.rank" + std::to_string(r)));
  EXPECT_TRUE(openCheckpoint(path).ok());

  // A single-file save removes the sharded layout's temporaries too.
  touch(".ckpt.safetensors.1111111111111111.rank2.Po09Iu");
  ASSERT_TRUE(
      writeSafetensors(path, global, {{"format", kCheckpointFormat}}).ok());
  removeStaleCheckpoint(path, /*sharded=*/false);
  EXPECT_FALSE(present(".ckpt.safetensors.1111111111111111.rank2.Po09Iu"));
  EXPECT_TRUE(present(".ckpt.safetensors.notmine"));
}

TEST_F(CheckpointTest, StepCheckpointsAreListedPrunedAndCleaned) {
  EXPECT_EQ(stepCheckpointPath("d", 20), "d/step-00000020.safetensors");
  EXPECT_EQ(stepCheckpointPath("d/", 123456789),
            "d/step-123456789.safetensors");
  EXPECT_TRUE(listStepCheckpoints(dir + "/absent").empty());

  auto touch = [&](const std::string &name, const std::string &text = "") {
    std::ofstream(dir + "/" + name) << text;
  };
  auto present = [&](const std::string &name) {
    return ::access((dir + "/" + name).c_str(), F_OK) == 0;
  };
  std::map<std::string, std::string> meta = {{"format", kCheckpointFormat}};
  ASSERT_TRUE(writeSafetensors(stepCheckpointPath(dir, 10), global, meta).ok());
  ASSERT_TRUE(writeSafetensors(stepCheckpointPath(dir, 20), global, meta).ok());
  std::string sharded =
      saveSharded("00000000000000aa", stepCheckpointPath(dir, 30));
  // A save of step 40 killed midway (a temporary, and rank 1's complete
  // file with no index), and files that are not checkpoints of the
  // directory.
  touch(".step-00000040.safetensors.Ab12Cd");
  absl::StatusOr<SafetensorsFile> rank1 =
      readSafetensors(shardFilePath(sharded, "00000000000000aa", 1));
  ASSERT_TRUE(rank1.ok());
  std::map<std::string, std::string> killed = rank1->metadata;
  killed["checkpoint_id"] = "00000000000000bb";
  ASSERT_TRUE(writeSafetensors(shardFilePath(stepCheckpointPath(dir, 40),
                                             "00000000000000bb", 1),
                               rank1->tensors, killed)
                  .ok());
  touch("notes.txt");
  touch("step-1.safetensors");
  touch(".step-00000010.safetensors.notmine");

  std::vector<StepCheckpoint> found = listStepCheckpoints(dir);
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].step, 10);
  EXPECT_EQ(found[0].path, stepCheckpointPath(dir, 10));
  EXPECT_EQ(found[2].step, 30);
  EXPECT_EQ(found[2].path, sharded);
  EXPECT_TRUE(openCheckpoint(found[2].path).ok());

  pruneStepCheckpoints(dir, 2);
  EXPECT_FALSE(present("step-00000010.safetensors"));
  EXPECT_TRUE(present("step-00000020.safetensors"));
  EXPECT_TRUE(openCheckpoint(sharded).ok());
  EXPECT_FALSE(present(".step-00000040.safetensors.Ab12Cd"));
  EXPECT_FALSE(present("step-00000040.safetensors.00000000000000bb.rank1"));
  EXPECT_TRUE(present("notes.txt"));
  EXPECT_TRUE(present("step-1.safetensors"));
  EXPECT_TRUE(present(".step-00000010.safetensors.notmine"));
  ASSERT_EQ(listStepCheckpoints(dir).size(), 2u);

  // Keeping all (0) removes nothing committed.
  pruneStepCheckpoints(dir, 0);
  EXPECT_EQ(listStepCheckpoints(dir).size(), 2u);

  removeCheckpoint(sharded);
  EXPECT_FALSE(present("step-00000030.safetensors.index.json"));
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_FALSE(present("step-00000030.safetensors.00000000000000aa.rank" +
                         std::to_string(r)));
  found = listStepCheckpoints(dir);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].step, 20);
}

TEST_F(CheckpointTest, IndexShapesAndBlocksAreChecked) {
  std::string path = saveSharded();
  std::string index = shardIndexPath(path);
  std::ifstream in(index);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  auto openWith = [&](const std::string &from, const std::string &to) {
    std::string edited = text;
    size_t at = edited.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    edited.replace(at, from.size(), to);
    std::ofstream(index) << edited;
    absl::StatusOr<std::unique_ptr<GlobalState>> opened = openCheckpoint(path);
    return opened.ok() ? std::string() : std::string(opened.status().message());
  };
  EXPECT_NE(openWith(R"("shape":[4,6])", R"("shape":[4611686018427387904,6])")
                .find("tensor 'a': shape: its shape "
                      "4611686018427387904x6xf32 has more bytes than a "
                      "64-bit size can count"),
            std::string::npos);
  EXPECT_NE(openWith(R"("shape":[4,6])", R"("shape":[-4,6])")
                .find("tensor 'a': shape: dimension 0 of its shape is "
                      "negative (-4)"),
            std::string::npos);
  EXPECT_NE(openWith(R"("offsets":[2,3])", R"("offsets":[3,3])")
                .find("lies outside the tensor's shape [4, 6]"),
            std::string::npos);
  // Numbers that are not int64_t integers are refused, not converted.
  EXPECT_NE(openWith(R"("shape":[4,6])", R"("shape":[4,3.3e95])")
                .find("tensor 'a': shape: expected a list of integers"),
            std::string::npos);
  EXPECT_NE(
      openWith(R"("offsets":[2,3])", R"("offsets":[2,18446744073709551615])")
          .find("offsets and shape must be lists of integers"),
      std::string::npos);
  // Shards are files beside the index, never a path the index names.
  size_t files = text.find(R"("files")");
  ASSERT_NE(files, std::string::npos);
  size_t name = text.find('"', text.find('[', files)) + 1;
  std::string shard = text.substr(name, text.find('"', name) - name);
  EXPECT_NE(openWith('"' + shard + '"', "\"../elsewhere/" + shard + '"')
                .find("is not a file name beside the index"),
            std::string::npos);
}

} // namespace
