//===- HostGloo.cpp - Gloo's collectives on host memory -------------------===//
//
// The Gloo library's own calls (no c10d): contexts connected through a
// store, the new-style collectives (allreduce, allgather, broadcast) and
// unbound buffers for the grouped sends and receives.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/HostGloo.h"

#include "merak/Runtime/Tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace merak::runtime {
namespace {

/// The slot prefix of the grouped sends and receives (Gloo's collectives
/// take 0x01 to 0x08).
constexpr uint8_t kExchangeSlotPrefix = 0x60;

std::string seconds(std::chrono::milliseconds t) { return secondsText(t); }

class JobStore final : public ::gloo::rendezvous::Store {
public:
  JobStore(DistributedJob &job, std::string prefix,
           std::chrono::milliseconds timeout)
      : job(job), prefix(std::move(prefix)), timeout(timeout) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    absl::Status s =
        job.storeSet(prefix + key, std::string(data.begin(), data.end()));
    if (!s.ok())
      throw std::runtime_error(std::string(s.message()));
  }
  std::vector<char> get(const std::string &key) override {
    std::string value = fetch(key, timeout);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string> &keys) override {
    wait(keys, timeout);
  }
  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &waitFor) override {
    for (const std::string &key : keys)
      fetch(key, waitFor);
  }

private:
  std::string fetch(const std::string &key, std::chrono::milliseconds t) {
    absl::StatusOr<std::string> value = job.storeGet(prefix + key, t);
    if (!value.ok())
      throw std::runtime_error(std::string(value.status().message()));
    return *std::move(value);
  }

  DistributedJob &job;
  std::string prefix;
  std::chrono::milliseconds timeout;
};

/// The storage type of `dtype`'s elements as Gloo moves them.
template <typename F> decltype(auto) withStorage(DType dtype, F &&f) {
  switch (dtype) {
  case DType::F32:
    return f(float{});
  case DType::F64:
    return f(double{});
  case DType::I32:
    return f(int32_t{});
  case DType::I64:
    return f(int64_t{});
  case DType::F16:
  case DType::BF16:
    return f(uint16_t{});
  case DType::Bool:
    break;
  }
  return f(uint8_t{});
}

/// Element arithmetic of `dtype` on storage `S`: float16 and bfloat16
/// through float, rounded after each step.
template <typename S> struct Arith {
  static S apply(DeviceReduction r, S a, S b) {
    switch (r) {
    case DeviceReduction::Sum:
    case DeviceReduction::Average:
      return S(a + b);
    case DeviceReduction::Product:
      return S(a * b);
    case DeviceReduction::Max:
      return std::max(a, b);
    case DeviceReduction::Min:
      return std::min(a, b);
    }
    return a;
  }
};

float applyFloat(DeviceReduction r, float a, float b) {
  return Arith<float>::apply(r, a, b);
}

/// The element-wise reduction Gloo's all-reduce calls: out = a (r) b.
::gloo::AllreduceOptions::Func reductionOf(DType dtype, DeviceReduction r) {
  switch (dtype) {
  case DType::F16:
  case DType::BF16: {
    bool bf16 = dtype == DType::BF16;
    return [r, bf16](void *out, const void *a, const void *b, size_t n) {
      auto *o = static_cast<uint16_t *>(out);
      auto *x = static_cast<const uint16_t *>(a);
      auto *y = static_cast<const uint16_t *>(b);
      for (size_t k = 0; k < n; ++k) {
        float u = bf16 ? bfloat16BitsToFloat(x[k]) : halfBitsToFloat(x[k]);
        float v = bf16 ? bfloat16BitsToFloat(y[k]) : halfBitsToFloat(y[k]);
        float w = applyFloat(r, u, v);
        o[k] = bf16 ? floatToBFloat16Bits(w) : floatToHalfBits(w);
      }
    };
  }
  case DType::Bool:
    return [r](void *out, const void *a, const void *b, size_t n) {
      auto *o = static_cast<uint8_t *>(out);
      auto *x = static_cast<const uint8_t *>(a);
      auto *y = static_cast<const uint8_t *>(b);
      bool any = r == DeviceReduction::Sum || r == DeviceReduction::Max ||
                 r == DeviceReduction::Average;
      for (size_t k = 0; k < n; ++k)
        o[k] = any ? uint8_t(x[k] || y[k]) : uint8_t(x[k] && y[k]);
    };
  default:
    return withStorage(dtype, [r](auto zero) -> ::gloo::AllreduceOptions::Func {
      using S = decltype(zero);
      return [r](void *out, const void *a, const void *b, size_t n) {
        auto *o = static_cast<S *>(out);
        auto *x = static_cast<const S *>(a);
        auto *y = static_cast<const S *>(b);
        for (size_t k = 0; k < n; ++k)
          o[k] = Arith<S>::apply(r, x[k], y[k]);
      };
    });
  }
}

/// Divides `count` elements of `dtype` at `data` by `n` (an average's end;
/// integers truncate).
void divideBy(void *data, int64_t count, DType dtype, int64_t n) {
  switch (dtype) {
  case DType::F16:
  case DType::BF16: {
    auto *p = static_cast<uint16_t *>(data);
    bool bf16 = dtype == DType::BF16;
    for (int64_t k = 0; k < count; ++k) {
      float v =
          (bf16 ? bfloat16BitsToFloat(p[k]) : halfBitsToFloat(p[k])) / float(n);
      p[k] = bf16 ? floatToBFloat16Bits(v) : floatToHalfBits(v);
    }
    return;
  }
  case DType::Bool:
    return;
  default:
    withStorage(dtype, [&](auto zero) {
      using S = decltype(zero);
      auto *p = static_cast<S *>(data);
      for (int64_t k = 0; k < count; ++k)
        p[k] = S(p[k] / S(n));
      return 0;
    });
  }
}

/// `p` as a pointer to Gloo's element storage `S` (Gloo's options take
/// mutable pointers; it does not write inputs).
template <typename S> S *typed(const void *p) {
  return const_cast<S *>(static_cast<const S *>(p));
}

/// Runs `call` with a value of `dtype`'s storage type; what Gloo throws
/// (a time-out, a closed connection), as text.
template <typename F>
std::optional<std::string> glooCall(DType dtype, F &&call) {
  try {
    withStorage(dtype, [&](auto zero) {
      call(zero);
      return 0;
    });
  } catch (const std::exception &e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

/// Whether nothing moves (a group of one member, or no elements): then
/// `bytes` of `from` are copied to `to` where they are not there already.
bool movesNothing(bool connected, int64_t count, const void *from, void *to,
                  size_t bytes) {
  if (connected && count != 0)
    return false;
  if (from != to && bytes)
    std::memcpy(to, from, bytes);
  return true;
}

} // namespace

absl::StatusOr<std::shared_ptr<::gloo::transport::Device>>
openHostGlooDevice(const std::string &masterAddr,
                   const std::string &interface) {
  ::gloo::transport::tcp::attr attr;
  if (!interface.empty()) {
    attr.iface = interface;
  } else if (masterAddr.empty() || isLoopbackAddress(masterAddr)) {
    attr.hostname = "127.0.0.1";
  } else {
    char name[256] = {};
    if (::gethostname(name, sizeof(name) - 1) != 0)
      return absl::UnavailableError(
          "cannot open a Gloo device: this machine's host name is unknown "
          "(set GLOO_SOCKET_IFNAME)");
    attr.hostname = name;
  }
  try {
    return ::gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception &e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot open a Gloo device on ",
        interface.empty() ? absl::StrCat("address ", attr.hostname)
                          : absl::StrCat("interface ", interface),
        ": ", e.what(),
        interface.empty() ? " (GLOO_SOCKET_IFNAME names the interface)" : ""));
  }
}

std::unique_ptr<::gloo::rendezvous::Store>
makeJobGlooStore(DistributedJob &job, std::string prefix,
                 std::chrono::milliseconds timeout) {
  return std::make_unique<JobStore>(job, std::move(prefix), timeout);
}

absl::StatusOr<std::unique_ptr<HostGlooCollectives>>
connectHostGloo(DistributedJob &job,
                const std::vector<ProcessGroupSpec> &groups,
                std::chrono::milliseconds timeout) {
  auto environment = [](const char *name) {
    const char *value = std::getenv(name);
    return std::string(value ? value : "");
  };
  absl::StatusOr<std::shared_ptr<::gloo::transport::Device>> device =
      openHostGlooDevice(environment("MASTER_ADDR"),
                         environment("GLOO_SOCKET_IFNAME"));
  if (!device.ok())
    return device.status();
  // Every rank connects its communicators in the same order: the count
  // keeps a later one's keys apart from an earlier one's.
  static std::atomic<int64_t> generations{0};
  std::unique_ptr<::gloo::rendezvous::Store> store = makeJobGlooStore(
      job, absl::StrCat("merak/host-gloo/", generations++, "/"), timeout);
  absl::StatusOr<std::unique_ptr<HostGlooCollectives>> host =
      HostGlooCollectives::connect(*store, *device, groups, timeout);
  if (host.ok())
    return host;
  std::vector<int64_t> everyone;
  for (int64_t r = 0; r < job.worldSize(); ++r)
    everyone.push_back(r);
  std::string why = job.diagnose(everyone);
  return absl::Status(
      host.status().code(),
      absl::StrCat(host.status().message(), why.empty() ? "" : ": ", why));
}

HostGlooCollectives::HostGlooCollectives(std::vector<Group> groups,
                                         std::chrono::milliseconds timeout)
    : groups(std::move(groups)), timeout(timeout) {}

HostGlooCollectives::~HostGlooCollectives() = default;

absl::StatusOr<std::unique_ptr<HostGlooCollectives>>
HostGlooCollectives::connect(::gloo::rendezvous::Store &store,
                             std::shared_ptr<::gloo::transport::Device> device,
                             const std::vector<ProcessGroupSpec> &specs,
                             std::chrono::milliseconds timeout) {
  std::vector<Group> groups;
  for (const ProcessGroupSpec &spec : specs) {
    Group group{spec, nullptr};
    const std::vector<int64_t> &ranks = spec.members.ranks;
    if (ranks.size() > 1) {
      // Groups over the same axes are disjoint: the axes and the first
      // member name one.
      ::gloo::rendezvous::PrefixStore prefixed(
          absl::StrCat("group/", absl::StrJoin(spec.meshAxes, ","), "/",
                       ranks.front(), "/"),
          store);
      auto context = std::make_shared<::gloo::rendezvous::Context>(
          int(spec.members.index), int(ranks.size()));
      context->setTimeout(timeout);
      try {
        context->connectFullMesh(prefixed, device);
      } catch (const std::exception &e) {
        return absl::UnavailableError(absl::StrCat(
            "cannot connect Gloo among ranks ", absl::StrJoin(ranks, ", "),
            " within ", seconds(timeout), ": ", e.what()));
      }
      group.context = std::move(context);
    }
    groups.push_back(std::move(group));
  }
  return std::unique_ptr<HostGlooCollectives>(
      new HostGlooCollectives(std::move(groups), timeout));
}

int64_t HostGlooCollectives::groupSize(int64_t group) const {
  return int64_t(groups.at(group).spec.members.ranks.size());
}

absl::Status HostGlooCollectives::checkGroup(int64_t group) const {
  if (group < 0 || group >= int64_t(groups.size()))
    return absl::InvalidArgumentError(
        absl::StrCat("process group ", group, " of ", groups.size()));
  return absl::OkStatus();
}

absl::Status HostGlooCollectives::failure(int64_t group, const char *what,
                                          const std::string &why) const {
  return absl::UnavailableError(
      absl::StrCat("Gloo's ", what, " among ranks ",
                   absl::StrJoin(groups[group].spec.members.ranks, ", "),
                   " failed (time-out ", seconds(timeout), "): ", why));
}

absl::Status HostGlooCollectives::allReduce(int64_t group, const void *send,
                                            void *recv, int64_t count,
                                            DType dtype, DeviceReduction r) {
  if (absl::Status s = checkGroup(group); !s.ok())
    return s;
  size_t bytes = size_t(count) * dtypeSize(dtype);
  const Group &g = groups[group];
  if (movesNothing(bool(g.context), count, send, recv, bytes))
    return absl::OkStatus();
  if (auto why = glooCall(dtype, [&](auto zero) {
        using S = decltype(zero);
        ::gloo::AllreduceOptions options(g.context);
        if (send != recv)
          options.setInput(typed<S>(send), size_t(count));
        options.setOutput(typed<S>(recv), size_t(count));
        options.setReduceFunction(reductionOf(dtype, r));
        options.setTimeout(timeout);
        ::gloo::allreduce(options);
      }))
    return failure(group, "all-reduce", *why);
  if (r == DeviceReduction::Average)
    divideBy(recv, count, dtype, groupSize(group));
  return absl::OkStatus();
}

absl::Status HostGlooCollectives::allGather(int64_t group, const void *send,
                                            void *recv, int64_t count,
                                            DType dtype) {
  if (absl::Status s = checkGroup(group); !s.ok())
    return s;
  const Group &g = groups[group];
  size_t bytes = size_t(count) * dtypeSize(dtype);
  char *own = static_cast<char *>(recv) + g.spec.members.index * bytes;
  if (movesNothing(bool(g.context), count, send, own, bytes))
    return absl::OkStatus();
  if (auto why = glooCall(dtype, [&](auto zero) {
        using S = decltype(zero);
        ::gloo::AllgatherOptions options(g.context);
        if (own != send)
          options.setInput(typed<S>(send), size_t(count));
        options.setOutput(typed<S>(recv),
                          size_t(count) * size_t(groupSize(group)));
        options.setTimeout(timeout);
        ::gloo::allgather(options);
      }))
    return failure(group, "all-gather", *why);
  return absl::OkStatus();
}

absl::Status HostGlooCollectives::reduceScatter(int64_t group, const void *send,
                                                void *recv, int64_t count,
                                                DType dtype,
                                                DeviceReduction r) {
  if (absl::Status s = checkGroup(group); !s.ok())
    return s;
  // Gloo has no reduce-scatter of this form: an all-reduce of the whole
  // buffer, of which this member keeps its block (twice a ring
  // reduce-scatter's traffic; a test and fallback path).
  int64_t n = groupSize(group);
  size_t bytes = size_t(count) * dtypeSize(dtype);
  std::vector<char> whole(bytes * size_t(n));
  if (absl::Status s =
          allReduce(group, send, whole.data(), count * n, dtype, r);
      !s.ok())
    return s;
  if (bytes)
    std::memcpy(recv, whole.data() + groups[group].spec.members.index * bytes,
                bytes);
  return absl::OkStatus();
}

absl::Status HostGlooCollectives::broadcast(int64_t group, const void *send,
                                            void *recv, int64_t count,
                                            DType dtype, int64_t root) {
  if (absl::Status s = checkGroup(group); !s.ok())
    return s;
  const Group &g = groups[group];
  size_t bytes = size_t(count) * dtypeSize(dtype);
  bool isRoot = g.spec.members.index == root;
  if (movesNothing(bool(g.context), count, send, recv, bytes))
    return absl::OkStatus();
  if (auto why = glooCall(dtype, [&](auto zero) {
        using S = decltype(zero);
        ::gloo::BroadcastOptions options(g.context);
        if (isRoot && send != recv)
          options.setInput(typed<S>(send), size_t(count));
        options.setOutput(typed<S>(recv), size_t(count));
        options.setRoot(int(root));
        options.setTimeout(timeout);
        ::gloo::broadcast(options);
      }))
    return failure(group, "broadcast", *why);
  return absl::OkStatus();
}

absl::Status
HostGlooCollectives::exchange(int64_t group, DType dtype,
                              const std::vector<DeviceTransfer> &sends,
                              const std::vector<DeviceTransfer> &receives) {
  if (absl::Status s = checkGroup(group); !s.ok())
    return s;
  Group &g = groups[group];
  const size_t size = dtypeSize(dtype);
  const int64_t self = g.spec.members.index;
  // A member's block for itself is a copy; the rest are Gloo's sends and
  // receives on a slot of this exchange (both sides count exchanges in
  // the same order).
  for (const DeviceTransfer &r : receives) {
    if (r.peer != self)
      continue;
    auto match = std::find_if(sends.begin(), sends.end(),
                              [&](const auto &s) { return s.peer == self; });
    if (match == sends.end() || match->count != r.count)
      return absl::InvalidArgumentError(absl::StrCat(
          "an exchange of ranks ", absl::StrJoin(g.spec.members.ranks, ", "),
          " receives ", r.count, " elements from its own member but sends ",
          match == sends.end() ? int64_t(0) : match->count));
    if (r.count && r.data != match->data)
      std::memcpy(r.data, match->data, size_t(r.count) * size);
  }
  if (!g.context)
    return absl::OkStatus();
  const uint64_t slot = ::gloo::Slot::build(kExchangeSlotPrefix, g.exchanges++);
  try {
    std::vector<std::unique_ptr<::gloo::transport::UnboundBuffer>> out, in;
    for (const DeviceTransfer &s : sends) {
      if (s.peer == self || s.count == 0)
        continue;
      out.push_back(
          g.context->createUnboundBuffer(s.data, size_t(s.count) * size));
      out.back()->send(int(s.peer), slot);
    }
    for (const DeviceTransfer &r : receives) {
      if (r.peer == self || r.count == 0)
        continue;
      in.push_back(
          g.context->createUnboundBuffer(r.data, size_t(r.count) * size));
      in.back()->recv(int(r.peer), slot);
    }
    for (auto &b : out)
      if (!b->waitSend(timeout))
        throw std::runtime_error("a send was aborted");
    for (auto &b : in)
      if (!b->waitRecv(timeout))
        throw std::runtime_error("a receive was aborted");
  } catch (const std::exception &e) {
    return failure(group, "send/receive", e.what());
  }
  return absl::OkStatus();
}

} // namespace merak::runtime
