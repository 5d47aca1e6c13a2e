// Faults in task code, reported instead of ending the process, and memory that makes them happen.
//
// While a block runs, SIGSEGV, SIGBUS and SIGFPE go to a handler on an alternate stack (a fiber's
// stack may be what overflowed). A fault in a fiber is recorded (address, program counter, read or
// write, thread) and the fiber is left for good: the handler unblocks the signal and switches to the
// runner, which formats the report once the block is over. A fault anywhere else is not ours: the
// handler restores the previous action and returns, so the instruction faults again into it (Python's
// faulthandler, say). Both the action and the alternate stack are put back after every run.
//
// With a time limit, a timer of this OS thread (signal kTimerSignal, every second after the limit)
// stops a fiber that never yields (a spin on a plain load, say): its handler reports the hang with
// the thread and the source line it was interrupted at, and leaves the fiber as a fault does. A
// fiber that does yield is stopped by the scheduler's own look at the clock after each round.
//
// guarded_alloc gives each tensor an inaccessible page before and after it, its end (rounded up to
// 16 bytes, so that vector accesses stay aligned) flush against the page after: an access past the
// end of a tensor faults, at no cost per access, and the report names the tensor.
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <utility>

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

#include "emulation/block_state.h"

namespace mpk {
namespace emu {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE};
constexpr size_t kAltStackBytes = 64 << 10;

struct Saved {
  struct sigaction actions[3];
  struct sigaction timer_action;
  stack_t stack;
};
int const kTimerSignal = SIGRTMIN + 5;
thread_local Saved saved;
thread_local char *alt_stack = nullptr;

size_t page_bytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

// From a signal handler running on a fiber: unblock the signal (our switch does not restore the
// signal mask) and leave the fiber for good, with ``msg`` as the block's failure.
[[noreturn]] void leave_fiber(int sig, std::string msg) {
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, sig);
  pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  abandon_fiber(std::move(msg));
}

void on_fault(int sig, siginfo_t *info, void *context) {
  Block *b = tls_block;
  Thread *t = tls_thread;
  if (!b || !t) {  // not task code: let the previous handler have it
    for (int i = 0; i < 3; ++i)
      if (kSignals[i] == sig) sigaction(sig, &saved.actions[i], nullptr);
    return;
  }
  Fault &f = b->fault;
  f.sig = sig;
  f.addr = reinterpret_cast<uintptr_t>(info->si_addr);
  f.tid = t->tid;
#if defined(__x86_64__)
  auto const *uc = static_cast<ucontext_t const *>(context);
  f.pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  f.write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;  // the page fault's error code: bit 1, a write
#else
  (void)context;
#endif
  leave_fiber(sig, std::string());
}

std::string pc_location(uintptr_t pc);

// The time limit's signal. In a fiber: the block has run past its limit and this fiber never gave
// the scheduler a chance to look (it would have): stop the block here. Elsewhere (the scheduler, the
// emulator's own code): nothing, the scheduler looks at the clock after its round.
void on_timer(int sig, siginfo_t *, void *context) {
  Block *b = tls_block;
  Thread *t = tls_thread;
  if (!b || !t) return;
  uintptr_t pc = 0;
#if defined(__x86_64__)
  pc = static_cast<uintptr_t>(static_cast<ucontext_t const *>(context)->uc_mcontext.gregs[REG_RIP]);
#else
  (void)context;
#endif
  leave_fiber(sig, finding("hang") + "the block has run past the emulator's limit of " +
                       std::to_string(b->cfg.time_limit_s) + " s, and " + describe_thread(t->tid) +
                       " was still running at " + pc_location(pc) +
                       ", never reaching a point where the scheduler could switch threads (a spin on a "
                       "plain load? a loop that does not end?)");
}

std::string pc_location(uintptr_t pc) {
  uintptr_t const base = module_base();
  if (pc < base) {
    char b[48];
    snprintf(b, sizeof b, "pc %#llx (outside the module)", static_cast<unsigned long long>(pc));
    return b;
  }
  uint32_t const off = static_cast<uint32_t>(pc - base);
  return location(symbolize({off}), off);
}

}  // namespace

FaultScope::FaultScope(int time_limit_s) {
  if (!alt_stack) alt_stack = static_cast<char *>(malloc(kAltStackBytes));
  stack_t st{};
  st.ss_sp = alt_stack;
  st.ss_size = kAltStackBytes;
  sigaltstack(&st, &saved.stack);
  struct sigaction sa{};
  sa.sa_sigaction = &on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &sa, &saved.actions[i]);
  if (time_limit_s <= 0) return;
  struct sigaction ta{};
  ta.sa_sigaction = &on_timer;
  ta.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&ta.sa_mask);
  sigaction(kTimerSignal, &ta, &saved.timer_action);
  struct sigevent ev{};
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = kTimerSignal;
  ev.sigev_notify_thread_id = static_cast<pid_t>(syscall(SYS_gettid));
  timer_t id;
  if (timer_create(CLOCK_MONOTONIC, &ev, &id) != 0) {  // no timer: the scheduler's own look remains
    sigaction(kTimerSignal, &saved.timer_action, nullptr);
    return;
  }
  struct itimerspec when{};
  // A second after the limit: a fiber that yields is stopped by the scheduler's look at the clock at
  // the limit, with its threads' places; the timer is for the fiber that never yields.
  when.it_value.tv_sec = time_limit_s + 1;
  when.it_interval.tv_sec = 1;  // again, in case one came while the scheduler ran
  timer_settime(id, 0, &when, nullptr);
  timer = new timer_t(id);
}

FaultScope::~FaultScope() {
  if (timer) {
    timer_t *id = static_cast<timer_t *>(timer);
    timer_delete(*id);
    delete id;
    sigaction(kTimerSignal, &saved.timer_action, nullptr);
  }
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &saved.actions[i], nullptr);
  sigaltstack(&saved.stack, nullptr);
}

std::string describe_fault(Block const &b) {
  Fault const &f = b.fault;
  Memory const &m = b.cfg.memory;
  std::string const who = describe_thread(f.tid);
  std::string const at = pc_location(f.pc);
  char const *rw = f.write ? "writes" : "reads";
  if (f.sig == SIGFPE)
    return finding("arithmetic fault") + who + " at " + at +
           ": an integer division by zero (or overflow); the device does not trap, its result would be undefined";
  if (f.addr - b.stacks_lo < b.stacks_hi - b.stacks_lo)
    return finding("stack overflow") + who + " at " + at + " ran past its " + std::to_string(kStackBytes >> 10) +
           " KB stack (large local arrays, or deep recursion)";
  size_t const page = page_bytes();
  for (int i = 0; i < m.num_tensors; ++i) {
    MpkEmuTensor const &t = m.tensors[i];
    uintptr_t const start = t.lo & ~(page - 1);
    uintptr_t const end = ((t.hi + 15) & ~uintptr_t{15});
    if (f.addr >= t.hi && f.addr < end + page)
      return finding("out-of-bounds access") + who + " " + rw + " past the end of tensor " + t.name + " at " + at +
             " (the fault is " + std::to_string(f.addr - t.hi) + " bytes after its last byte; it has " +
             std::to_string(t.hi - t.lo) + " bytes)";
    if (f.addr < t.lo && f.addr + page >= start)
      return finding("out-of-bounds access") + who + " " + rw + " before the start of tensor " + t.name + " at " + at +
             " (the fault is " + std::to_string(t.lo - f.addr) + " bytes before its first byte)";
  }
  char addr[32];
  snprintf(addr, sizeof addr, "%#llx", static_cast<unsigned long long>(f.addr));
  return finding(f.sig == SIGBUS ? "bus error" : "invalid address") + who + " " + rw + " " + addr + " at " + at +
         ", which is in no tensor of the graph, no shared memory and no stack";
}

void *guarded_alloc(size_t bytes) {
  size_t const page = page_bytes();
  size_t const used = (bytes + 15) & ~size_t{15};
  size_t const data_pages = (used + page - 1) / page;
  size_t const total = (data_pages + 2) * page;
  void *p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  char *base = static_cast<char *>(p);
  mprotect(base, page, PROT_NONE);
  mprotect(base + (data_pages + 1) * page, page, PROT_NONE);
  return base + (data_pages + 1) * page - used;
}

void guarded_free(void *p, size_t bytes) {
  if (!p) return;
  size_t const page = page_bytes();
  size_t const used = (bytes + 15) & ~size_t{15};
  size_t const data_pages = (used + page - 1) / page;
  char *base = static_cast<char *>(p) + used - (data_pages + 1) * page;
  munmap(base, (data_pages + 2) * page);
}

}  // namespace emu
}  // namespace mpk
