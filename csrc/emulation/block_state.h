// The block runner's state, shared by block_runner.cpp (scheduling, collectives, barriers),
// race_check.cpp (shadow memory), faults.cpp (signals, guarded memory) and symbols.cpp (source
// lines). Host-only code, never compiled with the race instrumentation.
#pragma once
#include <stdint.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "emulation/block_runner.h"
#include "emulation/fiber.h"
#include "emulation/shim_api.h"

namespace mpk {
namespace emu {

enum class State : uint8_t { kRunnable, kYielded, kBarrier, kWarp, kDone };

constexpr size_t kStackBytes = 128 << 10;  // each fiber's stack (registers and local memory)
constexpr int kMaxAsyncCopies = 128;       // cp.async copies one thread may have in flight (a pipeline of stages)
constexpr int kMaxWarps = 32;              // of a block of at most 1024 threads
constexpr int kNamedBarriers = 16;         // bar.sync ids; 0 is __syncthreads'
constexpr int kTrackedMbarriers = 16;      // mbarrier inits per task whose phases race checking follows

struct AsyncCopy {
  void *dst;
  void const *src;
  uint32_t bytes;
  uint32_t pc;     // where it was issued (offset in the module)
  uint32_t group;  // the issuing thread's commit count at issue: the group it joins at the next commit
};

// A TMA copy queued on its mbarrier until a wait on that barrier lands it.
struct TmaCopy {
  void *dst;
  TmaBox box;
  uint32_t bytes;
  uint32_t pc;  // where it was issued (offset in the module), for race reports
  uint32_t tid;
  Site site;
};

// An mbarrier of the task (shim_api.h), by its shared address.
struct Mbarrier {
  uint32_t slot;      // the task's mbarrier_init count at its init: its Thread::mbarrier_seen entry
  uint32_t arrivals;  // a phase's, from mbarrier_init
  uint32_t pending;   // arrivals the current phase still waits for
  int64_t tx;         // bytes announced for the current phase and not landed yet (< 0: landed first)
  uint32_t phase;     // phases completed since the init: the current one's parity is phase & 1
  std::vector<TmaCopy> copies;
  Site init;  // where mbarrier_init set it up
};

struct Thread {
  ThreadView view;  // first: what threadIdx and friends read
  Context ctx;
  uint32_t tid;
  State state;
  // Where it waits (kBarrier, kWarp) and with what.
  Site site;
  int kind;
  unsigned mask;
  uint64_t value;
  int arg;
  int width;
  uint64_t result;
  // kExchange: the collective's name, this lane's payload and result, and how they combine.
  char const *name;
  void const *in;
  void *out;
  Combine combine;
  // cp.async copies issued and not yet waited for (in issue order), and the groups committed so far.
  AsyncCopy copies[kMaxAsyncCopies];
  int num_copies;
  uint32_t groups_committed;
  // kYielded in mbarrier_wait_parity: the barrier (0: at __nanosleep) and the parity it waits for.
  uintptr_t mbarrier;
  unsigned parity;
  // Race checking: the thread's view of its warp's lanes' clocks (a vector clock over the warp,
  // reset at every block barrier; __syncwarp joins the clocks of its lanes).
  uint32_t clock[32];
  // The named barriers each warp has passed since the last block barrier, as far as this thread
  // knows (its own warp's entry: its warp's count; a named barrier joins its threads' views).
  uint32_t warp_clock[kMaxWarps];
  // The phases of each mbarrier (by slot) this thread knows complete: from its own waits, joined at
  // __syncwarp and named barriers. What a TMA copy of such a phase wrote is ordered before its accesses.
  uint32_t mbarrier_seen[kTrackedMbarriers];
};

// A signal in task code (faults.cpp): what the report needs, formatted after the run.
struct Fault {
  int sig = 0;  // 0: none
  uintptr_t addr = 0, pc = 0;
  bool write = false;
  uint32_t tid = 0;
};

struct Block {
  RunConfig cfg;
  Thread *threads;
  void (*thread_main)(void *);
  void *arg;
  Context scheduler;
  std::vector<uint32_t> order;  // this round's fibers; a blocking fiber switches straight to the next
  size_t next = 0;
  std::string failure;  // a definite error: the run stops there
  Fault fault;
  unsigned long long ticks = 0;  // clock64(): deterministic, one per call
  uintptr_t shared_lo = 0, shared_hi = 0;  // the module's thread_local block: every __shared__ variable
  uintptr_t stacks_lo = 0, stacks_hi = 0;  // the fibers' records and stacks (with their guard pages)
  std::unordered_map<uintptr_t, Mbarrier> mbarriers;  // the task's, by address (mbarrier_init adds them)
  uint32_t mbarrier_inits = 0;
};

extern thread_local Block *tls_block;
extern thread_local Thread *tls_thread;

// "thread 37 (warp 1, lane 5)"
std::string describe_thread(uint32_t tid);
// "threads 0-63, 70"
std::string describe_threads(std::vector<uint32_t> const &tids, char const *noun = "threads");
// "in task 5: "-style prefix of a finding of this block
std::string finding(char const *what);
// Leaves the running fiber for good (the run stops after this round); `msg` becomes the report.
[[noreturn]] void abandon_fiber(std::string msg);
[[noreturn]] void abort_block(std::string msg);  // abandon_fiber, for a finding (prefix it with finding())
std::string where(Site s);                       // "file:line"
// The running thread (a shim call from outside an emulated block aborts the process, naming `what`).
Thread &current(char const *what);
// The running fiber blocks: on to the round's next fiber, or back to the scheduler after the last.
void suspend(Thread &t);

// mbarriers and TMA copies (tma.cpp), for the runner's reports.
std::string shared_name(Block const &b, uintptr_t a);     // "dynamic_smem+64", "shared bars+8"
std::string mbarrier_state(Block const &b, uintptr_t a);  // where its phase stands, for a hang report
// A copy no wait landed, or a barrier not invalidated, when the task ended ("" if none).
std::string mbarriers_at_task_end(Block const &b);

// Race checking (race_check.cpp): hooks called by the runner.
void race_begin(Block &b);
void race_barrier(Block &b);
void race_syncwarp(Block &b, uint32_t warp, unsigned mask);
void race_named_barrier(Block &b, std::vector<uint32_t> const &tids);  // whole warps
// cp.async: the destination is written by an agent no one is ordered with, from issue to wait;
// at the wait the issuing thread reads the source and writes the destination.
void race_async_issue(uintptr_t dst, uint32_t bytes, uint32_t pc);
void race_async_land(uintptr_t dst, uintptr_t src, uint32_t bytes, uint32_t pc);
// TMA: issued like a cp.async (race_tma_issue); at the wait that lands it the waiting thread reads
// each source row (race_tma_read) and writes the destination (race_tma_land) for phase `phase` of
// the mbarrier in `slot`: a write ordered before the accesses of threads that know that phase
// complete (Thread::mbarrier_seen), or that are ordered after the landing thread's wait as usual.
// mbarrier arrivals order nothing else here: the primitives have no plain arrive to release with.
void race_tma_issue(uintptr_t dst, uint32_t bytes, uint32_t pc);
void race_tma_read(uintptr_t src, uint32_t bytes, uint32_t pc);
void race_tma_land(uintptr_t dst, uint32_t bytes, uint32_t pc, uint32_t slot, uint32_t phase);
std::string race_end(Block &b);  // the findings, as text ("" when none)

// Faults (faults.cpp): a handler for SIGSEGV / SIGBUS / SIGFPE while the block runs.
struct FaultScope {
  explicit FaultScope(int time_limit_s = 0);  // > 0: also a timer that stops a fiber spinning past it
  ~FaultScope();
  void *timer = nullptr;  // the timer_t, when armed
};
std::string describe_fault(Block const &b);

// Source lines (symbols.cpp), from the module's debug information.
uintptr_t module_base();
// file:line of each pc offset (innermost first, then where it was inlined), by one addr2line run.
std::unordered_map<uint32_t, std::string> symbolize(std::vector<uint32_t> const &pcs);
std::string location(std::unordered_map<uint32_t, std::string> const &where, uint32_t pc);
// The module's thread_local symbols (every __shared__ variable): offset in the block, size, name.
struct TlsSymbol {
  uintptr_t offset, size;
  std::string name;
};
std::vector<TlsSymbol> tls_symbols();
// "x[2, 8]" for an address inside a tensor of the run, else "global memory 0x...".
std::string tensor_address(Memory const &m, uintptr_t a);
MpkEmuTensor const *tensor_at(Memory const &m, uintptr_t a);

}  // namespace emu
}  // namespace mpk
