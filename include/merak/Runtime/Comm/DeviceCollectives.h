//===- DeviceCollectives.h - collectives of a device's tensors --*- C++ -*-===//
//
// The mesh collectives on a device's own memory through a device
// collective library (NCCL on CUDA), written against one interface per
// rank, `CollectiveStream`, so that everything but the library's and the
// driver's calls runs, and is tested, without a GPU:
//
//  * each collective as the library's primitives over dense buffers:
//    all_reduce as one all-reduce (in place where the plan gives a
//    target); all_gather and reduce_scatter along any dimension as the
//    library's own all-gather and reduce-scatter over blocks moved to the
//    front by a strided copy (none when the dimension is already the
//    outermost); all_to_all as a grouped send/recv of those blocks;
//    broadcast; an average as the library's average for floating-point
//    types, a sum and a truncating division for integers;
//  * the work on the stream's communication queue, after the compute work
//    queued before it (an event, not a device-wide synchronisation), so that
//    it overlaps the compute queued after it until the first use of its
//    results, where the compute queue waits for it;
//  * a collective that does not finish within the time-out, or that the
//    library reports failed, aborts the library's communicators (so that
//    nothing of this rank stays blocked in them) and fails naming the
//    group's ranks and what the run's heartbeat knows of them.
//
//===----------------------------------------------------------------------===//

#ifndef MERAK_RUNTIME_COMM_DEVICECOLLECTIVES_H
#define MERAK_RUNTIME_COMM_DEVICECOLLECTIVES_H

#include "merak/Runtime/Comm/Distributed.h"
#include "merak/Runtime/Communicator.h"
#include "merak/Runtime/Program.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace merak::runtime {

/// Device memory as the stream reads and writes it: `data` of `type`, with
/// `strides` in elements (row-major when empty).
struct DeviceBuffer {
  void *data = nullptr;
  TensorType type;
  std::vector<int64_t> strides;
  /// Keeps the memory allocated while a collective in flight uses it.
  std::shared_ptr<const void> owner;

  /// Row-major strides of `type` where `strides` is empty.
  std::vector<int64_t> stridesOrDense() const;
  /// Whether the elements are packed in row-major order (dimensions of
  /// size 1 may have any stride).
  bool isDense() const;
};

/// The reductions of the collective libraries.
enum class DeviceReduction : uint8_t { Sum, Product, Max, Min, Average };

/// One block of a grouped send/recv: `count` elements at `data` to or from
/// the group's member `peer` (an index into the group's ranks).
struct DeviceTransfer {
  void *data = nullptr;
  int64_t count = 0;
  int64_t peer = 0;
};

/// One rank's device, its communication queue and its collective library's
/// communicators, one per process group of the program (`group` indexes
/// `Program::groups`). Every `enqueue*` call queues work on the
/// communication queue, in order, and returns at once; errors are those the
/// call itself reports (the library's asynchronous errors come from
/// `asyncError`). Element types are the tensors' (`DType`); the library
/// moves booleans as bytes.
class CollectiveStream {
public:
  virtual ~CollectiveStream();

  /// `tensor`, a tensor of this device, as a buffer.
  virtual absl::StatusOr<DeviceBuffer> describe(DeviceTensor &tensor) = 0;
  /// A handle to `tensor`'s memory (an in-place result).
  virtual absl::StatusOr<TensorHandle> alias(DeviceTensor &tensor) = 0;
  /// A fresh dense tensor of `type` on this device, usable on the
  /// communication queue after the next `enqueueWaitForCompute`.
  virtual absl::StatusOr<TensorHandle> allocate(const TensorType &type) = 0;

  /// The queue waits for the compute work queued so far.
  virtual absl::Status enqueueWaitForCompute() = 0;
  /// Copies `from` to `to` (one shape and type, any strides).
  virtual absl::Status enqueueCopy(const DeviceBuffer &from,
                                   const DeviceBuffer &to) = 0;
  /// Divides every element of the dense integer buffer `buffer` by `n`,
  /// truncating (an integer average).
  virtual absl::Status enqueueDivide(const DeviceBuffer &buffer, int64_t n) = 0;

  /// The library's collectives over `count` elements of `dtype` per
  /// member (an all-gather's send, a reduce-scatter's receive); `send`
  /// may equal `recv` (in place).
  virtual absl::Status enqueueAllReduce(int64_t group, const void *send,
                                        void *recv, int64_t count, DType dtype,
                                        DeviceReduction reduction) = 0;
  virtual absl::Status enqueueAllGather(int64_t group, const void *send,
                                        void *recv, int64_t count,
                                        DType dtype) = 0;
  virtual absl::Status enqueueReduceScatter(int64_t group, const void *send,
                                            void *recv, int64_t count,
                                            DType dtype,
                                            DeviceReduction reduction) = 0;
  virtual absl::Status enqueueBroadcast(int64_t group, const void *send,
                                        void *recv, int64_t count, DType dtype,
                                        int64_t root) = 0;
  /// The sends and receives as one group of the library's point-to-point
  /// calls (they progress together, so no order among them can deadlock).
  virtual absl::Status
  enqueueExchange(int64_t group, DType dtype,
                  const std::vector<DeviceTransfer> &sends,
                  const std::vector<DeviceTransfer> &receives) = 0;

  /// A marker after everything queued so far.
  virtual absl::StatusOr<int64_t> mark() = 0;
  /// Whether the queue has passed `marker` (an error if the device
  /// reported one).
  virtual absl::StatusOr<bool> reached(int64_t marker) = 0;
  /// The compute work queued from now on waits for `marker`.
  virtual absl::Status joinCompute(int64_t marker) = 0;
  /// An error the library reported for any of its communicators since the
  /// last call, else ok.
  virtual absl::Status asyncError() = 0;
  /// Aborts every communicator: queued and running collectives end, and
  /// the communicators cannot be used again.
  virtual void abort() = 0;
};

struct DeviceCommunicatorOptions {
  int64_t rank = 0;
  int64_t worldSize = 1;
  /// The process groups, `Program::groups` of the program (bound to this
  /// rank) whose collectives it runs.
  std::vector<ProcessGroupSpec> groups;
  /// How long a collective may take from its start to its end.
  std::chrono::milliseconds timeout{60000};
  /// After a failure among `ranks`: what the run knows of them (a rank that
  /// reported a failure, one whose heartbeat stopped), or empty.
  std::function<std::string(const std::vector<int64_t> &ranks)> diagnose;
  /// Called with (step, instruction index) as each collective starts, so
  /// the heartbeat says where this rank is.
  std::function<void(int64_t, int64_t)> progress;
  /// The library's name in messages.
  std::string library = "NCCL";
};

/// The options of a device communicator of `program`'s groups on `job`'s
/// rank, the library named `library`: failures diagnosed and progress
/// reported through `job`.
DeviceCommunicatorOptions
deviceCommunicatorOptions(DistributedJob &job, const Program &program,
                          std::chrono::milliseconds timeout,
                          std::string library);

/// The mesh collectives of `options.groups` on `stream`.
std::unique_ptr<Communicator>
makeDeviceCommunicator(std::unique_ptr<CollectiveStream> stream,
                       DeviceCommunicatorOptions options);

} // namespace merak::runtime

#endif // MERAK_RUNTIME_COMM_DEVICECOLLECTIVES_H
