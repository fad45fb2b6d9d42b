//===- DevicePeerLinkTest.cpp - pipeline transfers on a stubbed library ---===//
//
// The device link (DevicePeerLink.h: pipeline transfers on NCCL) over a
// stand-in for a device and its library: host memory for device memory,
// a worker thread per channel for its queue, and point-to-point calls
// that behave as NCCL's do: a send and a receive meet by their order on
// the channel, each holds its queue until the other comes, and the byte
// counts must agree. Checked: receives posted in another order than the
// sends (by tag), several tensors (strided and empty ones) in one
// transfer, the same tag twice, byte counts that disagree, a peer that
// never sends (the time-out names it and aborts every channel), an error
// the library reports, the progress count, closing, a ring of ranks
// sending in random orders, and the directions a pipeline plan needs.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/DevicePeerLink.h"
#include "merak/Runtime/Comm/RingChannel.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

using namespace merak::runtime;

namespace {

using Shape = std::vector<int64_t>;

/// Host memory standing in for a device tensor (a view at `offset`).
struct HostBlock final : DeviceTensor {
  std::shared_ptr<std::vector<char>> bytes;
  int64_t offset = 0;
  TensorType type;
  std::vector<int64_t> strides; // empty: dense
  char *data() const { return bytes->data() + offset; }
};

std::shared_ptr<HostBlock> floats(const Shape &shape, float first,
                                  bool transposed = false) {
  auto b = std::make_shared<HostBlock>();
  b->type = {DType::F32, shape};
  b->bytes = std::make_shared<std::vector<char>>(b->type.byteSize());
  auto *p = reinterpret_cast<float *>(b->data());
  for (int64_t k = 0; k < b->type.numElements(); ++k)
    p[k] = first + float(k);
  if (transposed) {
    // Element (i, j) of the logical [rows, cols] tensor at j * rows + i:
    // holds first + i * cols + j, as the dense one would.
    int64_t rows = shape[0], cols = shape[1];
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        p[j * rows + i] = first + float(i * cols + j);
    b->strides = {1, rows};
  }
  return b;
}

std::vector<float> valuesOf(const TensorHandle &h) {
  auto &b = static_cast<HostBlock &>(*h);
  EXPECT_TRUE(b.strides.empty());
  const auto *p = reinterpret_cast<const float *>(b.data());
  return std::vector<float>(p, p + b.type.numElements());
}

std::vector<float> iota(int64_t n, float first) {
  std::vector<float> v(n);
  for (int64_t k = 0; k < n; ++k)
    v[k] = first + float(k);
  return v;
}

/// Set by the link's thread setup (DevicePeerLinkOptions::threadSetup), on
/// the thread that then posts every receive of a transfer's bytes.
thread_local bool linkThreadReady = false;

/// The channels between in-process ranks: one wire per direction, on
/// which a send waits until a receive takes it.
class FakeWires {
public:
  struct Message {
    const void *data;
    int64_t bytes;
    bool taken = false;
    std::string error;
  };

  /// Blocks until the receiver took `bytes` at `data`.
  absl::Status send(int64_t from, int64_t to, const void *data, int64_t bytes,
                    const bool &aborted) {
    std::unique_lock<std::mutex> lock(mutex);
    auto m = std::make_shared<Message>(Message{data, bytes});
    wires[{from, to}].push_back(m);
    changed.notify_all();
    changed.wait(lock, [&] { return m->taken || aborted; });
    if (!m->taken)
      return absl::AbortedError("communicator aborted");
    return m->error.empty() ? absl::OkStatus()
                            : absl::InvalidArgumentError(m->error);
  }

  /// Blocks until the sender's next message comes; its byte count must
  /// be `bytes`, as NCCL requires.
  absl::Status recv(int64_t from, int64_t to, void *data, int64_t bytes,
                    const bool &aborted) {
    std::unique_lock<std::mutex> lock(mutex);
    auto &wire = wires[{from, to}];
    changed.wait(lock, [&] { return !wire.empty() || aborted; });
    if (wire.empty())
      return absl::AbortedError("communicator aborted");
    std::shared_ptr<Message> m = wire.front();
    wire.pop_front();
    m->taken = true;
    if (m->bytes != bytes)
      m->error = absl::StrCat("sent ", m->bytes, " bytes, received ", bytes);
    else
      std::memcpy(data, m->data, size_t(bytes));
    changed.notify_all();
    return m->error.empty() ? absl::OkStatus()
                            : absl::InvalidArgumentError(m->error);
  }

  /// Wakes waiters (after an abort).
  void poke() {
    std::lock_guard<std::mutex> lock(mutex);
    changed.notify_all();
  }

  std::mutex mutex;
  /// How many channels were aborted (not counting their destruction).
  std::atomic<int> aborts{0};

private:
  std::condition_variable changed;
  std::map<std::pair<int64_t, int64_t>, std::deque<std::shared_ptr<Message>>>
      wires;
};

/// One rank's end of one direction, with its own queue: a worker thread
/// that runs the queued work in order. What moves the transfers is the
/// subclass's.
class QueueChannel : public PeerChannel {
public:
  explicit QueueChannel(std::atomic<int> &aborts)
      : aborts(aborts), worker([this] { work(); }) {}
  /// Subclasses call `stop` first in their destructors (the worker may be
  /// running their work).
  ~QueueChannel() override { stop(); }

  std::vector<std::string> log;
  int64_t joins = 0;

  bool isAborted() const { return aborted; }
  /// An error `asyncError` reports once.
  void inject(absl::Status s) {
    std::lock_guard<std::mutex> lock(mutex);
    injected = std::move(s);
  }

  absl::Status enqueueWaitForCompute() override {
    log.push_back("wait");
    return absl::OkStatus();
  }
  absl::Status enqueueCopy(const DeviceBuffer &f,
                           const DeviceBuffer &t) override {
    log.push_back("copy");
    EXPECT_EQ(f.type, t.type);
    return queue([f, t] {
      size_t size = dtypeSize(f.type.dtype);
      std::vector<int64_t> fs = f.stridesOrDense(), ts = t.stridesOrDense();
      std::vector<int64_t> i(f.type.shape.size(), 0);
      for (int64_t k = 0; k < f.type.numElements(); ++k) {
        int64_t a = 0, b = 0;
        for (size_t d = 0; d < i.size(); ++d) {
          a += i[d] * fs[d];
          b += i[d] * ts[d];
        }
        std::memcpy(static_cast<char *>(t.data) + b * size,
                    static_cast<const char *>(f.data) + a * size, size);
        for (size_t d = i.size(); d-- > 0;) {
          if (++i[d] < f.type.shape[d])
            break;
          i[d] = 0;
        }
      }
      return absl::OkStatus();
    });
  }
  absl::StatusOr<TensorHandle> allocate(int64_t bytes) override {
    auto b = std::make_shared<HostBlock>();
    b->type = {DType::I64, {(bytes + 7) / 8}};
    // Not zeros: a byte the transfer forgets to write shows.
    b->bytes = std::make_shared<std::vector<char>>(bytes, char(0x7b));
    return TensorHandle(b);
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
    std::lock_guard<std::mutex> lock(mutex);
    absl::Status s = injected;
    injected = absl::OkStatus();
    return s;
  }
  void abort() override {
    ++aborts;
    aborted = true;
    wake();
  }

protected:
  /// Queues `task` on the worker.
  absl::Status queue(std::function<absl::Status()> task) {
    std::lock_guard<std::mutex> lock(mutex);
    tasks.push_back(std::move(task));
    ++queued;
    changed.notify_all();
    return absl::OkStatus();
  }
  /// Ends the queue: aborts what runs, then stops the worker.
  void stop() {
    if (!worker.joinable())
      return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
      changed.notify_all();
    }
    aborted = true;
    wake();
    worker.join();
  }
  /// Wakes a task that waits on a peer (after an abort).
  virtual void wake() {}

  std::atomic<bool> aborted{false};

private:
  void work() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return stopping || !tasks.empty(); });
      if (stopping)
        return;
      std::function<absl::Status()> task = std::move(tasks.front());
      tasks.pop_front();
      lock.unlock();
      absl::Status s = failure.ok() ? task() : absl::OkStatus();
      lock.lock();
      if (!s.ok() && failure.ok())
        failure = s;
      ++done;
    }
  }

  std::atomic<int> &aborts;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<absl::Status()>> tasks;
  int64_t queued = 0, done = 0;
  absl::Status failure, injected;
  bool stopping = false;
  std::thread worker;
};

/// A channel whose transfers behave as NCCL's (`FakeWires`).
class FakeChannel final : public QueueChannel {
public:
  FakeChannel(FakeWires &wires, int64_t from, int64_t to)
      : QueueChannel(wires.aborts), wires(wires), from(from), to(to) {}
  ~FakeChannel() override { stop(); }

  absl::Status enqueueSendHeader(const PeerHeader &header) override {
    log.push_back("header");
    return queue([this, header] {
      return wires.send(from, to, &header, sizeof(header), abortedFlag());
    });
  }
  absl::Status enqueueSend(const void *data, int64_t bytes) override {
    log.push_back("send");
    return queue(
        [=] { return wires.send(from, to, data, bytes, abortedFlag()); });
  }
  absl::Status enqueueRecvHeader() override {
    log.push_back("header");
    return queue([this] {
      PeerHeader h;
      absl::Status s = wires.recv(from, to, &h, sizeof(h), abortedFlag());
      std::lock_guard<std::mutex> lock(headerMutex);
      header = h;
      return s;
    });
  }
  PeerHeader receivedHeader() override {
    std::lock_guard<std::mutex> lock(headerMutex);
    return header;
  }
  absl::Status enqueueRecv(void *data, int64_t bytes) override {
    EXPECT_TRUE(linkThreadReady) << "a receive posted off the link's thread";
    log.push_back("recv");
    return queue(
        [=] { return wires.recv(from, to, data, bytes, abortedFlag()); });
  }

private:
  /// The abort as the wires read it (under their mutex).
  const bool &abortedFlag() const { return abortedCopy; }
  void wake() override {
    {
      std::lock_guard<std::mutex> lock(wires.mutex);
      abortedCopy = true;
    }
    wires.poke();
  }

  FakeWires &wires;
  int64_t from, to;
  std::mutex headerMutex;
  PeerHeader header;
  bool abortedCopy = false; // guarded by wires.mutex
};

/// One direction's ring (RingChannel.h) in memory both ends share.
struct SharedRing {
  explicit SharedRing(int64_t bytes) : memory(bytes) { control.init(bytes); }
  RingControl control;
  std::vector<char> memory;
};

/// A channel on the ring protocol, its queue a host thread: the words it
/// waits on are polled.
class RingTestChannel final : public QueueChannel, private RingQueue {
public:
  RingTestChannel(std::atomic<int> &aborts, SharedRing &ring, bool sending)
      : QueueChannel(aborts), sending(sending),
        protocol(ring.control, ring.memory.data(), *this) {}
  ~RingTestChannel() override { stop(); }

  absl::Status enqueueSendHeader(const PeerHeader &header) override {
    log.push_back("header");
    return protocol.sendHeader(header);
  }
  absl::Status enqueueSend(const void *data, int64_t bytes) override {
    log.push_back("send");
    return protocol.send(data, bytes);
  }
  absl::Status enqueueRecvHeader() override {
    log.push_back("header");
    return protocol.recvHeader();
  }
  PeerHeader receivedHeader() override { return protocol.receivedHeader(); }
  absl::Status enqueueRecv(void *data, int64_t bytes) override {
    EXPECT_TRUE(linkThreadReady) << "a receive posted off the link's thread";
    log.push_back("recv");
    return protocol.recv(data, bytes);
  }
  /// The largest count a wait of this channel waited for.
  uint64_t largestWait = 0;

private:
  void wake() override { protocol.unblock(sending); }

  absl::Status enqueueWaitAtLeast(const uint64_t *word,
                                  uint64_t value) override {
    largestWait = std::max(largestWait, value);
    return queue([this, word, value] {
      while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < value) {
        if (aborted)
          return absl::AbortedError("ring aborted");
        std::this_thread::yield();
      }
      return absl::OkStatus();
    });
  }
  absl::Status enqueueStore(uint64_t *word, uint64_t value) override {
    return queue([word, value] {
      __atomic_store_n(word, value, __ATOMIC_RELEASE);
      return absl::OkStatus();
    });
  }
  absl::Status enqueueBytes(void *to, const void *from,
                            int64_t bytes) override {
    return queue([=] {
      std::memcpy(to, from, size_t(bytes));
      return absl::OkStatus();
    });
  }

  bool sending;
  RingProtocol protocol;
};

class FakeDevice final : public PeerDevice {
public:
  absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) override {
    auto &b = static_cast<HostBlock &>(tensor);
    return DeviceBuffer{b.data(), b.type, b.strides, b.bytes};
  }
  absl::StatusOr<TensorHandle> view(const TensorHandle &buffer, int64_t offset,
                                    const TensorType &type) override {
    auto &whole = static_cast<HostBlock &>(*buffer);
    EXPECT_LE(offset + type.byteSize(), int64_t(whole.bytes->size()));
    auto b = std::make_shared<HostBlock>();
    b->bytes = whole.bytes;
    b->offset = whole.offset + offset;
    b->type = type;
    return TensorHandle(b);
  }
};

/// In-process ranks, each with a link over fake channels for `pairs`:
/// NCCL's behaviour (`FakeWires`), or with `ringBytes`, rings of that many
/// bytes (RingChannel.h).
struct Ranks {
  FakeWires wires;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<SharedRing>> rings;
  std::vector<std::map<int64_t, QueueChannel *>> out, in;
  std::vector<std::unique_ptr<PeerLink>> links;
  std::string diagnosis;

  Ranks(int64_t n, const std::vector<std::pair<int64_t, int64_t>> &pairs,
        std::chrono::milliseconds timeout = std::chrono::seconds(20),
        int64_t ringBytes = 0)
      : out(n), in(n) {
    for (const auto &pair : pairs)
      if (ringBytes > 0)
        rings[pair] = std::make_unique<SharedRing>(ringBytes);
    auto channel = [&](int64_t a, int64_t b,
                       bool sending) -> std::unique_ptr<QueueChannel> {
      if (ringBytes > 0)
        return std::make_unique<RingTestChannel>(wires.aborts, *rings[{a, b}],
                                                 sending);
      return std::make_unique<FakeChannel>(wires, a, b);
    };
    for (int64_t r = 0; r < n; ++r) {
      std::map<int64_t, std::unique_ptr<PeerChannel>> o, i;
      for (const auto &[a, b] : pairs) {
        if (a == r) {
          auto c = channel(a, b, true);
          out[r][b] = c.get();
          o[b] = std::move(c);
        }
        if (b == r) {
          auto c = channel(a, b, false);
          in[r][a] = c.get();
          i[a] = std::move(c);
        }
      }
      DevicePeerLinkOptions options;
      options.rank = r;
      options.timeout = timeout;
      options.threadSetup = [] { linkThreadReady = true; };
      options.diagnose = [this](const std::vector<int64_t> &ranks) {
        return diagnosis.empty()
                   ? std::string()
                   : absl::StrCat(diagnosis, " (", ranks.front(), ")");
      };
      links.push_back(makeDevicePeerLink(std::make_unique<FakeDevice>(),
                                         std::move(o), std::move(i), options));
    }
  }
  /// The ranks' links go away together, as a run's do (each waits for
  /// its peers' closing headers).
  ~Ranks() {
    std::vector<std::thread> closing;
    for (auto &link : links)
      closing.emplace_back([&link] { link.reset(); });
    for (auto &t : closing)
      t.join();
  }
  PeerLink &operator[](int64_t r) { return *links[r]; }
};

TensorType f32(const Shape &shape) { return {DType::F32, shape}; }

/// The link's behaviour on each kind of channel: NCCL's (`FakeWires`) and
/// the ring protocol's, on a ring of 96 bytes (every transfer but the
/// smallest streams through it in several chunks, most of them wrapping
/// its end).
class DeviceTransportTest : public ::testing::TestWithParam<int64_t> {
protected:
  int64_t ringBytes() const { return GetParam(); }
  std::chrono::milliseconds standard() const {
    return std::chrono::seconds(20);
  }
};

INSTANTIATE_TEST_SUITE_P(DevicePeerLinkTest, DeviceTransportTest,
                         ::testing::Values(int64_t(0), int64_t(96)),
                         [](const ::testing::TestParamInfo<int64_t> &info) {
                           return std::string(info.param ? "Ring" : "Nccl");
                         });

TEST_P(DeviceTransportTest, ReceivesMatchTagsNotOrder) {
  Ranks ranks(2, {{0, 1}, {1, 0}}, standard(), ringBytes());
  std::vector<std::shared_ptr<HostBlock>> blocks = {
      floats({3}, 10), floats({2, 2}, 20), floats({5}, 30)};
  std::vector<std::unique_ptr<PendingCollective>> sends;
  for (int64_t k = 0; k < 3; ++k) {
    auto s = ranks[0].send(1, 100 + k, {blocks[k].get()}, {blocks[k]->type});
    ASSERT_TRUE(s.ok()) << s.status();
    sends.push_back(*std::move(s));
  }
  blocks.clear(); // the link keeps what it sends
  // The other way at the same time.
  auto back = floats({4}, 40);
  auto sentBack = ranks[1].send(0, 7, {back.get()}, {back->type});
  ASSERT_TRUE(sentBack.ok());
  // Posted in the reverse order, and the last one first finished.
  auto r2 = ranks[1].recv(0, 102, {f32({5})});
  auto r1 = ranks[1].recv(0, 101, {f32({2, 2})});
  auto r0 = ranks[1].recv(0, 100, {f32({3})});
  ASSERT_TRUE(r0.ok() && r1.ok() && r2.ok());
  auto got2 = (*r2)->finish();
  ASSERT_TRUE(got2.ok()) << got2.status();
  EXPECT_EQ(valuesOf((*got2)[0]), iota(5, 30));
  auto got0 = (*r0)->finish();
  auto got1 = (*r1)->finish();
  ASSERT_TRUE(got0.ok() && got1.ok());
  EXPECT_EQ(valuesOf((*got0)[0]), iota(3, 10));
  EXPECT_EQ(valuesOf((*got1)[0]), iota(4, 20));
  auto gotBack = (*ranks[0].recv(1, 7, {f32({4})}))->finish();
  ASSERT_TRUE(gotBack.ok());
  EXPECT_EQ(valuesOf((*gotBack)[0]), iota(4, 40));
  for (auto &s : sends)
    EXPECT_TRUE(s->wait().ok());
  EXPECT_TRUE((*sentBack)->wait().ok());
  // One dense tensor goes from where it is: no copy.
  EXPECT_EQ(
      ranks.out[0][1]->log,
      (std::vector<std::string>{"wait", "header", "send", "wait", "header",
                                "send", "wait", "header", "send"}));
  // The compute queue waits for each receive before reading it.
  EXPECT_EQ(ranks.in[1][0]->joins, 3);
}

TEST_P(DeviceTransportTest, SeveralTensorsInOneTransfer) {
  Ranks ranks(2, {{0, 1}}, standard(), ringBytes());
  auto strided = floats({3, 4}, 1, /*transposed=*/true);
  auto dense = floats({5}, 100);
  auto empty = floats({0, 3}, 0);
  std::vector<TensorType> types = {strided->type, empty->type, dense->type};
  auto s =
      ranks[0].send(1, 64, {strided.get(), empty.get(), dense.get()}, types);
  ASSERT_TRUE(s.ok()) << s.status();
  auto got = (*ranks[1].recv(0, 64, types))->finish();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ(valuesOf((*got)[0]), iota(12, 1)); // row-major now
  EXPECT_TRUE(valuesOf((*got)[1]).empty());
  EXPECT_EQ(valuesOf((*got)[2]), iota(5, 100));
  EXPECT_TRUE((*s)->wait().ok());
  // Packed on the sender's queue (the empty tensor is not copied).
  EXPECT_EQ(
      ranks.out[0][1]->log,
      (std::vector<std::string>{"wait", "copy", "copy", "header", "send"}));
  std::vector<int64_t> offsets;
  EXPECT_EQ(packedLayout(types, offsets), 256 + 20);
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 256, 256}));
}

TEST_P(DeviceTransportTest, OneTagTwiceArrivesInOrder) {
  Ranks ranks(2, {{0, 1}}, standard(), ringBytes());
  auto a = floats({2}, 1), b = floats({2}, 5);
  ASSERT_TRUE(ranks[0].send(1, 1, {a.get()}, {a->type}).ok());
  ASSERT_TRUE(ranks[0].send(1, 1, {b.get()}, {b->type}).ok());
  auto first = ranks[1].recv(0, 1, {f32({2})});
  auto second = ranks[1].recv(0, 1, {f32({2})});
  auto got2 = (*second)->finish();
  auto got1 = (*first)->finish();
  ASSERT_TRUE(got1.ok() && got2.ok());
  EXPECT_EQ(valuesOf((*got1)[0]), iota(2, 1));
  EXPECT_EQ(valuesOf((*got2)[0]), iota(2, 5));
}

TEST_P(DeviceTransportTest, ByteCountsThatDisagreeAreAnError) {
  Ranks ranks(2, {{0, 1}}, standard(), ringBytes());
  auto a = floats({4}, 1);
  ASSERT_TRUE(ranks[0].send(1, 65, {a.get()}, {a->type}).ok());
  auto got = (*ranks[1].recv(0, 65, {f32({3})}))->finish();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(got.status().message(),
            "rank 0 sent 16 bytes under tag 65 to rank 1, which expects 12 "
            "(1 tensor)");
}

TEST_P(DeviceTransportTest, PeerThatNeverSendsTimesOutNamingIt) {
  Ranks ranks(2, {{0, 1}, {1, 0}}, std::chrono::milliseconds(300), ringBytes());
  ranks.diagnosis = "rank 0 stopped answering";
  auto r = ranks[1].recv(0, 66, {f32({2})});
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)->ready());
  absl::Status s = (*r)->wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "pipeline transfers between ranks 1 and 0 failed: rank 0 stopped "
            "answering (0) (NCCL receive from rank 0, tag 66 did not finish "
            "within 0.3 s)");
  EXPECT_TRUE(ranks.in[1][0]->isAborted());
  EXPECT_TRUE(ranks.out[1][0]->isAborted());
  // Later transfers fail at once with the same message.
  auto a = floats({2}, 0);
  auto again = ranks[1].send(0, 67, {a.get()}, {a->type});
  EXPECT_EQ(again.status(), s);
  EXPECT_TRUE((*r)->ready());
}

TEST_P(DeviceTransportTest, AnErrorTheLibraryReportsFailsTheTransfers) {
  Ranks ranks(2, {{0, 1}}, std::chrono::milliseconds(500), ringBytes());
  ranks.in[1][0]->inject(absl::InternalError("remote process exited"));
  auto r = ranks[1].recv(0, 68, {f32({2})});
  // The link's thread may take the error before the receive is posted
  // (which then fails at once) or after (its wait fails).
  absl::Status s = r.ok() ? (*r)->wait() : r.status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("remote process exited"), std::string::npos)
      << s.message();
  EXPECT_FALSE(ranks.out[0][1]->isAborted()); // rank 0's own channel
  EXPECT_TRUE(ranks.in[1][0]->isAborted());
}

TEST_P(DeviceTransportTest, CountsFinishedTransfers) {
  Ranks ranks(2, {{0, 1}}, standard(), ringBytes());
  int64_t before = ranks[1].finished();
  auto a = floats({2}, 1);
  auto s = ranks[0].send(1, 70, {a.get()}, {a->type});
  // The receiver's link takes the transfer before any receive is posted.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ranks[1].finished() == before &&
         std::chrono::steady_clock::now() < deadline)
    ranks[1].waitForProgress(before, std::chrono::milliseconds(50));
  EXPECT_EQ(ranks[1].finished(), before + 1);
  auto r = ranks[1].recv(0, 70, {f32({2})});
  EXPECT_TRUE((*r)->ready());
  EXPECT_TRUE((*s)->wait().ok());
  EXPECT_EQ(ranks[0].finished(), 1);
}

TEST_P(DeviceTransportTest, ClosesCleanlyAndOnlyWithItsPeers) {
  {
    Ranks ranks(2, {{0, 1}, {1, 0}}, standard(), ringBytes());
    // Both links go away at once: each takes the other's closing header.
    std::thread other([&] { ranks.links[1].reset(); });
    ranks.links[0].reset();
    other.join();
    EXPECT_EQ(ranks.wires.aborts, 0);
  }
  {
    Ranks ranks(2, {{0, 1}, {1, 0}}, std::chrono::milliseconds(200),
                ringBytes());
    // Rank 0's peer never closes: its link gives up after the time-out
    // and aborts its channels rather than hang.
    auto start = std::chrono::steady_clock::now();
    ranks.links[0].reset();
    EXPECT_GE(std::chrono::steady_clock::now() - start,
              std::chrono::milliseconds(200));
    EXPECT_EQ(ranks.wires.aborts, 2);
  }
}

TEST_P(DeviceTransportTest, TransfersTheLinkHasNoChannelForAreAnError) {
  Ranks ranks(2, {{0, 1}}, standard(), ringBytes());
  auto a = floats({2}, 1);
  auto s = ranks[1].send(0, 1, {a.get()}, {a->type});
  EXPECT_EQ(s.status().message(),
            "rank 1 has no NCCL channel to rank 0 (a transfer the plan does "
            "not have)");
  auto r = ranks[0].recv(1, 1, {a->type});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
}

TEST_P(DeviceTransportTest, RingOfRanksInRandomOrders) {
  // Four ranks, each sending 40 transfers to the next and receiving 40
  // from the previous: receives posted in one shuffled order between the
  // sends, finished in another.
  constexpr int64_t kRanks = 4, kTransfers = 40;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t r = 0; r < kRanks; ++r)
    pairs.push_back({r, (r + 1) % kRanks});
  Ranks ranks(kRanks, pairs, standard(), ringBytes());
  std::vector<std::thread> threads;
  std::vector<int> failures(kRanks, 0);
  for (int64_t r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      std::mt19937 rng(uint32_t(17 + r));
      std::vector<int64_t> posted(kTransfers), finished(kTransfers);
      for (int64_t k = 0; k < kTransfers; ++k)
        posted[k] = finished[k] = k;
      std::shuffle(posted.begin(), posted.end(), rng);
      std::shuffle(finished.begin(), finished.end(), rng);
      const int64_t next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
      std::vector<std::unique_ptr<PendingCollective>> sends, recvs(kTransfers);
      for (int64_t k = 0; k < kTransfers; ++k) {
        auto t = floats({k + 1}, float(r * 1000 + k));
        auto s = ranks[r].send(next, 64 + k, {t.get()}, {t->type});
        int64_t want = posted[k];
        auto p = ranks[r].recv(prev, 64 + want, {f32({want + 1})});
        if (!s.ok() || !p.ok()) {
          ++failures[r];
          return;
        }
        sends.push_back(*std::move(s));
        recvs[want] = *std::move(p);
      }
      for (int64_t want : finished) {
        auto got = recvs[want]->finish();
        if (!got.ok() ||
            valuesOf((*got)[0]) != iota(want + 1, float(prev * 1000 + want)))
          ++failures[r];
      }
      for (auto &s : sends)
        if (!s->wait().ok())
          ++failures[r];
    });
  for (auto &t : threads)
    t.join();
  EXPECT_EQ(failures, std::vector<int>(kRanks, 0));
}

TEST(DevicePeerLinkTest, DirectionsOfAPipelinePlan) {
  PipelinePlan plan;
  plan.pp = 3;
  plan.virtualStages = 2;
  plan.stages = 6;
  plan.lossStage = 5; // on pipeline rank 2
  std::vector<std::pair<int64_t, int64_t>> got = pipelineDirections(plan, 1);
  // Neighbouring stages 0-1-2-0-1-2: every pair both ways, the loss's rank
  // to the others included.
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{
                     {0, 1}, {0, 2}, {1, 0}, {1, 2}, {2, 0}, {2, 1}}));

  plan.pp = 4;
  plan.virtualStages = 1;
  plan.stages = 4;
  plan.lossStage = 3;
  plan.tied = {{"wte", {0, 3}}};
  plan.dynamic = true;
  got = pipelineDirections(plan, 2);
  std::set<std::pair<int64_t, int64_t>> want;
  for (int64_t m = 0; m < 2; ++m) {
    for (auto [a, b] : std::vector<std::pair<int64_t, int64_t>>{
             {0, 1}, {1, 2}, {2, 3}, {0, 3}}) {
      want.insert({a * 2 + m, b * 2 + m});
      want.insert({b * 2 + m, a * 2 + m});
    }
    for (int64_t r : {0, 1, 2})
      want.insert({3 * 2 + m, r * 2 + m}); // the loss
  }
  for (int64_t p = 0; p < 4; ++p)
    want.insert({p * 2, p * 2 + 1}); // the dynamic schedule's choices
  std::vector<std::pair<int64_t, int64_t>> wanted(want.begin(), want.end());
  EXPECT_EQ(got, wanted);
}

} // namespace
