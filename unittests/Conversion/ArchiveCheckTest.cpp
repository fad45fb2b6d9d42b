//===- ArchiveCheckTest.cpp - zip structure and CRC checks ----------------===//
//
// Archives built here byte by byte (stored and deflated entries, zip64
// records), then damaged one field at a time; and the in-tree TorchScript
// fixtures, which must pass.
//
//===----------------------------------------------------------------------===//

#include "merak/Conversion/TorchScriptToMerak/ArchiveCheck.h"

#include "gtest/gtest.h"

#include <zlib.h>

#include <fstream>
#include <sstream>

using namespace merak;

namespace {

void put(std::string &out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out.push_back(char((v >> (8 * i)) & 0xFF));
}

void set(std::string &out, size_t at, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i)
    out[at + i] = char((v >> (8 * i)) & 0xFF);
}

std::string deflateRaw(const std::string &data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&z, uLong(data.size())), '\0');
  z.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(data.data()));
  z.avail_in = uInt(data.size());
  z.next_out = reinterpret_cast<Bytef *>(out.data());
  z.avail_out = uInt(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Entry {
  std::string name, data;
  bool deflated = false;
};

/// A zip of `entries`, with a zip64 end record when `zip64`. Offsets of
/// each local header are returned in `locals`.
std::string buildZip(const std::vector<Entry> &entries, bool zip64 = false,
                     std::vector<size_t> *locals = nullptr) {
  std::string out, directory;
  for (const Entry &e : entries) {
    std::string body = e.deflated ? deflateRaw(e.data) : e.data;
    uint32_t crc =
        uint32_t(crc32(0, reinterpret_cast<const Bytef *>(e.data.data()),
                       uInt(e.data.size())));
    size_t local = out.size();
    if (locals)
      locals->push_back(local);
    put(out, 0x04034b50, 4);
    put(out, 20, 2);
    put(out, 0, 2);
    put(out, e.deflated ? 8 : 0, 2);
    put(out, 0, 4); // time, date
    put(out, crc, 4);
    put(out, body.size(), 4);
    put(out, e.data.size(), 4);
    put(out, e.name.size(), 2);
    put(out, 0, 2);
    out += e.name + body;

    put(directory, 0x02014b50, 4);
    put(directory, 20, 2);
    put(directory, 20, 2);
    put(directory, 0, 2);
    put(directory, e.deflated ? 8 : 0, 2);
    put(directory, 0, 4);
    put(directory, crc, 4);
    put(directory, body.size(), 4);
    put(directory, e.data.size(), 4);
    put(directory, e.name.size(), 2);
    put(directory, 0, 2); // extra
    put(directory, 0, 2); // comment
    put(directory, 0, 2); // disk
    put(directory, 0, 2); // internal attributes
    put(directory, 0, 4); // external attributes
    put(directory, local, 4);
    directory += e.name;
  }
  size_t dirOffset = out.size();
  out += directory;
  if (zip64) {
    size_t record = out.size();
    put(out, 0x06064b50, 4);
    put(out, 44, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, entries.size(), 8);
    put(out, entries.size(), 8);
    put(out, directory.size(), 8);
    put(out, dirOffset, 8);
    put(out, 0x07064b50, 4);
    put(out, 0, 4);
    put(out, record, 8);
    put(out, 1, 4);
  }
  put(out, 0x06054b50, 4);
  put(out, 0, 4);
  put(out, zip64 ? 0xFFFF : entries.size(), 2);
  put(out, zip64 ? 0xFFFF : entries.size(), 2);
  put(out, zip64 ? 0xFFFFFFFF : directory.size(), 4);
  put(out, zip64 ? 0xFFFFFFFF : dirOffset, 4);
  put(out, 0, 2);
  return out;
}

std::vector<Entry> sample() {
  std::string code;
  for (int i = 0; i < 50; ++i)
    code += "def forward(self, x):\n  return torch.relu(x)\n";
  return {{"m/data.pkl", std::string("\x80\x02}q\x00.", 6)},
          {"m/code/__torch__.py", code, true},
          {"m/data/0", std::string(256, '\x3f')}};
}

TEST(ArchiveCheck, WholeArchivesPass) {
  std::vector<ArchiveEntry> entries;
  EXPECT_EQ(checkZipArchive(buildZip(sample()), &entries), "");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[1].name, "m/code/__torch__.py");
  EXPECT_EQ(entries[1].method, 8);
  EXPECT_EQ(entries[1].size, 50u * 45u);
  EXPECT_LT(entries[1].compressedSize, entries[1].size);
  EXPECT_EQ(checkZipArchive(buildZip(sample(), /*zip64=*/true)), "");
  EXPECT_EQ(checkZipArchive(buildZip({})), "");
}

TEST(ArchiveCheck, DamagedDataIsNamed) {
  std::vector<size_t> locals;
  std::string zip = buildZip(sample(), false, &locals);
  // A stored byte of data/0 flipped.
  std::string stored = zip;
  stored[locals[2] + 30 + 8 + 100] ^= 0x01;
  std::string error = checkZipArchive(stored);
  EXPECT_NE(error.find("entry 'm/data/0' (local header at byte " +
                       std::to_string(locals[2]) + "): CRC-32 is 0x"),
            std::string::npos)
      << error;
  // The deflated code damaged: the stream breaks or its CRC differs.
  std::string deflated = zip;
  deflated[locals[1] + 30 + 19 + 5] ^= 0x40;
  error = checkZipArchive(deflated);
  EXPECT_NE(error.find("entry 'm/code/__torch__.py'"), std::string::npos)
      << error;
  EXPECT_TRUE(error.find("CRC-32") != std::string::npos ||
              error.find("deflated data") != std::string::npos ||
              error.find("inflates to") != std::string::npos)
      << error;
}

TEST(ArchiveCheck, StructureLiesAreRefused) {
  std::vector<size_t> locals;
  std::string zip = buildZip(sample(), false, &locals);
  size_t dir = zip.size() - 22 - 0; // the end record
  size_t dirOffset =
      size_t(uint8_t(zip[dir + 16])) | size_t(uint8_t(zip[dir + 17])) << 8;
  // The local header's method disagrees with the directory's.
  std::string method = zip;
  set(method, locals[1] + 8, 0, 2);
  EXPECT_NE(checkZipArchive(method).find(
                "the local header says compression method 0, the directory 8"),
            std::string::npos)
      << checkZipArchive(method);
  // The directory says stored with sizes that differ.
  std::string sizes = zip;
  size_t second = dirOffset + 46 + std::string("m/data.pkl").size();
  set(sizes, second + 10, 0, 2); // method: stored
  EXPECT_NE(checkZipArchive(sizes).find("stored, but"), std::string::npos)
      << checkZipArchive(sizes);
  // An entry count the directory cannot hold.
  std::string count = zip;
  set(count, dir + 10, 60000, 2);
  EXPECT_NE(checkZipArchive(count).find("counts 60000 entries"),
            std::string::npos);
  // A local header offset past the entries.
  std::string offset = zip;
  set(offset, dirOffset + 42, dirOffset + 4, 4);
  EXPECT_NE(checkZipArchive(offset).find("no local header there"),
            std::string::npos)
      << checkZipArchive(offset);
  // Data longer than the file: compressed size inflated in both places.
  std::string longer = zip;
  set(longer, dirOffset + 20, 1u << 30, 4);
  set(longer, dirOffset + 24, 1u << 30, 4);
  EXPECT_NE(checkZipArchive(longer).find("run past the entries"),
            std::string::npos)
      << checkZipArchive(longer);
  // Cut short, and not a zip at all.
  EXPECT_NE(checkZipArchive(zip.substr(0, zip.size() - 5))
                .find("no end-of-central-directory record"),
            std::string::npos);
  EXPECT_NE(checkZipArchive("PK").find("too short"), std::string::npos);
  // A zip64 end record that points nowhere.
  std::string z64 = buildZip(sample(), true);
  set(z64, z64.size() - 22 - 20 + 8, 7, 8);
  EXPECT_NE(checkZipArchive(z64).find("zip64 end-of-directory record"),
            std::string::npos);
}

TEST(ArchiveCheck, PickleLengthsMustFit) {
  // PROTO 2, BINUNICODE of 4,000,000,000 bytes with 3 present, STOP.
  std::string lying("\x80\x02X\x00\x28\x6b\xee"
                    "abc.",
                    11);
  std::string honest("\x80\x02X\x03\x00\x00\x00"
                     "abc.",
                     11);
  EXPECT_EQ(checkZipArchive(buildZip({{"m/data.pkl", honest}})), "");
  std::string error = checkZipArchive(buildZip({{"m/data.pkl", lying}}));
  EXPECT_NE(error.find("entry 'm/data.pkl' (local header at byte 0): its "
                       "pickle's opcode 0x58 at byte 2 says 4000000000 "
                       "bytes follow, 4 do"),
            std::string::npos)
      << error;
  // Deflated debug information: not an error, the entry says what is wrong.
  std::vector<ArchiveEntry> entries;
  EXPECT_EQ(checkZipArchive(buildZip({{"m/code/m.py.debug_pkl", lying, true}}),
                            &entries),
            "");
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_NE(entries[0].damage.find("says 4000000000 bytes follow"),
            std::string::npos);
  // A memo index no pickle of this size can reach.
  EXPECT_NE(
      checkZipArchive(buildZip({{"m/data.pkl", std::string("\x80\x02N"
                                                           "r\x00\x00\x00\x40.",
                                                           9)}}))
          .find("opcode 0x72 at byte 3 stores memo entry 1073741824 in "
                "a pickle of 9 bytes"),
      std::string::npos);
  // Cut inside an operand.
  EXPECT_NE(checkZipArchive(buildZip({{"m/constants.pkl",
                                       std::string("\x80\x02J\x01", 4)}}))
                .find("opcode 0x4a at byte 2 is cut off"),
            std::string::npos);
}

TEST(ArchiveCheck, TraceFixturesPass) {
  for (const char *name : {"gpt2.pt", "llama.pt", "bert.pt"}) {
    std::string path = std::string(MERAK_FIXTURES_DIR) + "/" + name;
    std::ifstream in(path, std::ios::binary);
    if (!in)
      FAIL() << path << " is missing (the merak-fixtures target builds it)";
    std::stringstream bytes;
    bytes << in.rdbuf();
    std::vector<ArchiveEntry> entries;
    EXPECT_EQ(checkZipArchive(bytes.str(), &entries), "") << path;
    EXPECT_GT(entries.size(), 3u) << path;
  }
}

} // namespace
