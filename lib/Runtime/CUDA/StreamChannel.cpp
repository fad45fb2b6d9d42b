//===- StreamChannel.cpp - pipeline channels on a CUDA stream -------------===//

#include "StreamChannel.h"
#include "Collectives.h"
#include "Copy.h"

#include "absl/strings/str_cat.h"

namespace merak::runtime::cuda {

std::string cudaText(cudaError_t s) {
  return absl::StrCat(cudaGetErrorString(s), " (", cudaGetErrorName(s), ")");
}

absl::Status cudaStatus(cudaError_t s, const char *what) {
  if (s == cudaSuccess)
    return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaText(s)));
}

View viewOf(const DeviceBuffer &b) {
  if (b.type.shape.size() > size_t(kMaxDims))
    throw CudaError(absl::StrCat("a collective's buffer of rank ",
                                 b.type.shape.size(), " (at most ", kMaxDims,
                                 ")"));
  View v;
  v.data = b.data;
  v.type = elemTypeOf(b.type.dtype);
  v.rank = int(b.type.shape.size());
  std::vector<int64_t> strides = b.stridesOrDense();
  for (int d = 0; d < v.rank; ++d) {
    v.sizes[d] = b.type.shape[d];
    v.strides[d] = strides[d];
  }
  return v;
}

absl::Status waitForCompute(DeviceState &dev, cudaEvent_t event,
                            cudaStream_t stream) {
  if (absl::Status s = cudaStatus(cudaEventRecord(event, dev.stream),
                                  "recording the compute stream");
      !s.ok())
    return s;
  return cudaStatus(cudaStreamWaitEvent(stream, event, 0),
                    "ordering a communication stream");
}

absl::Status stridedCopy(const DeviceBuffer &from, const DeviceBuffer &to,
                         cudaStream_t stream, const char *what) {
  try {
    copyStrided(viewOf(from), viewOf(to), stream);
  } catch (const std::exception &e) {
    return absl::InternalError(e.what());
  }
  return cudaStatus(cudaGetLastError(), what);
}

absl::StatusOr<int64_t> recordMarker(cudaStream_t stream,
                                     std::map<int64_t, cudaEvent_t> &events,
                                     int64_t &next) {
  cudaEvent_t event;
  if (absl::Status s =
          cudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                     "creating an event");
      !s.ok())
    return s;
  if (absl::Status s =
          cudaStatus(cudaEventRecord(event, stream), "recording an event");
      !s.ok()) {
    cudaEventDestroy(event);
    return s;
  }
  events[next] = event;
  return next++;
}

absl::StatusOr<DeviceBuffer> CudaPeerDevice::describe(DeviceTensor &tensor) {
  CudaTensor &t = unwrap(tensor);
  return DeviceBuffer{t.data(), t.type, t.strides, t.storage};
}

absl::StatusOr<TensorHandle> CudaPeerDevice::view(const TensorHandle &buffer,
                                                  int64_t byteOffset,
                                                  const TensorType &type) {
  const CudaTensor &whole = unwrap(*buffer);
  return TensorHandle(std::make_shared<CudaTensor>(
      whole.storage, whole.byteOffset + byteOffset, type));
}

StreamChannel::StreamChannel(DeviceState &dev, cudaStream_t stream)
    : dev(dev), stream(stream) {}

StreamChannel::~StreamChannel() {
  if (abandoned)
    return;
  cudaStreamSynchronize(stream);
  for (auto &[marker, event] : events)
    cudaEventDestroy(event);
  if (computeDone)
    cudaEventDestroy(computeDone);
  cudaStreamDestroy(stream);
}

absl::Status StreamChannel::init() {
  return cudaStatus(
      cudaEventCreateWithFlags(&computeDone, cudaEventDisableTiming),
      "creating an event");
}

absl::Status StreamChannel::enqueueWaitForCompute() {
  return waitForCompute(dev, computeDone, stream);
}

absl::Status StreamChannel::enqueueCopy(const DeviceBuffer &from,
                                        const DeviceBuffer &to) {
  return stridedCopy(from, to, stream, "a transfer's packing copy");
}

absl::StatusOr<TensorHandle> StreamChannel::allocate(int64_t bytes) {
  try {
    return TensorHandle(std::make_shared<CudaTensor>(
        dev.allocateOn(std::max<int64_t>(bytes, 1), stream), 0,
        TensorType{DType::I64, {(bytes + 7) / 8}}));
  } catch (const CudaError &e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a pipeline transfer's buffer: ", e.what()));
  }
}

absl::StatusOr<int64_t> StreamChannel::mark() {
  return recordMarker(stream, events, next);
}

absl::StatusOr<bool> StreamChannel::reached(int64_t marker) {
  // Markers are reached in order: the ones before are done too.
  while (!events.empty() && events.begin()->first <= marker) {
    cudaError_t s = cudaEventQuery(events.begin()->second);
    if (s == cudaErrorNotReady)
      return false;
    if (absl::Status failed = cudaStatus(s, "a pipeline transfer on the GPU");
        !failed.ok())
      return failed;
    cudaEventDestroy(events.begin()->second);
    events.erase(events.begin());
  }
  return true;
}

absl::Status StreamChannel::joinCompute(int64_t marker) {
  auto it = events.find(marker);
  if (it == events.end())
    return absl::OkStatus(); // reached and released: nothing to wait for
  return cudaStatus(cudaStreamWaitEvent(dev.stream, it->second, 0),
                    "ordering the compute stream after a transfer");
}

CudaCollectiveStream::CudaCollectiveStream(DeviceState &dev,
                                           cudaStream_t stream)
    : dev(dev), stream(stream) {
  cudaEventCreateWithFlags(&computeDone, cudaEventDisableTiming);
}

CudaCollectiveStream::~CudaCollectiveStream() {
  cudaStreamSynchronize(stream);
  for (auto &[marker, event] : events)
    cudaEventDestroy(event);
  cudaEventDestroy(computeDone);
  cudaStreamDestroy(stream);
}

absl::StatusOr<DeviceBuffer>
CudaCollectiveStream::describe(DeviceTensor &tensor) {
  CudaTensor &t = unwrap(tensor);
  return DeviceBuffer{t.data(), t.type, t.strides, t.storage};
}

absl::StatusOr<TensorHandle> CudaCollectiveStream::alias(DeviceTensor &tensor) {
  return TensorHandle(std::make_shared<CudaTensor>(unwrap(tensor)));
}

absl::StatusOr<TensorHandle>
CudaCollectiveStream::allocate(const TensorType &type) {
  try {
    return TensorHandle(std::make_shared<CudaTensor>(
        dev.allocate(std::max<int64_t>(type.byteSize(), 1)), 0, type));
  } catch (const CudaError &e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a collective's buffer: ", e.what()));
  }
}

absl::Status CudaCollectiveStream::enqueueWaitForCompute() {
  return waitForCompute(dev, computeDone, stream);
}

absl::Status CudaCollectiveStream::enqueueCopy(const DeviceBuffer &from,
                                               const DeviceBuffer &to) {
  return stridedCopy(from, to, stream, "a collective's copy");
}

absl::Status CudaCollectiveStream::enqueueDivide(const DeviceBuffer &buffer,
                                                 int64_t n) {
  try {
    divideIntegers(viewOf(buffer), n, stream);
  } catch (const std::exception &e) {
    return absl::InternalError(e.what());
  }
  return cudaStatus(cudaGetLastError(), "an integer average");
}

absl::StatusOr<int64_t> CudaCollectiveStream::mark() {
  return recordMarker(stream, events, next);
}

absl::StatusOr<bool> CudaCollectiveStream::reached(int64_t marker) {
  auto it = events.find(marker);
  if (it == events.end())
    return true;
  cudaError_t s = cudaEventQuery(it->second);
  if (s == cudaErrorNotReady)
    return false;
  if (absl::Status failed = cudaStatus(s, "a collective on the GPU");
      !failed.ok())
    return failed;
  return true;
}

absl::Status CudaCollectiveStream::joinCompute(int64_t marker) {
  auto it = events.find(marker);
  if (it == events.end())
    return absl::OkStatus();
  absl::Status s = cudaStatus(cudaStreamWaitEvent(dev.stream, it->second, 0),
                              "ordering the compute stream after a collective");
  cudaEventDestroy(it->second);
  events.erase(it);
  return s;
}

std::unique_ptr<PeerLink>
makeCudaPeerLink(DistributedJob &job, DeviceState &dev,
                 std::map<int64_t, std::unique_ptr<PeerChannel>> outgoing,
                 std::map<int64_t, std::unique_ptr<PeerChannel>> incoming,
                 std::chrono::milliseconds timeout,
                 const std::string &library) {
  DevicePeerLinkOptions options;
  options.rank = job.rank();
  options.timeout = timeout;
  options.library = library;
  options.diagnose = [&job](const std::vector<int64_t> &ranks) {
    return job.diagnose(ranks);
  };
  // The link's thread queues receives and events on this rank's GPU.
  options.threadSetup = [device = dev.device] { cudaSetDevice(device); };
  return makeDevicePeerLink(std::make_unique<CudaPeerDevice>(),
                            std::move(outgoing), std::move(incoming),
                            std::move(options));
}

} // namespace merak::runtime::cuda
