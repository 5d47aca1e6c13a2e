// Fibers for the block runner: a stack and a saved stack pointer each. On x86-64 a switch is a few
// instructions of our own (emulation/block_runner.cpp): push the registers the SysV ABI says a call
// preserves (rbx, rbp, r12-r15), swap stack pointers, pop. Neither the signal mask nor the MXCSR / x87
// control words are saved (task code never changes them), so a switch costs a few nanoseconds where
// glibc's swapcontext makes a system call. Elsewhere, or with -DMPK_EMU_UCONTEXT (to compare),
// ucontext does the same job.
#pragma once
#include <stddef.h>
#include <stdint.h>

#if !defined(__x86_64__) || defined(MPK_EMU_UCONTEXT)
#include <ucontext.h>
#define MPK_EMU_FIBER_UCONTEXT 1
#endif

namespace mpk {
namespace emu {

using FiberMain = void (*)(void *);

#ifndef MPK_EMU_FIBER_UCONTEXT
extern "C" void mpk_emu_switch(void **save_sp, void *load_sp);
extern "C" void mpk_emu_fiber_start();

struct Context {
  void *sp = nullptr;
};

// The first switch to a new context "returns" into mpk_emu_fiber_start, which calls fn(arg) with
// the stack aligned as at any call. fn must never return (it switches away for good).
inline void make_context(Context &c, char *stack, size_t size, FiberMain fn, void *arg) {
  uint64_t *top = reinterpret_cast<uint64_t *>((reinterpret_cast<uintptr_t>(stack + size)) & ~uintptr_t{15});
  top[-1] = reinterpret_cast<uint64_t>(&mpk_emu_fiber_start);  // where the switch returns to
  top[-2] = 0;                                                   // rbp
  top[-3] = 0;                                                   // rbx
  top[-4] = reinterpret_cast<uint64_t>(arg);                     // r12: the argument
  top[-5] = reinterpret_cast<uint64_t>(fn);                      // r13: the function
  top[-6] = 0;                                                   // r14
  top[-7] = 0;                                                   // r15
  c.sp = top - 7;
}

inline void switch_context(Context &from, Context const &to) { mpk_emu_switch(&from.sp, to.sp); }
#else
struct Context {
  ucontext_t uc;
};

inline void fiber_trampoline(unsigned hi, unsigned lo, unsigned fhi, unsigned flo) {
  auto fn = reinterpret_cast<FiberMain>((static_cast<uintptr_t>(fhi) << 32) | flo);
  fn(reinterpret_cast<void *>((static_cast<uintptr_t>(hi) << 32) | lo));
}

inline void make_context(Context &c, char *stack, size_t size, FiberMain fn, void *arg) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  uintptr_t const a = reinterpret_cast<uintptr_t>(arg), f = reinterpret_cast<uintptr_t>(fn);
  makecontext(&c.uc, reinterpret_cast<void (*)()>(&fiber_trampoline), 4, unsigned(a >> 32), unsigned(a),
              unsigned(f >> 32), unsigned(f));
}

inline void switch_context(Context &from, Context const &to) { swapcontext(&from.uc, &to.uc); }
#endif

}  // namespace emu
}  // namespace mpk
