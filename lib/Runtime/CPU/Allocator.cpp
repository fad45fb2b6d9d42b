//===- Allocator.cpp - the CPU backend's allocation accounting ------------===//
//
// A c10 allocator that counts bytes and hands a kernel's result the arena
// slot the plan reserved for it.
//
//===----------------------------------------------------------------------===//

#include "Allocator.h"
#include "CpuTensor.h"

#include <c10/core/Allocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <cstring>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace merak::runtime::cpu {
namespace {

/// A slot of a program's arena that the running kernel's result of
/// `bytes` bytes goes to: the first allocation of exactly that size on the
/// executor's thread while the kernel runs takes it. A kernel that
/// allocates its result differently (a temporary of the same size first, a
/// result of another size) leaves it unused and its result on the heap,
/// which is correct either way: the slot is reserved for the result's
/// lifetime, and nothing else lives there meanwhile.
struct ArenaSlot {
  void *data;
  size_t bytes;
  bool taken;
};
thread_local std::vector<ArenaSlot> arenaSlots;

/// Wraps c10's CPU allocation with a byte count, so the executor can report
/// the peak of everything ATen holds. Each block carries its size in a
/// 64-byte header (which keeps c10's 64-byte alignment); data and context
/// pointers coincide, as `raw_allocate` (used by oneDNN) requires.
class CountingAllocator final : public c10::Allocator {
public:
  static constexpr size_t kHeader = 64;

  c10::DataPtr allocate(size_t n) const override {
    for (ArenaSlot &slot : arenaSlots)
      if (!slot.taken && slot.bytes == n) {
        // Counted with the arena; freed with it.
        slot.taken = true;
        const_cast<CountingAllocator *>(this)->arenaResults.fetch_add(1);
        return {slot.data, slot.data, &keep, c10::Device(c10::DeviceType::CPU)};
      }
    auto *base = static_cast<uint8_t *>(c10::alloc_cpu(n + kHeader));
    std::memcpy(base, &n, sizeof(n));
    void *data = base + kHeader;
    add(int64_t(n));
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  static CountingAllocator &get() {
    static CountingAllocator *instance = new CountingAllocator();
    return *instance;
  }

  std::atomic<int64_t> live{0}, peak{0}, arenaResults{0};

private:
  static void keep(void *) {}
  static void release(void *data) {
    if (!data)
      return;
    auto *base = static_cast<uint8_t *>(data) - kHeader;
    size_t n;
    std::memcpy(&n, base, sizeof(n));
    get().live.fetch_sub(int64_t(n));
    c10::free_cpu(base);
  }
  void add(int64_t n) const {
    auto &self = const_cast<CountingAllocator &>(*this);
    int64_t now = self.live.fetch_add(n) + n;
    int64_t old = self.peak.load();
    while (now > old && !self.peak.compare_exchange_weak(old, now)) {
    }
  }
};

} // namespace

ArenaScope::ArenaScope(const KernelCall &call, const Instruction &inst) {
  // oneDNN's convolutions take over the blocks they allocate (and free
  // them with free()), so theirs stay with the allocator.
  if (!call.arena || inst.kind == OpKind::Conv2d ||
      inst.kind == OpKind::Conv2dBackward)
    return;
  auto *base = static_cast<uint8_t *>(unwrap(*call.arena).data_ptr());
  for (size_t r = 0; r < inst.storage.size(); ++r)
    if (inst.storage[r].arenaOffset >= 0)
      arenaSlots.push_back(
          {base + inst.storage[r].arenaOffset,
           size_t(call.program->values[inst.results[r]].type.byteSize()),
           false});
}

ArenaScope::~ArenaScope() { arenaSlots.clear(); }

void installCountingAllocator() {
  static bool installed = [] {
#if defined(__GLIBC__)
    // glibc serves a block above its mmap threshold (128 KiB at first,
    // rising with what is freed) with a fresh mapping and unmaps it when it
    // is freed, so tensors freed and allocated again every step outside
    // the arena (a pipeline's activations, held from a forward task to its
    // backward) fault their pages in again every step: a fifth of a
    // two-stage GPipe step of the encoder fixture. Blocks up to 32 MiB come
    // from the heap instead, which keeps what is freed for the next step.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
    c10::SetAllocator(c10::DeviceType::CPU, &CountingAllocator::get());
    return true;
  }();
  (void)installed;
}

MemoryStats allocationStats() {
  CountingAllocator &alloc = CountingAllocator::get();
  return {alloc.live.load(), alloc.peak.load(), alloc.arenaResults.load()};
}

void resetAllocationPeak() {
  CountingAllocator &alloc = CountingAllocator::get();
  alloc.peak.store(alloc.live.load());
}

} // namespace merak::runtime::cpu
