//===- DevicePeerLink.h - pipeline transfers on a device library -*- C++
//-*-===//
//
// Pipeline transfers from device memory to device memory through a
// collective library's point-to-point calls (NCCL's `ncclSend` and
// `ncclRecv`), written against `PeerChannel` and `PeerDevice` so that
// everything but the library's and the driver's calls runs, and is
// tested, without a GPU.
//
// The library pairs a send with a receive by their order on a
// communicator, not by a tag, and a posted receive holds its queue until
// its send comes; a `PeerLink`'s transfers match by (pair, tag) in post
// order, whatever order the ranks post them in (the dynamic schedule picks
// its next task at run time). So:
//
//  * each direction between two ranks is a channel of its own (a
//    communicator of the two ranks and a queue on each): one rank only
//    sends on it, the other only receives, so transfers in different
//    directions or between other pairs never wait on each other;
//  * a transfer is a header (its tag and byte count) and then its bytes:
//    the transfer's tensors packed in one buffer at 256-byte aligned
//    offsets (one dense tensor goes from where it is), after the compute
//    work queued before the send (an event, not a synchronisation);
//  * the receiving rank keeps a header receive posted on every incoming
//    channel; a thread of the link reads each header as it arrives,
//    allocates its bytes and posts their receive at once, and files the
//    arrival under its (peer, tag), so a sender waits for the receiver's
//    queue, never for its schedule;
//  * a `recv` takes the arrivals of its (peer, tag) in order; its tensors
//    are views of the arrived buffer, read by compute work queued after
//    the receive's `finish` (the compute queue waits for the transfer); a
//    byte count other than its types' is an error naming both ranks and
//    the tag;
//  * a transfer that does not finish within the time-out, or that the
//    library reports failed, aborts every channel (nothing of this rank
//    stays blocked in the library) and fails naming the peer and what the
//    run's heartbeat knows of it;
//  * destroying the link sends a closing header on each outgoing channel
//    and waits, within the time-out, for each incoming channel's, so that
//    no receive is left posted when the communicators are destroyed.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMM_DEVICEPEERLINK_H
#define MERAK_RUNTIME_COMM_DEVICEPEERLINK_H

#include "merak/Runtime/Comm/DeviceCollectives.h"
#include "merak/Runtime/Pipeline.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace merak::runtime {

/// What precedes a transfer's bytes on a channel.
struct PeerHeader {
  int64_t magic = 0;
  /// The transfer's tag, or `kClose` (the sender's link is going away).
  int64_t tag = 0;
  /// The bytes that follow (none after `kClose`).
  int64_t bytes = 0;
  /// How many headers the channel carried before this one.
  int64_t sequence = 0;

  static constexpr int64_t kMagic = 0x503250414b52454d; // "MERAKP2P"
  static constexpr int64_t kClose = -1;
};

/// One direction between this rank and a peer: a communicator of the two
/// and a queue on this rank, on which this rank only sends (an outgoing
/// channel) or only receives (an incoming one). Every `enqueue*` call
/// queues work in order and returns at once; errors are those the call
/// itself reports (the library's asynchronous ones come from
/// `asyncError`). The link calls a channel from one thread at a time.
class PeerChannel {
public:
  virtual ~PeerChannel();

  /// The queue waits for the compute work queued so far.
  virtual absl::Status enqueueWaitForCompute() = 0;
  /// Copies `from` to `to` (one shape and type, any strides).
  virtual absl::Status enqueueCopy(const DeviceBuffer &from,
                                   const DeviceBuffer &to) = 0;
  /// Outgoing: sends `header` (the channel keeps a copy).
  virtual absl::Status enqueueSendHeader(const PeerHeader &header) = 0;
  /// Outgoing: sends `bytes` bytes at `data`.
  virtual absl::Status enqueueSend(const void *data, int64_t bytes) = 0;
  /// Incoming: receives the next header; `receivedHeader` reads it once
  /// the queue has passed the marker after this call.
  virtual absl::Status enqueueRecvHeader() = 0;
  virtual PeerHeader receivedHeader() = 0;
  /// Incoming: receives `bytes` bytes into `data`.
  virtual absl::Status enqueueRecv(void *data, int64_t bytes) = 0;
  /// Dense device memory of `bytes` bytes (at least one), usable by this
  /// queue's work queued from now on.
  virtual absl::StatusOr<TensorHandle> allocate(int64_t bytes) = 0;

  /// A marker after everything queued so far.
  virtual absl::StatusOr<int64_t> mark() = 0;
  /// Whether the queue has passed `marker` (an error if the device or the
  /// library reported one).
  virtual absl::StatusOr<bool> reached(int64_t marker) = 0;
  /// The compute work queued from now on waits for `marker`.
  virtual absl::Status joinCompute(int64_t marker) = 0;
  /// An error the library reported for the channel's communicator, else
  /// ok.
  virtual absl::Status asyncError() = 0;
  /// Aborts the communicator: queued and running transfers end, and the
  /// channel cannot be used again.
  virtual void abort() = 0;
};

/// The device's tensors as the link reads and makes them.
class PeerDevice {
public:
  virtual ~PeerDevice();

  /// `tensor`, a tensor of this device, as a buffer.
  virtual absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) = 0;
  /// A dense tensor of `type` at `byteOffset` in `buffer` (memory a
  /// channel allocated), sharing that memory.
  virtual absl::StatusOr<TensorHandle> view(const TensorHandle &buffer,
                                            int64_t byteOffset,
                                            const TensorType &type) = 0;
};

struct DevicePeerLinkOptions {
  /// This rank (global).
  int64_t rank = 0;
  /// How long a transfer may take from the start of its wait to its end,
  /// and how long the link waits for its peers' closing headers.
  std::chrono::milliseconds timeout{60000};
  /// After a failure with `ranks`: what the run knows of them, or empty.
  std::function<std::string(const std::vector<int64_t> &ranks)> diagnose;
  /// The library's name in messages.
  std::string library = "NCCL";
  /// Run first on the link's thread, which calls the channels too (CUDA:
  /// makes the rank's GPU the thread's current device).
  std::function<void()> threadSetup;
};

/// The transfers of this rank with its peers: `outgoing` by the peer each
/// channel sends to, `incoming` by the peer each receives from.
std::unique_ptr<PeerLink>
makeDevicePeerLink(std::unique_ptr<PeerDevice> device,
                   std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing,
                   std::map<int64_t, std::unique_ptr<PeerChannel>> incoming,
                   DevicePeerLinkOptions options);

/// Where each tensor of a transfer of `types` lies in its packed buffer
/// (256-byte aligned offsets); returns the buffer's bytes.
int64_t packedLayout(const std::vector<TensorType> &types,
                     std::vector<int64_t> &offsets);

/// Every direction (from, to) between global ranks in which a pipelined
/// run of `plan`'s shape sends tensors, on any rank: activations and
/// gradients between the ranks of neighbouring stages, the loss from its
/// stage's rank to every other, tied parameters' gradients among their
/// owners, and, for the dynamic schedule, each stage mesh's first rank's
/// choices to the others. Pipeline rank p's mesh rank m is global rank
/// p * meshSize + m. The same on every rank, sorted.
std::vector<std::pair<int64_t, int64_t>>
pipelineDirections(const PipelinePlan &plan, int64_t meshSize);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMM_DEVICEPEERLINK_H
