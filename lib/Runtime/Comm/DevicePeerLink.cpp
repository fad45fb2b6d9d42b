//===- DevicePeerLink.cpp - pipeline transfers on a device library --------===//
//
// See DevicePeerLink.h. One mutex guards the link's state and every call
// into a channel; a progress thread turns headers into posted receives and
// notices finished transfers, and waiters sleep on one condition variable
// that it signals.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/DevicePeerLink.h"
#include "merak/Runtime/Comm/Distributed.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace merak::runtime {

PeerChannel::~PeerChannel() = default;
PeerDevice::~PeerDevice() = default;

int64_t packedLayout(const std::vector<TensorType> &types,
                     std::vector<int64_t> &offsets) {
  constexpr int64_t kAlign = 256;
  offsets.clear();
  int64_t total = 0;
  for (const TensorType &t : types) {
    total = (total + kAlign - 1) / kAlign * kAlign;
    offsets.push_back(total);
    total += t.byteSize();
  }
  return total;
}

std::vector<std::pair<int64_t, int64_t>>
pipelineDirections(const PipelinePlan &plan, int64_t meshSize) {
  std::set<std::pair<int64_t, int64_t>> pipe; // between pipeline ranks
  auto both = [&](int64_t a, int64_t b) {
    if (a != b) {
      pipe.insert({a, b});
      pipe.insert({b, a});
    }
  };
  for (int64_t s = 0; s + 1 < plan.stages; ++s)
    both(plan.rankOf(s), plan.rankOf(s + 1));
  const int64_t owner = plan.rankOf(plan.lossStage);
  for (int64_t r = 0; r < plan.pp; ++r)
    if (r != owner)
      pipe.insert({owner, r});
  for (const auto &[name, stages] : plan.tied)
    for (int64_t a : stages)
      for (int64_t b : stages)
        both(plan.rankOf(a), plan.rankOf(b));
  std::set<std::pair<int64_t, int64_t>> global;
  for (int64_t m = 0; m < meshSize; ++m)
    for (const auto &[a, b] : pipe)
      global.insert({a * meshSize + m, b * meshSize + m});
  if (plan.dynamic)
    for (int64_t p = 0; p < plan.pp; ++p)
      for (int64_t m = 1; m < meshSize; ++m)
        global.insert({p * meshSize, p * meshSize + m});
  return {global.begin(), global.end()};
}

namespace {

using Clock = std::chrono::steady_clock;

#define MERAK_TRY(status)                                                      \
  do {                                                                         \
    if (absl::Status s_ = (status); !s_.ok())                                  \
      return s_;                                                               \
  } while (false)

std::string seconds(std::chrono::milliseconds t) { return secondsText(t); }

/// A transfer that arrived (or is arriving) on an incoming channel.
struct Arrival {
  int64_t tag = 0;
  int64_t bytes = 0;
  TensorHandle buffer;
  int64_t marker = 0;
  bool done = false;
  bool taken = false;
};

/// An outgoing transfer in flight.
struct Outgoing {
  PeerChannel *channel = nullptr;
  int64_t marker = 0;
  bool done = false;
  std::vector<DeviceBuffer> keep;
  TensorHandle packed;
};

class DevicePeerLink;

class SendPending final : public PendingCollective {
public:
  SendPending(DevicePeerLink &link, int64_t peer, int64_t tag,
              std::shared_ptr<Outgoing> out)
      : link(link), peer(peer), tag(tag), out(std::move(out)) {}
  ~SendPending() override;
  bool ready() override;
  absl::Status wait() override;
  absl::StatusOr<std::vector<TensorHandle>> finish() override;

private:
  DevicePeerLink &link;
  int64_t peer, tag;
  std::shared_ptr<Outgoing> out;
  std::optional<absl::Status> status;
};

class RecvPending final : public PendingCollective {
public:
  RecvPending(DevicePeerLink &link, int64_t peer, int64_t tag, int64_t index,
              std::vector<TensorType> types)
      : link(link), peer(peer), tag(tag), index(index),
        types(std::move(types)) {}
  ~RecvPending() override;
  bool ready() override;
  absl::Status wait() override;
  absl::StatusOr<std::vector<TensorHandle>> finish() override;

private:
  DevicePeerLink &link;
  int64_t peer, tag, index;
  std::vector<TensorType> types;
  std::optional<absl::Status> status;
  bool finished = false;
};

class DevicePeerLink final : public PeerLink {
public:
  DevicePeerLink(std::unique_ptr<PeerDevice> device,
                 std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing,
                 std::map<int64_t, std::unique_ptr<PeerChannel>> incoming,
                 DevicePeerLinkOptions options)
      : device(std::move(device)), outgoing(std::move(outgoing)),
        incoming(std::move(incoming)), options(std::move(options)) {
    for (auto &[peer, channel] : this->incoming) {
      Incoming &in = inbound[peer];
      in.channel = channel.get();
      if (absl::Status s = postHeader(peer, in); !s.ok())
        fail(described(s, std::vector<int64_t>{peer}));
    }
    thread = std::thread([this] {
      if (this->options.threadSetup)
        this->options.threadSetup();
      progress();
    });
  }

  ~DevicePeerLink() override {
    close();
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      changed.notify_all();
    }
    thread.join();
    // The channels finish their queued work as they go; then what the
    // arrivals and sends hold is released.
    outgoing.clear();
    incoming.clear();
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  send(int64_t peer, int64_t tag, const std::vector<DeviceTensor *> &tensors,
       const std::vector<TensorType> &types) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure)
      return *failure;
    auto it = outgoing.find(peer);
    if (it == outgoing.end())
      return absl::InternalError(absl::StrCat(
          "rank ", options.rank, " has no ", options.library,
          " channel to rank ", peer, " (a transfer the plan does not have)"));
    PeerChannel &channel = *it->second;
    auto out = std::make_shared<Outgoing>();
    out->channel = &channel;
    absl::Status s = queueSend(channel, tag, tensors, types, *out);
    if (s.ok()) {
      absl::StatusOr<int64_t> marker = channel.mark();
      s = marker.status();
      if (marker.ok())
        out->marker = *marker;
    }
    if (!s.ok()) {
      // A transfer queued in part leaves the channel unusable.
      absl::Status f = described(s, peer, tag, "send to");
      fail(f);
      return f;
    }
    sends.push_back(out);
    changed.notify_all();
    return std::unique_ptr<PendingCollective>(
        std::make_unique<SendPending>(*this, peer, tag, std::move(out)));
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  recv(int64_t peer, int64_t tag,
       const std::vector<TensorType> &types) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (failure)
      return *failure;
    if (!inbound.count(peer))
      return absl::InternalError(absl::StrCat(
          "rank ", options.rank, " has no ", options.library,
          " channel from rank ", peer, " (a transfer the plan does not have)"));
    int64_t index = posted[{peer, tag}]++;
    return std::unique_ptr<PendingCollective>(
        std::make_unique<RecvPending>(*this, peer, tag, index, types));
  }

  int64_t finished() override {
    std::lock_guard<std::mutex> lock(mutex);
    return completed;
  }

  void waitForProgress(int64_t since,
                       std::chrono::microseconds limit) override {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait_for(lock, limit,
                     [&] { return completed != since || failure; });
  }

  // For the pending transfers.
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<absl::Status> failure;
  int64_t completed = 0;
  const DevicePeerLinkOptions &settings() const { return options; }

  /// The arrival `index` of (peer, tag), if it came.
  std::shared_ptr<Arrival> arrival(int64_t peer, int64_t tag, int64_t index) {
    auto it = arrivals.find({peer, tag});
    if (it == arrivals.end())
      return nullptr;
    ArrivalQueue &q = it->second;
    if (index < q.first || index >= q.first + int64_t(q.items.size()))
      return nullptr;
    return q.items[size_t(index - q.first)];
  }

  /// Drops the arrivals of (peer, tag) that were taken, from the front;
  /// one whose bytes are still arriving stays (its memory must not go back
  /// to the pool while the library writes it) until a later call.
  void forget(int64_t peer, int64_t tag) {
    auto it = arrivals.find({peer, tag});
    if (it == arrivals.end())
      return;
    ArrivalQueue &q = it->second;
    while (!q.items.empty() && q.items.front()->taken &&
           (q.items.front()->done || failure)) {
      q.items.pop_front();
      ++q.first;
    }
  }

  PeerChannel &incomingChannel(int64_t peer) { return *inbound[peer].channel; }
  PeerDevice &peerDevice() { return *device; }

  /// A failure with `ranks`: `detail` and what the run knows of them.
  absl::Status described(const absl::Status &detail,
                         const std::vector<int64_t> &ranks) {
    std::string why;
    if (options.diagnose)
      why = options.diagnose(ranks);
    return absl::UnavailableError(absl::StrCat(
        "pipeline transfers between ranks ",
        absl::StrJoin(std::vector<int64_t>{options.rank, ranks.front()},
                      " and "),
        " failed", why.empty() ? "" : absl::StrCat(": ", why), " (",
        detail.message(), ")"));
  }
  absl::Status described(const absl::Status &detail, int64_t peer, int64_t tag,
                         const char *what) {
    return described(
        absl::Status(detail.code(),
                     absl::StrCat(options.library, " ", what, " rank ", peer,
                                  ", tag ", tag, ": ", detail.message())),
        std::vector<int64_t>{peer});
  }

  /// Records the first failure and aborts every channel; called with the
  /// mutex held.
  void fail(const absl::Status &why) {
    if (failure)
      return;
    failure = why;
    for (auto &[peer, channel] : outgoing)
      channel->abort();
    for (auto &[peer, channel] : incoming)
      channel->abort();
    changed.notify_all();
  }

private:
  struct Incoming {
    PeerChannel *channel = nullptr;
    /// The marker after the posted header receive (none once closed).
    std::optional<int64_t> header;
    int64_t sequence = 0;
    bool closed = false;
    /// Payloads posted, not yet seen done.
    std::deque<std::shared_ptr<Arrival>> inFlight;
  };
  struct ArrivalQueue {
    int64_t first = 0; // the index of items.front()
    std::deque<std::shared_ptr<Arrival>> items;
  };

  absl::Status queueSend(PeerChannel &channel, int64_t tag,
                         const std::vector<DeviceTensor *> &tensors,
                         const std::vector<TensorType> &types, Outgoing &out) {
    if (tensors.size() != types.size())
      return absl::InternalError(absl::StrCat(tensors.size(), " tensors and ",
                                              types.size(), " types"));
    std::vector<DeviceBuffer> from;
    for (DeviceTensor *t : tensors) {
      absl::StatusOr<DeviceBuffer> b = device->describe(*t);
      if (!b.ok())
        return b.status();
      from.push_back(*std::move(b));
    }
    for (size_t k = 0; k < types.size(); ++k)
      if (from[k].type.shape != types[k].shape ||
          from[k].type.dtype != types[k].dtype)
        return absl::InternalError(
            absl::StrCat("tensor ", k, " of the transfer is not of its type"));
    out.keep = from;
    std::vector<int64_t> offsets;
    const int64_t total = packedLayout(types, offsets);
    MERAK_TRY(channel.enqueueWaitForCompute());
    const void *payload = nullptr;
    if (from.size() == 1 && from[0].isDense()) {
      payload = from[0].data;
    } else if (total > 0) {
      absl::StatusOr<TensorHandle> packed = channel.allocate(total);
      if (!packed.ok())
        return packed.status();
      out.packed = *packed;
      absl::StatusOr<DeviceBuffer> whole = device->describe(**packed);
      if (!whole.ok())
        return whole.status();
      for (size_t k = 0; k < from.size(); ++k) {
        if (types[k].byteSize() == 0)
          continue;
        DeviceBuffer to{static_cast<char *>(whole->data) + offsets[k],
                        types[k],
                        {},
                        whole->owner};
        MERAK_TRY(channel.enqueueCopy(from[k], to));
      }
      payload = whole->data;
    }
    PeerHeader header;
    header.magic = PeerHeader::kMagic;
    header.tag = tag;
    header.bytes = total;
    header.sequence = sentHeaders[&channel]++;
    MERAK_TRY(channel.enqueueSendHeader(header));
    if (total > 0)
      MERAK_TRY(channel.enqueueSend(payload, total));
    return absl::OkStatus();
  }

  /// Posts the next header receive of `peer`'s channel.
  absl::Status postHeader(int64_t peer, Incoming &in) {
    MERAK_TRY(in.channel->enqueueRecvHeader());
    absl::StatusOr<int64_t> marker = in.channel->mark();
    if (!marker.ok())
      return marker.status();
    in.header = *marker;
    return absl::OkStatus();
  }

  /// A header that arrived from `peer`: posts the receive of its bytes and
  /// the next header's.
  absl::Status take(int64_t peer, Incoming &in) {
    PeerHeader h = in.channel->receivedHeader();
    in.header.reset();
    if (h.magic != PeerHeader::kMagic || h.sequence != in.sequence ||
        h.bytes < 0 || (h.tag < 0 && h.tag != PeerHeader::kClose))
      return absl::DataLossError(
          absl::StrCat("header ", in.sequence, " from rank ", peer,
                       " is not a transfer's (magic ", h.magic, ", sequence ",
                       h.sequence, ", tag ", h.tag, ", ", h.bytes, " bytes)"));
    ++in.sequence;
    if (h.tag == PeerHeader::kClose) {
      in.closed = true;
      changed.notify_all();
      return absl::OkStatus();
    }
    auto a = std::make_shared<Arrival>();
    a->tag = h.tag;
    a->bytes = h.bytes;
    absl::StatusOr<TensorHandle> buffer =
        in.channel->allocate(std::max<int64_t>(h.bytes, 1));
    if (!buffer.ok())
      return buffer.status();
    a->buffer = *buffer;
    if (h.bytes > 0) {
      absl::StatusOr<DeviceBuffer> b = device->describe(**buffer);
      if (!b.ok())
        return b.status();
      MERAK_TRY(in.channel->enqueueRecv(b->data, h.bytes));
    }
    absl::StatusOr<int64_t> marker = in.channel->mark();
    if (!marker.ok())
      return marker.status();
    a->marker = *marker;
    in.inFlight.push_back(a);
    arrivals[{peer, h.tag}].items.push_back(a);
    return postHeader(peer, in);
  }

  /// One pass over every channel; returns whether anything moved.
  bool poll() {
    bool moved = false;
    for (auto &[peer, in] : inbound) {
      while (!failure) {
        absl::Status s = in.channel->asyncError();
        if (s.ok() && !in.inFlight.empty()) {
          absl::StatusOr<bool> r =
              in.channel->reached(in.inFlight.front()->marker);
          if (r.ok() && *r) {
            in.inFlight.front()->done = true;
            if (in.inFlight.front()->taken) // its receive was abandoned
              forget(peer, in.inFlight.front()->tag);
            in.inFlight.pop_front();
            ++completed;
            moved = true;
            continue;
          }
          s = r.status();
        }
        if (s.ok() && in.header) {
          absl::StatusOr<bool> r = in.channel->reached(*in.header);
          if (r.ok() && *r) {
            s = take(peer, in);
            if (s.ok()) {
              moved = true;
              continue;
            }
          } else {
            s = r.status();
          }
        }
        if (!s.ok())
          fail(described(s, std::vector<int64_t>{peer}));
        break;
      }
    }
    for (auto it = sends.begin(); it != sends.end() && !failure;) {
      Outgoing &out = **it;
      absl::StatusOr<bool> r = out.channel->reached(out.marker);
      absl::Status s = r.ok() ? out.channel->asyncError() : r.status();
      if (!s.ok()) {
        int64_t peer = peerOf(out.channel);
        fail(described(s, std::vector<int64_t>{peer}));
        break;
      }
      if (!*r) {
        ++it;
        continue;
      }
      out.done = true;
      ++completed;
      moved = true;
      it = sends.erase(it);
    }
    if (moved)
      changed.notify_all();
    return moved;
  }

  int64_t peerOf(const PeerChannel *channel) const {
    for (const auto &[peer, c] : outgoing)
      if (c.get() == channel)
        return peer;
    for (const auto &[peer, c] : incoming)
      if (c.get() == channel)
        return peer;
    return -1;
  }

  /// Polls until the link goes away. A header is seen at most
  /// `kLongestPause` after it arrives, whatever the link was doing: on a
  /// GPU pipeline that is what a transfer waits beyond its copy, so the
  /// pause stays well under a stage's compute (a query of an event costs
  /// about a microsecond).
  void progress() {
    constexpr std::chrono::microseconds kLongestPause(100);
    std::unique_lock<std::mutex> lock(mutex);
    std::chrono::microseconds pause(5);
    while (!stopping) {
      if (!failure && poll()) {
        pause = std::chrono::microseconds(5);
        continue;
      }
      changed.wait_for(lock, pause);
      pause = std::min(pause * 2, kLongestPause);
    }
  }

  /// Sends the closing headers and waits for the peers', within the
  /// time-out; aborts the channels where that fails.
  void close() {
    std::unique_lock<std::mutex> lock(mutex);
    if (failure)
      return;
    std::vector<std::pair<int64_t, int64_t>> closing; // peer, marker
    absl::Status s;
    for (auto &[peer, channel] : outgoing) {
      PeerHeader header;
      header.magic = PeerHeader::kMagic;
      header.tag = PeerHeader::kClose;
      header.sequence = sentHeaders[channel.get()]++;
      s = channel->enqueueSendHeader(header);
      absl::StatusOr<int64_t> marker =
          s.ok() ? channel->mark() : absl::StatusOr<int64_t>(s);
      if (!marker.ok()) {
        fail(described(marker.status(), std::vector<int64_t>{peer}));
        return;
      }
      closing.push_back({peer, *marker});
    }
    const Clock::time_point deadline = Clock::now() + options.timeout;
    auto closed = [&] {
      if (failure)
        return true;
      for (const auto &[peer, in] : inbound)
        if (!in.closed)
          return false;
      for (const auto &[peer, marker] : closing) {
        absl::StatusOr<bool> r = outgoing[peer]->reached(marker);
        if (!r.ok() || !*r)
          return false;
      }
      return true;
    };
    // The progress thread takes the peers' headers meanwhile.
    while (!closed()) {
      if (Clock::now() > deadline) {
        std::vector<int64_t> open;
        for (const auto &[peer, in] : inbound)
          if (!in.closed)
            open.push_back(peer);
        fail(absl::DeadlineExceededError(
            absl::StrCat("ranks ", absl::StrJoin(open, ", "),
                         " did not close their transfers within ",
                         seconds(options.timeout))));
        return;
      }
      changed.wait_for(lock, std::chrono::milliseconds(1));
    }
  }

  std::unique_ptr<PeerDevice> device;
  std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing, incoming;
  DevicePeerLinkOptions options;
  std::map<int64_t, Incoming> inbound;
  std::map<const PeerChannel *, int64_t> sentHeaders;
  std::map<std::pair<int64_t, int64_t>, int64_t> posted;
  std::map<std::pair<int64_t, int64_t>, ArrivalQueue> arrivals;
  std::deque<std::shared_ptr<Outgoing>> sends;
  bool stopping = false;
  std::thread thread;
};

/// Waits on `link` until `done()` or a failure, at most the time-out;
/// called with `lock` held.
template <typename Done>
absl::Status waitUntil(DevicePeerLink &link, std::unique_lock<std::mutex> &lock,
                       Done done, const std::string &what) {
  const std::chrono::milliseconds timeout = link.settings().timeout;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (!done()) {
    if (link.failure)
      return *link.failure;
    if (Clock::now() > deadline)
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not finish within ", seconds(timeout)));
    link.changed.wait_for(lock, std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

SendPending::~SendPending() {
  // Abandoned before it finished: the compute queue must not reuse what it
  // reads before the transfer is done with it.
  std::lock_guard<std::mutex> lock(link.mutex);
  if (!out->done && !link.failure)
    (void)out->channel->joinCompute(out->marker);
}

bool SendPending::ready() {
  std::lock_guard<std::mutex> lock(link.mutex);
  return status || out->done || link.failure;
}

absl::Status SendPending::wait() {
  if (status)
    return *status;
  std::unique_lock<std::mutex> lock(link.mutex);
  absl::Status s = waitUntil(
      link, lock, [&] { return out->done; },
      absl::StrCat(link.settings().library, " send to rank ", peer, ", tag ",
                   tag));
  if (!s.ok() && !link.failure)
    link.fail(link.described(s, std::vector<int64_t>{peer}));
  status = s.ok() ? s : *link.failure;
  if (s.ok()) {
    out->keep.clear();
    out->packed.reset();
  }
  return *status;
}

absl::StatusOr<std::vector<TensorHandle>> SendPending::finish() {
  MERAK_TRY(wait());
  return std::vector<TensorHandle>{};
}

RecvPending::~RecvPending() {
  if (finished)
    return;
  // Never finished: its arrival, when it comes, is dropped.
  std::lock_guard<std::mutex> lock(link.mutex);
  if (std::shared_ptr<Arrival> a = link.arrival(peer, tag, index)) {
    a->taken = true;
    link.forget(peer, tag);
  }
}

bool RecvPending::ready() {
  std::lock_guard<std::mutex> lock(link.mutex);
  if (status || link.failure)
    return true;
  std::shared_ptr<Arrival> a = link.arrival(peer, tag, index);
  return a && a->done;
}

absl::Status RecvPending::wait() {
  if (status)
    return *status;
  std::unique_lock<std::mutex> lock(link.mutex);
  absl::Status s = waitUntil(
      link, lock,
      [&] {
        std::shared_ptr<Arrival> a = link.arrival(peer, tag, index);
        return a && a->done;
      },
      absl::StrCat(link.settings().library, " receive from rank ", peer,
                   ", tag ", tag));
  if (!s.ok() && !link.failure)
    link.fail(link.described(s, std::vector<int64_t>{peer}));
  status = s.ok() ? s : *link.failure;
  return *status;
}

absl::StatusOr<std::vector<TensorHandle>> RecvPending::finish() {
  MERAK_TRY(wait());
  std::lock_guard<std::mutex> lock(link.mutex);
  finished = true;
  std::shared_ptr<Arrival> a = link.arrival(peer, tag, index);
  a->taken = true;
  link.forget(peer, tag);
  std::vector<int64_t> offsets;
  const int64_t expected = packedLayout(types, offsets);
  if (a->bytes != expected)
    return absl::DataLossError(absl::StrCat(
        "rank ", peer, " sent ", a->bytes, " bytes under tag ", tag,
        " to rank ", link.settings().rank, ", which expects ", expected, " (",
        types.size(), " tensor", types.size() == 1 ? "" : "s", ")"));
  MERAK_TRY(link.incomingChannel(peer).joinCompute(a->marker));
  std::vector<TensorHandle> out;
  for (size_t k = 0; k < types.size(); ++k) {
    absl::StatusOr<TensorHandle> v =
        link.peerDevice().view(a->buffer, offsets[k], types[k]);
    if (!v.ok())
      return v.status();
    out.push_back(*std::move(v));
  }
  return out;
}

} // namespace

std::unique_ptr<PeerLink>
makeDevicePeerLink(std::unique_ptr<PeerDevice> device,
                   std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing,
                   std::map<int64_t, std::unique_ptr<PeerChannel>> incoming,
                   DevicePeerLinkOptions options) {
  return std::make_unique<DevicePeerLink>(
      std::move(device), std::move(outgoing), std::move(incoming),
      std::move(options));
}

} // namespace merak::runtime
