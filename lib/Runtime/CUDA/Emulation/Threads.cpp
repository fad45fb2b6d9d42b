//===- Threads.cpp - the CUDA emulator's threads, blocks and barriers -----===//
//
// Device.h's launch: each block's threads are fibers on the launching host
// thread, run in turn until each reaches a barrier or returns; a barrier
// releases its threads when every thread it waits for has arrived. Blocks
// run one after another. On x86-64 a fiber switch saves the callee-saved
// registers and swaps stacks (a few instructions); elsewhere it is
// ucontext's swapcontext, which also saves the signal mask (a system call
// per switch).
//
//===----------------------------------------------------------------------===//

#include "Emulation/Device.h"
#include "Emulation/Emulator.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define MERAK_EMULATOR_ASAN 1
#endif

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#if defined(__x86_64__)
#define MERAK_EMULATOR_STACK_SWITCH 1
/// Saves the callee-saved registers on the running stack, stores its
/// pointer in `*save` and resumes the stack at `to` (saved the same way,
/// or made by `newFiberStack`).
extern "C" void merakEmulatorSwitch(void **save, void *to);
asm(R"(
  .text
  .p2align 4
  .globl merakEmulatorSwitch
  .hidden merakEmulatorSwitch
  .type merakEmulatorSwitch, @function
merakEmulatorSwitch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size merakEmulatorSwitch, .-merakEmulatorSwitch
)");
#endif

namespace merak::runtime::cuda::emulation {
namespace {

/// What a thread waits at.
enum class Wait : uint8_t { Running, Block, Warp, Done };

struct Fiber {
  char *stack = nullptr;
  /// AddressSanitizer's record of the fiber's stack while it is switched
  /// away from.
  void *fakeStack = nullptr;
#if defined(MERAK_EMULATOR_STACK_SWITCH)
  void *sp = nullptr;
#else
  ucontext_t context;
#endif
  ThreadPlace place;
  Wait wait = Wait::Running;
  unsigned mask = 0;
  int predicate = 0;
  int lane = 0;
  int warp = 0;
};

/// A failed launch, thrown inside a fiber and caught at its bottom.
struct KernelFailure {};

constexpr size_t kStackBytes = size_t(256) << 10;
constexpr size_t kWarpSlotBytes = 64;

/// Fiber stacks, each above a guard page, kept for the next launch.
class StackPool {
public:
  ~StackPool() {
    if (base)
      munmap(base, count * stride());
  }
  char *stack(int i) { return base + size_t(i) * stride() + pageSize(); }
  void reserve(int n) {
    if (n <= count)
      return;
    if (base)
      munmap(base, count * stride());
    void *p = mmap(nullptr, size_t(n) * stride(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "CUDA emulator: cannot map %d thread stacks\n", n);
      std::abort();
    }
    base = static_cast<char *>(p);
    count = n;
    for (int i = 0; i < n; ++i)
      mprotect(base + size_t(i) * stride(), pageSize(), PROT_NONE);
  }

private:
  static size_t pageSize() { return size_t(sysconf(_SC_PAGESIZE)); }
  static size_t stride() { return kStackBytes + pageSize(); }
  char *base = nullptr;
  int count = 0;
};

/// The block being run.
struct BlockRun {
  std::vector<Fiber> fibers;
#if defined(MERAK_EMULATOR_STACK_SWITCH)
  void *scheduler = nullptr;
#else
  ucontext_t scheduler;
#endif
  Fiber *current = nullptr;
  const std::function<void()> *thread = nullptr;
  /// The scheduler's stack, as AddressSanitizer learns it.
  const void *schedulerBottom = nullptr;
  size_t schedulerSize = 0;
  int orResult = 0;
  std::vector<unsigned char> warpSlots;
  std::vector<unsigned char> dynamicShared;
  std::string failure;
};

BlockRun *running = nullptr;
std::mutex launchMutex;
StackPool stacks;

[[noreturn]] void outsideKernel(const char *what) {
  std::fprintf(stderr,
               "CUDA emulator: %s called outside a kernel launch; device "
               "functions run only inside one\n",
               what);
  std::abort();
}

Fiber &self(const char *what) {
  if (!running || !running->current)
    outsideKernel(what);
  return *running->current;
}

// AddressSanitizer is told of every switch between stacks (before it, the
// stack switched to; after it, on the stack switched to, that it arrived).

/// On a fiber's stack, after the switch to it.
void arrivedInFiber(Fiber &f) {
#if defined(MERAK_EMULATOR_ASAN)
  __sanitizer_finish_switch_fiber(f.fakeStack, &running->schedulerBottom,
                                  &running->schedulerSize);
#else
  (void)f;
#endif
}

/// From fiber `f` back to the scheduler; `finished`: for good.
void leaveFiber(Fiber &f, bool finished) {
#if defined(MERAK_EMULATOR_ASAN)
  __sanitizer_start_switch_fiber(finished ? nullptr : &f.fakeStack,
                                 running->schedulerBottom,
                                 running->schedulerSize);
#else
  (void)finished;
#endif
#if defined(MERAK_EMULATOR_STACK_SWITCH)
  merakEmulatorSwitch(&f.sp, running->scheduler);
#else
  swapcontext(&f.context, &running->scheduler);
#endif
}

/// From the scheduler to fiber `f`, until it switches back.
void enterFiber(BlockRun &b, Fiber &f) {
#if defined(MERAK_EMULATOR_ASAN)
  void *fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
#if defined(MERAK_EMULATOR_STACK_SWITCH)
  merakEmulatorSwitch(&b.scheduler, f.sp);
#else
  swapcontext(&b.scheduler, &f.context);
#endif
#if defined(MERAK_EMULATOR_ASAN)
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void yieldToScheduler() {
  Fiber &f = *running->current;
  leaveFiber(f, false);
  arrivedInFiber(f);
}

std::string where(const Fiber &f) {
  char text[160];
  std::snprintf(text, sizeof text, "block (%u, %u, %u), thread (%u, %u, %u)",
                f.place.blockIndex.x, f.place.blockIndex.y,
                f.place.blockIndex.z, f.place.threadIndex.x,
                f.place.threadIndex.y, f.place.threadIndex.z);
  return text;
}

[[noreturn]] void fail(const std::string &why) {
  running->failure = why;
  throw KernelFailure();
}

void fiberMain() {
  Fiber &f = *running->current;
  arrivedInFiber(f);
  try {
    (*running->thread)();
  } catch (const KernelFailure &) {
  }
  f.wait = Wait::Done;
  // Never resumed.
  leaveFiber(f, true);
  __builtin_unreachable();
}

#if defined(MERAK_EMULATOR_STACK_SWITCH)
/// A stack whose first switch to it enters `fiberMain` as if called: the
/// six registers merakEmulatorSwitch pops, then the return address, 16-byte
/// aligned as a call leaves it.
void *newFiberStack(char *stack, size_t bytes) {
  auto top = reinterpret_cast<uintptr_t>(stack + bytes) & ~uintptr_t(15);
  auto *slot = reinterpret_cast<void **>(top - 16);
  slot[0] = reinterpret_cast<void *>(&fiberMain);
  slot[1] = nullptr;
  void **regs = slot - 6;
  for (int i = 0; i < 6; ++i)
    regs[i] = nullptr;
  return regs;
}
#endif

/// Releases the lanes of warp `w` whose warp barrier (or shuffle) has
/// every lane its mask names; how many, or -1 (with `b.failure`) when a
/// mask names a lane that has returned.
int releaseWarp(BlockRun &b, int w) {
  const int n = int(b.fibers.size());
  std::vector<int> ready;
  for (int i = w * 32; i < std::min(n, w * 32 + 32); ++i) {
    const Fiber &f = b.fibers[size_t(i)];
    if (f.wait != Wait::Warp)
      continue;
    bool all = true;
    for (int l = 0; l < 32 && all; ++l) {
      int j = w * 32 + l;
      if (!(f.mask >> l & 1u) || j >= n)
        continue;
      const Fiber &other = b.fibers[size_t(j)];
      if (other.wait == Wait::Done) {
        b.failure = "a warp barrier or shuffle at " + where(f) +
                    " names lane " + std::to_string(l) +
                    " in its mask, which has returned";
        return -1;
      }
      all = other.wait == Wait::Warp;
    }
    if (all)
      ready.push_back(i);
  }
  for (int i : ready)
    b.fibers[size_t(i)].wait = Wait::Running;
  return int(ready.size());
}

/// Releases the block barrier when every thread that has not returned
/// waits at it; whether it did.
bool releaseBlock(BlockRun &b) {
  int live = 0, atBlock = 0, any = 0;
  for (const Fiber &f : b.fibers) {
    live += f.wait != Wait::Done;
    atBlock += f.wait == Wait::Block;
    any |= f.wait == Wait::Block && f.predicate;
  }
  if (live == 0 || atBlock != live)
    return false;
  b.orResult = any;
  for (Fiber &f : b.fibers)
    f.wait = Wait::Running;
  return true;
}

/// The failure of a block none of whose threads can go on.
std::string divergence(const BlockRun &b) {
  const Fiber *atSync = nullptr, *atWarp = nullptr;
  for (const Fiber &f : b.fibers) {
    if (f.wait == Wait::Block && !atSync)
      atSync = &f;
    if (f.wait == Wait::Warp && !atWarp)
      atWarp = &f;
  }
  std::string why = "the block's threads wait at different barriers: ";
  if (atSync)
    why += where(*atSync) + " at __syncthreads";
  if (atSync && atWarp)
    why += ", ";
  if (atWarp)
    why += where(*atWarp) + " at a warp barrier or shuffle";
  return why;
}

/// Runs one block; the failure's text, or empty. Each warp in turn runs
/// as far as it can (through its warp barriers and shuffles) before the
/// next starts, and each lane as far as it can before the next lane: a
/// thread that reads what another writes, or writes what another reads,
/// without a barrier between them sees the other's access missing.
std::string runBlock(BlockRun &b, const ThreadPlace &first) {
  const dim3 d = first.blockSize;
  const int n = int(d.x * d.y * d.z);
  b.fibers.assign(size_t(n), Fiber());
  b.failure.clear();
  b.orResult = 0;
  // Dynamic shared memory starts as NaNs: a read before a write shows.
  std::fill(b.dynamicShared.begin(), b.dynamicShared.end(), 0xff);
#if !defined(MERAK_EMULATOR_STACK_SWITCH)
  ucontext_t blank;
  getcontext(&blank);
#endif
  for (int i = 0; i < n; ++i) {
    Fiber &f = b.fibers[size_t(i)];
    f.place = first;
    f.place.threadIndex = make_uint3(unsigned(i) % d.x, unsigned(i) / d.x % d.y,
                                     unsigned(i) / (d.x * d.y));
    f.lane = i % 32;
    f.warp = i / 32;
    f.stack = stacks.stack(i);
#if defined(MERAK_EMULATOR_STACK_SWITCH)
    f.sp = newFiberStack(f.stack, kStackBytes);
#else
    f.context = blank;
    f.context.uc_mcontext.fpregs = &f.context.__fpregs_mem;
    f.context.uc_stack.ss_sp = f.stack;
    f.context.uc_stack.ss_size = kStackBytes;
    f.context.uc_link = &b.scheduler;
    makecontext(&f.context, fiberMain, 0);
#endif
  }
  const int warps = (n + 31) / 32;
  for (;;) {
    bool progress = false;
    for (int w = 0; w < warps; ++w) {
      for (;;) {
        for (int i = w * 32; i < std::min(n, w * 32 + 32); ++i) {
          Fiber &f = b.fibers[size_t(i)];
          if (f.wait != Wait::Running)
            continue;
          progress = true;
          b.current = &f;
          enterFiber(b, f);
          b.current = nullptr;
          if (!b.failure.empty())
            return b.failure;
        }
        int released = releaseWarp(b, w);
        if (released < 0)
          return b.failure;
        if (released == 0)
          break;
      }
    }
    bool done = true;
    for (const Fiber &f : b.fibers)
      done = done && f.wait == Wait::Done;
    if (done)
      return {};
    if (!releaseBlock(b) && !progress)
      return divergence(b);
  }
}

} // namespace

const ThreadPlace &place() { return self("threadIdx").place; }

int lane() { return self("a warp function").lane; }

int syncBlock(int predicate) {
  Fiber &f = self("__syncthreads");
  f.wait = Wait::Block;
  f.predicate = predicate;
  yieldToScheduler();
  return running->orResult;
}

void syncWarp(unsigned mask) {
  Fiber &f = self("__syncwarp");
  if (!(mask >> f.lane & 1u))
    fail("a warp barrier or shuffle at " + where(f) +
         " whose mask leaves out its own lane");
  f.wait = Wait::Warp;
  f.mask = mask;
  yieldToScheduler();
}

void gatherWarp(unsigned mask, const void *mine, void *all, size_t bytes) {
  Fiber &f = self("a warp function");
  unsigned char *slots =
      running->warpSlots.data() + size_t(f.warp) * 32 * kWarpSlotBytes;
  std::memcpy(slots + size_t(f.lane) * kWarpSlotBytes, mine, bytes);
  syncWarp(mask);
  auto *out = static_cast<unsigned char *>(all);
  for (int l = 0; l < 32; ++l) {
    if (mask >> l & 1u)
      std::memcpy(out + size_t(l) * bytes, slots + size_t(l) * kWarpSlotBytes,
                  bytes);
    else
      std::memset(out + size_t(l) * bytes, 0, bytes);
  }
  syncWarp(mask);
}

uint64_t exchange(unsigned mask, uint64_t value, int source) {
  Fiber &f = self("a shuffle");
  if (!(mask >> source & 1u) ||
      f.warp * 32 + source >= int(running->fibers.size()))
    fail("a shuffle at " + where(f) + " reads lane " + std::to_string(source) +
         ", which is not in its mask");
  uint64_t all[32];
  gatherWarp(mask, &value, all, sizeof value);
  return all[source];
}

void trap() {
  Fiber &f = self("__trap");
  fail("__trap() at " + where(f));
}

void *dynamicShared() {
  self("dynamic shared memory");
  return running->dynamicShared.data();
}

void launch(const LaunchConfig &c, const std::function<void()> &thread) {
  const char *site = c.file;
  if (const char *slash = std::strrchr(site, '/'))
    site = slash + 1;
  std::string at = std::string(site) + ":" + std::to_string(c.line);
  const uint64_t threads = uint64_t(c.block.x) * c.block.y * c.block.z;
  if (threads == 0 || threads > 1024 || c.block.z > 64 || c.grid.x == 0 ||
      c.grid.y == 0 || c.grid.z == 0 || c.grid.y > 65535 || c.grid.z > 65535) {
    recordLaunchError(
        cudaErrorInvalidConfiguration,
        "the kernel launched at " + at +
            " has an invalid configuration (grid " + std::to_string(c.grid.x) +
            "x" + std::to_string(c.grid.y) + "x" + std::to_string(c.grid.z) +
            ", block " + std::to_string(c.block.x) + "x" +
            std::to_string(c.block.y) + "x" + std::to_string(c.block.z) + ")");
    return;
  }
  if (c.shared > kMaxSharedBytes) {
    recordLaunchError(cudaErrorInvalidValue,
                      "the kernel launched at " + at + " asks for " +
                          std::to_string(c.shared) +
                          " bytes of dynamic shared memory");
    return;
  }
  if (!launchesAllowed())
    return;
  std::lock_guard<std::mutex> lock(launchMutex);
  stacks.reserve(int(threads));
  BlockRun b;
  b.thread = &thread;
  b.warpSlots.assign((threads + 31) / 32 * 32 * kWarpSlotBytes, 0);
  b.dynamicShared.assign(c.shared, 0);
  running = &b;
  ThreadPlace p;
  p.blockSize = c.block;
  p.gridSize = c.grid;
  for (unsigned z = 0; z < c.grid.z; ++z)
    for (unsigned y = 0; y < c.grid.y; ++y)
      for (unsigned x = 0; x < c.grid.x; ++x) {
        p.blockIndex = make_uint3(x, y, z);
        std::string failure = runBlock(b, p);
        if (!failure.empty()) {
#if defined(MERAK_EMULATOR_ASAN)
          // The threads left on their stacks never unwind: their frames'
          // poisoning would stay for the next launch's.
          for (int i = 0; i < int(threads); ++i)
            ASAN_UNPOISON_MEMORY_REGION(stacks.stack(i), kStackBytes);
#endif
          running = nullptr;
          recordKernelFailure("the kernel launched at " + at +
                              " failed: " + failure);
          return;
        }
      }
  running = nullptr;
}

} // namespace merak::runtime::cuda::emulation
