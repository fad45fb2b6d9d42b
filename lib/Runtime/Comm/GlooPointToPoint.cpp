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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
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

/// One direction of the device link's protocol on the CPU backend's
/// tensors: the queue is a `SerialWorker`, the library's sends and
/// receives are Gloo's under one tag (matched in order, as NCCL's are), and
/// each holds the queue until it completes. The CPU backend computes
/// synchronously, so waits for and joins with the compute queue are no-ops.
class GlooChannel final : public PeerChannel {
public:
  GlooChannel(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, int64_t peer)
      : pg(std::move(pg)), peer(int(peer)) {
    c10::InferenceMode normal(false);
    header = at::zeros({4}, at::kLong);
  }
  // A transfer still waiting ends at once; the worker (the last member)
  // then skips what is left.
  ~GlooChannel() override { abort(); }

  absl::Status enqueueWaitForCompute() override { return absl::OkStatus(); }
  absl::Status enqueueCopy(const DeviceBuffer &from,
                           const DeviceBuffer &to) override {
    return queue([from, to] { tensorOf(to).copy_(tensorOf(from)); });
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
  void abort() override {
    std::lock_guard<std::mutex> lock(mutex);
    aborted = true;
    if (current)
      current->abort();
  }

private:
  static at::Tensor tensorOf(const DeviceBuffer &b) {
    c10::InferenceMode normal(false);
    return at::from_blob(b.data, b.type.shape, b.stridesOrDense(),
                         at::TensorOptions().dtype(toAten(b.type.dtype)));
  }
  static at::Tensor bytesAt(void *data, int64_t bytes) {
    c10::InferenceMode normal(false);
    return at::from_blob(data, {bytes}, at::kByte);
  }

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

  /// Queues `task` on the worker; after a failure or an abort the
  /// queue's tasks are skipped, each still counted done.
  absl::Status queue(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++queued;
    }
    (void)worker.post([this, task = std::move(task)] {
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

  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
  int peer;
  at::Tensor header;
  std::mutex mutex;
  int64_t queued = 0, done = 0;
  absl::Status failure;
  c10::intrusive_ptr<c10d::Work> current;
  bool aborted = false;
  /// The channel's queue (last: it goes first, with what it runs).
  SerialWorker worker;
};

/// The CPU backend's tensors as the device link reads and makes them.
class CpuPeerDevice final : public PeerDevice {
public:
  absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) override {
    const at::Tensor &t = unwrap(tensor);
    std::optional<DType> dtype = fromAten(t.scalar_type());
    if (!dtype)
      return absl::InvalidArgumentError(
          absl::StrCat("a transfer of a ",
                       std::string(c10::toString(t.scalar_type())), " tensor"));
    TensorType type{*dtype,
                    std::vector<int64_t>(t.sizes().begin(), t.sizes().end())};
    return DeviceBuffer{
        t.data_ptr(), type,
        std::vector<int64_t>(t.strides().begin(), t.strides().end()),
        std::make_shared<at::Tensor>(t)};
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

std::unique_ptr<PeerLink>
makePeerLink(Job &job, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg) {
  return std::make_unique<GlooPeerLink>(job, std::move(pg));
}

} // namespace merak::runtime::gloo
