//===- GlooPointToPoint.cpp - pipeline transfers on Gloo ------------------===//
//
// Sends and receives between pipeline ranks over one Gloo process group of
// every rank, each transfer's tensors in one buffer, completed on a thread
// of its own so the executor can poll it.
//
//===----------------------------------------------------------------------===//

#include "../AtenDTypes.h"
#include "../CPU/CpuTensor.h"
#include "GlooInternal.h"
#include "merak/Runtime/Comm/DevicePeerLink.h"
#include "merak/Runtime/Comm/RingChannel.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace merak::runtime::gloo {

namespace {

/// Point-to-point transfers over one process group of every rank. A
/// transfer's tensors travel as one byte buffer, each at an 8-byte aligned
/// offset. c10d's send and receive works only complete inside `wait`, so a
/// thread per transfer waits for it; `ready` asks that thread.
class GlooPeerLink final : public PeerLink {
public:
  GlooPeerLink(Job &job, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg)
      : job(job), pg(std::move(pg)) {}

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  send(int64_t peer, int64_t tag, const std::vector<DeviceTensor *> &tensors,
       const std::vector<TensorType> &types) override {
    auto pending = std::make_unique<Transfer>(job, progress, job.rank(), peer);
    try {
      int64_t total = layout(types, pending->offsets);
      {
        // Gloo reads it on its own threads: a normal tensor.
        c10::InferenceMode normal(false);
        pending->buffer = at::empty({total}, at::kByte);
      }
      {
        c10::InferenceMode guard;
        for (size_t k = 0; k < tensors.size(); ++k) {
          at::Tensor t = unwrap(*tensors[k]).contiguous();
          int64_t bytes = t.numel() * int64_t(t.element_size());
          if (bytes)
            std::memcpy(static_cast<uint8_t *>(pending->buffer.data_ptr()) +
                            pending->offsets[k],
                        t.data_ptr(), size_t(bytes));
        }
      }
      std::vector<at::Tensor> list{pending->buffer};
      pending->start(pg->send(list, int(peer), int(tag)));
    } catch (const std::exception &e) {
      return pending->failed(e);
    }
    return std::unique_ptr<PendingCollective>(std::move(pending));
  }

  absl::StatusOr<std::unique_ptr<PendingCollective>>
  recv(int64_t peer, int64_t tag,
       const std::vector<TensorType> &types) override {
    auto pending = std::make_unique<Transfer>(job, progress, peer, job.rank());
    try {
      int64_t total = layout(types, pending->offsets);
      {
        c10::InferenceMode normal(false);
        pending->buffer = at::empty({total}, at::kByte);
      }
      pending->types = types;
      std::vector<at::Tensor> list{pending->buffer};
      pending->start(pg->recv(list, int(peer), int(tag)));
    } catch (const std::exception &e) {
      return pending->failed(e);
    }
    return std::unique_ptr<PendingCollective>(std::move(pending));
  }

  int64_t finished() override {
    std::lock_guard<std::mutex> guard(progress->mutex);
    return progress->completed;
  }

  void waitForProgress(int64_t since,
                       std::chrono::microseconds limit) override {
    std::unique_lock<std::mutex> lock(progress->mutex);
    progress->changed.wait_for(lock, limit,
                               [&] { return progress->completed != since; });
  }

private:
  /// Counts finished transfers, so a rank with nothing ready can sleep
  /// until one finishes.
  struct Progress {
    std::mutex mutex;
    std::condition_variable changed;
    int64_t completed = 0;
  };

  /// A send or a receive in flight; a receive cuts its buffer into the
  /// expected tensors at the end.
  class Transfer final : public PendingCollective {
  public:
    Transfer(Job &job, std::shared_ptr<Progress> progress, int64_t from,
             int64_t to)
        : job(job), progress(std::move(progress)), from(from), to(to) {}
    ~Transfer() override {
      // The waiting thread must not outlive the work it waits for.
      if (waiter.valid())
        waiter.wait();
    }

    void start(c10::intrusive_ptr<c10d::Work> w) {
      work = std::move(w);
      waiter =
          std::async(std::launch::async, [work = work, progress = progress] {
            auto done = [&] {
              std::lock_guard<std::mutex> guard(progress->mutex);
              ++progress->completed;
              progress->changed.notify_all();
            };
            try {
              work->wait();
            } catch (...) {
              done();
              throw;
            }
            done();
          });
    }

    bool ready() override {
      return transfer || !waiter.valid() ||
             waiter.wait_for(std::chrono::seconds(0)) ==
                 std::future_status::ready;
    }
    absl::Status wait() override {
      if (transfer)
        return *transfer;
      try {
        waiter.get();
        transfer = absl::OkStatus();
      } catch (const std::exception &e) {
        transfer = failed(e);
      }
      return *transfer;
    }
    absl::StatusOr<std::vector<TensorHandle>> finish() override {
      if (absl::Status s = wait(); !s.ok())
        return s;
      c10::InferenceMode guard;
      std::vector<TensorHandle> result;
      try {
        for (size_t k = 0; k < types.size(); ++k) {
          const TensorType &t = types[k];
          at::Tensor part =
              at::empty(t.shape, at::TensorOptions().dtype(toAten(t.dtype)));
          int64_t bytes = part.numel() * int64_t(part.element_size());
          if (bytes)
            std::memcpy(part.data_ptr(),
                        static_cast<const uint8_t *>(buffer.data_ptr()) +
                            offsets[k],
                        size_t(bytes));
          result.push_back(wrap(part));
        }
      } catch (const std::exception &e) {
        return absl::InternalError(describe(e));
      }
      buffer = at::Tensor();
      return result;
    }
    absl::Status failed(const std::exception &e) {
      std::string why = job.diagnose({from, to});
      return absl::UnavailableError(absl::StrCat(
          "transfer from rank ", from, " to rank ", to, " failed",
          why.empty() ? "" : absl::StrCat(": ", why), " (", describe(e), ")"));
    }

    at::Tensor buffer;
    std::vector<int64_t> offsets;
    std::vector<TensorType> types; // a receive's

  private:
    Job &job;
    std::shared_ptr<Progress> progress;
    int64_t from, to;
    c10::intrusive_ptr<c10d::Work> work;
    std::future<void> waiter;
    std::optional<absl::Status> transfer;
  };

  static int64_t layout(const std::vector<TensorType> &types,
                        std::vector<int64_t> &offsets) {
    int64_t total = 0;
    offsets.clear();
    for (const TensorType &t : types) {
      offsets.push_back(total);
      total += (t.byteSize() + 7) / 8 * 8;
    }
    return std::max<int64_t>(total, 8);
  }

  Job &job;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();
};

/// One direction's queue on the CPU backend's tensors, for the device
/// link (DevicePeerLink.h): a `SerialWorker` runs the queued work in order;
/// after a failure or an abort the rest is skipped, each task still
/// counted done. The CPU backend computes synchronously, so waits for and
/// joins with the compute queue are no-ops. Subclasses move the bytes and
/// stop the worker first in their destructors (`stop`).
class HostQueueChannel : public PeerChannel {
public:
  absl::Status enqueueWaitForCompute() override { return absl::OkStatus(); }
  absl::Status enqueueCopy(const DeviceBuffer &from,
                           const DeviceBuffer &to) override {
    return queue([from, to] { cpuTensorOf(to).copy_(cpuTensorOf(from)); });
  }
  absl::StatusOr<TensorHandle> allocate(int64_t bytes) override {
    // Words, not bytes: the buffer is a tensor of the backend's types.
    c10::InferenceMode normal(false);
    return wrap(at::empty({std::max<int64_t>((bytes + 7) / 8, 1)}, at::kLong));
  }
  absl::StatusOr<int64_t> mark() override {
    std::lock_guard<std::mutex> lock(mutex);
    return queued;
  }
  absl::StatusOr<bool> reached(int64_t marker) override {
    std::lock_guard<std::mutex> lock(mutex);
    if (!failure.ok())
      return failure;
    return done >= marker;
  }
  absl::Status joinCompute(int64_t) override { return absl::OkStatus(); }
  absl::Status asyncError() override { return absl::OkStatus(); }

protected:
  static at::Tensor bytesAt(void *data, int64_t bytes) {
    c10::InferenceMode normal(false);
    return at::from_blob(data, {bytes}, at::kByte);
  }

  /// Queues `task` on the worker.
  absl::Status queue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++queued;
    }
    (void)worker->post([this, task = std::move(task)] {
      bool run;
      {
        std::lock_guard<std::mutex> lock(mutex);
        run = failure.ok() && !aborted;
        if (!run && failure.ok())
          failure = absl::AbortedError("the channel was aborted");
      }
      absl::Status s;
      if (run) {
        try {
          task();
        } catch (const std::exception &e) {
          s = absl::UnavailableError(describe(e));
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      if (!s.ok() && failure.ok())
        failure = s;
      ++done;
    });
    return absl::OkStatus();
  }
  /// Waits for the worker to finish what it runs, then ends it.
  void stop() { worker.reset(); }

  std::mutex mutex;
  bool aborted = false; // guarded by `mutex`

private:
  int64_t queued = 0, done = 0;
  absl::Status failure;
  std::unique_ptr<SerialWorker> worker = std::make_unique<SerialWorker>();
};

/// One direction of the device link's protocol on the CPU backend's
/// tensors: the library's sends and receives are Gloo's under one tag
/// (matched in order, as NCCL's are), and each holds the queue until it
/// completes.
class GlooChannel final : public HostQueueChannel {
public:
  GlooChannel(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int64_t peer)
      : pg(std::move(pg)), peer(int(peer)) {
    c10::InferenceMode normal(false);
    header = at::zeros({4}, at::kLong);
  }
  // A transfer still waiting ends at once; the worker then skips what is
  // left.
  ~GlooChannel() override {
    abort();
    stop();
  }

  absl::Status enqueueSendHeader(const PeerHeader &h) override {
    at::Tensor words;
    {
      c10::InferenceMode normal(false);
      words = at::tensor({h.magic, h.tag, h.bytes, h.sequence}, at::kLong);
    }
    return queue([this, words] { transfer(words, /*send=*/true); });
  }
  absl::Status enqueueSend(const void *data, int64_t bytes) override {
    return queue([this, data, bytes] {
      transfer(bytesAt(const_cast<void *>(data), bytes), /*send=*/true);
    });
  }
  absl::Status enqueueRecvHeader() override {
    return queue([this] { transfer(header, /*send=*/false); });
  }
  PeerHeader receivedHeader() override {
    std::lock_guard<std::mutex> lock(mutex);
    const int64_t *w = header.data_ptr<int64_t>();
    return PeerHeader{w[0], w[1], w[2], w[3]};
  }
  absl::Status enqueueRecv(void *data, int64_t bytes) override {
    return queue(
        [this, data, bytes] { transfer(bytesAt(data, bytes), false); });
  }
  void abort() override {
    std::lock_guard<std::mutex> lock(mutex);
    aborted = true;
    if (current)
      current->abort();
  }

private:
  /// Runs one send or receive to completion (the worker's thread).
  void transfer(at::Tensor t, bool send) {
    std::vector<at::Tensor> list{std::move(t)};
    c10::intrusive_ptr<c10d::Work> w =
        send ? pg->send(list, peer, 0) : pg->recv(list, peer, 0);
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (aborted)
        w->abort();
      current = w;
    }
    w->wait();
    std::lock_guard<std::mutex> lock(mutex);
    current.reset();
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  int peer;
  at::Tensor header;
  c10::intrusive_ptr<c10d::Work> current;
};

/// One direction of the protocol `--p2p=shm` runs between GPUs
/// (RingChannel.h), on CPU ranks: the ring is host memory under /dev/shm
/// beside its control block, and the queue's waits poll the counts
/// (`--p2p=shm-channels`, a test of that path without a GPU).
class RingHostChannel final : public RingChannel<HostQueueChannel>,
                              private RingQueue {
public:
  RingHostChannel(std::unique_ptr<SharedRegion> region, bool sending)
      : region(std::move(region)), sending(sending),
        ringProtocol(control(),
                     static_cast<char *>(this->region->data()) +
                         kRingControlBytes,
                     *this) {}
  ~RingHostChannel() override {
    abort();
    stop();
  }

  /// The control block's bytes at the start of a region; the ring follows.
  static constexpr int64_t kRingControlBytes = 4096;

  void abort() override {
    std::lock_guard<std::mutex> lock(mutex);
    aborted = true;
    ringProtocol.unblock(sending);
  }

private:
  RingProtocol &protocol() override { return ringProtocol; }
  RingControl &control() { return *static_cast<RingControl *>(region->data()); }
  bool isAborted() {
    std::lock_guard<std::mutex> lock(mutex);
    return aborted;
  }

  absl::Status enqueueWaitAtLeast(const uint64_t *word,
                                  uint64_t value) override {
    return queue([this, word, value] {
      while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < value) {
        if (isAborted())
          throw std::runtime_error("the channel was aborted");
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    });
  }
  absl::Status enqueueStore(uint64_t *word, uint64_t value) override {
    return queue(
        [word, value] { __atomic_store_n(word, value, __ATOMIC_RELEASE); });
  }
  absl::Status enqueueBytes(void *to, const void *from,
                            int64_t bytes) override {
    return queue([to, from, bytes] { std::memcpy(to, from, size_t(bytes)); });
  }

  std::unique_ptr<SharedRegion> region;
  bool sending;
  RingProtocol ringProtocol;
};

/// The CPU backend's tensors as the device link reads and makes them.
class CpuPeerDevice final : public PeerDevice {
public:
  absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) override {
    return describeCpuTensor(tensor, "a transfer");
  }
  absl::StatusOr<TensorHandle> view(const TensorHandle &buffer,
                                    int64_t byteOffset,
                                    const TensorType &type) override {
    const at::Tensor &whole = unwrap(*buffer);
    at::Tensor bytes =
        whole.view(at::kByte).narrow(0, byteOffset, type.byteSize());
    return wrap(bytes.view(toAten(type.dtype)).view(type.shape));
  }
};

} // namespace

absl::StatusOr<DeviceBuffer> describeCpuTensor(DeviceTensor &tensor,
                                               const char *what) {
  const at::Tensor &t = unwrap(tensor);
  std::optional<DType> dtype = fromAten(t.scalar_type());
  if (!dtype)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of a ",
                     std::string(c10::toString(t.scalar_type())), " tensor"));
  TensorType type{*dtype,
                  std::vector<int64_t>(t.sizes().begin(), t.sizes().end())};
  return DeviceBuffer{
      t.data_ptr(), type,
      std::vector<int64_t>(t.strides().begin(), t.strides().end()),
      std::make_shared<at::Tensor>(t)};
}

at::Tensor cpuTensorOf(const DeviceBuffer &b) {
  c10::InferenceMode normal(false);
  return at::from_blob(b.data, b.type.shape, b.stridesOrDense(),
                       at::TensorOptions().dtype(toAten(b.type.dtype)));
}

std::unique_ptr<PeerLink>
makeChannelLink(Job &job, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg,
                const std::vector<std::pair<int64_t, int64_t>> &directions,
                std::chrono::milliseconds timeout) {
  std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing, incoming;
  for (const auto &[from, to] : directions) {
    if (from == job.rank())
      outgoing[to] = std::make_unique<GlooChannel>(pg, to);
    else if (to == job.rank())
      incoming[from] = std::make_unique<GlooChannel>(pg, from);
  }
  DevicePeerLinkOptions options;
  options.rank = job.rank();
  options.timeout = timeout;
  options.diagnose = [&job](const std::vector<int64_t> &ranks) {
    return job.diagnose(ranks);
  };
  options.library = "Gloo";
  return makeDevicePeerLink(std::make_unique<CpuPeerDevice>(),
                            std::move(outgoing), std::move(incoming),
                            std::move(options));
}

absl::StatusOr<std::unique_ptr<PeerLink>>
makeRingChannelLink(Job &job,
                    const std::vector<std::pair<int64_t, int64_t>> &directions,
                    std::chrono::milliseconds timeout) {
  absl::StatusOr<int64_t> ringBytes = ringBytesSetting(kHostRingBytes);
  if (!ringBytes.ok())
    return ringBytes.status();
  const int64_t me = job.rank();
  const int64_t regionBytes = RingHostChannel::kRingControlBytes + *ringBytes;
  std::map<int64_t, std::unique_ptr<SharedRegion>> in, out;
  RingSetup setup;
  setup.makeIncoming = [&](int64_t from) -> absl::StatusOr<std::string> {
    absl::StatusOr<std::unique_ptr<SharedRegion>> r =
        SharedRegion::create(absl::StrCat(from, "-", me), regionBytes);
    if (!r.ok())
      return r.status();
    static_cast<RingControl *>((*r)->data())->init(uint64_t(*ringBytes));
    in[from] = *std::move(r);
    return absl::StrCat(in[from]->name(), "\n", regionBytes);
  };
  setup.openOutgoing = [&](int64_t to, const std::string &shared) {
    std::vector<std::string> parts = absl::StrSplit(shared, '\n');
    int64_t bytes = 0;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[1], &bytes))
      return absl::DataLossError(absl::StrCat("rank ", to, " shared '", shared,
                                              "' for its transfer ring"));
    absl::StatusOr<std::unique_ptr<SharedRegion>> r =
        SharedRegion::open(parts[0], bytes);
    if (!r.ok())
      return r.status();
    if (std::string bad = static_cast<RingControl *>((*r)->data())->check();
        !bad.empty())
      return absl::DataLossError(
          absl::StrCat(parts[0], " (rank ", to, "'s transfer ring): ", bad));
    out[to] = *std::move(r);
    return absl::OkStatus();
  };
  setup.unlink = [&](int64_t from) { in[from]->unlink(); };
  static std::atomic<int64_t> generations{0};
  if (absl::Status s = setUpRings(
          job, directions, absl::StrCat("shm-ring/", generations++), setup);
      !s.ok())
    return s;
  std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing, incoming;
  for (auto &[peer, r] : in)
    incoming[peer] = std::make_unique<RingHostChannel>(std::move(r), false);
  for (auto &[peer, r] : out)
    outgoing[peer] = std::make_unique<RingHostChannel>(std::move(r), true);
  DevicePeerLinkOptions options;
  options.rank = me;
  options.timeout = timeout;
  options.diagnose = [&job](const std::vector<int64_t> &ranks) {
    return job.diagnose(ranks);
  };
  options.library = "the shared-memory ring";
  return makeDevicePeerLink(std::make_unique<CpuPeerDevice>(),
                            std::move(outgoing), std::move(incoming),
                            std::move(options));
}

std::unique_ptr<PeerLink>
makePeerLink(Job &job, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg) {
  return std::make_unique<GlooPeerLink>(job, std::move(pg));
}

} // namespace merak::runtime::gloo
