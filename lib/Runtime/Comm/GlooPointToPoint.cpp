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

} // namespace

std::unique_ptr<PeerLink>
makePeerLink(Job &job, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg) {
  return std::make_unique<GlooPeerLink>(job, std::move(pg));
}

} // namespace merak::runtime::gloo
