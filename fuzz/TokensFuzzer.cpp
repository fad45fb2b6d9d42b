//===- TokensFuzzer.cpp - fuzzing the flat token file reader --------------===//
//
// The reader behind `merak-exec --tokens` (`openTokenFile`). An input's
// first four bytes choose what a program would: the token width (uint16 or
// int32), one or two inputs of int32 or int64, the batch size, the window
// length and the seed; the rest is the token file. Two steps are drawn.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "merak/Runtime/Data.h"

#include <string>

using namespace merak::runtime;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 4)
    return 0;
  TokenDType width = data[0] & 1 ? TokenDType::I32 : TokenDType::U16;
  int numInputs = data[0] & 2 ? 2 : 1;
  DType dtype = data[0] & 4 ? DType::I32 : DType::I64;
  int64_t batch = 1 + data[1] % 8;
  int64_t seqLen = data[2] % 64;
  uint64_t seed = data[3];
  std::vector<InputSpec> inputs;
  for (int k = 0; k < numInputs; ++k)
    inputs.push_back({k ? "targets" : "idx", {dtype, {batch, seqLen}}});
  std::string path = merak::fuzz::memoryFile(data + 4, size - 4);
  absl::StatusOr<std::unique_ptr<BatchSource>> source =
      openTokenFile(path, width, inputs, seed);
  if (!source.ok())
    return 0;
  (*source)->describe();
  for (int64_t step : {1, 2})
    if (absl::StatusOr<std::vector<HostTensor>> b = (*source)->batch(step);
        b.ok())
      for (const HostTensor &t : *b)
        merak::fuzz::touch(t.bytes(), t.byteSize());
  return 0;
}
