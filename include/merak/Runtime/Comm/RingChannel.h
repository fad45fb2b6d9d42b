//===- RingChannel.h - pipeline transfers through a shared ring -*- C++ -*-===//
//
// `--p2p=shm` between GPUs of one machine: a direction's transfers go
// through a ring buffer in the receiver's device memory that the sender
// writes into directly (CUDA IPC), ordered by four counters in a control
// block of shared host memory that both ranks map. The protocol is written
// against `RingQueue` (what an ordered queue of work can do: wait until a
// shared word reaches a value, store a word, copy bytes) so that it runs
// on a CUDA stream (`cuStreamWaitValue64`, `cuStreamWriteValue64`,
// `cudaMemcpyAsync`) and, in tests, on a host thread between CPU ranks.
//
// One transfer as `DevicePeerLink` makes it (a header, then its bytes):
//
//  * the sender's queue waits for a free header slot (`headersRead` at
//    least the headers posted minus the slots), stores the header in its
//    slot and then the new count of headers posted;
//  * its bytes go in chunks of at most a quarter of the ring that never
//    wrap its end: for each, the queue waits until the ring has room
//    (`bytesReleased` at least the bytes written plus the chunk minus the
//    ring), copies the chunk into the peer's ring and stores the new
//    count of bytes written;
//  * the receiver's queue waits for the next header (`headersPosted`); the
//    link's thread reads it from its slot and frees the slot
//    (`headersRead`), then the queue takes the bytes chunk by chunk:
//    waits until they are written, copies them out of its ring, stores the
//    new count of bytes released.
//
// Every count only grows, each has one writer, and no host thread waits on
// a peer: a queue that waits blocks only its own direction, so two ranks
// sending to each other with full rings go on as soon as each receives. A
// transfer larger than the ring streams through it. Aborting a channel
// stores a count past any wait's into the words this side waits on (which
// only the peer writes and only this side reads), so nothing queued stays
// blocked.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMM_RINGCHANNEL_H
#define MERAK_RUNTIME_COMM_RINGCHANNEL_H

#include "merak/Runtime/Comm/DevicePeerLink.h"
#include "merak/Runtime/Comm/Distributed.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace merak::runtime {

/// Header slots of a ring's control block.
constexpr int64_t kRingHeaderSlots = 16;

/// The control block of one direction, in memory both ranks map. Each
/// count is written by one side only; the rest is written by the receiver
/// before the sender opens the block.
struct RingControl {
  uint64_t magic;
  uint64_t version;
  /// The ring's bytes (the receiver's buffer).
  uint64_t ringBytes;
  uint64_t headerSlots;
  /// Written by the sender.
  alignas(64) uint64_t headersPosted;
  alignas(64) uint64_t bytesWritten;
  /// Set by the sender's host once it no longer maps the ring (the
  /// receiver frees the ring only then).
  alignas(64) uint64_t detached;
  /// Written by the receiver.
  alignas(64) uint64_t headersRead;
  alignas(64) uint64_t bytesReleased;
  /// The receiver's ring as the device library exports it (a CUDA IPC
  /// handle); unused between host ranks.
  alignas(64) unsigned char ringHandle[64];
  /// Headers as 64-bit words: magic, tag, bytes, sequence.
  alignas(64) uint64_t slots[kRingHeaderSlots][4];

  static constexpr uint64_t kMagic = 0x474e524b4152454dULL; // "MERAKRNG"
  static constexpr uint64_t kVersion = 1;
  /// What an aborted side stores into the counts it waits on.
  static constexpr uint64_t kUnblocked = uint64_t(1) << 62;

  /// A fresh block for a ring of `ringBytes`.
  void init(uint64_t ringBytes);
  /// Empty when the block is one `init` made, else what is wrong with it.
  std::string check() const;
};

/// The ordered queue a channel's work runs on, as the ring protocol needs
/// it. Each call queues and returns; the queue runs the work in order.
class RingQueue {
public:
  virtual ~RingQueue();
  /// The queue waits until `*word` (shared memory) is at least `value`.
  virtual absl::Status enqueueWaitAtLeast(const uint64_t *word,
                                          uint64_t value) = 0;
  /// The queue stores `value` into `*word` (shared memory), after
  /// everything before it is done and visible to the peer.
  virtual absl::Status enqueueStore(uint64_t *word, uint64_t value) = 0;
  /// The queue copies `bytes` bytes (device memory, or the ring).
  virtual absl::Status enqueueBytes(void *to, const void *from,
                                    int64_t bytes) = 0;
};

/// A chunk of a transfer through a ring: `bytes` bytes at ring offset
/// `ringOffset`, the transfer's bytes from `offset`.
struct RingChunk {
  int64_t offset = 0;
  int64_t ringOffset = 0;
  int64_t bytes = 0;
};

/// The chunks of a transfer of `bytes` that starts when `streamed` bytes
/// went through a ring of `ringBytes` before it: each at most a quarter of
/// the ring (at least one byte), none across the ring's end.
std::vector<RingChunk> ringChunks(int64_t streamed, int64_t bytes,
                                  int64_t ringBytes);

/// One side of one direction's ring: the transfer calls of `PeerChannel`
/// queued on a `RingQueue`. `ring` is the ring's memory as this side
/// addresses it (the receiver's own buffer; the sender's mapping of it).
class RingProtocol {
public:
  RingProtocol(RingControl &control, char *ring, RingQueue &queue);

  /// Sender.
  absl::Status sendHeader(const PeerHeader &header);
  absl::Status send(const void *data, int64_t bytes);
  /// Receiver.
  absl::Status recvHeader();
  /// The header the last `recvHeader` waited for (once the queue passed
  /// it); frees its slot.
  PeerHeader receivedHeader();
  absl::Status recv(void *data, int64_t bytes);

  /// Unblocks whatever the queue waits for (see the file comment); later
  /// calls fail.
  void unblock(bool sending);

private:
  /// Queues `bytes` at `data` through the ring, into it (`toRing`) or out
  /// of it, chunk by chunk: each chunk after `waitFor` reaches its end
  /// less `lag`, then its copy, then its end stored into `done`.
  absl::Status stream(void *data, int64_t bytes, bool toRing,
                      const uint64_t &waitFor, uint64_t lag, uint64_t &done);

  RingControl &control;
  char *ring;
  RingQueue &queue;
  int64_t ringBytes;
  /// This side's counts of headers and bytes, as queued.
  uint64_t headers = 0;
  uint64_t streamed = 0;
  bool unblocked = false;
};

/// A channel `Base` (a `PeerChannel` whose queue runs the work) whose
/// transfers are `protocol()`'s: the CUDA IPC channel on a stream, the
/// host's on a thread.
template <typename Base> class RingChannel : public Base {
public:
  using Base::Base;

  absl::Status enqueueSendHeader(const PeerHeader &header) override {
    return protocol().sendHeader(header);
  }
  absl::Status enqueueSend(const void *data, int64_t bytes) override {
    return protocol().send(data, bytes);
  }
  absl::Status enqueueRecvHeader() override { return protocol().recvHeader(); }
  PeerHeader receivedHeader() override { return protocol().receivedHeader(); }
  absl::Status enqueueRecv(void *data, int64_t bytes) override {
    return protocol().recv(data, bytes);
  }

protected:
  virtual RingProtocol &protocol() = 0;
};

/// Shared memory under /dev/shm that both ranks of a direction map: the
/// receiver creates it (`create`), the sender opens it by name (`open`),
/// and the receiver removes the name once the sender has it (`unlink`),
/// so that nothing stays behind a run however it ends.
class SharedRegion {
public:
  SharedRegion() = default;
  ~SharedRegion();
  SharedRegion(const SharedRegion &) = delete;
  SharedRegion &operator=(const SharedRegion &) = delete;

  /// A new region of `bytes` bytes, zeroed, named after `key`, this
  /// process and a counter (its name is `name()`). The first call of a
  /// process removes the regions of processes that are gone.
  static absl::StatusOr<std::unique_ptr<SharedRegion>>
  create(const std::string &key, int64_t bytes);
  /// The region called `name` (of at least `bytes` bytes).
  static absl::StatusOr<std::unique_ptr<SharedRegion>>
  open(const std::string &name, int64_t bytes);

  void *data() const { return base; }
  int64_t size() const { return length; }
  const std::string &name() const { return path; }
  /// Removes the name (the mapping stays).
  void unlink();

  /// Removes the regions whose creator is gone (a rank killed while its
  /// link was being made, before its peer had opened them).
  static void removeOrphans();

private:
  /// Maps `bytes` of the open file `fd`, which it closes.
  absl::Status mapFile(int fd, int64_t bytes);

  void *base = nullptr;
  int64_t length = 0;
  std::string path;
  bool named = false;
};

/// The bytes of each direction's ring: MERAK_P2P_RING_BYTES where set (at
/// least 64, at most 2^40), else `fallback`; an error names a bad value.
absl::StatusOr<int64_t> ringBytesSetting(int64_t fallback);

/// How the two ranks of each direction set up their ring, through the
/// run's rendezvous: the receiver makes its half and shares a text (the
/// control block's name and what else the sender needs), the sender opens
/// its half from that text and says so, and the receiver then removes
/// what it named (`unlink`). Every rank goes through `directions` in the
/// list's order (the same on every rank), so each wait is for a value its
/// peer gives before it waits itself. `prefix` keeps one link's keys apart
/// from another's.
struct RingSetup {
  std::function<absl::StatusOr<std::string>(int64_t from)> makeIncoming;
  std::function<absl::Status(int64_t to, const std::string &shared)>
      openOutgoing;
  std::function<void(int64_t from)> unlink;
};
absl::Status
setUpRings(DistributedJob &job,
           const std::vector<std::pair<int64_t, int64_t>> &directions,
           const std::string &prefix, const RingSetup &setup);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMM_RINGCHANNEL_H
