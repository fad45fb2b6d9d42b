//===- merak-tokenize.cpp - text to the token files merak-exec reads ------===//
//
// Tokenizes a text corpus with a SentencePiece model into the flat token
// file `merak-exec --tokens` samples windows from (little-endian uint16 or
// int32), one document per line, each followed by the end-of-sentence id.
// The last `--validation` fraction of the documents goes to a second file
// (`OUT` with `.val` before its extension) for evaluation. A manifest beside
// the output (`OUT.json`) records the inputs' hashes and the options; a run
// whose inputs and options match it does nothing (the files are cached).
//
//===----------------------------------------------------------------------===//

#include "SentencePiece.h"
#include "merak/Runtime/FlagNames.h"
#include "merak/Runtime/Safetensors.h"

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

ABSL_FLAG(std::string, text, "",
          "The corpus: UTF-8 text, one document per "
          "line");
ABSL_FLAG(std::string, tokenizer, "", "A SentencePiece model (spm.model)");
ABSL_FLAG(int, train_vocab, 0,
          "When --tokenizer does not exist, train it on --text first: a "
          "byte-pair-encoding model of at most this many pieces");
ABSL_FLAG(std::string, o, "", "The token file to write (tokens.bin)");
ABSL_FLAG(double, validation, 0.0,
          "Fraction of the documents (the last ones) written to the "
          "validation file instead, from 0 to below 1");
ABSL_FLAG(std::string, token_dtype, "auto",
          "uint16, int32, or auto (uint16 when the vocabulary fits)");
ABSL_FLAG(bool, eos, true, "Append the end-of-sentence id to each document");
ABSL_FLAG(bool, force, false,
          "Tokenize even when the manifest says the "
          "files are up to date");

namespace {

using json = nlohmann::ordered_json;

constexpr const char *kFormat = "merak-tokens-v1";

int fail(const std::string &message) {
  std::fflush(stdout);
  std::fprintf(stderr, "merak-tokenize: error: %s\n", message.c_str());
  return 1;
}

/// A read-only mapping of a whole file.
struct MappedFile {
  const char *data = nullptr;
  size_t size = 0;
  ~MappedFile() {
    if (data && size)
      ::munmap(const_cast<char *>(data), size);
  }
};

absl::Status mapFile(const std::string &path, MappedFile &file) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(path + " is not a regular file");
  }
  file.size = size_t(st.st_size);
  if (file.size > 0) {
    void *p = ::mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      return absl::InternalError(
          absl::StrCat("cannot map ", path, ": ", std::strerror(errno)));
    }
    file.data = static_cast<const char *>(p);
  }
  ::close(fd);
  return absl::OkStatus();
}

/// FNV-1a, 64 bits, as hexadecimal: the cache key of an input.
std::string fingerprint(const char *data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= uint8_t(data[i]);
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

/// `tokens.bin` -> `tokens.val.bin` (`tokens` -> `tokens.val`).
std::string validationPath(const std::string &out) {
  size_t slash = out.rfind('/');
  size_t dot = out.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1))
    return out + ".val";
  return out.substr(0, dot) + ".val" + out.substr(dot);
}

/// Packs `tokens` little-endian in `width` bytes each.
std::string pack(const std::vector<int> &tokens, int width) {
  std::string bytes(tokens.size() * size_t(width), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t v = uint32_t(tokens[i]);
    for (int b = 0; b < width; ++b)
      bytes[i * size_t(width) + size_t(b)] = char((v >> (8 * b)) & 0xff);
  }
  return bytes;
}

bool fileHasSize(const std::string &path, uint64_t bytes) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         uint64_t(st.st_size) == bytes;
}

} // namespace

int main(int argc, char **argv) {
  absl::SetProgramUsageMessage(
      "tokenizes a text corpus for merak-exec --tokens: merak-tokenize "
      "--text corpus.txt --tokenizer spm.model -o tokens.bin "
      "[--validation 0.05]");
  // Flag names with dashes, as the help and docs spell them.
  std::vector<std::string> args =
      merak::runtime::underscoreFlagNames(argc, argv);
  std::vector<char *> pointers;
  for (std::string &arg : args)
    pointers.push_back(arg.data());
  std::vector<char *> rest =
      absl::ParseCommandLine(int(pointers.size()), pointers.data());
  if (rest.size() > 1)
    return fail(absl::StrCat("unexpected argument '", rest[1],
                             "' (the corpus is given with --text)"));
  const std::string textPath = absl::GetFlag(FLAGS_text);
  const std::string modelPath = absl::GetFlag(FLAGS_tokenizer);
  const std::string out = absl::GetFlag(FLAGS_o);
  const double validation = absl::GetFlag(FLAGS_validation);
  const std::string dtypeFlag = absl::GetFlag(FLAGS_token_dtype);
  const bool eos = absl::GetFlag(FLAGS_eos);
  if (textPath.empty() || modelPath.empty() || out.empty())
    return fail("give --text, --tokenizer and -o");
  if (!(validation >= 0 && validation < 1))
    return fail(absl::StrCat("--validation must be from 0 to below 1, not ",
                             validation));
  if (dtypeFlag != "auto" && dtypeFlag != "uint16" && dtypeFlag != "int32")
    return fail("--token-dtype must be uint16, int32 or auto, not '" +
                dtypeFlag + "'");
  const std::string valOut = validationPath(out);
  const std::string manifestPath = out + ".json";
  for (const std::string &path : {out, manifestPath})
    if (absl::Status s = merak::runtime::checkWritable(path, false); !s.ok())
      return fail(absl::StrCat("-o: ", s.message()));

  const int trainVocab = absl::GetFlag(FLAGS_train_vocab);
  if (trainVocab < 0 || trainVocab == 1 || trainVocab > (1 << 20))
    return fail(
        absl::StrCat("--train-vocab must be from 2 to 2^20, not ", trainVocab));
  MappedFile text, model;
  if (absl::Status s = mapFile(textPath, text); !s.ok())
    return fail(absl::StrCat("--text: ", s.message()));
  if (trainVocab > 0 && ::access(modelPath.c_str(), F_OK) != 0) {
    if (absl::Status s = merak::runtime::checkWritable(modelPath, false);
        !s.ok())
      return fail(absl::StrCat("--tokenizer: ", s.message()));
    std::string error;
    if (!merak::tokenize::trainSentencePiece(textPath, modelPath, trainVocab,
                                             error))
      return fail(absl::StrCat("training a tokenizer on ", textPath,
                               " failed: ", error));
    std::printf("trained a SentencePiece model (BPE, up to %d pieces) on %s: "
                "%s\n",
                trainVocab, textPath.c_str(), modelPath.c_str());
  }
  if (absl::Status s = mapFile(modelPath, model); !s.ok())
    return fail(absl::StrCat("--tokenizer: ", s.message()));
  std::string error;
  std::unique_ptr<merak::tokenize::SentencePieceModel> spm =
      merak::tokenize::SentencePieceModel::load(
          std::string_view(model.data, model.size), error);
  if (!spm)
    return fail(absl::StrCat("--tokenizer ", modelPath,
                             " is not a SentencePiece model: ", error));
  const int vocab = spm->vocabSize();
  std::string dtype = dtypeFlag;
  if (dtype == "auto")
    dtype = vocab <= 65536 ? "uint16" : "int32";
  if (dtype == "uint16" && vocab > 65536)
    return fail(absl::StrCat("--token-dtype uint16 holds ids below 65536, but ",
                             modelPath, " has ", vocab, " pieces"));
  if (eos && spm->eosId() < 0)
    return fail(modelPath + " has no end-of-sentence piece: pass --eos=false");
  const int width = dtype == "uint16" ? 2 : 4;

  // The manifest of these inputs and options; the files are up to date when
  // the one on disk says the same and they have its sizes.
  json key;
  key["format"] = kFormat;
  key["text"] = textPath;
  key["text_bytes"] = text.size;
  key["text_fnv1a"] = fingerprint(text.data, text.size);
  key["tokenizer"] = modelPath;
  key["tokenizer_fnv1a"] = fingerprint(model.data, model.size);
  key["vocab_size"] = vocab;
  key["dtype"] = dtype;
  key["eos"] = eos;
  key["validation"] = validation;
  if (!absl::GetFlag(FLAGS_force)) {
    std::ifstream in(manifestPath);
    json old = json::parse(in, nullptr, /*allow_exceptions=*/false);
    bool same = old.is_object();
    for (auto it = key.begin(); same && it != key.end(); ++it)
      same = old.contains(it.key()) && old[it.key()] == it.value();
    if (same && old.contains("tokens") && old["tokens"].is_number_unsigned() &&
        old.contains("validation_tokens") &&
        old["validation_tokens"].is_number_unsigned() &&
        fileHasSize(out, old["tokens"].get<uint64_t>() * uint64_t(width)) &&
        (validation == 0 ||
         fileHasSize(valOut, old["validation_tokens"].get<uint64_t>() *
                                 uint64_t(width)))) {
      std::printf("%s is up to date (%llu tokens; --force tokenizes again)\n",
                  out.c_str(),
                  (unsigned long long)old["tokens"].get<uint64_t>());
      return 0;
    }
  }

  // Documents: the lines of the text (a last line without a newline
  // included, empty lines skipped).
  std::vector<std::pair<size_t, size_t>> lines;
  for (size_t begin = 0; begin < text.size;) {
    const void *nl = std::memchr(text.data + begin, '\n', text.size - begin);
    size_t end =
        nl ? size_t(static_cast<const char *>(nl) - text.data) : text.size;
    size_t stop = end;
    if (stop > begin && text.data[stop - 1] == '\r')
      --stop;
    if (stop > begin)
      lines.emplace_back(begin, stop - begin);
    begin = end + 1;
  }
  if (lines.empty())
    return fail("--text " + textPath + " holds no text");
  const size_t validationLines =
      validation > 0
          ? std::max<size_t>(1, size_t(std::ceil(validation * lines.size())))
          : 0;
  if (validationLines >= lines.size())
    return fail(absl::StrCat("--validation ", validation, " of ", lines.size(),
                             " documents leaves none to train on"));
  const size_t trainLines = lines.size() - validationLines;

  const bool bar = isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  };
  std::vector<int> train, held;
  std::vector<int> ids;
  size_t done = 0, lastDrawn = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto [begin, length] = lines[i];
    ids.clear();
    if (!spm->encode(std::string_view(text.data + begin, length), ids, error))
      return fail(absl::StrCat("--text ", textPath, ": line ", i + 1, " (byte ",
                               begin, "): ", error));
    std::vector<int> &dst = i < trainLines ? train : held;
    dst.insert(dst.end(), ids.begin(), ids.end());
    if (eos)
      dst.push_back(spm->eosId());
    done = begin + length;
    if (bar && done - lastDrawn > (1 << 20)) {
      lastDrawn = done;
      double fraction = double(done) / double(text.size);
      int filled = int(30 * fraction);
      double eta = seconds() / std::max(fraction, 1e-9) * (1 - fraction);
      std::fprintf(stderr, "\r[%s%s] %.1f/%.1f MB  %zu tokens  eta %.1fs",
                   std::string(size_t(filled), '#').c_str(),
                   std::string(size_t(30 - filled), '.').c_str(), done / 1e6,
                   text.size / 1e6, train.size() + held.size(), eta);
    }
  }
  if (bar)
    std::fprintf(stderr, "\r\033[K");

  std::string trainBytes = pack(train, width);
  if (absl::Status s = merak::runtime::writeFileAtomically(
          out, {{trainBytes.data(), trainBytes.size()}});
      !s.ok())
    return fail(std::string(s.message()));
  if (validationLines > 0) {
    std::string heldBytes = pack(held, width);
    if (absl::Status s = merak::runtime::writeFileAtomically(
            valOut, {{heldBytes.data(), heldBytes.size()}});
        !s.ok())
      return fail(std::string(s.message()));
  }
  json manifest = key;
  manifest["tokens"] = uint64_t(train.size());
  manifest["documents"] = uint64_t(trainLines);
  manifest["validation_file"] = validationLines > 0 ? valOut : "";
  manifest["validation_tokens"] = uint64_t(held.size());
  manifest["validation_documents"] = uint64_t(validationLines);
  std::string manifestText = manifest.dump(2) + "\n";
  // Written last: a run killed before it leaves no manifest that vouches
  // for half-written files.
  if (absl::Status s = merak::runtime::writeFileAtomically(
          manifestPath, {{manifestText.data(), manifestText.size()}});
      !s.ok())
    return fail(std::string(s.message()));
  double s = seconds();
  std::printf("tokenized %zu documents into %zu tokens (%s) in %s: train %zu "
              "tokens, validation %zu tokens%s; %.2f s, %.1f MB/s\n",
              lines.size(), train.size() + held.size(), dtype.c_str(),
              out.c_str(), train.size(), held.size(),
              validationLines > 0 ? (" in " + valOut).c_str() : "", s,
              s > 0 ? text.size / 1e6 / s : 0.0);
  return 0;
}
