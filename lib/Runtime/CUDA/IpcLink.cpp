//===- IpcLink.cpp - pipeline transfers between GPUs through CUDA IPC -----===//
//
// See IpcLink.h. A direction is set up through the run's rendezvous: the
// receiver makes the control block (/dev/shm) and the ring (`cudaMalloc`,
// exported with `cudaIpcGetMemHandle` into the block) and shares the
// block's name; the sender opens both and says so, and the receiver then
// removes the name. Each side registers the block with CUDA so that its
// stream can wait on and write the counts; the driver's stream memory
// operations are found at run time (`cudaGetDriverEntryPointByVersion`),
// so the runtime needs no link to the driver library.
//
//===----------------------------------------------------------------------===//

#include "merak/Runtime/CUDA/IpcLink.h"
#include "StreamChannel.h"
#include "merak/Runtime/Comm/RingChannel.h"

#include "absl/strings/str_cat.h"

#include <cuda.h>

#include <atomic>
#include <cstring>
#include <thread>

namespace merak::runtime {
namespace {

using cuda::cudaStatus;
using cuda::DeviceState;
using Clock = std::chrono::steady_clock;

static_assert(sizeof(cudaIpcMemHandle_t) <= sizeof(RingControl::ringHandle),
              "a CUDA IPC handle fits a control block's ring handle");

/// A control block's bytes in shared memory: one page.
constexpr int64_t kControlBytes = 4096;
static_assert(int64_t(sizeof(RingControl)) <= kControlBytes,
              "a ring's control block fits a page");

#define MERAK_IPC_TRY(status)                                                  \
  do {                                                                         \
    if (absl::Status s_ = (status); !s_.ok())                                  \
      return s_;                                                               \
  } while (false)

/// The driver's stream memory operations on 64-bit words.
struct StreamMemOps {
  using Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  Fn wait = nullptr;
  Fn write = nullptr;
  /// `CU_STREAM_WAIT_VALUE_GEQ`, with a flush of the peer's writes where
  /// the device can.
  unsigned waitFlags = CU_STREAM_WAIT_VALUE_GEQ;
};

/// The driver's function `name` (as of CUDA 12.0), or an error.
absl::StatusOr<void *> driverFunction(const char *name) {
  void *fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  cudaError_t s = cudaGetDriverEntryPointByVersion(name, &fn, 12000,
                                                   cudaEnableDefault, &found);
  if (s != cudaSuccess || found != cudaDriverEntryPointSuccess || !fn)
    return absl::FailedPreconditionError(absl::StrCat(
        "--p2p=shm between GPUs needs the driver's ", name,
        ", which this driver does not give",
        s != cudaSuccess ? absl::StrCat(" (", cuda::cudaText(s), ")") : ""));
  return fn;
}

absl::StatusOr<StreamMemOps> streamMemOps(int device) {
  StreamMemOps ops;
  absl::StatusOr<void *> wait = driverFunction("cuStreamWaitValue64");
  absl::StatusOr<void *> write = driverFunction("cuStreamWriteValue64");
  absl::StatusOr<void *> get = driverFunction("cuDeviceGet");
  absl::StatusOr<void *> attribute = driverFunction("cuDeviceGetAttribute");
  for (const auto *f : {&wait, &write, &get, &attribute})
    if (!f->ok())
      return f->status();
  ops.wait = reinterpret_cast<StreamMemOps::Fn>(*wait);
  ops.write = reinterpret_cast<StreamMemOps::Fn>(*write);
  auto deviceGet = reinterpret_cast<CUresult (*)(CUdevice *, int)>(*get);
  auto getAttribute =
      reinterpret_cast<CUresult (*)(int *, CUdevice_attribute, CUdevice)>(
          *attribute);
  CUdevice d = 0;
  int has64 = 0, flush = 0;
  if (deviceGet(&d, device) != CUDA_SUCCESS ||
      getAttribute(&has64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
                   d) != CUDA_SUCCESS ||
      getAttribute(&flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, d) !=
          CUDA_SUCCESS)
    return absl::InternalError(
        absl::StrCat("cannot read GPU ", device, "'s attributes"));
  if (!has64)
    return absl::FailedPreconditionError(absl::StrCat(
        "--p2p=shm between GPUs: GPU ", device,
        " cannot wait on 64-bit values in a stream; use --p2p=nccl"));
  if (flush)
    ops.waitFlags |= CU_STREAM_WAIT_VALUE_FLUSH;
  return ops;
}

absl::Status driverStatus(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS)
    return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed (CUresult ", r, ")"));
}

/// A direction's control block as this rank maps it, registered with CUDA
/// so that a stream can wait on and write its words.
struct MappedControl {
  std::unique_ptr<SharedRegion> region;
  char *device = nullptr;
  bool registered = false;

  ~MappedControl() {
    if (registered)
      cudaHostUnregister(region->data());
  }
  RingControl &control() const {
    return *static_cast<RingControl *>(region->data());
  }
  absl::Status registerWithCuda() {
    MERAK_IPC_TRY(cudaStatus(
        cudaHostRegister(region->data(), size_t(region->size()),
                         cudaHostRegisterMapped | cudaHostRegisterPortable),
        "registering a transfer ring's control block"));
    registered = true;
    void *d = nullptr;
    MERAK_IPC_TRY(
        cudaStatus(cudaHostGetDevicePointer(&d, region->data(), 0),
                   "the device address of a transfer ring's control block"));
    device = static_cast<char *>(d);
    return absl::OkStatus();
  }
  /// The device address of `word` (in the block).
  CUdeviceptr deviceAddress(const void *word) const {
    return CUdeviceptr(device + (static_cast<const char *>(word) -
                                 static_cast<const char *>(region->data())));
  }
};

/// A ring's device memory as this rank has it: its own (`cudaMalloc`), or
/// the peer's opened through its IPC handle.
struct RingMemory {
  char *data = nullptr;
  bool imported = false;
  ~RingMemory() { release(); }
  void release() {
    if (data)
      imported ? cudaIpcCloseMemHandle(data) : cudaFree(data);
    data = nullptr;
  }
};

/// One direction of one rank: the ring protocol on the channel's stream.
class IpcChannel final : public RingChannel<cuda::StreamChannel>,
                         private RingQueue {
public:
  IpcChannel(DeviceState &dev, cudaStream_t stream, const StreamMemOps &ops,
             std::unique_ptr<MappedControl> mapped,
             std::unique_ptr<RingMemory> ring, bool sending,
             std::chrono::milliseconds timeout)
      : RingChannel(dev, stream), ops(ops), mapped(std::move(mapped)),
        ring(std::move(ring)), sending(sending), timeout(timeout),
        ringProtocol(this->mapped->control(), this->ring->data, *this) {}

  ~IpcChannel() override {
    drain();
    RingControl &c = mapped->control();
    if (sending) {
      // The receiver frees its ring only once this mapping is closed.
      ring->release();
      __atomic_store_n(&c.detached, uint64_t(1), __ATOMIC_RELEASE);
      return;
    }
    const Clock::time_point deadline =
        Clock::now() +
        std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10));
    while (__atomic_load_n(&c.detached, __ATOMIC_ACQUIRE) == 0 &&
           Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (__atomic_load_n(&c.detached, __ATOMIC_ACQUIRE) == 0)
      ring->data = nullptr; // still mapped by a peer gone astray: kept
  }

  /// Failures show in the stream (`reached`).
  absl::Status asyncError() override { return absl::OkStatus(); }
  void abort() override {
    aborted = true;
    ringProtocol.unblock(sending);
  }

private:
  RingProtocol &protocol() override { return ringProtocol; }

  absl::Status enqueueWaitAtLeast(const uint64_t *word,
                                  uint64_t value) override {
    return driverStatus(ops.wait(CUstream(stream), mapped->deviceAddress(word),
                                 value, ops.waitFlags),
                        "cuStreamWaitValue64");
  }
  absl::Status enqueueStore(uint64_t *word, uint64_t value) override {
    return driverStatus(ops.write(CUstream(stream), mapped->deviceAddress(word),
                                  value, CU_STREAM_WRITE_VALUE_DEFAULT),
                        "cuStreamWriteValue64");
  }
  absl::Status enqueueBytes(void *to, const void *from,
                            int64_t bytes) override {
    return cudaStatus(cudaMemcpyAsync(to, from, size_t(bytes),
                                      cudaMemcpyDeviceToDevice, stream),
                      "a pipeline transfer's copy through the ring");
  }

  /// Waits, within the time-out, for the stream's work; an aborted
  /// channel's waits are released again and again meanwhile (the peer may
  /// still write the counts this side waits on).
  void drain() {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (cudaStreamQuery(stream) == cudaErrorNotReady) {
      if (Clock::now() > deadline && !aborted)
        abort();
      if (aborted)
        ringProtocol.unblock(sending);
      if (Clock::now() > deadline + std::chrono::seconds(1)) {
        abandonStream(); // stuck for good: left to the process's end
        return;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  StreamMemOps ops;
  std::unique_ptr<MappedControl> mapped;
  std::unique_ptr<RingMemory> ring;
  bool sending;
  std::chrono::milliseconds timeout;
  RingProtocol ringProtocol;
  std::atomic<bool> aborted{false};
};

std::atomic<int64_t> generations{0};

/// One direction being set up.
struct Direction {
  int64_t from = 0, to = 0;
  std::unique_ptr<MappedControl> mapped;
  std::unique_ptr<RingMemory> ring;
};

/// The receiver's half: the control block and a ring of `ringBytes`,
/// exported.
absl::Status makeIncoming(Direction &d, int64_t ringBytes) {
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::create(absl::StrCat(d.from, "-", d.to), kControlBytes);
  if (!region.ok())
    return region.status();
  d.mapped = std::make_unique<MappedControl>();
  d.mapped->region = *std::move(region);
  RingControl &c = d.mapped->control();
  c.init(uint64_t(ringBytes));
  d.ring = std::make_unique<RingMemory>();
  void *p = nullptr;
  MERAK_IPC_TRY(cudaStatus(cudaMalloc(&p, size_t(ringBytes)),
                           "a pipeline transfer ring's device memory"));
  d.ring->data = static_cast<char *>(p);
  cudaIpcMemHandle_t handle;
  MERAK_IPC_TRY(cudaStatus(cudaIpcGetMemHandle(&handle, p),
                           "exporting a transfer ring (cudaIpcGetMemHandle)"));
  std::memcpy(c.ringHandle, &handle, sizeof(handle));
  return absl::OkStatus();
}

/// The sender's half: the receiver's block (by `name`) and ring, opened.
absl::Status openOutgoing(Direction &d, const std::string &name) {
  absl::StatusOr<std::unique_ptr<SharedRegion>> region =
      SharedRegion::open(name, kControlBytes);
  if (!region.ok())
    return absl::Status(
        region.status().code(),
        absl::StrCat("rank ", d.to,
                     "'s transfer ring: ", region.status().message(),
                     " (--p2p=shm between GPUs needs every pipeline peer on "
                     "this machine)"));
  d.mapped = std::make_unique<MappedControl>();
  d.mapped->region = *std::move(region);
  if (std::string bad = d.mapped->control().check(); !bad.empty())
    return absl::DataLossError(
        absl::StrCat(name, " (rank ", d.to, "'s transfer ring): ", bad));
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, d.mapped->control().ringHandle, sizeof(handle));
  void *p = nullptr;
  MERAK_IPC_TRY(cudaStatus(
      cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess),
      absl::StrCat("opening rank ", d.to,
                   "'s transfer ring (cudaIpcOpenMemHandle)")
          .c_str()));
  d.ring = std::make_unique<RingMemory>();
  d.ring->data = static_cast<char *>(p);
  d.ring->imported = true;
  return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::unique_ptr<PeerLink>>
createIpcPeerLink(DistributedJob &job,
                  const std::vector<std::pair<int64_t, int64_t>> &directions,
                  Backend &backend, std::chrono::milliseconds timeout) {
  DeviceState *dev = cuda::deviceStateOf(backend);
  if (!dev)
    return absl::InvalidArgumentError(absl::StrCat(
        "--p2p=shm between GPUs moves the CUDA backend's tensors, not the ",
        backend.name(), " backend's"));
  MERAK_IPC_TRY(cudaStatus(cudaSetDevice(dev->device), "cudaSetDevice"));
  absl::StatusOr<StreamMemOps> ops = streamMemOps(dev->device);
  if (!ops.ok())
    return ops.status();

  absl::StatusOr<int64_t> ringBytes = ringBytesSetting(kIpcRingBytes);
  if (!ringBytes.ok())
    return ringBytes.status();
  const int64_t me = job.rank();
  std::map<int64_t, Direction> in, out;
  RingSetup setup;
  setup.makeIncoming = [&](int64_t from) -> absl::StatusOr<std::string> {
    Direction &d = in[from];
    d.from = from;
    d.to = me;
    if (absl::Status s = makeIncoming(d, *ringBytes); !s.ok())
      return s;
    return d.mapped->region->name();
  };
  setup.openOutgoing = [&](int64_t to, const std::string &name) {
    Direction &d = out[to];
    d.from = me;
    d.to = to;
    return openOutgoing(d, name);
  };
  setup.unlink = [&](int64_t from) { in[from].mapped->region->unlink(); };
  MERAK_IPC_TRY(setUpRings(job, directions,
                           absl::StrCat("ipc-p2p/", generations++), setup));
  std::vector<Direction> mine;
  for (auto *m : {&in, &out})
    for (auto &[peer, d] : *m)
      mine.push_back(std::move(d));

  std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing, incoming;
  for (Direction &d : mine) {
    MERAK_IPC_TRY(d.mapped->registerWithCuda());
    cudaStream_t stream = nullptr;
    MERAK_IPC_TRY(
        cudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                   "creating a transfer stream"));
    const bool sending = d.from == me;
    auto channel =
        std::make_unique<IpcChannel>(*dev, stream, *ops, std::move(d.mapped),
                                     std::move(d.ring), sending, timeout);
    MERAK_IPC_TRY(channel->init());
    (sending ? outgoing[d.to] : incoming[d.from]) = std::move(channel);
  }
  return cuda::makeCudaPeerLink(job, *dev, std::move(outgoing),
                                std::move(incoming), timeout, "CUDA IPC");
}

} // namespace merak::runtime
