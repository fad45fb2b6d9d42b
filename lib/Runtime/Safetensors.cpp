//===- Safetensors.cpp - reading and writing .safetensors files -----------===//

#include "merak/Runtime/Safetensors.h"

#include "absl/strings/str_cat.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <sys/mman.h>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>
#include <vector>

namespace merak::runtime {
namespace {

// As in the reference implementation: a larger header means a corrupt or
// foreign file, and refusing it avoids a huge allocation.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

/// A read-only mapping of a whole file, unmapped with its last reference.
struct MappedFile {
  void *base = nullptr;
  size_t size = 0;
  ~MappedFile() {
    if (base && size)
      munmap(base, size);
  }
};

std::string errnoText() { return std::strerror(errno); }

absl::Status fail(const std::string &path, const std::string &what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

} // namespace

absl::StatusOr<SafetensorsFile> readSafetensors(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat("cannot open ", path, ": ", errnoText()));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    std::string err = errnoText();
    ::close(fd);
    return absl::NotFoundError(absl::StrCat("cannot stat ", path, ": ", err));
  }
  auto file = std::make_shared<MappedFile>();
  file->size = size_t(st.st_size);
  if (file->size > 0) {
    file->base = mmap(nullptr, file->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (file->base == MAP_FAILED) {
      file->base = nullptr;
      std::string err = errnoText();
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot map ", path, ": ", err));
    }
  }
  ::close(fd);
  const uint8_t *bytes = static_cast<const uint8_t *>(file->base);

  if (file->size < 8)
    return fail(path, absl::StrCat("truncated: ", file->size,
                                   " bytes, too short for the 8-byte header "
                                   "length"));
  uint64_t headerLength = 0;
  for (int i = 7; i >= 0; --i)
    headerLength = (headerLength << 8) | bytes[i];
  if (headerLength > kMaxHeaderBytes)
    return fail(path,
                absl::StrCat("header length ", headerLength, " is larger than ",
                             kMaxHeaderBytes, "; not a safetensors file?"));
  if (8 + headerLength > file->size)
    return fail(path, absl::StrCat("truncated: the header is ", headerLength,
                                   " bytes but only ", file->size - 8,
                                   " follow the length"));

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(
        reinterpret_cast<const char *>(bytes + 8),
        reinterpret_cast<const char *>(bytes + 8 + headerLength));
  } catch (const nlohmann::json::exception &e) {
    return fail(path, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!header.is_object())
    return fail(path, "header is not a JSON object");

  SafetensorsFile result;
  const uint8_t *data = bytes + 8 + headerLength;
  uint64_t dataSize = file->size - 8 - headerLength;
  struct Span {
    uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string &name = it.key();
    const nlohmann::json &entry = it.value();
    if (name == "__metadata__") {
      if (!entry.is_object())
        return fail(path, "__metadata__ must map strings to strings");
      for (auto m = entry.begin(); m != entry.end(); ++m) {
        if (!m.value().is_string())
          return fail(path, "__metadata__ must map strings to strings");
        result.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!entry.is_object())
      return fail(path, absl::StrCat("entry '", name, "' is not an object"));
    auto dtypeIt = entry.find("dtype");
    auto shapeIt = entry.find("shape");
    auto offsetsIt = entry.find("data_offsets");
    if (dtypeIt == entry.end() || !dtypeIt->is_string())
      return fail(path, absl::StrCat("tensor '", name, "' has no dtype"));
    std::optional<DType> dtype =
        parseSafetensorsDType(dtypeIt->get<std::string>());
    if (!dtype)
      return fail(path, absl::StrCat("tensor '", name, "' has dtype ",
                                     dtypeIt->get<std::string>(),
                                     ", which Merak cannot hold (it reads "
                                     "F16, BF16, F32, F64, BOOL, I32, I64)"));
    TensorType type{*dtype, {}};
    if (shapeIt == entry.end() || !shapeIt->is_array())
      return fail(path, absl::StrCat("tensor '", name, "' has no shape"));
    for (const auto &d : *shapeIt) {
      if (!d.is_number_unsigned() ||
          d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        return fail(path, absl::StrCat("tensor '", name,
                                       "' has an invalid shape: ", d.dump(),
                                       " is not a dimension"));
      type.shape.push_back(d.get<int64_t>());
    }
    absl::StatusOr<int64_t> byteSize = checkedByteSize(type);
    if (!byteSize.ok())
      return fail(path, absl::StrCat("tensor '", name,
                                     "': ", byteSize.status().message()));
    if (offsetsIt == entry.end() || !offsetsIt->is_array() ||
        offsetsIt->size() != 2 || !(*offsetsIt)[0].is_number_unsigned() ||
        !(*offsetsIt)[1].is_number_unsigned())
      return fail(path,
                  absl::StrCat("tensor '", name, "' has invalid data_offsets"));
    uint64_t begin = (*offsetsIt)[0].get<uint64_t>();
    uint64_t end = (*offsetsIt)[1].get<uint64_t>();
    if (begin > end || uint64_t(*byteSize) != end - begin)
      return fail(path,
                  absl::StrCat("tensor '", name, "' is ", type.str(), ", ",
                               *byteSize, " bytes, but its data_offsets span ",
                               end >= begin ? end - begin : 0));
    if (end > dataSize)
      return fail(path,
                  absl::StrCat("truncated: tensor '", name, "' ends at byte ",
                               end, " of the data, which holds ", dataSize));
    HostTensor t;
    t.type = std::move(type);
    t.data = data + begin;
    t.owner = file;
    result.tensors[name] = std::move(t);
    spans.push_back({begin, end, name});
  }
  // The data must be covered exactly once, without gaps or overlaps.
  std::sort(spans.begin(), spans.end(), [](const Span &a, const Span &b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  uint64_t position = 0;
  for (const Span &s : spans) {
    if (s.begin != position)
      return fail(path, absl::StrCat("tensor '", s.name, "' starts at byte ",
                                     s.begin, ", expected ", position,
                                     " (gap or overlap in data_offsets)"));
    position = s.end;
  }
  if (position < dataSize)
    return fail(path, absl::StrCat(dataSize - position,
                                   " bytes of trailing data after the last "
                                   "tensor"));
  return result;
}

absl::Status
writeSafetensors(const std::string &path,
                 const std::map<std::string, HostTensor> &tensors,
                 const std::map<std::string, std::string> &metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty())
    header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto &[name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      return absl::InvalidArgumentError(
          absl::StrCat("invalid tensor name '", name, "'"));
    uint64_t size = t.byteSize();
    header[name] = {{"dtype", safetensorsDTypeName(t.type.dtype)},
                    {"shape", t.type.shape},
                    {"data_offsets", {offset, offset + size}}};
    offset += size;
  }
  std::string text = header.dump();
  // Padding to 8 keeps the data aligned for readers that map the file.
  text.append((8 - text.size() % 8) % 8, ' ');

  uint8_t lengthBytes[8];
  uint64_t length = text.size();
  for (int i = 0; i < 8; ++i)
    lengthBytes[i] = uint8_t(length >> (8 * i));
  std::vector<std::pair<const void *, size_t>> pieces = {
      {lengthBytes, 8}, {text.data(), text.size()}};
  for (const auto &[name, t] : tensors)
    pieces.push_back({t.data, t.byteSize()});
  return writeFileAtomically(path, pieces);
}

namespace {

/// `path`'s directory (`.` for a bare name) and base name.
std::pair<std::string, std::string> splitPath(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

/// The mkstemp template of `writeFileAtomically(path)`'s temporary.
std::string temporaryTemplate(const std::string &path) {
  auto [dir, base] = splitPath(path);
  return absl::StrCat(dir, "/.", base, ".XXXXXX");
}

} // namespace

bool isAtomicWriteTemporary(const std::string &path, const std::string &name) {
  const std::string base = splitPath(path).second;
  const size_t prefix = base.size() + 2; // '.' base '.'
  if (base.empty() || name.size() != prefix + 6 || name[0] != '.' ||
      name.compare(1, base.size(), base) != 0 || name[prefix - 1] != '.')
    return false;
  return std::all_of(name.begin() + prefix, name.end(),
                     [](char c) { return std::isalnum((unsigned char)c); });
}

absl::Status checkWritable(const std::string &path, bool appends) {
  if (path.empty() || path.back() == '/')
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a file name"));
  auto [dir, base] = splitPath(path);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0)
    return absl::NotFoundError(
        absl::StrCat("cannot write ", path, ": its directory ", dir,
                     " does not exist (", errnoText(), ")"));
  if (!S_ISDIR(st.st_mode))
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": ", dir, " is not a directory"));
  bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write ", path, ": it is a directory"));
  if (exists && appends) {
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0)
      return absl::PermissionDeniedError(
          absl::StrCat("cannot write ", path, ": ", errnoText()));
    ::close(fd);
    return absl::OkStatus();
  }
  std::string tmpl = temporaryTemplate(path);
  std::vector<char> probe(tmpl.begin(), tmpl.end());
  probe.push_back('\0');
  int fd = mkstemp(probe.data());
  if (fd < 0)
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path, ": cannot create a file in ", dir,
                     ": ", errnoText()));
  ::close(fd);
  ::unlink(probe.data());
  return absl::OkStatus();
}

namespace {

/// Fault injection for the tests of interrupted saves:
/// `MERAK_FAULT_KILL_AFTER_BYTES=N[@RANK]` makes this process (only the one
/// whose `RANK` is RANK, when given; one without `RANK` is rank 0) kill
/// itself with SIGKILL when its atomic writes, counted together from the
/// start of the process, are about to write byte N + 1. N = 0 dies before
/// the first byte; a file whose last byte is byte N is still flushed and
/// renamed.
class WriteKillSwitch {
public:
  static WriteKillSwitch &get() {
    static WriteKillSwitch instance;
    return instance;
  }
  /// How many of `n` bytes may be written before the process dies.
  size_t allowed(size_t n) const {
    if (!armed)
      return n;
    return size_t(std::min<uint64_t>(n, limit - written));
  }
  void wrote(size_t n) { written += n; }
  /// Dies when bytes are left to write and the budget is spent.
  void check(size_t left) const {
    if (armed && left > 0 && written >= limit) {
      std::fflush(stdout);
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
  }

private:
  WriteKillSwitch() {
    const char *text = std::getenv("MERAK_FAULT_KILL_AFTER_BYTES");
    if (!text || !*text)
      return;
    unsigned long long bytes = 0;
    long long rank = -1;
    int n = std::sscanf(text, "%llu@%lld", &bytes, &rank);
    if (n < 1)
      return;
    if (n == 2) {
      // A process started alone is rank 0.
      const char *own = std::getenv("RANK");
      if ((own ? std::atoll(own) : 0) != rank)
        return;
    }
    armed = true;
    limit = bytes;
  }
  bool armed = false;
  uint64_t limit = 0, written = 0;
};

} // namespace

absl::Status writeFileAtomically(
    const std::string &path,
    const std::vector<std::pair<const void *, size_t>> &pieces) {
  std::string dir = splitPath(path).first;
  std::string tmpl = temporaryTemplate(path);
  std::vector<char> tmpName(tmpl.begin(), tmpl.end());
  tmpName.push_back('\0');
  int fd = mkstemp(tmpName.data());
  if (fd < 0)
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot create a temporary file in ", dir, ": ", errnoText()));
  std::string tmp(tmpName.data());
  WriteKillSwitch &fault = WriteKillSwitch::get();
  auto writeAll = [&](const void *p, size_t n) {
    const char *c = static_cast<const char *>(p);
    while (n > 0) {
      fault.check(n);
      ssize_t w = ::write(fd, c, fault.allowed(n));
      if (w < 0) {
        if (errno == EINTR)
          continue;
        return false;
      }
      c += w;
      n -= size_t(w);
      fault.wrote(size_t(w));
    }
    return true;
  };
  bool ok = true;
  for (auto it = pieces.begin(); ok && it != pieces.end(); ++it)
    ok = writeAll(it->first, it->second);
  ok = ok && fsync(fd) == 0;
  std::string err = ok ? "" : errnoText();
  // mkstemp creates the file 0600; give it the usual permissions.
  mode_t mask = umask(0);
  umask(mask);
  fchmod(fd, 0666 & ~mask);
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errnoText();
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errnoText();
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", err));
  }
  // The rename is durable once the directory is on disk too.
  int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd >= 0) {
    ::fsync(dirFd);
    ::close(dirFd);
  }
  return absl::OkStatus();
}

} // namespace merak::runtime
