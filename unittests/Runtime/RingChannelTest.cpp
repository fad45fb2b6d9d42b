//===- RingChannelTest.cpp - the shared-ring transfer protocol ------------===//
//
// RingChannel.h's protocol on queues that run each call at once (a wait
// spins until the peer's count is there): its chunk arithmetic, a
// transfer many times the ring's size, header slots reused, an aborted
// side's waits ending, and two processes sharing a ring and its control
// block through /dev/shm. The protocol under the device link, on queued
// channels, is in DevicePeerLinkTest.cpp (the Ring instances).
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/Comm/RingChannel.h"

#include "gtest/gtest.h"

#include <chrono>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace merak::runtime;

namespace {

/// A queue that runs each call as it is made; a wait gives up after a few
/// seconds (a test that would hang fails instead).
class InlineQueue final : public RingQueue {
public:
  absl::Status enqueueWaitAtLeast(const uint64_t *word,
                                  uint64_t value) override {
    ++waits;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < value) {
      if (std::chrono::steady_clock::now() > deadline)
        return absl::DeadlineExceededError("a ring's count never came");
      std::this_thread::yield();
    }
    return absl::OkStatus();
  }
  absl::Status enqueueStore(uint64_t *word, uint64_t value) override {
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    return absl::OkStatus();
  }
  absl::Status enqueueBytes(void *to, const void *from,
                            int64_t bytes) override {
    std::memcpy(to, from, size_t(bytes));
    copies.push_back(bytes);
    return absl::OkStatus();
  }
  int64_t waits = 0;
  std::vector<int64_t> copies;
};

PeerHeader header(int64_t tag, int64_t bytes, int64_t sequence) {
  PeerHeader h;
  h.magic = PeerHeader::kMagic;
  h.tag = tag;
  h.bytes = bytes;
  h.sequence = sequence;
  return h;
}

/// Sends `count` transfers of `values(k)` (tag 100 + k) on `protocol`.
void sendAll(RingProtocol &protocol, int count,
             const std::function<std::vector<int32_t>(int)> &values) {
  for (int k = 0; k < count; ++k) {
    std::vector<int32_t> v = values(k);
    int64_t bytes = int64_t(v.size() * sizeof(int32_t));
    ASSERT_TRUE(protocol.sendHeader(header(100 + k, bytes, k)).ok());
    ASSERT_TRUE(protocol.send(v.data(), bytes).ok());
  }
}

/// Receives `count` transfers on `protocol`; false and a message at the
/// first that is not `values(k)`.
bool receiveAll(RingProtocol &protocol, int count,
                const std::function<std::vector<int32_t>(int)> &values,
                std::string &why) {
  for (int k = 0; k < count; ++k) {
    if (!protocol.recvHeader().ok()) {
      why = "no header";
      return false;
    }
    PeerHeader h = protocol.receivedHeader();
    std::vector<int32_t> want = values(k);
    if (h.magic != PeerHeader::kMagic || h.tag != 100 + k || h.sequence != k ||
        h.bytes != int64_t(want.size() * 4)) {
      why = "header " + std::to_string(k) + " differs";
      return false;
    }
    std::vector<int32_t> got(want.size(), -1);
    if (!protocol.recv(got.data(), h.bytes).ok() || got != want) {
      why = "transfer " + std::to_string(k) + " differs";
      return false;
    }
  }
  return true;
}

std::vector<int32_t> ramp(int k) {
  std::vector<int32_t> v(size_t(k * 37 % 300));
  std::iota(v.begin(), v.end(), k * 1000);
  return v;
}

TEST(RingChannelTest, ChunksAreAQuarterOfTheRingAndNeverWrap) {
  auto chunks = ringChunks(90, 50, 96);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].offset, 0);
  EXPECT_EQ(chunks[0].ringOffset, 90);
  EXPECT_EQ(chunks[0].bytes, 6); // to the ring's end
  EXPECT_EQ(chunks[1].ringOffset, 0);
  EXPECT_EQ(chunks[1].bytes, 24); // a quarter
  EXPECT_EQ(chunks[2].offset, 30);
  EXPECT_EQ(chunks[2].ringOffset, 24);
  EXPECT_EQ(chunks[2].bytes, 20);
  EXPECT_TRUE(ringChunks(5, 0, 96).empty());
  // Every byte once, in order, whatever the start.
  for (int64_t start : {0, 1, 95, 96 * 7 + 13})
    for (int64_t bytes : {1, 24, 25, 1000}) {
      int64_t next = 0;
      for (const RingChunk &c : ringChunks(start, bytes, 96)) {
        EXPECT_EQ(c.offset, next);
        EXPECT_EQ(c.ringOffset, (start + c.offset) % 96);
        EXPECT_GE(c.bytes, 1);
        EXPECT_LE(c.bytes, 24);
        EXPECT_LE(c.ringOffset + c.bytes, 96);
        next += c.bytes;
      }
      EXPECT_EQ(next, bytes);
    }
  // A tiny ring still moves a byte at a time.
  EXPECT_EQ(ringChunks(0, 3, 2).size(), 3u);
}

TEST(RingChannelTest, StreamsTransfersLargerThanTheRing) {
  // 40 transfers of up to 1,196 bytes through 64 bytes: the sender waits
  // for room, the header slots (16) are reused, every value arrives.
  RingControl control;
  control.init(64);
  std::vector<char> ring(64);
  InlineQueue sendQueue, recvQueue;
  RingProtocol sender(control, ring.data(), sendQueue);
  RingProtocol receiver(control, ring.data(), recvQueue);
  std::thread t([&] { sendAll(sender, 40, ramp); });
  std::string why;
  EXPECT_TRUE(receiveAll(receiver, 40, ramp, why)) << why;
  t.join();
  EXPECT_GT(sendQueue.waits, 40); // room and slots waited for
  for (int64_t c : sendQueue.copies)
    EXPECT_LE(c, 16);
  EXPECT_EQ(control.headersPosted, 40u);
  EXPECT_EQ(control.headersRead, 40u);
  EXPECT_EQ(control.bytesWritten, control.bytesReleased);
}

TEST(RingChannelTest, AnAbortedSideStopsWaiting) {
  RingControl control;
  control.init(64);
  std::vector<char> ring(64);
  InlineQueue queue;
  RingProtocol receiver(control, ring.data(), queue);
  // Nothing was sent: a header wait would last; after the abort it ends
  // at once, and the protocol refuses more work.
  std::thread waiter([&] { EXPECT_TRUE(receiver.recvHeader().ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  receiver.unblock(/*sending=*/false);
  waiter.join();
  EXPECT_EQ(receiver.recvHeader().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(receiver.receivedHeader().magic, 0);
  // The sender's words are the sender's: an aborted receiver leaves the
  // counts the sender waits on alone.
  EXPECT_EQ(control.headersRead, 0u);
  EXPECT_EQ(control.bytesReleased, 0u);

  RingControl full;
  full.init(8);
  std::vector<char> small(8);
  RingProtocol sender(full, small.data(), queue);
  std::vector<char> bytes(32, 1);
  std::thread blocked([&] { EXPECT_TRUE(sender.send(bytes.data(), 32).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  sender.unblock(/*sending=*/true);
  blocked.join();
  EXPECT_EQ(sender.send(bytes.data(), 1).code(), absl::StatusCode::kAborted);
}

TEST(RingChannelTest, AControlBlockSaysWhatIsWrongWithIt) {
  RingControl c;
  c.init(1 << 20);
  EXPECT_EQ(c.check(), "");
  c.version = 9;
  EXPECT_EQ(c.check(), "a ring's control block of version 9, not 1");
  c.init(2);
  EXPECT_EQ(c.check(), "a ring of 2 bytes");
  c.init(64);
  c.magic = 7;
  EXPECT_EQ(c.check(), "not a ring's control block (its magic number differs)");
}

TEST(RingChannelTest, TwoProcessesShareARingThroughDevShm) {
  // The receiver makes the control block and the ring (here host memory
  // in /dev/shm too), the sender, another process, opens both by name.
  auto control = SharedRegion::create("test-control", sizeof(RingControl));
  auto ring = SharedRegion::create("test-ring", 256);
  ASSERT_TRUE(control.ok() && ring.ok());
  auto *block = static_cast<RingControl *>((*control)->data());
  block->init(256);
  const std::string controlName = (*control)->name(),
                    ringName = (*ring)->name();
  EXPECT_EQ(controlName.rfind("/dev/shm/merak-ring-test-control-", 0), 0u);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto c = SharedRegion::open(controlName, sizeof(RingControl));
    auto r = SharedRegion::open(ringName, 256);
    if (!c.ok() || !r.ok())
      ::_exit(2);
    auto *b = static_cast<RingControl *>((*c)->data());
    if (!b->check().empty())
      ::_exit(3);
    InlineQueue q;
    RingProtocol sender(*b, static_cast<char *>((*r)->data()), q);
    sendAll(sender, 30, ramp);
    ::_exit(::testing::Test::HasFailure() ? 4 : 0);
  }
  InlineQueue q;
  RingProtocol receiver(*block, static_cast<char *>((*ring)->data()), q);
  std::string why;
  EXPECT_TRUE(receiveAll(receiver, 30, ramp, why)) << why;
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The names go with their regions (or earlier, by `unlink`).
  (*control)->unlink();
  EXPECT_NE(::access(controlName.c_str(), F_OK), 0);
  control->reset();
  ring->reset();
  EXPECT_NE(::access(ringName.c_str(), F_OK), 0);
}

TEST(RingChannelTest, RegionsOfProcessesThatAreGoneAreRemoved) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0)
    ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string orphan =
      "/dev/shm/merak-ring-test-orphan-" + std::to_string(child) + "-0";
  std::ofstream(orphan) << "left by a killed rank";
  auto mine = SharedRegion::create("test-mine", 8);
  ASSERT_TRUE(mine.ok());
  SharedRegion::removeOrphans();
  EXPECT_NE(::access(orphan.c_str(), F_OK), 0);
  EXPECT_EQ(::access((*mine)->name().c_str(), F_OK), 0); // this process's
}

TEST(RingChannelTest, OpeningChecksTheName) {
  EXPECT_EQ(SharedRegion::open("/etc/passwd", 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedRegion::open("/dev/shm/merak-ring-../x", 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto missing = SharedRegion::open("/dev/shm/merak-ring-none-0-0", 8);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  auto small = SharedRegion::create("test-small", 8);
  ASSERT_TRUE(small.ok());
  auto big = SharedRegion::open((*small)->name(), 4096);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kDataLoss);
}

} // namespace
