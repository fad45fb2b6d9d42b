//===- merak.cpp - one command from a model and a corpus to a checkpoint --===//
//
// `merak train run.yaml [--SECTION.KEY=VALUE ...]` reads a run
// configuration (RunConfig.h), traces the model when it is a Python class,
// tokenizes a text corpus, compiles the training step and its parallel
// plan, and runs merak-exec on the plan's ranks with periodic checkpoints
// (a run started again resumes from the newest), evaluation and logs. Each
// product is cached under the run directory by the hash of what made it, so
// a second run starts training at once. Every command is printed before it
// runs. `merak tokenize ...` runs merak-tokenize.
//
//===----------------------------------------------------------------------===//

#include "HtmlReport.h"
#include "RunConfig.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "llvm/Support/CommandLine.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace {

using merak::driver::configKeys;
using merak::driver::KeyKind;
using merak::driver::RunConfig;

int fail(const std::string &message) {
  std::fprintf(stderr, "merak: error: %s\n", message.c_str());
  return 1;
}

void say(const std::string &message) {
  std::printf("merak: %s\n", message.c_str());
  std::fflush(stdout);
}

/// The directory of this executable (the other tools sit beside it).
std::string toolDir() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return ".";
  std::string self(buf, size_t(n));
  return self.substr(0, self.rfind('/'));
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool isFile(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

/// FNV-1a over `bytes`, continuing from `h`.
uint64_t fnv1a(const std::string &bytes, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::optional<std::string> readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// A cache key over file contents and strings: 16 hex digits.
class Key {
public:
  bool addFile(const std::string &path) {
    std::optional<std::string> bytes = readFile(path);
    if (!bytes)
      return false;
    add(*bytes);
    return true;
  }
  /// A tool changes with its build: its size and modification time.
  void addTool(const std::string &path) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0)
      add(absl::StrCat(st.st_size, ":", st.st_mtim.tv_sec, ".",
                       st.st_mtim.tv_nsec));
  }
  void add(const std::string &text) {
    h = fnv1a(text, h);
    h = fnv1a(std::string(1, '\0'), h);
  }
  std::string hex() const { return absl::StrFormat("%016x", h); }

private:
  uint64_t h = 1469598103934665603ull;
};

std::string quote(const std::string &arg) {
  if (!arg.empty() &&
      arg.find_first_of(" \t\n'\"\\$`*?;&|<>(){}") == std::string::npos)
    return arg;
  std::string out = "'";
  for (char c : arg)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// Runs `argv` with this process's standard streams after printing it;
/// returns its exit status (128 + signal when killed).
int run(const std::string &what, const std::vector<std::string> &argv,
        const std::vector<std::string> &extraEnv = {}) {
  std::vector<std::string> shown;
  for (const std::string &a : argv)
    shown.push_back(quote(a));
  say(absl::StrCat(what, ": ", absl::StrJoin(shown, " ")));
  std::vector<char *> args;
  for (const std::string &a : argv)
    args.push_back(const_cast<char *>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> envText;
  for (char **e = environ; *e; ++e)
    envText.emplace_back(*e);
  for (const std::string &e : extraEnv)
    envText.push_back(e);
  std::vector<char *> env;
  for (std::string &e : envText)
    env.push_back(e.data());
  env.push_back(nullptr);
  pid_t pid;
  int rc =
      posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), env.data());
  if (rc != 0) {
    fail(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(rc)));
    return 127;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return 127;
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

std::string formatNumber(double v) { return absl::StrFormat("%.10g", v); }

/// The Python that traces a model class: reads the JSON job file.
const char *kTraceScript = R"PY(
import importlib.util, json, sys
job = json.load(open(sys.argv[1]))
sys.path.insert(0, job["merak_python"])
import torch
import merak_trace
spec = importlib.util.spec_from_file_location("merak_user_model", job["file"])
module = importlib.util.module_from_spec(spec)
sys.path.insert(0, job["file_dir"])
spec.loader.exec_module(module)
if not hasattr(module, job["class"]):
    sys.exit("merak: error: %s defines no %s" % (job["file"], job["class"]))
torch.manual_seed(job["seed"])
model = getattr(module, job["class"])(**job["kwargs"])
model.train()
types = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16,
         "f16": torch.float16, "i64": torch.int64, "i32": torch.int32,
         "i1": torch.bool}
g = torch.Generator().manual_seed(job["seed"])
inputs = []
for spec in job["inputs"]:
    dtype = types[spec["dtype"]]
    if dtype.is_floating_point:
        inputs.append(torch.randn(spec["shape"], generator=g).to(dtype))
    elif dtype == torch.bool:
        inputs.append(torch.randint(0, 2, spec["shape"], generator=g).bool())
    else:
        inputs.append(torch.randint(0, spec["high"], spec["shape"],
                                    generator=g).to(dtype))
merak_trace.save(model, tuple(inputs), job["out"])
)PY";

std::string pythonExecutable() {
  const char *env = std::getenv("MERAK_PYTHON");
  return env && *env ? env : MERAK_DEFAULT_PYTHON;
}

std::string pythonDir() {
  const char *env = std::getenv("MERAK_PYTHON_DIR");
  return env && *env ? env : MERAK_SOURCE_PYTHON_DIR;
}

bool writeText(const std::string &path, const std::string &text) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary);
    out << text;
    if (!out)
      return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

/// `plan.mlir` -> `plan.html`.
std::string htmlBeside(const std::string &input) {
  size_t slash = input.rfind('/');
  size_t dot = input.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash))
    return input + ".html";
  return input.substr(0, dot) + ".html";
}

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Writes the plan report of `plan` (a .mlir plan, summarized by
/// merak-translate, or a merak-plan-v1 .json) to `out`.
int planReport(const std::string &plan, const std::string &out) {
  std::string summaryPath = plan;
  if (!endsWith(plan, ".json")) {
    summaryPath = out + ".plan.json";
    if (int rc = run("summarize",
                     {toolDir() + "/merak-translate", "--merak-to-plan-summary",
                      plan, "-o", summaryPath});
        rc != 0)
      return fail(absl::StrCat("cannot summarize the plan ", plan,
                               " (merak-translate exit status ", rc, ")"));
  }
  std::optional<std::string> text = readFile(summaryPath);
  if (!text)
    return fail(
        absl::StrCat("cannot read ", summaryPath, ": ", std::strerror(errno)));
  nlohmann::json summary;
  try {
    summary = nlohmann::json::parse(*text);
  } catch (const std::exception &e) {
    return fail(absl::StrCat(summaryPath, " is not JSON: ", e.what()));
  }
  std::string html, error;
  if (!merak::driver::renderPlanReport(summary, html, error))
    return fail(absl::StrCat(summaryPath, ": ", error));
  if (!writeText(out, html))
    return fail(absl::StrCat("cannot write ", out, ": ", std::strerror(errno)));
  say(absl::StrCat("plan report: ", out));
  return 0;
}

/// Writes the run report of a --log-jsonl file and, when given, its
/// --trace to `out`.
int runReport(const std::string &log, const std::string &trace,
              const std::string &out) {
  std::optional<std::string> text = readFile(log);
  if (!text)
    return fail(absl::StrCat("cannot read ", log, ": ", std::strerror(errno)));
  nlohmann::json events;
  if (!trace.empty()) {
    std::optional<std::string> traceText = readFile(trace);
    if (!traceText)
      return fail(
          absl::StrCat("cannot read ", trace, ": ", std::strerror(errno)));
    try {
      events = nlohmann::json::parse(*traceText);
    } catch (const std::exception &e) {
      return fail(absl::StrCat(trace, " is not JSON: ", e.what()));
    }
  }
  std::string html, error;
  if (!merak::driver::renderRunReport(*text, log, events, html, error))
    return fail(error);
  if (!writeText(out, html))
    return fail(absl::StrCat("cannot write ", out, ": ", std::strerror(errno)));
  say(absl::StrCat("run report: ", out));
  return 0;
}

struct Driver {
  const RunConfig &config;
  std::string tools = toolDir();
  std::string dir; // the run directory
  bool dryRun = false;

  std::string tool(const std::string &name) const { return tools + "/" + name; }

  /// model.torchscript, or the traced model.python class.
  absl::StatusOr<std::string> model() {
    if (config.has("model.torchscript")) {
      std::string pt = config.path("model.torchscript");
      if (!isFile(pt))
        return absl::NotFoundError(
            absl::StrCat(config.where("model.torchscript"),
                         ": model.torchscript ", pt, " does not exist"));
      return pt;
    }
    std::string file = config.path("model.python");
    nlohmann::json job;
    job["file"] = file;
    job["file_dir"] = file.substr(
        0, file.rfind('/') == std::string::npos ? 0 : file.rfind('/'));
    if (job["file_dir"].get<std::string>().empty())
      job["file_dir"] = ".";
    job["class"] = config.string("model.class");
    job["kwargs"] = config.json("model.kwargs").is_null()
                        ? nlohmann::json::object()
                        : config.json("model.kwargs");
    job["inputs"] = config.json("model.inputs");
    job["seed"] = config.integer("model.seed", 0);
    Key key;
    if (!key.addFile(file))
      return absl::NotFoundError(absl::StrCat(config.where("model.python"),
                                              ": model.python ", file,
                                              " cannot be read"));
    // A string yaml-cpp made of odd input is replaced, not thrown over.
    const auto replace = nlohmann::json::error_handler_t::replace;
    key.add(job.dump(-1, ' ', false, replace));
    std::string out = absl::StrCat(dir, "/model-", key.hex(), ".pt");
    if (isFile(out)) {
      say(absl::StrCat("model: ", out, " (traced before from ", file, ")"));
      return out;
    }
    job["out"] = out + ".tmp";
    job["merak_python"] = pythonDir();
    std::string jobFile = dir + "/trace-job.json";
    if (!writeText(jobFile, job.dump(2, ' ', false, replace)))
      return absl::UnavailableError("cannot write " + jobFile);
    std::string script = dir + "/trace_model.py";
    if (!writeText(script, kTraceScript))
      return absl::UnavailableError("cannot write " + script);
    if (dryRun) {
      say(absl::StrCat("trace: ", pythonExecutable(), " ", script, " ",
                       jobFile));
      return out;
    }
    if (int rc = run("trace", {pythonExecutable(), script, jobFile}); rc != 0)
      return absl::InternalError(
          absl::StrCat("tracing ", config.string("model.class"), " from ", file,
                       " failed (exit status ", rc, ")"));
    if (std::rename((out + ".tmp").c_str(), out.c_str()) != 0)
      return absl::UnavailableError("cannot write " + out);
    return out;
  }

  /// The data flags of merak-exec: tokens from text, a token file, batches.
  absl::StatusOr<std::vector<std::string>> data() {
    std::vector<std::string> flags;
    auto need = [&](const std::string &key) -> absl::Status {
      std::string p = config.path(key);
      if (!isFile(p))
        return absl::NotFoundError(absl::StrCat(config.where(key), ": ", key,
                                                " ", p, " does not exist"));
      return absl::OkStatus();
    };
    if (config.has("data.text")) {
      if (absl::Status s = need("data.text"); !s.ok())
        return s;
      std::string tokenizer = config.has("data.tokenizer")
                                  ? config.path("data.tokenizer")
                                  : dir + "/tokenizer.model";
      if (!config.has("data.vocab-size"))
        if (absl::Status s = need("data.tokenizer"); !s.ok())
          return s;
      std::string tokens = dir + "/tokens.bin";
      double validation = config.number("data.validation", 0.05);
      std::vector<std::string> argv = {tool("merak-tokenize"),
                                       "--text",
                                       config.path("data.text"),
                                       "--tokenizer",
                                       tokenizer,
                                       "-o",
                                       tokens,
                                       "--validation",
                                       formatNumber(validation)};
      if (config.has("data.vocab-size"))
        argv.insert(argv.end(),
                    {"--train-vocab",
                     std::to_string(config.integer("data.vocab-size"))});
      if (!isFile(tool("merak-tokenize")))
        return absl::FailedPreconditionError(
            "data.text needs merak-tokenize, which this build lacks (it "
            "needs SentencePiece: Debian's libsentencepiece-dev)");
      if (dryRun)
        say("tokenize: " + absl::StrJoin(argv, " "));
      else if (int rc = run("tokenize", argv); rc != 0)
        return absl::InternalError(
            absl::StrCat("tokenizing ", config.path("data.text"),
                         " failed (exit status ", rc, ")"));
      // The width merak-tokenize chose (uint16 before a dry run's first
      // tokenization).
      std::optional<std::string> manifest = readFile(tokens + ".json");
      std::string dtype = "uint16";
      if (manifest) {
        try {
          dtype = nlohmann::json::parse(*manifest).value("dtype", "uint16");
        } catch (const std::exception &) {
        }
      }
      flags = {"--tokens", tokens, "--token-dtype", dtype};
      if (validation > 0)
        flags.insert(flags.end(), {"--eval-tokens", dir + "/tokens.val.bin"});
    } else if (config.has("data.tokens")) {
      if (absl::Status s = need("data.tokens"); !s.ok())
        return s;
      flags = {"--tokens", config.path("data.tokens"), "--token-dtype",
               config.string("data.token-dtype", "uint16")};
      if (config.has("data.eval-tokens")) {
        if (absl::Status s = need("data.eval-tokens"); !s.ok())
          return s;
        flags.insert(flags.end(),
                     {"--eval-tokens", config.path("data.eval-tokens")});
      }
    } else if (config.has("data.batches")) {
      if (absl::Status s = need("data.batches"); !s.ok())
        return s;
      flags = {"--data", config.path("data.batches")};
      if (config.has("data.eval-batches")) {
        if (absl::Status s = need("data.eval-batches"); !s.ok())
          return s;
        flags.insert(flags.end(),
                     {"--eval-data", config.path("data.eval-batches")});
      }
    } else {
      say("data: none given; the run draws synthetic batches");
    }
    return flags;
  }

  /// The ranks the plan runs on.
  int64_t ranks() const {
    if (config.string("parallel.plan") == "auto" ||
        config.has("parallel.ranks"))
      return config.integer("parallel.ranks", 1);
    return config.integer("parallel.dp", 1) * config.integer("parallel.tp", 1) *
           config.integer("parallel.ep", 1) *
           config.integer("parallel.sp-size", 1) *
           config.integer("parallel.pp", 1);
  }

  /// --merak-train and --merak-parallelize options.
  std::pair<std::string, std::string> compilerOptions() const {
    std::vector<std::string> train = {
        "optimizer=" + config.string("train.optimizer", "adamw")};
    auto number = [&](const char *key, const char *name) {
      if (config.has(key))
        train.push_back(
            absl::StrCat(name, "=", formatNumber(config.number(key))));
    };
    number("train.lr", "lr");
    number("train.weight-decay", "weight-decay");
    number("train.momentum", "momentum");
    number("train.clip-grad-norm", "clip-grad-norm");
    if (config.has("train.precision"))
      train.push_back("precision=" + config.string("train.precision"));
    if (config.has("train.loss-scale"))
      train.push_back("loss-scale=" + config.string("train.loss-scale"));
    if (config.has("train.loss-scale-window"))
      train.push_back(absl::StrCat("loss-scale-window=",
                                   config.integer("train.loss-scale-window")));
    int64_t pp = config.integer("parallel.pp", 1);
    bool automatic = config.string("parallel.plan") == "auto";
    if (config.has("parallel.microbatches") && pp == 1 && !automatic)
      train.push_back(absl::StrCat("microbatches=",
                                   config.integer("parallel.microbatches")));

    std::vector<std::string> plan;
    if (automatic) {
      plan.push_back("auto");
      plan.push_back(absl::StrCat("devices=", ranks()));
      if (config.has("parallel.hardware"))
        plan.push_back("hardware=" + config.path("parallel.hardware"));
      if (config.has("parallel.memory"))
        plan.push_back("memory=" +
                       formatNumber(config.number("parallel.memory")));
      if (config.has("parallel.zero"))
        plan.push_back(absl::StrCat("zero=", config.integer("parallel.zero")));
    } else {
      auto degree = [&](const char *key, const char *name) {
        if (config.has(key) && config.integer(key) > 0 &&
            (config.integer(key) != 1 || std::string(name) == "zero"))
          plan.push_back(absl::StrCat(name, "=", config.integer(key)));
      };
      degree("parallel.dp", "dp");
      degree("parallel.tp", "tp");
      degree("parallel.ep", "ep");
      degree("parallel.pp", "pp");
      degree("parallel.virtual", "virtual");
      if (config.has("parallel.zero") && config.integer("parallel.zero") > 0)
        plan.push_back(absl::StrCat("zero=", config.integer("parallel.zero")));
      if (config.has("parallel.sp") && config.string("parallel.sp") != "none")
        plan.push_back("sp=" + config.string("parallel.sp"));
      degree("parallel.sp-size", "sp-size");
      if (pp > 1 && config.has("parallel.microbatches"))
        plan.push_back(absl::StrCat("microbatches=",
                                    config.integer("parallel.microbatches")));
      if (config.has("parallel.schedule"))
        plan.push_back("schedule=" + config.string("parallel.schedule"));
    }
    if (config.has("parallel.recompute"))
      plan.push_back("recompute=" + config.string("parallel.recompute"));
    return {absl::StrJoin(train, " "), absl::StrJoin(plan, " ")};
  }

  /// The compiled plan, cached by the hash of the model, the options and
  /// the compiler.
  absl::StatusOr<std::string> compile(const std::string &modelFile) {
    auto [train, plan] = compilerOptions();
    std::vector<std::string> argv = {tool("merak-opt"), modelFile};
    std::string lora =
        config.has("train.lora") ? config.string("train.lora") : "";
    if (config.has("train.lora"))
      argv.push_back("--merak-lora=" + lora);
    argv.push_back("--merak-train=" + train);
    if (!plan.empty())
      argv.push_back("--merak-parallelize=" + plan);
    Key key;
    if (!dryRun && !key.addFile(modelFile))
      return absl::NotFoundError("cannot read " + modelFile);
    key.add("lora " + lora);
    key.add(train);
    key.add(plan);
    key.addTool(tool("merak-opt"));
    if (config.has("parallel.hardware"))
      key.addFile(config.path("parallel.hardware"));
    std::string out = absl::StrCat(dir, "/plan-", key.hex(), ".mlir");
    if (isFile(out)) {
      say(absl::StrCat("plan: ", out, " (compiled before for ",
                       plan.empty() ? "one rank" : plan, ")"));
      return out;
    }
    argv.insert(argv.end(), {"-o", out + ".tmp"});
    if (dryRun) {
      say("compile: " + absl::StrJoin(argv, " "));
      return out;
    }
    if (int rc = run("compile", argv); rc != 0)
      return absl::InternalError(
          absl::StrCat("compiling the plan failed (exit status ", rc, ")"));
    if (std::rename((out + ".tmp").c_str(), out.c_str()) != 0)
      return absl::UnavailableError("cannot write " + out);
    return out;
  }

  std::vector<std::string> execArgs(const std::string &plan,
                                    const std::string &modelFile,
                                    const std::vector<std::string> &data) {
    std::vector<std::string> argv = {tool("merak-exec"), plan};
    if (ranks() > 1)
      argv.insert(argv.end(), {"--nproc", std::to_string(ranks())});
    argv.insert(argv.end(),
                {"--init", config.has("model.init") ? config.path("model.init")
                                                    : modelFile});
    argv.insert(argv.end(), data.begin(), data.end());
    argv.insert(argv.end(),
                {"--steps", std::to_string(config.integer("train.steps"))});
    auto flag = [&](const char *key, const char *name, bool path = false) {
      if (!config.has(key))
        return;
      argv.push_back(name);
      argv.push_back(path ? config.path(key) : config.string(key));
    };
    flag("train.seed", "--seed");
    flag("train.lr", "--lr");
    flag("train.lr-schedule", "--lr-schedule");
    flag("train.warmup-steps", "--warmup-steps");
    flag("train.min-lr", "--min-lr");
    flag("checkpoint.dir", "--save-dir", true);
    flag("checkpoint.every", "--save-every");
    flag("checkpoint.keep-last", "--keep-last");
    flag("eval.every", "--eval-every");
    flag("eval.batches", "--eval-batches");
    flag("log.jsonl", "--log-jsonl", true);
    flag("log.trace", "--trace", true);
    flag("run.threads", "--threads");
    flag("run.comm-timeout", "--comm-timeout");
    flag("run.device", "--device");
    flag("run.comm", "--comm");
    flag("run.p2p", "--p2p");
    auto boolean = [&](const char *key, const char *name) {
      if (config.boolean(key))
        argv.push_back(name);
    };
    boolean("train.skip-nonfinite", "--skip-nonfinite");
    boolean("run.check-numerics", "--check-numerics");
    boolean("run.profile", "--profile");
    boolean("run.tf32", "--tf32");
    return argv;
  }

  int train() {
    if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST)
      return fail(absl::StrCat("cannot create the run directory ", dir, ": ",
                               std::strerror(errno)));
    absl::StatusOr<std::string> modelFile = model();
    if (!modelFile.ok())
      return fail(std::string(modelFile.status().message()));
    absl::StatusOr<std::vector<std::string>> dataFlags = data();
    if (!dataFlags.ok())
      return fail(std::string(dataFlags.status().message()));
    absl::StatusOr<std::string> plan = compile(*modelFile);
    if (!plan.ok())
      return fail(std::string(plan.status().message()));
    std::vector<std::string> argv = execArgs(*plan, *modelFile, *dataFlags);
    if (dryRun) {
      say("train: " + absl::StrJoin(argv, " "));
      return 0;
    }
    if (int rc = run("train", argv); rc != 0)
      return rc;
    if (config.has("checkpoint.dir"))
      say("checkpoints: " + config.path("checkpoint.dir"));
    if (config.has("log.plan-report"))
      if (int rc = planReport(*plan, config.path("log.plan-report")); rc != 0)
        return rc;
    if (config.has("log.run-report"))
      if (int rc =
              runReport(config.path("log.jsonl"),
                        config.has("log.trace") ? config.path("log.trace") : "",
                        config.path("log.run-report"));
          rc != 0)
        return rc;
    return 0;
  }
};

int usage() {
  std::fprintf(stderr,
               "usage: merak train RUN.yaml [--SECTION.KEY=VALUE ...] "
               "[--dry-run] [--print-config]\n"
               "       merak tokenize [merak-tokenize flags]\n"
               "       merak report PLAN.mlir|PLAN.json [-o plan.html]\n"
               "       merak report RUN.jsonl [TRACE.json] [-o run.html]\n"
               "       merak train --help   (every configuration key)\n");
  return 2;
}

int trainCommand(int argc, char **argv) {
  // Every configuration key is also a flag; the command line wins.
  std::vector<std::unique_ptr<llvm::cl::opt<std::string>>> keyFlags;
  llvm::cl::OptionCategory keysCategory("Configuration keys (override the "
                                        "file)");
  for (const auto &key : configKeys()) {
    const char *value =
        key.kind == KeyKind::Int                                     ? "int"
        : key.kind == KeyKind::Float                                 ? "number"
        : key.kind == KeyKind::Path                                  ? "path"
        : key.kind == KeyKind::Map || key.kind == KeyKind::InputList ? "yaml"
                                                                     : "value";
    keyFlags.push_back(std::make_unique<llvm::cl::opt<std::string>>(
        llvm::StringRef(key.path), llvm::cl::desc(key.help),
        llvm::cl::value_desc(value), llvm::cl::cat(keysCategory)));
  }
  llvm::cl::opt<std::string> file(llvm::cl::Positional, llvm::cl::Required,
                                  llvm::cl::desc("<run.yaml>"));
  llvm::cl::opt<bool> dryRun(
      "dry-run", llvm::cl::desc("Print the commands without running them"));
  llvm::cl::opt<bool> printConfig(
      "print-config",
      llvm::cl::desc("Print every setting and where it was set, then stop"));
  llvm::cl::ParseCommandLineOptions(
      argc, argv,
      "merak train: trains a model from a run configuration (YAML)\n");

  std::vector<std::pair<std::string, std::string>> overrides;
  for (size_t i = 0; i < keyFlags.size(); ++i)
    if (keyFlags[i]->getNumOccurrences() > 0)
      overrides.emplace_back(configKeys()[i].path, keyFlags[i]->getValue());
  absl::StatusOr<RunConfig> config = RunConfig::load(file, overrides);
  if (!config.ok())
    return fail(std::string(config.status().message()));
  if (printConfig) {
    std::fputs(config->describe().c_str(), stdout);
    return 0;
  }
  Driver driver{*config};
  driver.dryRun = dryRun;
  driver.dir = config->has("run.dir")
                   ? config->path("run.dir")
                   : config->fileDir + "/" + config->fileStem + ".merak";
  return driver.train();
}

/// `merak report`: a plan (.mlir, or its merak-plan-v1 .json) or a run
/// (.jsonl, with its trace) as a self-contained HTML page.
int reportCommand(int argc, char **argv) {
  llvm::cl::list<std::string> inputs(
      llvm::cl::Positional, llvm::cl::OneOrMore,
      llvm::cl::desc("<plan.mlir | plan.json | run.jsonl [trace.json]>"));
  llvm::cl::opt<std::string> out("o",
                                 llvm::cl::desc("The HTML page to write "
                                                "(default: the first "
                                                "input's name with "
                                                ".html)"),
                                 llvm::cl::value_desc("file"));
  std::string name = "merak report";
  std::vector<char *> args = {name.data()};
  for (int i = 1; i < argc; ++i)
    args.push_back(argv[i]);
  llvm::cl::ParseCommandLineOptions(
      int(args.size()), args.data(),
      "merak report: a plan or a run as a self-contained HTML page\n");
  const std::string &first = inputs.front();
  std::string page = out.empty() ? htmlBeside(first) : std::string(out);
  if (endsWith(first, ".jsonl")) {
    if (inputs.size() > 2)
      return fail("a run report takes RUN.jsonl and at most one TRACE.json");
    return runReport(first, inputs.size() == 2 ? inputs[1] : "", page);
  }
  if (inputs.size() > 1)
    return fail("a plan report takes one plan (.mlir or .json)");
  return planReport(first, page);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  std::string command = argv[1];
  if (command == "tokenize") {
    std::vector<std::string> args = {toolDir() + "/merak-tokenize"};
    for (int i = 2; i < argc; ++i)
      args.emplace_back(argv[i]);
    if (!isFile(args[0]))
      return fail("this build has no merak-tokenize (it needs SentencePiece: "
                  "Debian's libsentencepiece-dev)");
    std::vector<char *> raw;
    for (std::string &a : args)
      raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    return fail(
        absl::StrCat("cannot run ", args[0], ": ", std::strerror(errno)));
  }
  if (command == "train") {
    std::string name = "merak train";
    std::vector<char *> rest = {name.data()};
    for (int i = 2; i < argc; ++i)
      rest.push_back(argv[i]);
    return trainCommand(int(rest.size()), rest.data());
  }
  if (command == "report")
    return reportCommand(argc - 1, argv + 1);
  if (command == "--help" || command == "-h" || command == "help") {
    usage();
    return 0;
  }
  std::fprintf(stderr, "merak: error: unknown command '%s'\n", argv[1]);
  return usage();
}
