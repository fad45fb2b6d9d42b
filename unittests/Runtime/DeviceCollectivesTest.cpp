//===- DeviceCollectivesTest.cpp - device collectives on a stubbed library ===//
//
// The device communicator (DeviceCollectives.h: what runs the mesh
// collectives on NCCL) over a stand-in for a device and its library: host
// memory for device memory, one worker thread per rank for its
// communication queue, and collectives that meet across the in-process
// ranks as NCCL's do (every member calls, each reads the others' buffers).
// Checked: every collective of the Gloo communicator's cases, from dense
// and from strided operands and in place, against ATen's answers; integer
// averages; which copies each collective queues; and the failure paths: a
// member that never comes (the time-out aborts the library and names the
// ranks, and later collectives fail at once) and an error the library
// reports asynchronously.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/DeviceCollectives.h"

#include "CollectiveCases.h"
#include "merak/Runtime/Comm/HostGloo.h"

#include "gtest/gtest.h"

#include <gloo/rendezvous/hash_store.h>

#include <ATen/ATen.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace merak::runtime;
using namespace merak::runtime::testing;

namespace {

/// Host memory standing in for a device tensor.
struct HostBlock final : DeviceTensor {
  std::shared_ptr<std::vector<char>> bytes;
  TensorType type;
  std::vector<int64_t> strides; // empty: dense
  char *data() const { return bytes->data(); }
};

std::shared_ptr<HostBlock> blockOf(const at::Tensor &t, bool transposed) {
  auto b = std::make_shared<HostBlock>();
  b->type = {t.scalar_type() == at::kLong ? DType::I64 : DType::F32,
             Shape(t.sizes().begin(), t.sizes().end())};
  b->bytes = std::make_shared<std::vector<char>>(t.numel() * t.element_size());
  if (!transposed || t.dim() < 2) {
    std::memcpy(b->data(), t.contiguous().data_ptr(), b->bytes->size());
    return b;
  }
  // Stored with the dimensions reversed (column-major for a matrix): the
  // same logical tensor, strides that are not row-major.
  std::vector<int64_t> order;
  for (int64_t d = t.dim() - 1; d >= 0; --d)
    order.push_back(d);
  at::Tensor stored = t.permute(order).contiguous();
  std::memcpy(b->data(), stored.data_ptr(), b->bytes->size());
  std::vector<int64_t> storedStrides(stored.strides().begin(),
                                     stored.strides().end());
  b->strides.assign(t.dim(), 0);
  for (int64_t k = 0; k < t.dim(); ++k)
    b->strides[order[k]] = storedStrides[k];
  return b;
}

/// A result (dense) as an ATen tensor.
at::Tensor tensorOf(const HostBlock &b) {
  EXPECT_TRUE(b.strides.empty());
  at::ScalarType type = b.type.dtype == DType::I64 ? at::kLong : at::kFloat;
  at::Tensor dense = at::empty(b.type.shape, type);
  std::memcpy(dense.data_ptr(), b.data(), dense.numel() * dense.element_size());
  return dense;
}

/// The ranks' shared side of the stand-in library: collectives meet here.
class FakeLibrary {
public:
  /// One member's part of a collective.
  struct Part {
    const void *send = nullptr;
    std::vector<DeviceTransfer> sends;
  };

  /// Blocks until every member of `members` gave its part for the
  /// `sequence`-th collective of that group, calls `compute` with all the
  /// parts (each member writes only its own output, into a temporary),
  /// waits until every member has computed, then `write`s. An error when
  /// `rank` was aborted meanwhile.
  absl::Status
  meet(const std::vector<int64_t> &members, int64_t sequence, int64_t index,
       Part part, const std::function<void(const std::vector<Part> &)> &compute,
       const std::function<void()> &write, int64_t rank) {
    std::unique_lock<std::mutex> lock(mutex);
    Meeting &m = meetings[{members, sequence}];
    m.parts.resize(members.size());
    m.parts[index] = std::move(part);
    // Counts this member into `count` and waits for the others.
    auto together = [&](int64_t &count) {
      ++count;
      changed.notify_all();
      changed.wait(lock, [&] {
        return count == int64_t(members.size()) || aborted.count(rank);
      });
      return aborted.count(rank) ? absl::AbortedError("communicator aborted")
                                 : absl::OkStatus();
    };
    if (absl::Status s = together(m.arrived); !s.ok())
      return s;
    lock.unlock();
    compute(m.parts);
    lock.lock();
    if (absl::Status s = together(m.computed); !s.ok())
      return s;
    write();
    if (++m.left == int64_t(members.size()))
      meetings.erase({members, sequence});
    return absl::OkStatus();
  }

  void abort(int64_t rank) {
    std::lock_guard<std::mutex> lock(mutex);
    aborted.insert(rank);
    changed.notify_all();
  }

private:
  struct Meeting {
    std::vector<Part> parts;
    int64_t arrived = 0, computed = 0, left = 0;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::map<std::pair<std::vector<int64_t>, int64_t>, Meeting> meetings;
  std::set<int64_t> aborted;
};

template <typename F> void forEachIndex(const Shape &shape, F f) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t k = 0; k < n; ++k) {
    f(index);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < shape[d])
        break;
      index[d] = 0;
    }
  }
}

/// Reduces element `k` of every part's `send` (at `offset` elements).
template <typename T>
T reduceAt(const std::vector<FakeLibrary::Part> &parts, int64_t k,
           DeviceReduction r) {
  T acc = static_cast<const T *>(parts[0].send)[k];
  for (size_t j = 1; j < parts.size(); ++j) {
    T v = static_cast<const T *>(parts[j].send)[k];
    switch (r) {
    case DeviceReduction::Sum:
    case DeviceReduction::Average:
      acc += v;
      break;
    case DeviceReduction::Product:
      acc *= v;
      break;
    case DeviceReduction::Max:
      acc = std::max(acc, v);
      break;
    case DeviceReduction::Min:
      acc = std::min(acc, v);
      break;
    }
  }
  if (r == DeviceReduction::Average)
    acc /= T(parts.size());
  return acc;
}

/// One rank's stand-in device and communication queue.
class FakeStream final : public CollectiveStream {
public:
  FakeStream(FakeLibrary &library, int64_t rank,
             std::vector<ProcessGroupSpec> groups)
      : library(library), rank(rank), groups(std::move(groups)),
        worker([this] { work(); }) {}
  ~FakeStream() override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      changed.notify_all();
    }
    worker.join();
  }

  /// What was queued, in order ("wait", "copy", "all_reduce", ...).
  std::vector<std::string> log;
  int64_t joins = 0;
  bool aborted = false;
  /// Reported once by asyncError.
  absl::Status injected;
  /// Stops the queue before its next task (a rank that hangs).
  bool frozen = false;
  /// Where set, the library's calls are Gloo's on this host memory (the
  /// staged `--comm=gloo` of the runtime built alone) instead of the
  /// stand-in's.
  HostGlooCollectives *gloo = nullptr;

  absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) override {
    auto &b = static_cast<HostBlock &>(tensor);
    return DeviceBuffer{b.data(), b.type, b.strides, b.bytes};
  }
  absl::StatusOr<TensorHandle> alias(DeviceTensor &tensor) override {
    return TensorHandle(
        std::make_shared<HostBlock>(static_cast<HostBlock &>(tensor)));
  }
  absl::StatusOr<TensorHandle> allocate(const TensorType &type) override {
    auto b = std::make_shared<HostBlock>();
    b->type = type;
    // Not zeros: an element the collective forgets to write shows.
    b->bytes = std::make_shared<std::vector<char>>(type.byteSize(), char(0x7b));
    return TensorHandle(b);
  }
  absl::Status enqueueWaitForCompute() override {
    log.push_back("wait");
    return absl::OkStatus();
  }
  absl::Status enqueueCopy(const DeviceBuffer &from,
                           const DeviceBuffer &to) override {
    log.push_back("copy");
    EXPECT_EQ(from.type, to.type);
    return queue([from, to] {
      size_t size = dtypeSize(from.type.dtype);
      std::vector<int64_t> fs = from.stridesOrDense(), ts = to.stridesOrDense();
      forEachIndex(from.type.shape, [&](const std::vector<int64_t> &i) {
        int64_t f = 0, t = 0;
        for (size_t d = 0; d < i.size(); ++d) {
          f += i[d] * fs[d];
          t += i[d] * ts[d];
        }
        std::memcpy(static_cast<char *>(to.data) + t * size,
                    static_cast<const char *>(from.data) + f * size, size);
      });
      return absl::OkStatus();
    });
  }
  absl::Status enqueueDivide(const DeviceBuffer &buffer, int64_t n) override {
    log.push_back("divide");
    EXPECT_EQ(buffer.type.dtype, DType::I64);
    return queue([buffer, n] {
      auto *p = static_cast<int64_t *>(buffer.data);
      for (int64_t k = 0; k < buffer.type.numElements(); ++k)
        p[k] /= n;
      return absl::OkStatus();
    });
  }
  absl::Status enqueueAllReduce(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                DeviceReduction r) override {
    log.push_back("all_reduce");
    if (gloo)
      return queue(
          [=] { return gloo->allReduce(group, send, recv, count, dtype, r); });
    return collective(
        group, {send, {}},
        [=](auto &parts, auto &out) {
          out.resize(count * dtypeSize(dtype));
          for (int64_t k = 0; k < count; ++k) {
            if (dtype == DType::I64)
              reinterpret_cast<int64_t *>(out.data())[k] =
                  reduceAt<int64_t>(parts, k, r);
            else
              reinterpret_cast<float *>(out.data())[k] =
                  reduceAt<float>(parts, k, r);
          }
        },
        recv);
  }
  absl::Status enqueueAllGather(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype) override {
    log.push_back("all_gather");
    if (gloo)
      return queue(
          [=] { return gloo->allGather(group, send, recv, count, dtype); });
    size_t bytes = count * dtypeSize(dtype);
    return collective(
        group, {send, {}},
        [=](auto &parts, auto &out) {
          out.resize(parts.size() * bytes);
          for (size_t j = 0; j < parts.size(); ++j)
            std::memcpy(out.data() + j * bytes, parts[j].send, bytes);
        },
        recv);
  }
  absl::Status enqueueReduceScatter(int64_t group, const void *send, void *recv,
                                    int64_t count, DType dtype,
                                    DeviceReduction r) override {
    log.push_back("reduce_scatter");
    if (gloo)
      return queue([=] {
        return gloo->reduceScatter(group, send, recv, count, dtype, r);
      });
    int64_t index = groups[group].members.index;
    return collective(
        group, {send, {}},
        [=](auto &parts, auto &out) {
          out.resize(count * dtypeSize(dtype));
          for (int64_t k = 0; k < count; ++k) {
            if (dtype == DType::I64)
              reinterpret_cast<int64_t *>(out.data())[k] =
                  reduceAt<int64_t>(parts, index * count + k, r);
            else
              reinterpret_cast<float *>(out.data())[k] =
                  reduceAt<float>(parts, index * count + k, r);
          }
        },
        recv);
  }
  absl::Status enqueueBroadcast(int64_t group, const void *send, void *recv,
                                int64_t count, DType dtype,
                                int64_t root) override {
    log.push_back("broadcast");
    if (gloo)
      return queue([=] {
        return gloo->broadcast(group, send, recv, count, dtype, root);
      });
    size_t bytes = count * dtypeSize(dtype);
    return collective(
        group, {send, {}},
        [=](auto &parts, auto &out) {
          out.resize(bytes);
          std::memcpy(out.data(), parts[root].send, bytes);
        },
        recv);
  }
  absl::Status
  enqueueExchange(int64_t group, DType dtype,
                  const std::vector<DeviceTransfer> &sends,
                  const std::vector<DeviceTransfer> &receives) override {
    log.push_back("exchange");
    if (gloo)
      return queue(
          [=] { return gloo->exchange(group, dtype, sends, receives); });
    int64_t index = groups[group].members.index;
    size_t size = dtypeSize(dtype);
    auto outputs = std::make_shared<std::vector<std::vector<char>>>();
    return queue([=] {
      return library.meet(
          groups[group].members.ranks, sequence[group]++, index,
          {nullptr, sends},
          [&](const std::vector<FakeLibrary::Part> &parts) {
            for (const DeviceTransfer &r : receives) {
              const DeviceTransfer *match = nullptr;
              for (const DeviceTransfer &s : parts[r.peer].sends)
                if (s.peer == index)
                  match = &s;
              EXPECT_NE(match, nullptr);
              EXPECT_EQ(match->count, r.count);
              const char *from = static_cast<const char *>(match->data);
              outputs->emplace_back(from, from + r.count * size);
            }
          },
          [&] {
            for (size_t k = 0; k < receives.size(); ++k)
              std::memcpy(receives[k].data, (*outputs)[k].data(),
                          (*outputs)[k].size());
          },
          rank);
    });
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
  absl::Status joinCompute(int64_t) override {
    ++joins;
    return absl::OkStatus();
  }
  absl::Status asyncError() override {
    absl::Status s = injected;
    injected = absl::OkStatus();
    return s;
  }
  void abort() override {
    aborted = true;
    library.abort(rank);
  }

private:
  /// Queues a collective of `group`: `compute(parts, out)` fills this
  /// member's output, written to `recv` once every member has read.
  absl::Status
  collective(int64_t group, FakeLibrary::Part part,
             std::function<void(const std::vector<FakeLibrary::Part> &,
                                std::vector<char> &)>
                 compute,
             void *recv) {
    return queue([=] {
      std::vector<char> out;
      return library.meet(
          groups[group].members.ranks, sequence[group]++,
          groups[group].members.index, part,
          [&](const std::vector<FakeLibrary::Part> &parts) {
            compute(parts, out);
          },
          [&] { std::memcpy(recv, out.data(), out.size()); }, rank);
    });
  }

  absl::Status queue(std::function<absl::Status()> task) {
    std::lock_guard<std::mutex> lock(mutex);
    tasks.push_back(std::move(task));
    ++queued;
    changed.notify_all();
    return absl::OkStatus();
  }

  void work() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      changed.wait(lock,
                   [&] { return stopping || (!tasks.empty() && !frozen); });
      if (stopping)
        return;
      std::function<absl::Status()> task = std::move(tasks.front());
      tasks.pop_front();
      lock.unlock();
      absl::Status s = task();
      lock.lock();
      if (!s.ok() && failure.ok())
        failure = s;
      ++done;
    }
  }

  FakeLibrary &library;
  int64_t rank;
  std::vector<ProcessGroupSpec> groups;
  std::map<int64_t, int64_t> sequence;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<absl::Status()>> tasks;
  int64_t queued = 0, done = 0;
  absl::Status failure;
  bool stopping = false;
  std::thread worker;
};

/// The call of `program`'s one collective on `operand`, in place when
/// asked.
KernelCall callOf(const Program &program, HostBlock &operand,
                  bool inPlace = false) {
  KernelCall call;
  call.instruction = &program.instructions[0];
  call.program = &program;
  call.operands = {&operand};
  call.inPlace = {inPlace ? &operand : nullptr};
  return call;
}

/// The device communicator of `program`'s groups on `stream`, for `rank`
/// of the mesh.
std::unique_ptr<Communicator> communicatorOf(
    const Program &program, std::unique_ptr<FakeStream> stream, int64_t rank,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(20000),
    std::function<std::string(const std::vector<int64_t> &)> diagnose =
        nullptr) {
  DeviceCommunicatorOptions options;
  options.rank = rank;
  options.worldSize = kWorld;
  options.groups = program.groups;
  options.timeout = timeout;
  options.diagnose = std::move(diagnose);
  return makeDeviceCommunicator(std::move(stream), options);
}

enum class Layout { Dense, Strided, InPlace };

/// Runs `c` on every rank of the mesh with operands in `layout`; returns
/// each rank's result, or the first error.
/// The library a case's collectives run on.
enum class Library { StandIn, Gloo };

absl::StatusOr<std::vector<at::Tensor>> runCase(const Case &c, Layout layout,
                                                DType dtype = DType::F32,
                                                Library on = Library::StandIn) {
  FakeLibrary library;
  ::gloo::rendezvous::HashStore store;
  std::vector<at::Tensor> results(kWorld);
  std::vector<absl::Status> errors(kWorld);
  auto rankMain = [&](int64_t rank) {
    Program program = collectiveProgram(c, rank);
    if (dtype == DType::I64)
      for (ValueInfo &v : program.values)
        v.type.dtype = DType::I64;
    std::unique_ptr<HostGlooCollectives> gloo;
    if (on == Library::Gloo) {
      auto device = openHostGlooDevice("127.0.0.1", "");
      auto connected =
          device.ok()
              ? HostGlooCollectives::connect(store, *device, program.groups,
                                             std::chrono::milliseconds(20000))
              : device.status();
      if (!connected.ok()) {
        errors[rank] = connected.status();
        return;
      }
      gloo = *std::move(connected);
    }
    auto stream = std::make_unique<FakeStream>(library, rank, program.groups);
    stream->gloo = gloo.get();
    std::unique_ptr<Communicator> comm =
        communicatorOf(program, std::move(stream), rank);
    at::Tensor x = input(c.in, rank);
    // Integers: 100 (rank + 1) + k + rank, so that averages have remainders.
    if (dtype == DType::I64)
      x = (x + double(rank)).to(at::kLong);
    std::shared_ptr<HostBlock> operand = blockOf(x, layout == Layout::Strided);
    KernelCall call = callOf(program, *operand, layout == Layout::InPlace);
    absl::StatusOr<std::unique_ptr<PendingCollective>> pending =
        comm->start(call);
    if (!pending.ok()) {
      errors[rank] = pending.status();
      return;
    }
    absl::StatusOr<std::vector<TensorHandle>> out = (*pending)->finish();
    if (!out.ok()) {
      errors[rank] = out.status();
      return;
    }
    results[rank] = tensorOf(static_cast<HostBlock &>(*(*out)[0]));
    if (layout == Layout::InPlace &&
        (c.kind == OpKind::AllReduce || c.kind == OpKind::Broadcast) &&
        static_cast<HostBlock &>(*(*out)[0]).bytes != operand->bytes)
      errors[rank] = absl::InternalError("not written in place");
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < kWorld; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  for (const absl::Status &s : errors)
    if (!s.ok())
      return s;
  return results;
}

void expectCase(const Case &c, Layout layout, Library on = Library::StandIn) {
  absl::StatusOr<std::vector<at::Tensor>> got =
      runCase(c, layout, DType::F32, on);
  ASSERT_TRUE(got.ok()) << c.name << ": " << got.status();
  std::vector<at::Tensor> xs;
  for (int64_t r = 0; r < kWorld; ++r)
    xs.push_back(input(c.in, r));
  for (int64_t r = 0; r < kWorld; ++r) {
    at::Tensor expected = c.expect(xs, r).contiguous();
    EXPECT_TRUE(at::allclose((*got)[r], expected, 1e-6, 0))
        << c.name << " on rank " << r << ": got " << (*got)[r] << " expected "
        << expected;
  }
}

/// The Gloo communicator's cases, plus collectives along inner dimensions
/// of three-dimensional tensors (copies on both sides).
std::vector<Case> deviceCases() {
  std::vector<Case> all;
  for (Case &c : cases())
    if (c.kind != OpKind::AllSlice)
      all.push_back(std::move(c));
  all.push_back(
      {"all_gather_tp_dim2",
       OpKind::AllGather,
       collective({1}, CollectiveReduction::Sum, 2),
       {2, 3, 2},
       {2, 3, 4},
       [](auto &xs, int64_t r) { return at::cat(members(xs, r, {1}), 2); }});
  all.push_back({"reduce_scatter_sum_all_dim2",
                 OpKind::ReduceScatter,
                 collective({0, 1}, CollectiveReduction::Sum, 2),
                 {2, 3, 8},
                 {2, 3, 2},
                 [](auto &xs, int64_t r) {
                   at::Tensor sum = at::stack(xs).sum(0);
                   return sum.chunk(4, 2)[indexIn(r, {0, 1})];
                 }});
  all.push_back({"all_to_all_swapped_split2_concat1",
                 OpKind::AllToAll,
                 collective({1, 0}, CollectiveReduction::Sum, 2, 1),
                 {2, 3, 4},
                 {2, 12, 1},
                 [](auto &xs, int64_t r) {
                   std::vector<at::Tensor> pieces;
                   for (const at::Tensor &x : members(xs, r, {1, 0}))
                     pieces.push_back(x.chunk(4, 2)[indexIn(r, {1, 0})]);
                   return at::cat(pieces, 1);
                 }});
  all.push_back({"all_to_all_dp_split1_concat1",
                 OpKind::AllToAll,
                 collective({0}, CollectiveReduction::Sum, 1, 1),
                 {3, 4},
                 {3, 4},
                 [](auto &xs, int64_t r) {
                   std::vector<at::Tensor> pieces;
                   for (const at::Tensor &x : members(xs, r, {0}))
                     pieces.push_back(x.chunk(2, 1)[indexIn(r, {0})]);
                   return at::cat(pieces, 1);
                 }});
  return all;
}

TEST(DeviceCollectivesTest, EveryCollectiveFromDenseOperands) {
  for (const Case &c : deviceCases())
    expectCase(c, Layout::Dense);
}

TEST(DeviceCollectivesTest, EveryCollectiveFromStridedOperands) {
  for (const Case &c : deviceCases())
    expectCase(c, Layout::Strided);
}

TEST(DeviceCollectivesTest, AllReduceAndBroadcastInPlace) {
  for (const Case &c : deviceCases())
    if (c.kind == OpKind::AllReduce || c.kind == OpKind::Broadcast)
      expectCase(c, Layout::InPlace);
}

void expectIntegerAveragesTruncate(Library on) {
  // 100 (r + 1) + k + r summed over the four ranks is 1006 + 4 k: the
  // average 251.5 + k truncates to 251 + k.
  Case allReduce{"all_reduce_average_all_i64",
                 OpKind::AllReduce,
                 collective({0, 1}, CollectiveReduction::Average),
                 {3},
                 {3},
                 nullptr};
  absl::StatusOr<std::vector<at::Tensor>> got =
      runCase(allReduce, Layout::Dense, DType::I64, on);
  ASSERT_TRUE(got.ok()) << got.status();
  for (int64_t r = 0; r < kWorld; ++r)
    EXPECT_TRUE(at::equal((*got)[r], at::tensor({251, 252, 253}, at::kLong)))
        << (*got)[r];
  Case scatter{"reduce_scatter_average_tp_i64",
               OpKind::ReduceScatter,
               collective({1}, CollectiveReduction::Average, 0),
               {4},
               {2},
               nullptr};
  got = runCase(scatter, Layout::Dense, DType::I64, on);
  ASSERT_TRUE(got.ok()) << got.status();
  // Rank 3 (dp 1, tp 1) with rank 2: (302 + k + 403 + k) / 2, k = 2, 3.
  EXPECT_TRUE(at::equal((*got)[3], at::tensor({354, 355}, at::kLong)))
      << (*got)[3];
}

TEST(DeviceCollectivesTest, IntegerAveragesTruncate) {
  expectIntegerAveragesTruncate(Library::StandIn);
}

// The same collectives with Gloo's calls on host memory as the library:
// the staged --comm=gloo of the runtime built alone, all but its copies
// between the GPU and the host.
TEST(DeviceCollectivesOnGlooTest, EveryCollectiveFromDenseOperands) {
  for (const Case &c : deviceCases())
    expectCase(c, Layout::Dense, Library::Gloo);
}

TEST(DeviceCollectivesOnGlooTest, EveryCollectiveFromStridedOperands) {
  for (const Case &c : deviceCases())
    expectCase(c, Layout::Strided, Library::Gloo);
}

TEST(DeviceCollectivesOnGlooTest, AllReduceAndBroadcastInPlace) {
  for (const Case &c : deviceCases())
    if (c.kind == OpKind::AllReduce || c.kind == OpKind::Broadcast)
      expectCase(c, Layout::InPlace, Library::Gloo);
}

TEST(DeviceCollectivesOnGlooTest, IntegerAveragesTruncate) {
  expectIntegerAveragesTruncate(Library::Gloo);
}

/// What one rank queues for `c` (from a dense operand), with the other
/// ranks running it too.
std::vector<std::string> queuedFor(const Case &c) {
  FakeLibrary library;
  std::vector<std::vector<std::string>> logs(kWorld);
  auto rankMain = [&](int64_t rank) {
    Program program = collectiveProgram(c, rank);
    auto owned = std::make_unique<FakeStream>(library, rank, program.groups);
    FakeStream *stream = owned.get();
    std::unique_ptr<Communicator> comm =
        communicatorOf(program, std::move(owned), rank);
    std::shared_ptr<HostBlock> operand = blockOf(input(c.in, rank), false);
    KernelCall call = callOf(program, *operand);
    EXPECT_TRUE(comm->execute(call).ok());
    EXPECT_EQ(stream->joins, 1);
    logs[rank] = stream->log;
  };
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < kWorld; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  return logs[0];
}

TEST(DeviceCollectivesTest, CopiesOnlyWhereTheDimensionIsNotOutermost) {
  using Log = std::vector<std::string>;
  std::map<std::string, Case> byName;
  for (Case &c : deviceCases())
    byName.emplace(c.name, std::move(c));
  // The library reads the operand and writes the result directly.
  EXPECT_EQ(queuedFor(byName.at("all_reduce_sum_tp")),
            (Log{"wait", "all_reduce"}));
  EXPECT_EQ(queuedFor(byName.at("reduce_scatter_sum_all_dim0")),
            (Log{"wait", "reduce_scatter"}));
  EXPECT_EQ(queuedFor(byName.at("broadcast_dp_root1")),
            (Log{"wait", "broadcast"}));
  // Gathered blocks moved into place along dimension 1.
  EXPECT_EQ(queuedFor(byName.at("all_gather_swapped_dim1")),
            (Log{"wait", "all_gather", "copy"}));
  // Blocks of dimension 1 moved to the front before the scatter.
  EXPECT_EQ(queuedFor(byName.at("reduce_scatter_max_tp_dim1")),
            (Log{"wait", "copy", "reduce_scatter"}));
  // Split along 0 and concatenated along 1 behind a dimension of size 1:
  // both in place.
  EXPECT_EQ(queuedFor(byName.at("all_to_all_all_split0_concat1")),
            (Log{"wait", "exchange"}));
  EXPECT_EQ(queuedFor(byName.at("all_to_all_tp_split1_concat0")),
            (Log{"wait", "copy", "exchange"}));
  EXPECT_EQ(queuedFor(byName.at("all_to_all_swapped_split2_concat1")),
            (Log{"wait", "copy", "exchange", "copy"}));
}

/// Two ranks of a 1x2 mesh all-reduce over tp, rank 1's queue stopped
/// (`frozen`) or its library failing (`injected`): rank 0's collective
/// fails, naming the group and what the run knows.
struct FailureRun {
  absl::Status first, later;
  bool aborted = false;
};

FailureRun runFailing(bool freeze, absl::Status inject) {
  FakeLibrary library;
  FailureRun run;
  Case c{"all_reduce_sum_tp",
         OpKind::AllReduce,
         collective({1}),
         {4},
         {4},
         nullptr};
  auto rankMain = [&](int64_t rank) {
    Program program = collectiveProgram(c, rank);
    auto owned = std::make_unique<FakeStream>(library, rank, program.groups);
    FakeStream *stream = owned.get();
    if (rank == 1)
      stream->frozen = freeze;
    if (rank == 0)
      stream->injected = inject;
    std::unique_ptr<Communicator> comm = communicatorOf(
        program, std::move(owned), rank, std::chrono::milliseconds(300),
        [rank](const std::vector<int64_t> &) {
          return rank == 0 ? std::string("rank 1 stopped answering")
                           : std::string();
        });
    std::shared_ptr<HostBlock> operand = blockOf(input(c.in, rank), false);
    KernelCall call = callOf(program, *operand);
    absl::Status first = comm->execute(call);
    if (rank == 0) {
      run.first = first;
      run.later = comm->execute(call);
      run.aborted = stream->aborted;
      return;
    }
    // Rank 1 gives up too (its own time-out), so the test ends.
    if (freeze)
      EXPECT_FALSE(first.ok());
  };
  // Ranks 0 and 1 form one tp group; 2 and 3 are not run.
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < 2; ++r)
    threads.emplace_back(rankMain, r);
  for (std::thread &t : threads)
    t.join();
  return run;
}

TEST(DeviceCollectivesTest, AMemberThatNeverComesTimesOutAndAborts) {
  auto began = std::chrono::steady_clock::now();
  FailureRun run = runFailing(/*freeze=*/true, absl::OkStatus());
  auto took = std::chrono::steady_clock::now() - began;
  ASSERT_FALSE(run.first.ok());
  std::string message(run.first.message());
  EXPECT_NE(message.find("communication among ranks 0, 1 failed"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("rank 1 stopped answering"), std::string::npos)
      << message;
  EXPECT_NE(message.find("NCCL mesh.all_reduce did not finish within 0.3 s"),
            std::string::npos)
      << message;
  EXPECT_TRUE(run.aborted);
  // Later collectives fail at once with the same error.
  EXPECT_EQ(run.later, run.first);
  EXPECT_LT(took, std::chrono::seconds(10));
}

TEST(DeviceCollectivesTest, AnAsynchronousLibraryErrorFailsTheCollective) {
  FailureRun run = runFailing(
      /*freeze=*/true, absl::InternalError("NCCL: remote process exited"));
  ASSERT_FALSE(run.first.ok());
  std::string message(run.first.message());
  EXPECT_NE(message.find("remote process exited"), std::string::npos)
      << message;
  EXPECT_EQ(message.find("did not finish"), std::string::npos) << message;
  EXPECT_TRUE(run.aborted);
}

} // namespace
