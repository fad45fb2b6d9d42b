//===- SafetensorsTest.cpp - safetensors reader and writer ----------------===//

#include "merak/Runtime/Safetensors.h"

#include "ScratchDir.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

using namespace merak::runtime;
using merak::testing::ScratchDir;

namespace {

HostTensor makeTensor(DType dtype, std::vector<int64_t> shape, int seed) {
  HostTensor t = HostTensor::allocate(TensorType{dtype, std::move(shape)});
  for (size_t i = 0; i < t.byteSize(); ++i)
    t.mutableBytes()[i] = uint8_t((i * 37 + seed) & 0xff);
  if (dtype == DType::Bool)
    for (size_t i = 0; i < t.byteSize(); ++i)
      t.mutableBytes()[i] &= 1;
  return t;
}

void writeRaw(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string withLength(const std::string &header, uint64_t length) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i)
    bytes[i] = char((length >> (8 * i)) & 0xff);
  return bytes + header;
}

TEST(SafetensorsTest, RoundTripKeepsEveryDTypeShapeAndMetadata) {
  ScratchDir dir("merak-safetensors");
  std::map<std::string, HostTensor> tensors = {
      {"a.f32", makeTensor(DType::F32, {2, 3}, 1)},
      {"b.f64", makeTensor(DType::F64, {4}, 2)},
      {"c.f16", makeTensor(DType::F16, {3, 1, 2}, 3)},
      {"d.bf16", makeTensor(DType::BF16, {5}, 4)},
      {"e.i64", makeTensor(DType::I64, {}, 5)},
      {"f.i32", makeTensor(DType::I32, {2, 2}, 6)},
      {"g.bool", makeTensor(DType::Bool, {7}, 7)},
      {"h.empty", makeTensor(DType::F32, {0, 4}, 8)},
  };
  std::map<std::string, std::string> metadata = {{"step", "12"}, {"seed", "3"}};
  std::string path = dir.path + "/ckpt.safetensors";
  ASSERT_TRUE(writeSafetensors(path, tensors, metadata).ok());
  // The temporary file was renamed away.
  EXPECT_EQ(dir.files(), std::vector<std::string>{"ckpt.safetensors"});

  absl::StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->metadata, metadata);
  ASSERT_EQ(read->tensors.size(), tensors.size());
  for (const auto &[name, t] : tensors) {
    ASSERT_TRUE(read->tensors.count(name)) << name;
    const HostTensor &r = read->tensors.at(name);
    EXPECT_EQ(r.type, t.type) << name;
    EXPECT_EQ(0, std::memcmp(r.data, t.data, t.byteSize())) << name;
  }
}

TEST(SafetensorsTest, HeaderIsPaddedToEightBytes) {
  ScratchDir dir("merak-safetensors");
  std::string path = dir.path + "/x.safetensors";
  ASSERT_TRUE(
      writeSafetensors(path, {{"x", makeTensor(DType::F32, {3}, 0)}}, {}).ok());
  std::ifstream in(path, std::ios::binary);
  uint8_t len[8];
  in.read(reinterpret_cast<char *>(len), 8);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i)
    length = (length << 8) | len[i];
  EXPECT_EQ(length % 8, 0u);
}

TEST(SafetensorsTest, OverwritesAtomically) {
  ScratchDir dir("merak-safetensors");
  std::string path = dir.path + "/ckpt.safetensors";
  ASSERT_TRUE(
      writeSafetensors(path, {{"x", makeTensor(DType::F32, {3}, 0)}}, {}).ok());
  ASSERT_TRUE(
      writeSafetensors(path, {{"y", makeTensor(DType::I64, {2}, 1)}}, {}).ok());
  absl::StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->tensors.count("x"), 0u);
  EXPECT_EQ(read->tensors.count("y"), 1u);
  EXPECT_EQ(dir.files().size(), 1u);
}

TEST(SafetensorsTest, WriteIntoMissingDirectoryFails) {
  absl::Status s =
      writeSafetensors("/nonexistent-dir/ckpt.safetensors",
                       {{"x", makeTensor(DType::F32, {1}, 0)}}, {});
  EXPECT_FALSE(s.ok());
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  absl::StatusOr<SafetensorsFile> read =
      readSafetensors("/nonexistent/file.safetensors");
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find("cannot open"), std::string::npos);
}

TEST(SafetensorsTest, TooShortForTheLengthIsTruncated) {
  ScratchDir dir("merak-safetensors");
  std::string path = dir.path + "/short.safetensors";
  writeRaw(path, "abc");
  absl::StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("truncated"), std::string::npos)
      << read.status();
}

TEST(SafetensorsTest, TruncatedHeaderIsAnError) {
  ScratchDir dir("merak-safetensors");
  std::string path = dir.path + "/trunc.safetensors";
  // The length promises 100 bytes of header; 10 follow.
  writeRaw(path, withLength("{\"x\": {\"dt", 100));
  absl::StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("truncated: the header is 100 bytes"),
            std::string::npos)
      << read.status();
}

TEST(SafetensorsTest, TruncatedDataIsAnError) {
  ScratchDir dir("merak-safetensors");
  std::string path = dir.path + "/data.safetensors";
  std::string header =
      R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  writeRaw(path, withLength(header, header.size()) + std::string(8, '\0'));
  absl::StatusOr<SafetensorsFile> read = readSafetensors(path);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("truncated"), std::string::npos)
      << read.status();
}

TEST(SafetensorsTest, MalformedHeadersAreRejected) {
  ScratchDir dir("merak-safetensors");
  struct Case {
    std::string header, data, expected;
  } cases[] = {
      {"not json", "", "not valid JSON"},
      {"[1, 2]", "", "not a JSON object"},
      {R"({"x":{"dtype":"U16","shape":[1],"data_offsets":[0,2]}})",
       std::string(2, '\0'), "cannot hold"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})",
       std::string(4, '\0'), "data_offsets span 4"},
      {R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
       std::string(4, '\0'), "invalid shape"},
      {R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
       R"("y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       std::string(8, '\0'), "gap or overlap"},
      {R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       std::string(12, '\0'), "trailing data"},
      {R"({"__metadata__":{"step":3}})", "", "must map strings to strings"},
  };
  for (const Case &c : cases) {
    std::string path = dir.path + "/bad.safetensors";
    writeRaw(path, withLength(c.header, c.header.size()) + c.data);
    absl::StatusOr<SafetensorsFile> read = readSafetensors(path);
    ASSERT_FALSE(read.ok()) << c.header;
    EXPECT_NE(read.status().message().find(c.expected), std::string::npos)
        << c.header << " -> " << read.status();
  }
}

TEST(SafetensorsTest, SizesThatOverflowAreRejected) {
  ScratchDir dir("merak-safetensors");
  struct Case {
    std::string header, data, expected;
  } cases[] = {
      // 2^60 x 2 x 16 f32: 2^67 bytes, 0 in 64 bits, which [0, 0] matches.
      {R"({"x":{"dtype":"F32","shape":[1152921504606846976,2,16],)"
       R"("data_offsets":[0,0]}})",
       "",
       "bad.safetensors: tensor 'x': its shape 1152921504606846976x2x16xf32 "
       "has more bytes than a 64-bit size can count"},
      // The element count itself overflows.
      {R"({"x":{"dtype":"BOOL","shape":[4294967296,4294967296],)"
       R"("data_offsets":[0,0]}})",
       "", "has more bytes than a 64-bit size can count"},
      // A dimension beyond int64.
      {R"({"x":{"dtype":"F32","shape":[9223372036854775808],)"
       R"("data_offsets":[0,0]}})",
       "",
       "tensor 'x' has an invalid shape: 9223372036854775808 is not a "
       "dimension"},
      {R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
       std::string(4, '\0'), "1.5 is not a dimension"},
      // Offsets past the data.
      {R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
       std::string(8, '\0'), "truncated: tensor 'x' ends at byte 16"},
  };
  for (const Case &c : cases) {
    std::string path = dir.path + "/bad.safetensors";
    writeRaw(path, withLength(c.header, c.header.size()) + c.data);
    absl::StatusOr<SafetensorsFile> read = readSafetensors(path);
    ASSERT_FALSE(read.ok()) << c.header;
    EXPECT_NE(read.status().message().find(c.expected), std::string::npos)
        << c.header << " -> " << read.status();
  }
  // An empty tensor with a huge other dimension holds no bytes: valid.
  std::string empty = R"({"x":{"dtype":"F32","shape":[0,9223372036854775807],)"
                      R"("data_offsets":[0,0]}})";
  std::string path = dir.path + "/empty.safetensors";
  writeRaw(path, withLength(empty, empty.size()));
  EXPECT_TRUE(readSafetensors(path).ok());
}

TEST(SafetensorsTest, TemporariesAreKnownByTheWritersNames) {
  const std::string target = "dir/ckpt.safetensors";
  EXPECT_TRUE(isAtomicWriteTemporary(target, ".ckpt.safetensors.Ab12Cd"));
  EXPECT_TRUE(isAtomicWriteTemporary("ckpt", ".ckpt.zzzzzz"));
  EXPECT_FALSE(isAtomicWriteTemporary(target, ".ckpt.safetensors.Ab12C"));
  EXPECT_FALSE(isAtomicWriteTemporary(target, ".ckpt.safetensors.Ab12Cd7"));
  EXPECT_FALSE(isAtomicWriteTemporary(target, ".ckpt.safetensors.Ab-2Cd"));
  EXPECT_FALSE(isAtomicWriteTemporary(target, ".ckpt.safetensors.Ab12Cd.tmp"));
  EXPECT_FALSE(isAtomicWriteTemporary(target, "ckpt.safetensors.Ab12Cd"));
  EXPECT_FALSE(isAtomicWriteTemporary(target, ".other.safetensors.Ab12Cd"));
  EXPECT_FALSE(isAtomicWriteTemporary(target, ".ckpt.safetensors"));
}

TEST(SafetensorsTest, CheckWritableProbesAndLeavesNothing) {
  ScratchDir dir("merak-safetensors");
  EXPECT_TRUE(checkWritable(dir.path + "/ckpt.safetensors", false).ok());
  EXPECT_TRUE(dir.files().empty());

  absl::Status missing = checkWritable(dir.path + "/none/ckpt", false);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.message().find("none/ckpt: its directory " + dir.path +
                                   "/none does not exist"),
            std::string::npos)
      << missing;

  absl::Status directory = checkWritable(dir.path, false);
  EXPECT_NE(directory.message().find("it is a directory"), std::string::npos)
      << directory;
  absl::Status slash = checkWritable(dir.path + "/", false);
  EXPECT_NE(slash.message().find("is not a file name"), std::string::npos)
      << slash;

  // A log opened for appending: an existing file stays as it is.
  std::string log = dir.path + "/log.jsonl";
  writeRaw(log, "{\"step\":1}\n");
  ASSERT_TRUE(checkWritable(log, true).ok());
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "{\"step\":1}\n");
  absl::Status underFile = checkWritable(log + "/x", true);
  EXPECT_NE(underFile.message().find("log.jsonl is not a directory"),
            std::string::npos)
      << underFile;
  EXPECT_EQ(dir.files().size(), 1u);
}

} // namespace
