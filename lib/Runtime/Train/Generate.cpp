//===- Generate.cpp - text generation with a key-value cache --------------===//
//
// Prompts are right-padded to the window and prefilled together; decoding
// then goes one position at a time from the shortest prompt's end, every
// row in step: a row still inside its prompt takes its prompt's token, the
// others the token picked from the previous position's logits. The caches
// live on the backend from the prefill to the last step; only the token,
// the position and one position's logits cross to the host.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Train/Generate.h"
#include "merak/Runtime/Executor.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace merak::runtime {

absl::Status checkSampling(const SamplingOptions &o) {
  if (!(std::isfinite(o.temperature) && o.temperature >= 0))
    return absl::InvalidArgumentError(absl::StrCat(
        "--temperature must be a number of at least 0 (0: greedy), not ",
        o.temperature));
  if (o.topK < 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "--top-k must be at least 0 (0: every token), not ", o.topK));
  if (!(o.topP > 0 && o.topP <= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("--top-p must be above 0 and at most 1, not ", o.topP));
  return absl::OkStatus();
}

int64_t pickToken(const float *logits, int64_t vocab, const SamplingOptions &o,
                  double uniform) {
  if (vocab <= 0)
    return -1;
  if (o.temperature == 0)
    return std::max_element(logits, logits + vocab) - logits;
  // Ranked by logit (ties by index, so the order is fixed), cut to top-k.
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (o.topK > 0 && o.topK < vocab)
    order.resize(size_t(o.topK));
  std::vector<double> p(order.size());
  double top = double(logits[order[0]]), sum = 0;
  for (size_t i = 0; i < order.size(); ++i)
    sum += p[i] = std::exp((double(logits[order[i]]) - top) / o.temperature);
  // Top-p: the fewest leading tokens whose probability reaches topP.
  size_t keep = order.size();
  if (o.topP < 1) {
    double mass = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      mass += p[i] / sum;
      if (mass >= o.topP) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = std::accumulate(p.begin(), p.begin() + keep, 0.0);
  double target = uniform * kept, run = 0;
  for (size_t i = 0; i < keep; ++i) {
    run += p[i];
    if (target < run)
      return order[i];
  }
  return order[keep - 1];
}

namespace {

absl::Status badProgram(const Program &p, const std::string &why) {
  return absl::InvalidArgumentError(
      absl::StrCat("@", p.function, " is not a generation step (", why,
                   "): compile the model with --merak-kv-cache"));
}

/// The one argument of `role`, or null.
const Argument *only(const Program &p, ArgumentRole role, int &count) {
  const Argument *found = nullptr;
  count = 0;
  for (const Argument &a : p.arguments)
    if (a.role == role)
      found = &a, ++count;
  return found;
}

} // namespace

Generator::~Generator() = default;

absl::StatusOr<std::unique_ptr<Generator>>
Generator::create(const Program &prefill, const Program &decode,
                  Backend &backend, Communicator *communicator) {
  std::unique_ptr<Generator> g(new Generator(prefill, decode, backend));
  int n = 0;
  const Argument *tokens = only(prefill, ArgumentRole::Input, n);
  if (n != 1)
    return badProgram(prefill, "it needs one input, the tokens");
  const TensorType &t = prefill.values[tokens->value].type;
  if (t.dtype != DType::I64 || t.shape.size() != 2)
    return badProgram(prefill, "its input is " + t.str());
  g->batchSize = t.shape[0], g->length = t.shape[1];
  const Argument *token = only(decode, ArgumentRole::Input, n);
  if (n != 1 || decode.values[token->value].type !=
                    TensorType{DType::I64, {g->batchSize, 1}})
    return badProgram(decode, "it needs one input, a token per row");
  const Argument *position = only(decode, ArgumentRole::Position, n);
  if (n != 1 ||
      decode.values[position->value].type != TensorType{DType::I64, {1}})
    return badProgram(decode, "it needs one position");
  std::vector<const Argument *> cacheArgs;
  for (const Argument &a : decode.arguments)
    if (a.role == ArgumentRole::KvCache)
      cacheArgs.push_back(&a);
  for (const Program *p : {&prefill, &decode}) {
    if (p->results.size() != cacheArgs.size() + 1 || cacheArgs.empty())
      return badProgram(*p, "it must return the logits and each cache");
    const TensorType &logits = p->values[p->results[0].value].type;
    int64_t positions = p == &prefill ? g->length : 1;
    if (!isFloat(logits.dtype) || logits.shape.size() != 3 ||
        logits.shape[0] != g->batchSize || logits.shape[1] != positions)
      return badProgram(*p, "its first result is " + logits.str() +
                                ", not logits [batch, positions, vocabulary]");
    if (!p->results[0].sharding.isReplicated())
      return badProgram(*p, "its logits are split over ranks (" +
                                p->results[0].sharding.str() +
                                "); every rank picks the token from all of "
                                "them");
    if (g->vocab && logits.shape[2] != g->vocab)
      return badProgram(*p, "the two steps' vocabularies differ");
    g->vocab = logits.shape[2];
    for (size_t i = 0; i < cacheArgs.size(); ++i)
      if (p->values[p->results[i + 1].value].type !=
          decode.values[cacheArgs[i]->value].type)
        return badProgram(*p, "result #" + std::to_string(i + 1) +
                                  " is not the cache '" + cacheArgs[i]->name +
                                  "'");
  }
  for (const Argument &a : prefill.arguments)
    if (a.role != ArgumentRole::Input && a.role != ArgumentRole::Param &&
        a.role != ArgumentRole::Buffer)
      return badProgram(prefill, std::string("an argument of role ") +
                                     argumentRoleName(a.role));
  absl::StatusOr<std::unique_ptr<Executor>> pe =
      Executor::create(prefill, backend, communicator);
  if (!pe.ok())
    return pe.status();
  absl::StatusOr<std::unique_ptr<Executor>> de =
      Executor::create(decode, backend, communicator);
  if (!de.ok())
    return de.status();
  g->prefillExec = *std::move(pe);
  g->decodeExec = *std::move(de);
  return g;
}

absl::Status
Generator::loadWeights(const std::map<std::string, HostTensor> &tensors,
                       const std::string &sourceName) {
  weights.clear();
  for (const Program *p : {&prefill, &decode})
    for (const Argument &a : p->arguments) {
      if (a.role != ArgumentRole::Param && a.role != ArgumentRole::Buffer)
        continue;
      const TensorType &type = p->values[a.value].type;
      auto have = weights.find(a.name);
      if (have != weights.end())
        continue;
      absl::StatusOr<TensorHandle> h =
          loadStateArgument(backend, a, type, tensors, sourceName, false);
      if (!h.ok())
        return h.status();
      weights[a.name] = *std::move(h);
    }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TensorHandle>>
Generator::arguments(const Program &program, const HostTensor &tokens,
                     int64_t position) {
  std::vector<TensorHandle> args(program.arguments.size());
  for (size_t i = 0; i < program.arguments.size(); ++i) {
    const Argument &a = program.arguments[i];
    absl::StatusOr<TensorHandle> h;
    switch (a.role) {
    case ArgumentRole::Param:
    case ArgumentRole::Buffer: {
      auto it = weights.find(a.name);
      if (it == weights.end())
        return absl::FailedPreconditionError(
            absl::StrCat(argumentRoleNoun(a.role), " '", a.name,
                         "' has no value: load the weights first"));
      h = it->second;
      break;
    }
    case ArgumentRole::Input:
      h = backend.upload(tokens);
      break;
    case ArgumentRole::Position: {
      HostTensor p = HostTensor::allocate({DType::I64, {1}});
      std::memcpy(p.mutableBytes(), &position, sizeof(position));
      h = backend.upload(p);
      break;
    }
    case ArgumentRole::KvCache: {
      auto it = caches.find(a.name);
      if (it == caches.end())
        return absl::FailedPreconditionError("cache '" + a.name +
                                             "' has no value before a prefill");
      h = it->second;
      break;
    }
    default:
      return badProgram(program, std::string("an argument of role ") +
                                     argumentRoleName(a.role));
    }
    if (!h.ok())
      return h.status();
    args[i] = *std::move(h);
  }
  return args;
}

absl::StatusOr<HostTensor>
Generator::logitsOf(const Program &program,
                    const std::vector<TensorHandle> &results) {
  const TensorType &type = program.values[program.results[0].value].type;
  return backend.download(*results[0], type);
}

absl::StatusOr<GenerationResult>
Generator::generate(const GenerationRequest &request) {
  const auto &prompts = request.prompts;
  if (prompts.empty() || int64_t(prompts.size()) > batchSize)
    return absl::InvalidArgumentError(absl::StrCat(
        prompts.size(), " prompts: the program generates for 1 to ", batchSize,
        " at a time (its batch)"));
  if (request.maxNewTokens < 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "--max-new-tokens must be at least 1, not ", request.maxNewTokens));
  if (absl::Status s = checkSampling(request.sampling); !s.ok())
    return s;
  for (int64_t stop : request.stopTokens)
    if (stop < 0 || stop >= vocab)
      return absl::InvalidArgumentError(absl::StrCat(
          "stop token ", stop, " is not in the vocabulary [0, ", vocab, ")"));
  int64_t shortest = length;
  for (size_t r = 0; r < prompts.size(); ++r) {
    int64_t n = int64_t(prompts[r].size());
    if (n < 1 || n >= length)
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt ", r + 1, " has ", n, " tokens; the window of ", length,
          " positions takes 1 to ", length - 1, " and the tokens it adds"));
    for (int64_t t : prompts[r])
      if (t < 0 || t >= vocab)
        return absl::InvalidArgumentError(
            absl::StrCat("prompt ", r + 1, ": token ", t,
                         " is not in the vocabulary [0, ", vocab, ")"));
    shortest = std::min(shortest, n);
  }

  // The prompts right-padded (with token 0) into the window; rows beyond
  // the prompts repeat the first.
  HostTensor window = HostTensor::allocate({DType::I64, {batchSize, length}});
  auto *ids = reinterpret_cast<int64_t *>(window.mutableBytes());
  auto prompt = [&](int64_t row) -> const std::vector<int64_t> & {
    return prompts[size_t(row) < prompts.size() ? size_t(row) : 0];
  };
  for (int64_t b = 0; b < batchSize; ++b)
    std::copy(prompt(b).begin(), prompt(b).end(), ids + b * length);

  GenerationResult result;
  result.tokens.resize(prompts.size());
  result.finish.assign(prompts.size(), "");
  std::mt19937_64 rng(request.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<int64_t> next(static_cast<size_t>(batchSize), 0);
  std::vector<float> row(static_cast<size_t>(vocab));
  // Picks each row's next token from position `at` of `logits`.
  auto pick = [&](const HostTensor &logits, int64_t positions, int64_t at) {
    for (int64_t b = 0; b < batchSize; ++b) {
      int64_t base = (b * positions + at) * vocab;
      if (logits.type.dtype == DType::F32)
        std::memcpy(row.data(), logits.bytes() + base * int64_t(sizeof(float)),
                    size_t(vocab) * sizeof(float));
      else
        for (int64_t v = 0; v < vocab; ++v)
          row[size_t(v)] = float(logits.elementAsDouble(base + v));
      double u = uniform(rng);
      next[size_t(b)] = pickToken(row.data(), vocab, request.sampling, u);
    }
  };

  StepContext step;
  step.evaluate = true;
  step.seed = request.seed;
  auto start = std::chrono::steady_clock::now();
  auto seconds = [](auto from) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         from)
        .count();
  };
  {
    absl::StatusOr<std::vector<TensorHandle>> args =
        arguments(prefill, window, 0);
    if (!args.ok())
      return args.status();
    absl::StatusOr<std::vector<TensorHandle>> out =
        prefillExec->call(step, *std::move(args));
    if (!out.ok())
      return out.status();
    caches.clear();
    size_t c = 0;
    for (const Argument &a : decode.arguments)
      if (a.role == ArgumentRole::KvCache)
        caches[a.name] = (*out)[++c];
    absl::StatusOr<HostTensor> logits = logitsOf(prefill, *out);
    if (!logits.ok())
      return logits.status();
    pick(*logits, length, shortest - 1);
  }
  result.prefillSeconds = seconds(start);

  auto decodeStart = std::chrono::steady_clock::now();
  HostTensor current = HostTensor::allocate({DType::I64, {batchSize, 1}});
  auto *cur = reinterpret_cast<int64_t *>(current.mutableBytes());
  for (int64_t p = shortest;; ++p) {
    bool running = false;
    for (int64_t b = 0; b < batchSize; ++b) {
      bool inPrompt = p < int64_t(prompt(b).size());
      cur[b] = inPrompt ? prompt(b)[size_t(p)] : next[size_t(b)];
      if (size_t(b) >= prompts.size())
        continue;
      std::string &finish = result.finish[size_t(b)];
      if (!inPrompt && finish.empty()) {
        std::vector<int64_t> &out = result.tokens[size_t(b)];
        out.push_back(cur[b]);
        if (std::count(request.stopTokens.begin(), request.stopTokens.end(),
                       cur[b]))
          finish = "stop";
        else if (int64_t(out.size()) == request.maxNewTokens)
          finish = "length";
      }
      running |= finish.empty();
    }
    if (!running)
      break;
    if (p == length - 1) {
      for (std::string &finish : result.finish)
        if (finish.empty())
          finish = "context";
      break;
    }
    absl::StatusOr<std::vector<TensorHandle>> args =
        arguments(decode, current, p);
    if (!args.ok())
      return args.status();
    absl::StatusOr<std::vector<TensorHandle>> out =
        decodeExec->call(step, *std::move(args));
    if (!out.ok())
      return out.status();
    size_t c = 0;
    for (const Argument &a : decode.arguments)
      if (a.role == ArgumentRole::KvCache)
        caches[a.name] = (*out)[++c];
    absl::StatusOr<HostTensor> logits = logitsOf(decode, *out);
    if (!logits.ok())
      return logits.status();
    pick(*logits, 1, 0);
    ++result.decodeSteps;
  }
  result.decodeSeconds = seconds(decodeStart);
  return result;
}

} // namespace merak::runtime
