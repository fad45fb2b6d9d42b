//===- RunConfig.cpp - reading and checking a run configuration -----------===//

#include "RunConfig.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace merak::driver {

const std::vector<KeySpec> &configKeys() {
  using K = KeyKind;
  static const std::vector<KeySpec> keys = {
      {"model.torchscript", K::Path,
       "a traced TorchScript archive (python/merak_trace.py)"},
      {"model.python", K::Path,
       "a Python file defining the model class (traced by the driver)"},
      {"model.class", K::String, "the nn.Module class in model.python"},
      {"model.kwargs", K::Map, "keyword arguments of the class's constructor"},
      {"model.inputs", K::InputList,
       "the forward's inputs to trace with: a list of {name, shape, dtype, "
       "high}"},
      {"model.seed", K::Int, "torch.manual_seed before building the model"},
      {"model.init", K::Path,
       "initial weights (a .pt or .safetensors; default: the model's own)"},
      {"data.text", K::Path, "a text corpus, one document per line"},
      {"data.tokenizer", K::Path,
       "the SentencePiece model for data.text (with data.vocab-size: "
       "trained there when it does not exist)"},
      {"data.vocab-size", K::Int,
       "train a BPE tokenizer of this many pieces on data.text when "
       "data.tokenizer does not exist (default place: the run directory)"},
      {"data.validation", K::Float,
       "fraction of data.text's documents held out for evaluation "
       "(default 0.05)"},
      {"data.tokens", K::Path, "a flat token file (merak-tokenize's output)"},
      {"data.eval-tokens", K::Path, "validation tokens for data.tokens"},
      {"data.token-dtype",
       K::Choice,
       "width of data.tokens' ids",
       {"uint16", "int32"}},
      {"data.batches", K::Path,
       "batches per step as safetensors (merak-exec --data)"},
      {"data.eval-batches", K::Path, "validation batches for data.batches"},
      {"train.optimizer",
       K::Choice,
       "the optimizer (default adamw)",
       {"adamw", "sgd"}},
      {"train.lr", K::Float, "peak learning rate"},
      {"train.weight-decay", K::Float, "weight decay"},
      {"train.momentum", K::Float, "SGD momentum"},
      {"train.clip-grad-norm", K::Float, "clip gradients to this norm"},
      {"train.lr-schedule",
       K::Choice,
       "learning-rate schedule",
       {"constant", "cosine"}},
      {"train.warmup-steps", K::Int, "linear warm-up steps"},
      {"train.min-lr", K::Float, "learning rate at the end of the decay"},
      {"train.precision",
       K::Choice,
       "compute type of matrix products (bf16 / fp16 keep float32 master "
       "weights)",
       {"fp32", "bf16", "fp16"}},
      {"train.lora", K::String,
       "LoRA adapters, every other weight frozen: --merak-lora options, "
       "e.g. 'rank=8 alpha=16 targets=c_attn,c_proj'"},
      {"train.loss-scale", K::String,
       "loss scaling: dynamic (the default with fp16), none, or a static "
       "scale"},
      {"train.loss-scale-window", K::Int,
       "steps without an overflow after which a dynamic loss scale doubles"},
      {"train.steps", K::Int, "steps to train (required)"},
      {"train.seed", K::Int, "seed of data sampling and dropout"},
      {"train.skip-nonfinite", K::Bool,
       "skip a step whose loss is not finite instead of stopping"},
      {"parallel.plan",
       K::Choice,
       "auto: the automatic search; explicit: the degrees below (default)",
       {"auto", "explicit"}},
      {"parallel.ranks", K::Int,
       "local ranks (default: the product of the degrees, or 1)"},
      {"parallel.dp", K::Int, "data-parallel degree"},
      {"parallel.tp", K::Int, "tensor-parallel degree"},
      {"parallel.ep", K::Int,
       "expert-parallel degree (mixture-of-experts weights)"},
      {"parallel.sp",
       K::Choice,
       "sequence parallelism: megatron (over tp) or ulysses (over its own "
       "axis of parallel.sp-size)",
       {"none", "megatron", "ulysses"}},
      {"parallel.sp-size", K::Int, "Ulysses sequence-parallel degree"},
      {"parallel.pp", K::Int, "pipeline stages"},
      {"parallel.virtual", K::Int,
       "model chunks per pipeline rank (interleaved-1f1b)"},
      {"parallel.zero", K::Int, "ZeRO stage (0-3)"},
      {"parallel.microbatches", K::Int,
       "micro-batches per step: a pipeline's, else gradient accumulation"},
      {"parallel.schedule",
       K::Choice,
       "pipeline schedule",
       {"gpipe", "1f1b", "interleaved-1f1b", "merak-last-no-recompute",
        "merak-shifted-critical-path", "zb-h1", "dynamic"}},
      {"parallel.recompute",
       K::Choice,
       "activation recomputation",
       {"none", "full", "selective"}},
      {"parallel.hardware", K::Path, "hardware profile for parallel.plan=auto"},
      {"parallel.memory", K::Float,
       "memory per device in GiB for parallel.plan=auto"},
      {"checkpoint.dir", K::Path,
       "directory of periodic checkpoints; a run started again resumes "
       "from its newest"},
      {"checkpoint.every", K::Int, "a checkpoint every N steps"},
      {"checkpoint.keep-last", K::Int, "keep the newest K checkpoints"},
      {"eval.every", K::Int, "evaluate every N steps (and after the last)"},
      {"eval.batches", K::Int, "batches per evaluation (default 8)"},
      {"log.jsonl", K::Path, "append step and evaluation records here"},
      {"log.trace", K::Path, "a Chrome trace of the run"},
      {"log.plan-report", K::Path,
       "after training, the plan as an HTML page (merak report)"},
      {"log.run-report", K::Path,
       "after training, the losses, rates and trace as an HTML page"},
      {"run.dir", K::Path,
       "working directory: traced model, tokens, compiled plans (default "
       "FILE.merak beside the configuration FILE.yaml)"},
      {"run.threads", K::Int, "kernel threads per rank"},
      {"run.comm-timeout", K::Float, "seconds before a silent rank fails"},
      {"run.device", K::String, "the backend (merak-exec --device)"},
      {"run.comm", K::String, "the communicator (merak-exec --comm)"},
      {"run.p2p",
       K::Choice,
       "pipeline transfers: auto (nccl with --comm nccl, else gloo), gloo, "
       "shm between ranks on one machine, or nccl",
       {"auto", "gloo", "shm", "nccl"}},
      {"run.check-numerics", K::Bool,
       "stop at the first op that produces a NaN or infinity"},
      {"run.profile", K::Bool, "print kernel time per op kind"},
      {"run.tf32", K::Bool,
       "--device=cuda: float32 GEMMs and convolutions on TF32 tensor cores"},
  };
  return keys;
}

namespace {

const KeySpec *findKey(const std::string &path) {
  for (const KeySpec &k : configKeys())
    if (path == k.path)
      return &k;
  return nullptr;
}

std::vector<std::string> keysOf(const std::string &section) {
  std::vector<std::string> names;
  for (const KeySpec &k : configKeys()) {
    std::string p = k.path;
    if (p.compare(0, section.size() + 1, section + ".") == 0)
      names.push_back(p.substr(section.size() + 1));
  }
  return names;
}

std::vector<std::string> sections() {
  std::vector<std::string> names;
  for (const KeySpec &k : configKeys()) {
    std::string p = k.path;
    std::string s = p.substr(0, p.find('.'));
    if (names.empty() || names.back() != s)
      names.push_back(s);
  }
  return names;
}

std::string at(const std::string &file, const YAML::Mark &mark) {
  return absl::StrCat(file, ":", mark.line + 1, ":", mark.column + 1);
}

absl::Status error(const std::string &where, const std::string &what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what));
}

std::optional<int64_t> parseInt(const std::string &s) {
  if (s.empty())
    return std::nullopt;
  errno = 0;
  char *end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0')
    return std::nullopt;
  return int64_t(v);
}

std::optional<double> parseFloat(const std::string &s) {
  if (s.empty())
    return std::nullopt;
  errno = 0;
  char *end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v))
    return std::nullopt;
  return v;
}

std::optional<bool> parseBool(const std::string &s) {
  if (s == "true" || s == "True" || s == "yes" || s == "on")
    return true;
  if (s == "false" || s == "False" || s == "no" || s == "off")
    return false;
  return std::nullopt;
}

/// Checks a scalar's text against its key's kind.
absl::Status checkScalar(const KeySpec &key, const std::string &text,
                         const std::string &where) {
  std::string path = key.path;
  switch (key.kind) {
  case KeyKind::Int:
    if (!parseInt(text))
      return error(where,
                   absl::StrCat(path, " must be an integer, not '", text, "'"));
    break;
  case KeyKind::Float:
    if (!parseFloat(text))
      return error(where,
                   absl::StrCat(path, " must be a number, not '", text, "'"));
    break;
  case KeyKind::Bool:
    if (!parseBool(text))
      return error(where, absl::StrCat(path, " must be true or false, not '",
                                       text, "'"));
    break;
  case KeyKind::Choice: {
    bool known = false;
    for (const std::string &c : key.choices)
      known |= c == text;
    if (!known)
      return error(where, absl::StrCat(path, " must be one of ",
                                       absl::StrJoin(key.choices, ", "),
                                       ", not '", text, "'"));
    break;
  }
  case KeyKind::String:
  case KeyKind::Path:
    if (text.empty())
      return error(where, absl::StrCat(path, " is empty"));
    break;
  default:
    return error(where, absl::StrCat(path, " cannot be given as text"));
  }
  return absl::OkStatus();
}

/// YAML to JSON for model.kwargs: scalars keep YAML's types (integers,
/// numbers, booleans, null, else strings).
nlohmann::json toJson(const YAML::Node &node) {
  if (node.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto &kv : node)
      out[kv.first.as<std::string>()] = toJson(kv.second);
    return out;
  }
  if (node.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto &item : node)
      out.push_back(toJson(item));
    return out;
  }
  if (node.IsNull())
    return nullptr;
  std::string text = node.as<std::string>();
  if (node.Tag() == "!")
    return text; // quoted
  if (auto i = parseInt(text))
    return *i;
  if (auto f = parseFloat(text))
    return *f;
  if (auto b = parseBool(text))
    return *b;
  if (text == "null" || text == "~")
    return nullptr;
  return text;
}

const std::set<std::string> kDTypes = {"f32", "f64", "bf16", "f16",
                                       "i64", "i32", "i1"};

/// model.inputs: a list of {name, shape, dtype, high}.
absl::StatusOr<nlohmann::json> readInputs(const YAML::Node &node,
                                          const std::string &file) {
  if (!node.IsSequence() || node.size() == 0)
    return error(at(file, node.Mark()),
                 "model.inputs must be a list of {name, shape, dtype, high}");
  nlohmann::json out = nlohmann::json::array();
  for (const auto &item : node) {
    std::string here = at(file, item.Mark());
    if (!item.IsMap())
      return error(here, "each of model.inputs must be a map {name, shape, "
                         "dtype, high}");
    nlohmann::json entry = {{"dtype", "f32"}, {"high", 2}};
    for (const auto &kv : item) {
      std::string key = kv.first.as<std::string>();
      std::string where = at(file, kv.first.Mark());
      if (key == "name") {
        if (!kv.second.IsScalar())
          return error(where, "model.inputs name must be text");
        entry["name"] = kv.second.as<std::string>();
      } else if (key == "shape") {
        if (!kv.second.IsSequence() || kv.second.size() == 0)
          return error(where, "model.inputs shape must be a list of sizes");
        std::vector<int64_t> shape;
        for (const auto &d : kv.second) {
          auto v = d.IsScalar() ? parseInt(d.as<std::string>()) : std::nullopt;
          if (!v || *v < 1)
            return error(at(file, d.Mark()),
                         "model.inputs shape sizes must be positive integers");
          shape.push_back(*v);
        }
        entry["shape"] = shape;
      } else if (key == "dtype") {
        std::string d = kv.second.IsScalar() ? kv.second.as<std::string>() : "";
        if (!kDTypes.count(d))
          return error(where, absl::StrCat("model.inputs dtype must be one of ",
                                           absl::StrJoin(kDTypes, ", "),
                                           ", not '", d, "'"));
        entry["dtype"] = d;
      } else if (key == "high") {
        auto v = kv.second.IsScalar() ? parseInt(kv.second.as<std::string>())
                                      : std::nullopt;
        if (!v || *v < 1)
          return error(where, "model.inputs high must be a positive integer");
        entry["high"] = *v;
      } else {
        return error(where, absl::StrCat("unknown key '", key,
                                         "' in model.inputs (known: name, "
                                         "shape, dtype, high)"));
      }
    }
    if (!entry.contains("name") || !entry.contains("shape"))
      return error(here, "each of model.inputs needs a name and a shape");
    out.push_back(entry);
  }
  return out;
}

/// The offset of the first byte of `text` that is not valid UTF-8, if any
/// (the values reach JSON and Python, which take UTF-8 only).
std::optional<size_t> invalidUtf8(const std::string &text) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  size_t i = 0, n = text.size();
  while (i < n) {
    unsigned char c = byte(i);
    size_t extra = c < 0x80           ? 0
                   : (c >> 5) == 0x6  ? 1
                   : (c >> 4) == 0xe  ? 2
                   : (c >> 3) == 0x1e ? 3
                                      : 4;
    if (extra == 4 || i + extra >= n + (extra == 0 ? 1 : 0))
      return i;
    for (size_t k = 1; k <= extra; ++k)
      if ((byte(i + k) >> 6) != 0x2)
        return i;
    // Overlong forms, surrogates and code points above U+10FFFF.
    if ((extra == 1 && c < 0xc2) ||
        (extra == 2 && c == 0xe0 && byte(i + 1) < 0xa0) ||
        (extra == 2 && c == 0xed && byte(i + 1) >= 0xa0) ||
        (extra == 3 && c == 0xf0 && byte(i + 1) < 0x90) ||
        (extra == 3 && (c > 0xf4 || (c == 0xf4 && byte(i + 1) >= 0x90))))
      return i;
    i += extra + 1;
  }
  return std::nullopt;
}

std::string dirOf(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

absl::StatusOr<RunConfig> RunConfig::load(
    const std::string &file,
    const std::vector<std::pair<std::string, std::string>> &overrides) {
  RunConfig config;
  config.fileDir = dirOf(file);
  std::string name = file.substr(file.rfind('/') + 1);
  config.fileStem = name.substr(0, name.rfind('.') == 0 ||
                                           name.rfind('.') == std::string::npos
                                       ? name.size()
                                       : name.rfind('.'));
  std::ifstream in(file);
  if (!in)
    return absl::NotFoundError(
        absl::StrCat("cannot read ", file, ": ", std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  // YAML text is UTF-8 without control characters but tab and line
  // breaks; yaml-cpp would read others as something else.
  std::optional<size_t> bad = invalidUtf8(text.str());
  std::string why = "not valid UTF-8";
  for (size_t i = 0; i < text.str().size() && (!bad || i < *bad); ++i) {
    unsigned char c = static_cast<unsigned char>(text.str()[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
      bad = i;
      why = absl::StrFormat("control character 0x%02x", c);
      break;
    }
  }
  if (bad) {
    std::string before = text.str().substr(0, *bad);
    size_t line = size_t(std::count(before.begin(), before.end(), '\n')) + 1;
    size_t lineStart = before.rfind('\n');
    size_t column =
        lineStart == std::string::npos ? *bad + 1 : *bad - lineStart;
    return error(absl::StrCat(file, ":", line, ":", column),
                 absl::StrCat(why, " (byte ", *bad, ")"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception &e) {
    return error(at(file, e.mark), absl::StrCat("not valid YAML: ", e.msg));
  }
  if (root.IsNull())
    root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap())
    return error(at(file, root.Mark()),
                 absl::StrCat("a run configuration is a map of sections (",
                              absl::StrJoin(sections(), ", "), ")"));
  try {
    for (const auto &section : root) {
      std::string sname = section.first.as<std::string>();
      std::string swhere = at(file, section.first.Mark());
      std::vector<std::string> known = keysOf(sname);
      if (known.empty())
        return error(swhere,
                     absl::StrCat("unknown section '", sname, "' (known: ",
                                  absl::StrJoin(sections(), ", "), ")"));
      if (section.second.IsNull())
        continue;
      if (!section.second.IsMap())
        return error(swhere, absl::StrCat("section '", sname,
                                          "' must be a map of keys"));
      for (const auto &kv : section.second) {
        std::string key = absl::StrCat(sname, ".", kv.first.as<std::string>());
        std::string where = at(file, kv.first.Mark());
        const KeySpec *spec = findKey(key);
        if (!spec)
          return error(where,
                       absl::StrCat("unknown key '", key, "' (known in ", sname,
                                    ": ", absl::StrJoin(known, ", "), ")"));
        if (config.settings.count(key))
          return error(where, absl::StrCat(key, " is given twice"));
        Setting s;
        s.where = where;
        s.base = config.fileDir;
        if (spec->kind == KeyKind::Map) {
          if (!kv.second.IsMap())
            return error(where, absl::StrCat(key, " must be a map"));
          s.value = toJson(kv.second);
        } else if (spec->kind == KeyKind::InputList) {
          absl::StatusOr<nlohmann::json> inputs = readInputs(kv.second, file);
          if (!inputs.ok())
            return inputs.status();
          s.value = *std::move(inputs);
        } else {
          if (!kv.second.IsScalar())
            return error(where,
                         absl::StrCat(key, " must be a single value, not a ",
                                      kv.second.IsMap() ? "map" : "list"));
          s.text = kv.second.as<std::string>();
          if (absl::Status st = checkScalar(*spec, s.text, where); !st.ok())
            return st;
        }
        config.settings[key] = std::move(s);
      }
    }
  } catch (const YAML::Exception &e) {
    return error(at(file, e.mark), e.msg);
  }
  for (const auto &[key, value] : overrides) {
    std::string where = "--" + key;
    if (invalidUtf8(value))
      return error(where, "not valid UTF-8");
    for (unsigned char c : value)
      if ((c < 0x20 && c != '\t') || c == 0x7f)
        return error(where, absl::StrFormat("control character 0x%02x", c));
    const KeySpec *spec = findKey(key);
    if (!spec)
      return error(where, absl::StrCat("unknown key '", key, "'"));
    Setting s;
    s.where = where;
    s.base = ".";
    if (spec->kind == KeyKind::Map || spec->kind == KeyKind::InputList) {
      YAML::Node node;
      try {
        node = YAML::Load(value);
      } catch (const YAML::Exception &e) {
        return error(where, absl::StrCat("not valid YAML: ", e.msg));
      }
      if (spec->kind == KeyKind::Map) {
        if (!node.IsMap())
          return error(where, absl::StrCat(key, " must be a map"));
        s.value = toJson(node);
      } else {
        absl::StatusOr<nlohmann::json> inputs = readInputs(node, where);
        if (!inputs.ok())
          return inputs.status();
        s.value = *std::move(inputs);
      }
    } else {
      s.text = value;
      if (absl::Status st = checkScalar(*spec, value, where); !st.ok())
        return st;
    }
    config.settings[key] = std::move(s);
  }
  if (absl::Status s = config.check(); !s.ok())
    return s;
  return config;
}

std::string RunConfig::where(const std::string &key) const {
  auto it = settings.find(key);
  return it == settings.end() ? key : it->second.where;
}

std::string RunConfig::string(const std::string &key,
                              const std::string &fallback) const {
  auto it = settings.find(key);
  return it == settings.end() ? fallback : it->second.text;
}

std::string RunConfig::path(const std::string &key) const {
  auto it = settings.find(key);
  if (it == settings.end())
    return "";
  const std::string &p = it->second.text;
  if (p.empty() || p[0] == '/' || it->second.base == ".")
    return p;
  return it->second.base + "/" + p;
}

int64_t RunConfig::integer(const std::string &key, int64_t fallback) const {
  auto it = settings.find(key);
  return it == settings.end() ? fallback : *parseInt(it->second.text);
}

double RunConfig::number(const std::string &key, double fallback) const {
  auto it = settings.find(key);
  return it == settings.end() ? fallback : *parseFloat(it->second.text);
}

bool RunConfig::boolean(const std::string &key, bool fallback) const {
  auto it = settings.find(key);
  return it == settings.end() ? fallback : *parseBool(it->second.text);
}

const nlohmann::json &RunConfig::json(const std::string &key) const {
  static const nlohmann::json none;
  auto it = settings.find(key);
  return it == settings.end() ? none : it->second.value;
}

std::vector<TraceInput> RunConfig::traceInputs() const {
  std::vector<TraceInput> inputs;
  for (const nlohmann::json &e : json("model.inputs")) {
    TraceInput in;
    in.name = e["name"].get<std::string>();
    in.shape = e["shape"].get<std::vector<int64_t>>();
    in.dtype = e["dtype"].get<std::string>();
    in.high = e["high"].get<int64_t>();
    inputs.push_back(in);
  }
  return inputs;
}

std::string RunConfig::describe() const {
  std::string out;
  for (const auto &[key, s] : settings)
    absl::StrAppend(
        &out, "  ", key, ": ",
        s.value.is_null()
            ? s.text
            : s.value.dump(-1, ' ', false,
                           nlohmann::json::error_handler_t::replace),
        "  (", s.where, ")\n");
  return out;
}

absl::Status RunConfig::check() const {
  auto conflict = [&](const std::string &a,
                      const std::string &b) -> absl::Status {
    if (has(a) && has(b))
      return error(where(b), absl::StrCat(b, " and ", a, " (", where(a),
                                          ") cannot both be given"));
    return absl::OkStatus();
  };
  auto needs = [&](const std::string &a, const std::string &b,
                   const std::string &why) -> absl::Status {
    if (has(a) && !has(b))
      return error(where(a), absl::StrCat(a, " needs ", b, why));
    return absl::OkStatus();
  };
  auto atLeast = [&](const std::string &key, int64_t low) -> absl::Status {
    if (has(key) && integer(key) < low)
      return error(where(key), absl::StrCat(key, " must be at least ", low,
                                            ", not ", integer(key)));
    return absl::OkStatus();
  };
  for (absl::Status s : {
           conflict("model.torchscript", "model.python"),
           needs("model.python", "model.class", ""),
           needs("model.python", "model.inputs", " (the inputs to trace with)"),
           needs("model.class", "model.python", ""),
           needs("model.kwargs", "model.python", ""),
           needs("model.inputs", "model.python", ""),
           conflict("data.text", "data.tokens"),
           conflict("data.text", "data.batches"),
           conflict("data.tokens", "data.batches"),
           needs("data.tokenizer", "data.text", ""),
           needs("data.vocab-size", "data.text", ""),
           atLeast("data.vocab-size", 2),
           needs("data.validation", "data.text", ""),
           needs("data.eval-tokens", "data.tokens", ""),
           needs("data.token-dtype", "data.tokens", ""),
           needs("data.eval-batches", "data.batches", ""),
           needs("checkpoint.every", "checkpoint.dir", ""),
           needs("log.run-report", "log.jsonl", " (the run's records)"),
           needs("checkpoint.keep-last", "checkpoint.dir", ""),
           atLeast("train.steps", 1),
           atLeast("train.warmup-steps", 0),
           atLeast("parallel.ranks", 1),
           atLeast("parallel.dp", 1),
           atLeast("parallel.tp", 1),
           atLeast("parallel.ep", 1),
           atLeast("parallel.sp-size", 1),
           atLeast("parallel.virtual", 1),
           atLeast("parallel.pp", 1),
           atLeast("parallel.zero", 0),
           atLeast("parallel.microbatches", 1),
           atLeast("checkpoint.every", 0),
           atLeast("checkpoint.keep-last", 0),
           atLeast("eval.every", 0),
           atLeast("eval.batches", 1),
           atLeast("run.threads", 1),
       })
    if (!s.ok())
      return s;
  if (!has("model.torchscript") && !has("model.python"))
    return absl::InvalidArgumentError(
        "the configuration names no model: give model.torchscript (a traced "
        ".pt) or model.python with model.class and model.inputs");
  if (has("data.text") && !has("data.tokenizer") && !has("data.vocab-size"))
    return error(where("data.text"),
                 "data.text needs data.tokenizer (a SentencePiece model) or "
                 "data.vocab-size (to train one)");
  if (!has("train.steps"))
    return absl::InvalidArgumentError("train.steps is required");
  if (has("parallel.zero") && integer("parallel.zero") > 3)
    return error(where("parallel.zero"),
                 absl::StrCat("parallel.zero must be 0, 1, 2 or 3, not ",
                              integer("parallel.zero")));
  if (has("data.validation")) {
    double v = number("data.validation");
    if (v < 0 || v >= 1)
      return error(where("data.validation"),
                   absl::StrCat("data.validation must be from 0 to below 1, "
                                "not ",
                                string("data.validation")));
  }
  bool hasValidation = has("data.eval-tokens") || has("data.eval-batches") ||
                       (has("data.text") && (!has("data.validation") ||
                                             number("data.validation") > 0));
  if (has("eval.every") && integer("eval.every") > 0 && !hasValidation)
    return error(where("eval.every"),
                 "eval.every needs validation data: data.text with "
                 "data.validation > 0, data.eval-tokens or data.eval-batches");
  bool automatic = string("parallel.plan") == "auto";
  for (const char *degree : {"parallel.dp", "parallel.tp", "parallel.ep",
                             "parallel.sp", "parallel.sp-size", "parallel.pp",
                             "parallel.schedule", "parallel.virtual"})
    if (automatic && has(degree))
      return error(where(degree), absl::StrCat(degree,
                                               " is chosen by the search under "
                                               "parallel.plan: auto (",
                                               where("parallel.plan"), ")"));
  if (!automatic) {
    for (const char *key : {"parallel.hardware", "parallel.memory"})
      if (has(key))
        return error(where(key),
                     absl::StrCat(key, " is for parallel.plan: auto"));
    int64_t product = integer("parallel.dp", 1) * integer("parallel.tp", 1) *
                      integer("parallel.ep", 1) *
                      integer("parallel.sp-size", 1) *
                      integer("parallel.pp", 1);
    if (has("parallel.ranks") && integer("parallel.ranks") != product)
      return error(where("parallel.ranks"),
                   absl::StrCat("parallel.ranks is ", integer("parallel.ranks"),
                                ", but dp x ep x tp x sp-size x pp is ",
                                product));
    if (has("parallel.sp-size") && string("parallel.sp") != "ulysses")
      return error(where("parallel.sp-size"),
                   "parallel.sp-size needs parallel.sp: ulysses");
    if (has("parallel.schedule") && integer("parallel.pp", 1) == 1)
      return error(where("parallel.schedule"),
                   "parallel.schedule needs parallel.pp > 1");
  }
  return absl::OkStatus();
}

} // namespace merak::driver
