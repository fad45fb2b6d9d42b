//===- ArchiveCheck.cpp - a zip archive's structure and checksums ---------===//

#include "merak/Conversion/TorchScriptToMerak/ArchiveCheck.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <limits>

using namespace merak;

namespace {

constexpr uint32_t kEndOfDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint32_t kDirectoryEntry = 0x02014b50;
constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr size_t kEndOfDirectorySize = 22, kLocatorSize = 20,
                 kZip64EndSize = 56, kDirectoryEntrySize = 46,
                 kLocalHeaderSize = 30;

uint64_t get(std::string_view b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i)
    v = (v << 8) | uint8_t(b[at + i]);
  return v;
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

/// Whether [at, at + size) lies inside `total` bytes.
bool inside(uint64_t at, uint64_t size, uint64_t total) {
  return at <= total && size <= total - at;
}

/// The CRC-32 of an entry's data, inflating a deflated one in chunks; ""
/// or what is wrong with the stream.
std::string entryCrc(const ArchiveEntry &e, std::string_view data,
                     uint32_t &crc, std::string *inflated = nullptr) {
  crc = uint32_t(::crc32(0L, Z_NULL, 0));
  if (e.method == 0) {
    if (inflated)
      inflated->assign(data);
    // zlib takes 32-bit lengths.
    for (uint64_t at = 0; at < data.size();) {
      uInt n = uInt(std::min<uint64_t>(data.size() - at, 1u << 30));
      crc = uint32_t(
          ::crc32(crc, reinterpret_cast<const Bytef *>(data.data() + at), n));
      at += n;
    }
    return "";
  }
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
    return "zlib could not start inflating";
  unsigned char out[1 << 16];
  uint64_t produced = 0, consumed = 0;
  int status = Z_OK;
  while (status != Z_STREAM_END) {
    if (z.avail_in == 0 && consumed < data.size()) {
      uInt n = uInt(std::min<uint64_t>(data.size() - consumed, 1u << 30));
      z.next_in =
          reinterpret_cast<Bytef *>(const_cast<char *>(data.data() + consumed));
      z.avail_in = n;
      consumed += n;
    }
    z.next_out = out;
    z.avail_out = sizeof out;
    status = inflate(&z, Z_NO_FLUSH);
    size_t got = sizeof out - z.avail_out;
    produced += got;
    if (produced > e.size) {
      inflateEnd(&z);
      return "inflates to more than its " + std::to_string(e.size) + " bytes";
    }
    crc = uint32_t(::crc32(crc, out, uInt(got)));
    if (inflated)
      inflated->append(reinterpret_cast<const char *>(out), got);
    if (status == Z_STREAM_END)
      break;
    if (status != Z_OK ||
        (got == 0 && z.avail_in == 0 && consumed == data.size())) {
      inflateEnd(&z);
      return "its deflated data is damaged" +
             (z.msg ? std::string(" (") + z.msg + ")" : std::string());
    }
  }
  inflateEnd(&z);
  if (produced != e.size)
    return "inflates to " + std::to_string(produced) + " bytes, not " +
           std::to_string(e.size);
  return "";
}

/// Walks a pickle's opcodes and checks every length it states against the
/// bytes that follow, and every memo index it stores against its size:
/// LibTorch's unpickler allocates (and zero-fills) what a length says
/// before it reads, and grows its memo table to the index. "" when none lies;
/// stops at STOP or at an opcode it does not know (LibTorch refuses those
/// itself).
std::string checkPickleLengths(std::string_view p) {
  size_t at = 0;
  auto line = [&]() {
    size_t end = p.find('\n', at);
    at = end == std::string_view::npos ? p.size() : end + 1;
  };
  while (at < p.size()) {
    size_t op = at++;
    unsigned char c = uint8_t(p[op]);
    int fixed = -1; // operand bytes; -1: no operand
    int lengthBytes = 0;
    switch (c) {
    case '.':
      return "";
    case 'I':
    case 'L':
    case 'F':
    case 'S':
    case 'V':
    case 'P':
    case 'g':
    case 'p':
      line();
      continue;
    case 'c':
    case 'i':
      line();
      line();
      continue;
    case 'K':
    case 'h':
    case 'q':
    case 0x80:
    case 0x82:
      fixed = 1;
      break;
    case 'M':
    case 0x83:
      fixed = 2;
      break;
    case 'J':
    case 'j':
    case 'r':
    case 0x84:
      fixed = 4;
      break;
    case 'G':
    case 0x95:
      fixed = 8;
      break;
    case 0x8a:
    case 'U':
    case 'C':
    case 0x8c:
      lengthBytes = 1;
      break;
    case 0x8b:
    case 'T':
    case 'B':
    case 'X':
      lengthBytes = 4;
      break;
    case 0x8e:
    case 0x8d:
    case 0x96:
      lengthBytes = 8;
      break;
    case '(':
    case '0':
    case '1':
    case '2':
    case 'N':
    case 0x88:
    case 0x89:
    case ')':
    case ']':
    case '}':
    case 'a':
    case 'e':
    case 's':
    case 'u':
    case 't':
    case 0x85:
    case 0x86:
    case 0x87:
    case 'l':
    case 'd':
    case 'b':
    case 'R':
    case 'o':
    case 0x81:
    case 0x92:
    case 0x93:
    case 'Q':
    case 0x8f:
    case 0x90:
    case 0x91:
    case 0x94:
    case 0x97:
    case 0x98:
      continue;
    default:
      return "";
    }
    size_t operand = fixed > 0 ? size_t(fixed) : size_t(lengthBytes);
    if (p.size() - at < operand)
      return "opcode 0x" + hex(c).substr(8) + " at byte " + std::to_string(op) +
             " is cut off";
    if (fixed > 0) {
      // LONG_BINPUT: the unpickler grows its memo table to the index, and
      // a pickle stores one memo entry per opcode at most.
      if (c == 'r' && get(p, at, 4) > p.size())
        return "opcode 0x72 at byte " + std::to_string(op) +
               " stores memo entry " + std::to_string(get(p, at, 4)) +
               " in a pickle of " + std::to_string(p.size()) + " bytes";
      at += operand;
      continue;
    }
    uint64_t length = get(p, at, lengthBytes);
    at += operand;
    if (length > p.size() - at)
      return "opcode 0x" + hex(c).substr(8) + " at byte " + std::to_string(op) +
             " says " + std::to_string(length) + " bytes follow, " +
             std::to_string(p.size() - at) + " do";
    at += length;
  }
  return "";
}

/// Reads the zip64 "extended information" extra field over the fields the
/// 32-bit entry marks 0xFFFFFFFF, in the order the format lists them.
bool readZip64Extra(std::string_view extra, ArchiveEntry &e, bool sizeMarked,
                    bool compressedMarked, bool offsetMarked) {
  for (size_t at = 0; at + 4 <= extra.size();) {
    uint16_t id = uint16_t(get(extra, at, 2));
    uint16_t len = uint16_t(get(extra, at + 2, 2));
    if (at + 4 + len > extra.size())
      return false;
    if (id == 0x0001) {
      size_t p = at + 4, end = at + 4 + len;
      auto next = [&](uint64_t &field) {
        if (p + 8 > end)
          return false;
        field = get(extra, p, 8);
        p += 8;
        return true;
      };
      if (sizeMarked && !next(e.size))
        return false;
      if (compressedMarked && !next(e.compressedSize))
        return false;
      if (offsetMarked && !next(e.localHeaderOffset))
        return false;
      return true;
    }
    at += 4 + len;
  }
  return !(sizeMarked || compressedMarked || offsetMarked);
}

} // namespace

std::string merak::checkZipArchive(std::string_view b,
                                   std::vector<ArchiveEntry> *entries,
                                   bool verifyCrc) {
  uint64_t total = b.size();
  if (total < kEndOfDirectorySize)
    return "not a zip archive: " + std::to_string(total) +
           " bytes, too short for its end-of-directory record";
  // The end-of-central-directory record: the last signature within the
  // final 22 + 65,535 bytes (its comment) whose comment ends the file.
  size_t eocd = std::string::npos;
  size_t lowest = total > kEndOfDirectorySize + 0xFFFF
                      ? total - kEndOfDirectorySize - 0xFFFF
                      : 0;
  for (size_t at = total - kEndOfDirectorySize + 1; at-- > lowest;)
    if (get(b, at, 4) == kEndOfDirectory &&
        at + kEndOfDirectorySize + get(b, at + 20, 2) == total) {
      eocd = at;
      break;
    }
  if (eocd == std::string::npos)
    return "not a zip archive: no end-of-central-directory record";
  uint64_t count = get(b, eocd + 10, 2);
  uint64_t dirSize = get(b, eocd + 12, 4);
  uint64_t dirOffset = get(b, eocd + 16, 4);
  if (get(b, eocd + 4, 2) != 0 || get(b, eocd + 6, 2) != 0)
    return "a zip archive split over several disks";
  bool zip64 =
      count == 0xFFFF || dirSize == 0xFFFFFFFF || dirOffset == 0xFFFFFFFF;
  if (eocd >= kLocatorSize && get(b, eocd - kLocatorSize, 4) == kZip64Locator) {
    uint64_t at = get(b, eocd - kLocatorSize + 8, 8);
    if (!inside(at, kZip64EndSize, total) ||
        get(b, at, 4) != kZip64EndOfDirectory)
      return "the zip64 end-of-directory record (byte " + std::to_string(at) +
             ") is missing or damaged";
    count = get(b, at + 32, 8);
    dirSize = get(b, at + 40, 8);
    dirOffset = get(b, at + 48, 8);
  } else if (zip64) {
    return "the end-of-directory record (byte " + std::to_string(eocd) +
           ") says zip64 but there is no zip64 record";
  }
  if (!inside(dirOffset, dirSize, total))
    return "the central directory (bytes " + std::to_string(dirOffset) +
           " to " + std::to_string(dirOffset + dirSize) + ") is not inside " +
           "the file's " + std::to_string(total) + " bytes";
  // Each directory entry is at least 46 bytes: a count above that is a lie.
  if (count > dirSize / kDirectoryEntrySize)
    return "the end-of-directory record counts " + std::to_string(count) +
           " entries in a " + std::to_string(dirSize) +
           "-byte central directory";

  std::vector<ArchiveEntry> found;
  uint64_t at = dirOffset, end = dirOffset + dirSize;
  for (uint64_t i = 0; i < count; ++i) {
    std::string where = "central-directory entry " + std::to_string(i) +
                        " (byte " + std::to_string(at) + ")";
    if (!inside(at, kDirectoryEntrySize, end) ||
        get(b, at, 4) != kDirectoryEntry)
      return where + ": no entry signature";
    ArchiveEntry e;
    e.directoryOffset = at;
    uint16_t flags = uint16_t(get(b, at + 8, 2));
    e.method = uint16_t(get(b, at + 10, 2));
    e.crc = uint32_t(get(b, at + 16, 4));
    e.compressedSize = get(b, at + 20, 4);
    e.size = get(b, at + 24, 4);
    uint64_t nameLen = get(b, at + 28, 2), extraLen = get(b, at + 30, 2),
             commentLen = get(b, at + 32, 2);
    e.localHeaderOffset = get(b, at + 42, 4);
    uint64_t length = kDirectoryEntrySize + nameLen + extraLen + commentLen;
    if (!inside(at, length, end))
      return where + ": its name and fields run past the central directory";
    e.name = std::string(b.substr(at + kDirectoryEntrySize, nameLen));
    where = "entry '" + e.name + "'";
    if (!readZip64Extra(b.substr(at + kDirectoryEntrySize + nameLen, extraLen),
                        e, e.size == 0xFFFFFFFF, e.compressedSize == 0xFFFFFFFF,
                        e.localHeaderOffset == 0xFFFFFFFF))
      return where + ": its zip64 sizes are missing or damaged";
    if (flags & 0x1)
      return where + ": encrypted";
    if (e.method != 0 && e.method != 8)
      return where + ": compression method " + std::to_string(e.method) +
             " (a TorchScript archive stores or deflates)";
    if (e.method == 0 && e.compressedSize != e.size)
      return where + ": stored, but " + std::to_string(e.compressedSize) +
             " bytes in the archive for " + std::to_string(e.size);
    at += length;

    // The local header it points to.
    uint64_t lh = e.localHeaderOffset;
    where += " (local header at byte " + std::to_string(lh) + ")";
    if (!inside(lh, kLocalHeaderSize, dirOffset) ||
        get(b, lh, 4) != kLocalHeader)
      return where + ": no local header there";
    uint64_t localName = get(b, lh + 26, 2), localExtra = get(b, lh + 28, 2);
    if (!inside(lh, kLocalHeaderSize + localName + localExtra, dirOffset) ||
        b.substr(lh + kLocalHeaderSize, localName) != e.name)
      return where + ": the local header names another entry";
    if (get(b, lh + 8, 2) != e.method)
      return where + ": the local header says compression method " +
             std::to_string(get(b, lh + 8, 2)) + ", the directory " +
             std::to_string(e.method);
    e.dataOffset = lh + kLocalHeaderSize + localName + localExtra;
    if (!inside(e.dataOffset, e.compressedSize, dirOffset))
      return where + ": its " + std::to_string(e.compressedSize) +
             " bytes of data run past the entries";
    if (verifyCrc) {
      uint32_t crc = 0;
      bool pickle = e.name.size() > 4 &&
                    (e.name.compare(e.name.size() - 4, 4, ".pkl") == 0 ||
                     e.name.compare(e.name.size() - 4, 4, "_pkl") == 0);
      std::string inflated;
      std::string error = entryCrc(e, b.substr(e.dataOffset, e.compressedSize),
                                   crc, pickle ? &inflated : nullptr);
      if (!error.empty())
        return where + ": " + error;
      if (crc != e.crc)
        return where + ": CRC-32 is " + hex(crc) + ", the directory says " +
               hex(e.crc);
      if (pickle) {
        std::string lie = checkPickleLengths(inflated);
        bool debug = e.name.size() > 10 &&
                     e.name.compare(e.name.size() - 10, 10, ".debug_pkl") == 0;
        if (!lie.empty() && !debug)
          return where + ": its pickle's " + lie;
        if (!lie.empty())
          e.damage = "its pickle's " + lie;
      }
    }
    found.push_back(std::move(e));
  }
  if (entries)
    *entries = std::move(found);
  return "";
}
