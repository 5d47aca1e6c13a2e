// Running one thread block on the host: its threads are fibers on the calling OS thread, switched
// at every barrier, warp collective and __nanosleep (see block_runner.cpp for the rules). The
// generated module's C entry (emulation/entry.h) calls run_block once per task.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <string>

namespace mpk {
namespace emu {

// Which runnable fiber goes first between two synchronization points. A result that changes with
// the order depends on an interleaving the program does not fix: a race the device may or may not show.
enum Order : int { kInOrder = 0, kReversed = 1, kShuffled = 2 };

struct RunConfig {
  int num_threads;
  int order;
  uint64_t seed;  // kShuffled: the permutations' seed
  bool race_check;  // the module must be built with -fsanitize=thread (its hooks are ours)
  uint32_t task_id;  // for reports
  unsigned char *dynamic_smem;  // the buffer, its capacity, and the bytes this run may use
  size_t dynamic_smem_capacity;
  size_t dynamic_smem_bytes;
};

enum RunStatus : int { kRunOk = 0, kRunDetected = 2, kRunInvalid = 3 };

// Runs thread_main(arg) on cfg.num_threads fibers. kRunDetected: `report` says what was found
// (divergent barrier, warp mask mismatch, data race, ...), with threads and source lines.
int run_block(RunConfig const &cfg, void (*thread_main)(void *), void *arg, std::string &report);

// The cost of one fiber switch (there and back, halved) in ns, measured over n round trips.
double measure_switch_ns(int n);

}  // namespace emu
}  // namespace mpk
