// The block runner's state, shared by block_runner.cpp (scheduling, collectives, barriers) and
// race_check.cpp (shadow memory). Host-only code, never compiled with the race instrumentation.
#pragma once
#include <stdint.h>

#include <string>
#include <vector>

#include "emulation/block_runner.h"
#include "emulation/shim_api.h"
#include "emulation/fiber.h"

namespace mpk {
namespace emu {

enum class State : uint8_t { kRunnable, kYielded, kBarrier, kWarp, kDone };

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
  // Race checking: the thread's view of its warp's lanes' clocks (a vector clock over the warp,
  // reset at every block barrier; __syncwarp joins the clocks of its lanes).
  uint32_t clock[32];
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
  unsigned long long ticks = 0;  // clock64(): deterministic, one per call
  uintptr_t shared_lo = 0, shared_hi = 0;  // the module's thread_local block: every __shared__ variable
};

extern thread_local Block *tls_block;
extern thread_local Thread *tls_thread;

// "thread 37 (warp 1, lane 5)"
std::string describe_thread(uint32_t tid);
// "threads 0-63, 70"
std::string describe_threads(std::vector<uint32_t> const &tids, char const *noun = "threads");

// Race checking (race_check.cpp): hooks called by the runner.
void race_begin(Block &b, uintptr_t skip_lo, uintptr_t skip_hi);
void race_barrier(Block &b);
void race_syncwarp(Block &b, uint32_t warp, unsigned mask);
std::string race_end(Block &b);  // the findings, as text ("" when none)

}  // namespace emu
}  // namespace mpk
