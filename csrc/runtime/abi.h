// The data layout shared by the Python front end, the host side of the built module and the
// persistent kernel. mpk_runtime/abi.py mirrors these structs; at load time it compares its
// offsets with the ones the module reports (mpk_abi_layout), so the two can never drift silently.
#pragma once
#include <stddef.h>
#include <stdint.h>

#define MPK_ABI_VERSION 5
#define MPK_MAX_INPUTS 7
#define MPK_MAX_OUTPUTS 3
#define MPK_NO_EVENT 0xffffffffu
#define MPK_NO_RANK 0xffffffffu
#define MPK_MAX_SCHEDULERS 32

// MpkTaskDesc::flags
#define MPK_FLAG_FIRST_TRIGGER_SINGLE 0x1u  // first_trigger counts this task alone: publish by store
// MpkKernelParams::triggers entries: event id, with this bit when the event has a single producer
#define MPK_TRIGGER_SINGLE 0x80000000u

// One task: what to run, what to wait for, what to signal. 128 bytes, copied to shared memory
// by the worker before the task runs.
typedef struct MpkTaskDesc {
  uint16_t variant;       // dispatcher case (one per template instantiation)
  uint16_t task_type;     // opcode from the registry
  uint16_t num_triggers;  // events this task increments when it finishes
  uint16_t flags;
  uint32_t wait_event;    // event to wait for, or MPK_NO_EVENT
  uint32_t wait_count;    // producers counted by wait_event (its target is wait_count * (iteration + 1))
  uint32_t first_trigger; // the first event this task increments (kept here: the common case
                          // of one trigger then needs no extra load on the critical path)
  uint32_t trigger_begin; // further triggers: MpkKernelParams::triggers[trigger_begin ...]
  uint32_t task_id;
  uint32_t layer;
  uint16_t grid_idx[3];
  uint16_t reserved;
  union {
    float f;
    int32_t i;
  } scalars[2];
  void *inputs[MPK_MAX_INPUTS];
  void *outputs[MPK_MAX_OUTPUTS];
} MpkTaskDesc;

// The eleven meta tensors (see mpk_runtime/frontend/meta.py for shapes and dtypes).
typedef struct MpkMeta {
  int64_t *tokens;          // [total_num_requests, max_seq_length]
  int32_t *step;            // [total_num_requests]
  int32_t *prompt_lengths;  // [total_num_requests]
  int32_t *stop_lengths;    // [total_num_requests]
  int64_t *input_tokens;    // [max_num_batched_tokens]
  int64_t *output_tokens;   // [max_num_batched_tokens]
  int32_t *num_new_tokens;  // [1]
  int32_t *qo_indptr;       // [max_num_batched_requests + 1]
  int32_t *paged_kv_indptr; // [max_num_batched_requests + 1]
  int32_t *paged_kv_indices;       // [max_num_pages]
  int32_t *paged_kv_last_page_len; // [max_num_batched_requests]
} MpkMeta;

typedef struct MpkBatchConfig {
  int32_t max_num_batched_tokens;
  int32_t max_num_batched_requests;
  int32_t max_num_pages;
  int32_t page_size;
  int32_t max_seq_length;
  int32_t total_num_requests;
  int32_t max_pages_per_request;
  int32_t test_mode;
  int64_t eos_token_id;
} MpkBatchConfig;

// Scratch owned by prepare_next_batch (device memory, sized by the host).
typedef struct MpkBatchState {
  int32_t *running;        // [max_num_batched_requests] admitted, unfinished requests, oldest first
  int32_t *batch;          // [max_num_batched_requests] requests of the current iteration, by slot
  int32_t *request_pages;  // [total_num_requests * max_pages_per_request]
  int32_t *request_num_pages; // [total_num_requests]
  int32_t *page_queue;     // [max_num_pages] free pages, a ring
  int32_t *counters;       // MPK_BATCH_* below
  int32_t const *initial_step;  // [total_num_requests] step of each request at launch (tokens in the KV cache)
  int32_t const *page_order;    // [max_num_pages] the free-page queue at launch
} MpkBatchState;

enum {
  MPK_BATCH_NUM_RUNNING = 0,
  MPK_BATCH_BATCH_SIZE,
  MPK_BATCH_NEXT_REQUEST,
  MPK_BATCH_PAGE_HEAD,
  MPK_BATCH_FREE_PAGES,
  MPK_BATCH_NUM_COUNTERS
};

// Profiler record kinds (see csrc/runtime/profiler.cuh for the buffer layout).
enum {
  MPK_PROF_TASK_BEGIN = 1,     // a worker starts a task (its dependencies are met)
  MPK_PROF_TASK_END = 2,       // ... and has finished it (after the CTA barrier)
  MPK_PROF_PREPARE_BEGIN = 3,  // the controller enters prepare_next_batch (END_OF_TASK_GRAPH)
  MPK_PROF_PREPARE_END = 4,
  MPK_PROF_TASK_MARK = 5,  // a task body ends one of its phases (Runtime::mark; id: the phase number)
};

// Device-side control words. Counters stay monotonic across launches (a launch's targets are
// offset by iterations_total), so a launch needs no reset; only a launch stopped half-way (watchdog)
// makes the host zero them, with every event counter, before the next one.
typedef struct MpkControl {
  // (launch_id << 32) | MPK_GO_STOP? | iterations released to the workers in this launch
  unsigned long long go;
  unsigned long long end_count;         // queues drained, one per worker and iteration
  unsigned long long iterations_total;  // iterations completed by earlier launches
  uint32_t abort;                       // launch id stopped by the watchdog or a device error
  uint32_t task_error_launch;           // launch id in which a task reported an error (first wins)
  uint32_t task_error_task;             // ... which task, with which code and value
  int32_t task_error_code;
  long long task_error_value;
  unsigned long long scheduler_progress[MPK_MAX_SCHEDULERS];
} MpkControl;

// Task error codes (Runtime::fail); the host turns them into a KernelError naming the task.
enum {
  MPK_TASK_ERROR_INDEX = 1,  // an index read from data (e.g. a token id) is out of range; value: the index
  MPK_TASK_ERROR_VALUE = 2,  // a value read from data is one the task cannot use (e.g. NaN); value: its index
};
#define MPK_GO_STOP 0x80000000ull
#define MPK_GO_ITERATIONS 0x7fffffffull

// Written by a worker when a wait has lasted long, read by the host after a watchdog stop.
typedef struct MpkWorkerStatus {
  uint32_t task;       // task waiting for its event, or MPK_NO_EVENT when not waiting
  uint32_t launch_id;
  uint32_t peer;       // in a wait for other ranks (runtime/comm.cuh): the first rank missing; else MPK_NO_RANK
  uint32_t reserved;
} MpkWorkerStatus;

// The ranks of one host (a process and a GPU each), for cross-rank tasks such as the all-reduce.
// Every rank has a heap of device memory with the same layout (mpk_runtime/run/transport.py), which
// every other rank maps as peer memory: a task reaches a peer's copy of an address in its own heap at
// the same offset in the peer's heap. All zero when the graph has no cross-rank task.
typedef struct MpkComm {
  char *heap;                   // this rank's heap
  char *const *peers;           // [world_size] device array: every rank's heap as mapped here
  unsigned long long *signals;  // in this rank's heap: [task * world_size + q], written by rank q only
  uint32_t rank;
  uint32_t world_size;
} MpkComm;

enum {
  MPK_STATUS_RUNNING = 1,
  MPK_STATUS_OK = 0,
  MPK_STATUS_WATCHDOG = 2,
  MPK_STATUS_PAGES_EXHAUSTED = 3,
  MPK_STATUS_SKIPPED = 4,  // not run: an earlier launch stopped half-way and was not reset yet
  MPK_STATUS_TASK_ERROR = 5,  // a task reported an error (MpkControl::task_error_*); detail[0]: task
};

// Result of a launch, in mapped host memory: the host can read it even while the kernel runs.
typedef struct MpkStatus {
  int32_t code;
  uint32_t iterations;       // iterations the task graph ran in this launch
  unsigned long long idle_ns;  // with MPK_STATUS_WATCHDOG: how long nothing progressed
  int32_t detail[4];         // with MPK_STATUS_PAGES_EXHAUSTED: request, pages needed, pages free
  unsigned long long end_seen;  // control.end_count as the controller read it when it last passed
                                // END_OF_TASK_GRAPH: the host checks it against every worker's signal
} MpkStatus;

typedef struct MpkKernelParams {
  // Descriptors in queue order: worker w runs tasks[queue_offsets[w] .. queue_offsets[w + 1]),
  // in program order, every iteration. Laid out by queue so a worker can prefetch the next
  // descriptor without first loading its id.
  const MpkTaskDesc *tasks;
  const uint32_t *queue_offsets;  // [num_workers + 1]
  const uint32_t *triggers;  // event ids (| MPK_TRIGGER_SINGLE), indexed by MpkTaskDesc::trigger_begin
  unsigned long long *event_counters;  // [num_events]
  unsigned long long *worker_progress;  // [num_workers] tasks finished in this launch
  MpkWorkerStatus *worker_status;  // [num_workers]
  MpkControl *control;
  MpkStatus *status;  // this launch's slot in the host's ring of mapped status blocks
  unsigned long long *profiler_buffer;  // null when profiling is off
  unsigned long long profiler_capacity;  // entries in profiler_buffer
  uint32_t launch_id;  // > 0, different for every launch of this kernel
  uint32_t num_tasks;
  uint32_t num_events;
  uint32_t num_workers;
  uint32_t num_schedulers;
  uint32_t end_trigger_count;  // workers with a non-empty queue
  unsigned long long watchdog_timeout_ns;
  MpkMeta meta;
  MpkBatchConfig batch;
  MpkBatchState state;
  MpkComm comm;
} MpkKernelParams;
