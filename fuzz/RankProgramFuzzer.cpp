//===- RankProgramFuzzer.cpp - fuzzing the rank-program file reader -------===//
//
// An input is a `.mrp` file. Read as it is, a mutated file rarely passes
// the header's checksums, so the input is read a second time with the
// payload size and both checksums rewritten to match: the CBOR payload is
// then what the fuzzer explores. Each opened plan decodes every pipeline
// rank's plan (`openRankPrograms`, `pipelinePlan`), is bound and listed
// for rank 0 as `merak-exec --print-program` does, and one read whole
// (`parseRankPrograms`) must write back and read again.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/RankProgramFile.h"
#include "merak/Runtime/Train/RunOptions.h"

#include <cstdio>
#include <cstdlib>
#include <string>

using namespace merak::runtime;

namespace {

void putU32(std::string &out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out[at + i] = char(v >> (8 * i));
}

/// `bytes` with the header's payload size (bytes 16-23), payload checksum
/// (24-27) and header checksum (28-31) made to match the rest.
std::string withChecksums(std::string bytes) {
  uint64_t size = bytes.size() - kRankProgramHeaderBytes;
  for (int i = 0; i < 8; ++i)
    bytes[16 + i] = char(size >> (8 * i));
  putU32(bytes, 24,
         crc32c(std::string_view(bytes).substr(kRankProgramHeaderBytes)));
  putU32(bytes, 28, crc32c(std::string_view(bytes).substr(0, 28)));
  return bytes;
}

void check(std::string_view bytes) {
  if (absl::StatusOr<std::unique_ptr<CompiledPlan>> plan =
          openRankPrograms(bytes, "input.mrp");
      plan.ok()) {
    for (int64_t r = -1; r <= (*plan)->pipelineRanks(); ++r)
      (void)(*plan)->pipelinePlan(r);
    (void)listRankZero(**plan, CollectiveMode::Overlapped);
  }
  absl::StatusOr<RankPrograms> programs = parseRankPrograms(bytes, "input.mrp");
  if (!programs.ok())
    return;
  // What was read is consistent, so it can be written and read back.
  absl::StatusOr<std::string> again = serializeRankPrograms(*programs);
  if (!again.ok()) {
    std::fprintf(stderr, "read, but not written back: %s\n",
                 again.status().ToString().c_str());
    std::abort();
  }
  if (absl::StatusOr<RankPrograms> reread =
          parseRankPrograms(*again, "again.mrp");
      !reread.ok()) {
    std::fprintf(stderr, "written back, but not read again: %s\n",
                 reread.status().ToString().c_str());
    std::abort();
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  check(bytes);
  if (isRankProgramFile(bytes) && size >= kRankProgramHeaderBytes)
    check(withChecksums(std::string(bytes)));
  return 0;
}
