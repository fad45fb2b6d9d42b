//===- RunConfigFuzzer.cpp - fuzzing `merak train`'s YAML reader ----------===//
//
// The run configuration reader (`RunConfig::load`, yaml-cpp underneath): an
// input is a YAML file. A configuration that loads is printed and every key
// read back as its type.
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "RunConfig.h"

#include <string>

using namespace merak::driver;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path = merak::fuzz::memoryFile(data, size);
  absl::StatusOr<RunConfig> config = RunConfig::load(path, {});
  if (!config.ok())
    return 0;
  std::string text = config->describe();
  merak::fuzz::touch(text.data(), text.size());
  for (const KeySpec &key : configKeys()) {
    if (!config->has(key.path))
      continue;
    switch (key.kind) {
    case KeyKind::Int:
      (void)config->integer(key.path);
      break;
    case KeyKind::Float:
      (void)config->number(key.path);
      break;
    case KeyKind::Bool:
      (void)config->boolean(key.path);
      break;
    case KeyKind::Path:
      (void)config->path(key.path);
      break;
    default:
      (void)config->string(key.path);
      (void)config->json(key.path).dump();
      break;
    }
  }
  if (config->has("model.inputs"))
    (void)config->traceInputs();
  return 0;
}
