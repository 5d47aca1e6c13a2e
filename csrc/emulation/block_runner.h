// Running one thread block on the host: its threads are fibers on the calling OS thread, switched
// at every barrier, warp collective and __nanosleep (see block_runner.cpp for the rules). The
// generated module's C entry (emulation/entry.h) calls run_block once per task.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <string>

// What a task may address besides shared memory and its own stack, in the C ABI's terms
// (mpk_runtime/run/host_runner.py fills them in).
typedef struct MpkEmuTensor {
  uint64_t lo, hi;   // its bytes [lo, hi)
  char const *name;  // for reports
  int32_t elem_size;
  int32_t ndim;
  int64_t shape[6];
} MpkEmuTensor;

typedef struct MpkEmuRange {
  uint64_t lo, hi;
} MpkEmuRange;

namespace mpk {
namespace emu {

// Which runnable fiber goes first between two synchronization points. A result that changes with
// the order depends on an interleaving the program does not fix: a race the device may or may not show.
enum Order : int { kInOrder = 0, kReversed = 1, kShuffled = 2 };

// The global memory of a run. Every run names its tensors (reports say "x[2, 8]" and a fault past a
// tensor's guard page says which tensor). A race-checking run also checks each global access: a
// read must fall in a readable range (the task's input and output slices, the meta tensors), a write
// in a writable one (its output slices); both lists sorted and disjoint.
struct Memory {
  MpkEmuTensor const *tensors = nullptr;
  int num_tensors = 0;
  MpkEmuRange const *readable = nullptr;
  int num_readable = 0;
  MpkEmuRange const *writable = nullptr;
  int num_writable = 0;
  bool check_slices = false;   // race-checking runs only: the hooks see every access
  char const *slices = "";     // the task's slices in words, for reports
  uintptr_t host_lo = 0;       // the emulator's own copy of the descriptor and runtime view
  uintptr_t host_hi = 0;
};

struct RunConfig {
  int num_threads;
  int order;
  uint64_t seed;  // kShuffled: the permutations' seed
  bool race_check;  // the module must be built with -fsanitize=thread (its hooks are ours)
  uint32_t task_id;  // for reports
  unsigned char *dynamic_smem;  // the buffer, its capacity, and the bytes this run may use
  size_t dynamic_smem_capacity;
  size_t dynamic_smem_bytes;
  Memory memory;
  int time_limit_s = 0;  // > 0: a block still running after this many seconds is stopped as a hang
};

enum RunStatus : int { kRunOk = 0, kRunDetected = 2, kRunInvalid = 3 };

// Runs thread_main(arg) on cfg.num_threads fibers. kRunDetected: `report` says what was found
// (divergent barrier, warp mask mismatch, data race, out-of-bounds access, ...), with threads and
// source lines. A fault in task code (SIGSEGV, SIGBUS, SIGFPE) ends the run with a report instead
// of the process.
int run_block(RunConfig const &cfg, void (*thread_main)(void *), void *arg, std::string &report);

// Unmaps the calling OS thread's fiber stacks (the next run_block maps them again). Every module has
// its own copy of this runtime, and so its own stacks: 2 n + 1 mappings for n fibers (a guard page
// below each stack), which a process keeps while the module stays loaded. A test process that ran
// 128 modules of 256 threads would pass vm.max_map_count (65530) and fail to load the next module,
// so the host runner releases them after each launch.
void release_stacks();

// The words the calling OS thread's tasks updated atomically (note_atomic, shim_api.h) since the last
// clear: copy_atomic_words fills up to `max` (address, bytes) pairs and returns how many there are.
void clear_atomic_words();
size_t copy_atomic_words(uint64_t *addrs, uint32_t *bytes, size_t max);

// The cost of one fiber switch (there and back, halved) in ns, measured over n round trips.
double measure_switch_ns(int n);

// Memory for one tensor with an inaccessible page before and after it: its (16-byte aligned) end
// lies against the page after, so that an access past its end faults (see faults.cpp).
void *guarded_alloc(size_t bytes);
void guarded_free(void *p, size_t bytes);

}  // namespace emu
}  // namespace mpk
