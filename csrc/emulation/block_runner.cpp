// The block runner: the threads of one thread block as fibers on the calling OS thread.
//
// A round runs every runnable fiber, in the configured order, until it blocks: at a barrier, at a
// warp collective, at __nanosleep or an mbarrier wait, or by returning (in the shuffled order a warp
// at times sits out a few rounds, as warps drift apart on the device). Then the runner completes
// what can complete: a warp collective once every lane named in its mask waits at a collective of
// the same kind, mask and width (the same intrinsic, possibly at another line, as the programming
// guide allows), a named barrier (bar.sync id, n) once n threads, whole warps, wait at id (at any
// line), and a block barrier once every thread waits at it. What can never complete is reported and
// stops the run:
//   - a barrier that some threads returned without reaching, or threads waiting at different barriers;
//   - more threads at a named barrier than its count, or threads giving one id different counts;
//   - a collective whose mask leaves out the calling lane, names a lane that returned, or names lanes
//     that wait elsewhere; a shuffle that reads a lane outside its mask; an invalid shuffle width;
//   - threads that spin in __nanosleep or wait on an mbarrier while nothing else can move (within
//     a few rounds when all of them wait on mbarriers: only other threads could complete a phase).
// Shuffle results follow the PTX ISA's shfl.sync definition (clamp / segment mask from the width),
// with each lane's own source lane or offset. A warp_exchange (mma) completes like a shuffle and
// hands every lane's payload to its combine function. cp.async copies wait in their thread's queue
// until its cp_async_wait_all(), the cp_async_wait_group(n) that covers their group (all but the
// newest n committed groups), or its return (the hardware lands them anyway). TMA copies wait on
// their mbarrier until a wait on it; one still queued when the task ends is reported, since on the
// device it would write the shared memory of whatever runs next.
#include <link.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <new>
#include <unordered_map>

#include "emulation/block_state.h"

#ifndef MPK_EMU_FIBER_UCONTEXT
// mpk_emu_switch(void **save_sp, void *load_sp): see fiber.h for the frame it saves and restores.
asm(R"(
  .text
  .globl mpk_emu_switch
  .hidden mpk_emu_switch
  .type mpk_emu_switch, @function
mpk_emu_switch:
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
  .size mpk_emu_switch, .-mpk_emu_switch

  .globl mpk_emu_fiber_start
  .hidden mpk_emu_fiber_start
  .type mpk_emu_fiber_start, @function
mpk_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size mpk_emu_fiber_start, .-mpk_emu_fiber_start
)");
#endif

namespace mpk {
namespace emu {

thread_local ThreadView const *tls_view = nullptr;
thread_local Block *tls_block = nullptr;
thread_local Thread *tls_thread = nullptr;

std::string where(Site s) { return std::string(s.file) + ":" + std::to_string(s.line); }

std::string prefix(char const *what) { return finding(what); }

[[noreturn]] void abort_block(std::string msg) { abandon_fiber(std::move(msg)); }

void suspend(Thread &t) {
  Block &b = *tls_block;
  if (b.next < b.order.size()) {
    Thread &n = b.threads[b.order[b.next++]];
    tls_thread = &n;
    tls_view = &n.view;
    switch_context(t.ctx, n.ctx);
  } else {
    tls_thread = nullptr;
    tls_view = nullptr;
    switch_context(t.ctx, b.scheduler);
  }
}

Thread &current(char const *what) {
  if (!tls_thread) {
    fprintf(stderr, "mpk emulation: %s called outside an emulated block\n", what);
    abort();
  }
  return *tls_thread;
}

namespace {

constexpr int kMaxThreads = 1024;
constexpr long kMaxIdleRounds = 1 << 16;  // rounds in which every thread that ran only yielded
// The same when every such thread waits on an mbarrier: a phase completes only by other threads'
// arrivals and copies, so once every thread has run (the lagging warp too) and none moved, none will.
constexpr long kMbarrierIdleRounds = 3;

// Per OS thread: the Thread records, then one stack per fiber above a guard page (an overflow
// faults instead of corrupting the next stack). One range, so the race checker skips it in one test.
struct Arena {
  char *base = nullptr;
  size_t bytes = 0, records = 0, page = 0;
  int threads = 0;

  char *stack(int i) const { return base + records + static_cast<size_t>(i) * (page + kStackBytes) + page; }

  void release() {
    if (base) munmap(base, bytes);
    base = nullptr;
    threads = 0;
  }

  bool reserve(int n) {
    if (threads >= n) return true;
    if (base) munmap(base, bytes);
    page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    records = (n * sizeof(Thread) + page - 1) / page * page;
    bytes = records + static_cast<size_t>(n) * (page + kStackBytes);
    void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      base = nullptr;
      threads = 0;
      return false;
    }
    base = static_cast<char *>(p);
    threads = n;
    for (int i = 0; i < n; ++i) mprotect(stack(i) - page, page, PROT_NONE);
    return true;
  }
};
thread_local Arena arena;

char const *barrier_name(int kind) {
  static char const *const names[] = {"__syncthreads()", "__syncthreads_count()", "__syncthreads_and()",
                                      "__syncthreads_or()", "named barrier"};
  return names[kind];
}

char const *warp_name(int kind) {
  static char const *const names[] = {"__shfl_sync",     "__shfl_up_sync", "__shfl_down_sync",
                                      "__shfl_xor_sync", "__ballot_sync",  "__any_sync",
                                      "__all_sync",      "__syncwarp",     "warp_exchange"};
  return names[kind];
}

char const *warp_name(Thread const &t) { return t.kind == kExchange ? t.name : warp_name(t.kind); }

// Whether two lanes wait at the same collective: kind, mask, width and (kExchange) combine agree.
bool same_collective(Thread const &a, Thread const &b) {
  return a.state == State::kWarp && a.kind == b.kind && a.mask == b.mask && a.width == b.width &&
         a.combine == b.combine;
}

std::string hex_mask(unsigned m) {
  char buf[16];
  snprintf(buf, sizeof buf, "0x%08x", m);
  return buf;
}

// "__shfl_xor_sync(mask 0xffffffff) at f:12", "__syncthreads() at f:30", "returned", ...
std::string waiting_at(Thread const &t) {
  switch (t.state) {
    case State::kBarrier:
      if (t.kind == kNamedBarrier)
        return "named barrier " + std::to_string(t.arg) + " (" + std::to_string(t.value) + " threads) at " +
               where(t.site);
      return std::string(barrier_name(t.kind)) + " at " + where(t.site);
    case State::kWarp:
      return std::string(warp_name(t)) + "(mask " + hex_mask(t.mask) + ") at " + where(t.site);
    case State::kYielded:
      if (t.mbarrier) return "mbarrier_wait_parity(parity " + std::to_string(t.parity) + ") at " + where(t.site);
      return "__nanosleep at " + where(t.site);
    case State::kDone:
      return "returned";
    default:
      return "running";
  }
}

bool stopped(Block const &b) { return !b.failure.empty() || b.fault.sig != 0; }

// Land the thread's copies of groups older than `before` (every copy: ~0u), keep the rest in flight.
void land_copies(Thread &t, uint32_t before = ~0u) {
  int kept = 0;
  for (int i = 0; i < t.num_copies; ++i) {
    AsyncCopy const &c = t.copies[i];
    if (c.group >= before) {
      t.copies[kept++] = c;
      continue;
    }
    if (tls_block->cfg.race_check)
      race_async_land(reinterpret_cast<uintptr_t>(c.dst), reinterpret_cast<uintptr_t>(c.src), c.bytes, c.pc);
    if (c.src)
      memcpy(c.dst, c.src, c.bytes);
    else
      memset(c.dst, 0, c.bytes);  // a zero-filling copy (cp_async_16_zfill of nothing)
  }
  t.num_copies = kept;
}

void fiber_main(void *p) {
  Thread &t = *static_cast<Thread *>(p);
  Block &b = *tls_block;
  b.thread_main(b.arg);
  land_copies(t);  // copies a thread never waited for still land
  t.state = State::kDone;
  suspend(t);
  __builtin_unreachable();
}

uint64_t splitmix64(uint64_t &s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A draw in [0, n) from the high bits of a 64 x 64 bit product (no division: a shuffle draws once a
// fiber a round, and `%` made a fifth of the scheduler's time).
uint64_t below(uint64_t &s, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(splitmix64(s)) * n) >> 64);
}

// The calling OS thread's block of the module's thread_local variables, found from one address in
// it: that block holds every __shared__ variable and the dynamic shared memory.
void find_shared_window(void const *inside, uintptr_t &lo, uintptr_t &hi) {
  struct Query {
    uintptr_t addr, lo, hi;
  } q{reinterpret_cast<uintptr_t>(inside), 0, 0};
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) -> int {
        auto &q = *static_cast<Query *>(data);
        if (!info->dlpi_tls_data) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type != PT_TLS) continue;
          uintptr_t const lo = reinterpret_cast<uintptr_t>(info->dlpi_tls_data);
          if (q.addr >= lo && q.addr < lo + info->dlpi_phdr[i].p_memsz) {
            q.lo = lo;
            q.hi = lo + info->dlpi_phdr[i].p_memsz;
            return 1;
          }
        }
        return 0;
      },
      &q);
  lo = q.lo;
  hi = q.hi;
}

// Completes the collective of the lanes in `mask` of warp w (all wait at it). False: a definite error.
bool complete_collective(Block &b, uint32_t w, unsigned mask) {
  Thread *lanes = b.threads + w * 32;
  Thread const &lead = lanes[__builtin_ctz(mask)];
  int const kind = lead.kind;
  if (kind == kExchange) {
    void const *ins[32] = {};
    void *outs[32] = {};
    for (unsigned m = mask; m; m &= m - 1) {
      ins[__builtin_ctz(m)] = lanes[__builtin_ctz(m)].in;
      outs[__builtin_ctz(m)] = lanes[__builtin_ctz(m)].out;
    }
    lead.combine(ins, outs);
  } else if (kind <= kShflXor) {
    // shfl.sync: c = clamp | segment mask, as __shfl*_sync build it from the width.
    unsigned const c = ((32u - lead.width) << 8) | (kind == kShflUp ? 0u : 0x1fu);
    int const segmask = (c >> 8) & 0x1f, cval = c & 0x1f;
    for (unsigned m = mask; m; m &= m - 1) {
      int const i = __builtin_ctz(m);
      int const bval = lanes[i].arg & 0x1f;
      int const max_lane = (i & segmask) | (cval & ~segmask), min_lane = i & segmask;
      int j;
      bool in;
      switch (kind) {
        case kShflUp:
          j = i - bval;
          in = j >= max_lane;
          break;
        case kShflDown:
          j = i + bval;
          in = j <= max_lane;
          break;
        case kShflXor:
          j = i ^ bval;
          in = j <= max_lane;
          break;
        default:
          j = min_lane | (bval & ~segmask);
          in = j <= max_lane;
          break;
      }
      if (!in) j = i;
      if (j != i && !(mask >> j & 1u)) {
        b.failure = prefix("warp collective mismatch") + describe_thread(lanes[i].tid) + " reads lane " +
                    std::to_string(j) + " in " + warp_name(kind) + "(mask " + hex_mask(mask) + ") at " +
                    where(lanes[i].site) + ", but lane " + std::to_string(j) +
                    " is not in the mask: the value it gets is undefined";
        return false;
      }
      lanes[i].result = lanes[j].value;
    }
  } else {
    unsigned votes = 0;
    for (unsigned m = mask; m; m &= m - 1)
      if (lanes[__builtin_ctz(m)].value) votes |= 1u << __builtin_ctz(m);
    uint64_t const r = kind == kBallot ? votes : kind == kAny ? votes != 0 : kind == kAll ? votes == mask : 0;
    for (unsigned m = mask; m; m &= m - 1) lanes[__builtin_ctz(m)].result = r;
    if (kind == kSyncwarp && b.cfg.race_check) race_syncwarp(b, w, mask);
  }
  for (unsigned m = mask; m; m &= m - 1) lanes[__builtin_ctz(m)].state = State::kRunnable;
  return true;
}

// A lane's collective can complete: every lane of its mask waits at the same kind, mask and width.
// A lane of the mask that does not exist or returned makes it a definite error.
enum class Ready { kYes, kNotYet, kNever };

Ready collective_ready(Block &b, Thread const &t, uint32_t lanes_in_warp) {
  Thread const *lanes = b.threads + t.tid / 32 * 32;
  std::vector<uint32_t> gone;
  bool ready = true;
  for (unsigned m = t.mask; m; m &= m - 1) {
    uint32_t const j = __builtin_ctz(m);
    if (j >= lanes_in_warp || lanes[j].state == State::kDone) {
      gone.push_back(j);
      continue;
    }
    if (!same_collective(lanes[j], t)) ready = false;
  }
  if (!gone.empty()) {
    b.failure = prefix("warp collective mismatch") + describe_thread(t.tid) + " waits at " + waiting_at(t) + ", but " +
                describe_threads(gone, "lanes") + " named in its mask " +
                (gone.back() >= lanes_in_warp ? "do not exist or " : "") + "returned without reaching it";
    return Ready::kNever;
  }
  return ready ? Ready::kYes : Ready::kNotYet;
}

// Completes every warp collective that can complete. Returns whether any did.
bool resolve_warps(Block &b) {
  int const n = b.cfg.num_threads;
  bool progress = false;
  for (int w = 0; w * 32 < n; ++w) {
    uint32_t const lanes_in_warp = std::min(32, n - w * 32);
    for (uint32_t l = 0; l < lanes_in_warp; ++l) {
      Thread const &t = b.threads[w * 32 + l];
      if (t.state != State::kWarp) continue;
      Ready const r = collective_ready(b, t, lanes_in_warp);
      if (r == Ready::kNever) return progress;
      if (r == Ready::kYes) {
        if (!complete_collective(b, w, t.mask)) return progress;
        progress = true;
      }
    }
  }
  return progress;
}

// Nothing can move and some lane waits at a collective: say which lanes of its mask are elsewhere.
void diagnose_collective(Block &b) {
  int const n = b.cfg.num_threads;
  for (int i = 0; i < n; ++i) {
    Thread const &t = b.threads[i];
    if (t.state != State::kWarp) continue;
    Thread const *lanes = b.threads + i / 32 * 32;
    std::vector<std::pair<std::string, std::vector<uint32_t>>> elsewhere;  // in order of first lane
    std::vector<uint32_t> with;
    for (unsigned m = t.mask; m; m &= m - 1) {
      Thread const &o = lanes[__builtin_ctz(m)];
      if (same_collective(o, t)) {
        with.push_back(__builtin_ctz(m));
        continue;
      }
      std::string const at = waiting_at(o);
      auto it = std::find_if(elsewhere.begin(), elsewhere.end(), [&](auto const &e) { return e.first == at; });
      if (it == elsewhere.end()) elsewhere.push_back({at, {}}), it = elsewhere.end() - 1;
      it->second.push_back(__builtin_ctz(m));
    }
    std::string msg = prefix("warp collective mismatch") + describe_thread(t.tid) + " waits at " + waiting_at(t) +
                      ", but lanes named in its mask never reach it:";
    for (size_t k = 0; k < elsewhere.size(); ++k)
      msg += std::string(k ? ";" : "") + " " + describe_threads(elsewhere[k].second, "lanes") + " wait at " +
             elsewhere[k].first;
    msg += " (" + describe_threads(with, "lanes") + " wait with it)";
    b.failure = msg;
    return;
  }
}

// Releases every named barrier that as many threads wait at as its count says (whole warps).
// Returns whether any was; a definite error (more threads than the count, counts that differ, part
// of a warp) stops the run.
bool resolve_named(Block &b) {
  int const n = b.cfg.num_threads;
  bool progress = false;
  // The waiters of each id, in one pass over the threads (a pass per id cost a sixth of an emulated
  // model's time: every round runs this, and a thread's state is a cache line of its own).
  std::vector<uint32_t> waiting[kNamedBarriers];
  for (int i = 0; i < n; ++i) {
    Thread const &t = b.threads[i];
    if (t.state == State::kBarrier && t.kind == kNamedBarrier && t.arg >= 1 && t.arg < kNamedBarriers)
      waiting[t.arg].push_back(i);
  }
  for (int id = 1; id < kNamedBarriers; ++id) {
    std::vector<uint32_t> const &at = waiting[id];
    if (at.empty()) continue;
    Thread const &first = b.threads[at[0]];
    std::string const name = "named barrier " + std::to_string(id);
    for (uint32_t i : at)
      if (b.threads[i].value != first.value) {
        b.failure = prefix("divergent barrier") + describe_thread(at[0]) + " waits at " + name + " for " +
                    std::to_string(first.value) + " threads, " + describe_thread(i) + " for " +
                    std::to_string(b.threads[i].value) +
                    ": every thread of a named barrier must give it the same count";
        return progress;
      }
    if (at.size() < first.value) continue;
    if (at.size() > first.value) {
      b.failure = prefix("divergent barrier") + describe_threads(at) + " wait at " + name + ", which is for " +
                  std::to_string(first.value) + ": which of them it releases would depend on the order they arrive in";
      return progress;
    }
    unsigned lanes[kMaxWarps] = {};  // of each warp, the ones waiting here
    for (uint32_t i : at) lanes[i / 32] |= 1u << (i % 32);
    for (int w = 0; w * 32 < n; ++w) {
      int const in_warp = std::min(32, n - w * 32);
      unsigned const all = in_warp == 32 ? ~0u : (1u << in_warp) - 1;
      if (lanes[w] && lanes[w] != all) {
        b.failure = prefix("divergent barrier") + waiting_at(first) + " is complete with " + describe_threads(at) +
                    ", part of warp " + std::to_string(w) + ": a named barrier takes whole warps";
        return progress;
      }
    }
    if (b.cfg.race_check) race_named_barrier(b, at);
    for (uint32_t i : at) b.threads[i].state = State::kRunnable;
    progress = true;
  }
  return progress;
}

// Every thread that has not returned waits at a block barrier: release it, or report the divergence.
void resolve_barrier(Block &b) {
  int const n = b.cfg.num_threads;
  std::vector<std::pair<Thread const *, std::vector<uint32_t>>> sites;  // one per (site, kind)
  std::vector<uint32_t> done;
  for (int i = 0; i < n; ++i) {
    Thread const &t = b.threads[i];
    if (t.state == State::kDone) {
      done.push_back(i);
      continue;
    }
    auto it = std::find_if(sites.begin(), sites.end(), [&](auto const &s) {
      return s.first->kind == t.kind && s.first->site.line == t.site.line &&
             (s.first->site.file == t.site.file || !strcmp(s.first->site.file, t.site.file)) &&
             (t.kind != kNamedBarrier || (s.first->arg == t.arg && s.first->value == t.value));
    });
    if (it == sites.end()) sites.push_back({&t, {}}), it = sites.end() - 1;
    it->second.push_back(i);
  }
  if (sites.size() > 1) {
    std::string msg = prefix("divergent barrier") + "threads wait at different barriers:";
    for (size_t k = 0; k < sites.size(); ++k)
      msg += std::string(k ? ";" : "") + " " + describe_threads(sites[k].second) + " at " + waiting_at(*sites[k].first);
    b.failure = msg + (done.empty() ? "" : "; " + describe_threads(done) + " returned");
    return;
  }
  if (sites[0].first->kind == kNamedBarrier) {  // resolve_named would have released it if it could
    b.failure = prefix("divergent barrier") + waiting_at(*sites[0].first) + " is reached by " +
                describe_threads(sites[0].second) + " only" +
                (done.empty() ? std::string() : ": " + describe_threads(done) + " returned without reaching it");
    return;
  }
  if (!done.empty()) {
    b.failure = prefix("divergent barrier") + waiting_at(*sites[0].first) + " is reached by " +
                describe_threads(sites[0].second) + ", but " + describe_threads(done) +
                " returned without reaching it: every thread of the block must reach every barrier";
    return;
  }
  int count = 0;
  for (int i = 0; i < n; ++i) count += b.threads[i].value != 0;
  int const kind = sites[0].first->kind;
  uint64_t const r = kind == kSyncthreadsCount ? count
                     : kind == kSyncthreadsAnd ? count == n
                     : kind == kSyncthreadsOr  ? count > 0
                                               : 0;
  if (b.cfg.race_check) race_barrier(b);
  for (int i = 0; i < n; ++i) {
    b.threads[i].result = r;
    b.threads[i].state = State::kRunnable;
  }
}

// Warps on the device drift apart: one may still be reading what the others, already past their
// next warp collectives, overwrite. Rounds alone hide that (every fiber runs up to its next
// synchronization point before any moves on), so in the shuffled order, between two block barriers,
// one warp picked at random lags: it sits out while the others can move, and runs once they all
// wait (at the barrier, or spinning on something only it can change). A barrier the code needs but
// lacks then changes the results, as it may on the device. -1: no warp lags (a one-warp block).
int pick_lagging_warp(int num_warps, uint64_t &rng) {
  return num_warps < 2 ? -1 : static_cast<int>(below(rng, num_warps));
}

// This round's order without the lagging warp's fibers, unless nothing else could run (then the
// lag ends until the next barrier).
void hold_back(std::vector<uint32_t> &order, int &lagging, bool others_moved) {
  if (lagging < 0) return;
  auto const lags = [&](uint32_t tid) { return static_cast<int>(tid / 32) == lagging; };
  if (!others_moved || std::all_of(order.begin(), order.end(), lags)) {
    lagging = -1;
    return;
  }
  order.erase(std::remove_if(order.begin(), order.end(), lags), order.end());
}

void schedule(Block &b) {
  int const n = b.cfg.num_threads;
  std::vector<uint32_t> &order = b.order;
  order.reserve(n);
  uint64_t rng = b.cfg.seed;
  int const num_warps = (n + 31) / 32;
  int lagging = b.cfg.order == kShuffled ? pick_lagging_warp(num_warps, rng) : -1;
  bool moved_last = true;  // the last round moved (not only __nanosleep spinners)
  long idle_rounds = 0;
  auto const started = std::chrono::steady_clock::now();
  for (;;) {
    if (b.cfg.time_limit_s > 0 &&
        std::chrono::steady_clock::now() - started > std::chrono::seconds(b.cfg.time_limit_s)) {
      int const running = static_cast<int>(
          std::find_if(b.threads, b.threads + n, [](Thread const &t) { return t.state != State::kDone; }) - b.threads);
      Thread const &t = b.threads[running];
      std::string const place = t.state != State::kRunnable && t.state != State::kYielded ? " waits at " + waiting_at(t)
                                : t.site.file ? " last synchronized at " + where(t.site)
                                              : " runs";
      b.failure = prefix("hang") + "the block has run past the emulator's limit of " +
                  std::to_string(b.cfg.time_limit_s) + " s, and its threads go on without finishing (" +
                  describe_thread(running) + place + "): a loop that does not end?";
      return;
    }
    order.clear();
    for (int i = 0; i < n; ++i) {
      Thread &t = b.threads[i];
      if (t.state == State::kRunnable || t.state == State::kYielded) {
        t.state = State::kRunnable;
        order.push_back(i);
      }
    }
    if (b.cfg.order == kReversed) std::reverse(order.begin(), order.end());
    if (b.cfg.order == kShuffled) {
      hold_back(order, lagging, moved_last);
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[below(rng, i)]);
    }
    bool moved = order.empty();
    if (!order.empty()) {  // the round: each fiber runs until it blocks, then hands over to the next
      Thread &first = b.threads[order[0]];
      b.next = 1;
      tls_thread = &first;
      tls_view = &first.view;
      switch_context(b.scheduler, first.ctx);
      if (stopped(b)) return;
      for (uint32_t tid : order) moved |= b.threads[tid].state != State::kYielded;
    }
    moved_last = moved;
    bool progress = resolve_warps(b);
    if (stopped(b)) return;
    progress |= resolve_named(b);
    if (stopped(b)) return;
    int done = 0, runnable = 0, at_warp = 0;
    for (int i = 0; i < n; ++i) {
      State const s = b.threads[i].state;
      done += s == State::kDone;
      runnable += s == State::kRunnable || s == State::kYielded;
      at_warp += s == State::kWarp;
    }
    if (done == n) return;
    if (progress || (runnable && moved)) {
      idle_rounds = 0;
      continue;
    }
    if (runnable) {  // only __nanosleep spinners and mbarrier waiters can move
      bool const only_mbarriers = std::all_of(b.threads, b.threads + n,
                                              [](Thread const &t) { return t.state != State::kYielded || t.mbarrier; });
      if (++idle_rounds < (only_mbarriers ? kMbarrierIdleRounds : kMaxIdleRounds)) continue;
      std::vector<uint32_t> spinning;
      std::string others;
      for (int i = 0; i < n; ++i) {
        Thread const &t = b.threads[i];
        if (t.state == State::kYielded)
          spinning.push_back(i);
        else if (others.empty() && t.state != State::kDone)
          others = "; " + describe_thread(i) + " waits at " + waiting_at(t);
      }
      Thread const &first = b.threads[spinning[0]];
      b.failure = prefix("hang") + describe_threads(spinning) + (spinning.size() == 1 ? " spins" : " spin") + " at " +
                  waiting_at(first) + " and nothing else can move" +
                  (first.mbarrier ? " (" + mbarrier_state(b, first.mbarrier) + ")" : "") + others;
      return;
    }
    if (at_warp) {
      diagnose_collective(b);
      return;
    }
    resolve_barrier(b);
    if (stopped(b)) return;
    if (b.cfg.order == kShuffled) lagging = pick_lagging_warp(num_warps, rng);  // a new interval, perhaps a new laggard
  }
}

}  // namespace

std::string finding(char const *what) {
  return std::string(what) + " in task " + std::to_string(tls_block->cfg.task_id) + ": ";
}

void abandon_fiber(std::string msg) {
  Block &b = *tls_block;
  if (b.failure.empty()) b.failure = std::move(msg);
  Thread *t = tls_thread;
  tls_thread = nullptr;
  tls_view = nullptr;
  switch_context(t->ctx, b.scheduler);
  __builtin_unreachable();
}

std::string describe_thread(uint32_t tid) {
  return "thread " + std::to_string(tid) + " (warp " + std::to_string(tid / 32) + ", lane " + std::to_string(tid % 32) +
         ")";
}

std::string describe_threads(std::vector<uint32_t> const &ids, char const *noun) {
  if (ids.size() == 1) return std::string(noun, strlen(noun) - 1) + " " + std::to_string(ids[0]);
  std::string out = noun;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    out += (i ? ", " : " ") + std::to_string(ids[i]) + (j > i ? "-" + std::to_string(ids[j]) : "");
    i = j + 1;
  }
  return out;
}

int barrier(Site site, int kind, int pred) {
  Thread &t = current("__syncthreads");
  t.state = State::kBarrier;
  t.site = site;
  t.kind = kind;
  t.value = pred;
  suspend(t);
  return static_cast<int>(t.result);
}

void named_barrier(Site site, int id, int threads) {
  Thread &t = current("bar.sync");
  int const n = tls_block->cfg.num_threads;
  if (id < 1 || id >= kNamedBarriers)
    abort_block(prefix("invalid barrier") + describe_thread(t.tid) + " waits at named barrier " + std::to_string(id) +
                " at " + where(site) + ": the ids are 1 to " + std::to_string(kNamedBarriers - 1) +
                " (0 is __syncthreads())");
  if (threads < 32 || threads % 32 || threads > n)
    abort_block(prefix("invalid barrier") + describe_thread(t.tid) + " waits at named barrier " + std::to_string(id) +
                " at " + where(site) + " for " + std::to_string(threads) +
                " threads: a multiple of 32 (whole warps), at most the block's " + std::to_string(n));
  t.state = State::kBarrier;
  t.site = site;
  t.kind = kNamedBarrier;
  t.arg = id;
  t.value = static_cast<uint64_t>(threads);
  suspend(t);
}

uint64_t warp_collective(Site site, int kind, unsigned mask, uint64_t value, int arg, int width) {
  Thread &t = current(warp_name(kind));
  if (!(mask >> (t.tid % 32) & 1u))
    abort_block(prefix("warp collective mismatch") + describe_thread(t.tid) + " calls " + warp_name(kind) + " at " +
                where(site) + " with mask " + hex_mask(mask) + ", which does not include its own lane");
  bool const shuffle = kind <= kShflXor;
  if (shuffle && (width < 1 || width > 32 || (width & (width - 1))))
    abort_block(prefix("invalid shuffle") + describe_thread(t.tid) + " calls " + warp_name(kind) + " at " +
                where(site) + " with width " + std::to_string(width) + ": it must be a power of 2 from 1 to 32");
  t.state = State::kWarp;
  t.site = site;
  t.kind = kind;
  t.mask = mask;
  t.value = value;
  t.arg = arg;
  t.width = shuffle ? width : 32;
  suspend(t);
  return t.result;
}

void warp_exchange(Site site, char const *name, unsigned mask, void const *in, void *out, Combine combine) {
  Thread &t = current(name);
  if (!(mask >> (t.tid % 32) & 1u))
    abort_block(prefix("warp collective mismatch") + describe_thread(t.tid) + " calls " + name + " at " + where(site) +
                " with mask " + hex_mask(mask) + ", which does not include its own lane");
  t.state = State::kWarp;
  t.site = site;
  t.kind = kExchange;
  t.mask = mask;
  t.width = 32;
  t.name = name;
  t.in = in;
  t.out = out;
  t.combine = combine;
  suspend(t);
}

void cp_async_issue(void *smem_dst, void const *src, unsigned bytes) {
  Thread &t = current("cp.async");
  uint32_t const pc =
      static_cast<uint32_t>(reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1 - module_base());
  uintptr_t const d = reinterpret_cast<uintptr_t>(smem_dst), s = reinterpret_cast<uintptr_t>(src);
  if (d < tls_block->shared_lo || d + bytes > tls_block->shared_hi)
    abort_block(prefix("invalid cp.async") + describe_thread(t.tid) + " at " + location(symbolize({pc}), pc) +
                " copies to an address that is not shared memory");
  if ((d | s) % bytes)
    abort_block(prefix("misaligned cp.async") + describe_thread(t.tid) + " at " + location(symbolize({pc}), pc) +
                " copies " + std::to_string(bytes) + " bytes between addresses that are not multiples of " +
                std::to_string(bytes) + " (the device stops the kernel with a misaligned address error)");
  if (t.num_copies == kMaxAsyncCopies)
    abort_block(prefix("too many cp.async copies") + describe_thread(t.tid) + " has " +
                std::to_string(kMaxAsyncCopies) +
                " copies in flight without a cp_async_wait_all() or cp_async_wait_group()");
  t.copies[t.num_copies++] = AsyncCopy{smem_dst, src, bytes, pc, t.groups_committed};
  if (tls_block->cfg.race_check) race_async_issue(reinterpret_cast<uintptr_t>(smem_dst), bytes, pc);
}

void cp_async_commit() { ++current("cp.async.commit_group").groups_committed; }

void cp_async_wait_all() { land_copies(current("cp.async.wait_all")); }

// cp.async.wait_group n: every committed group but the newest n has landed; those n, and copies not
// yet committed, stay in flight (their destinations keep what they held).
void cp_async_wait_group(int n) {
  Thread &t = current("cp.async.wait_group");
  land_copies(t, t.groups_committed > static_cast<uint32_t>(n) ? t.groups_committed - n : 0);
}

unsigned long long global_timer_ns() {
  return static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

void yield(Site site) {
  Thread &t = current("__nanosleep");
  t.state = State::kYielded;
  t.site = site;
  suspend(t);
}

void trap(Site site, char const *what) {
  Thread &t = current(what);
  abort_block(prefix("trap") + describe_thread(t.tid) + " at " + where(site) + ": " + what);
}

unsigned long long clock_ticks() { return tls_block ? ++tls_block->ticks : 0; }

namespace {
thread_local std::unordered_map<uintptr_t, unsigned> atomic_words;  // since clear_atomic_words: address -> bytes
}  // namespace

void note_atomic(void const *p, unsigned bytes) {
  unsigned &b = atomic_words[reinterpret_cast<uintptr_t>(p)];
  b = std::max(b, bytes);
}

void clear_atomic_words() { atomic_words.clear(); }

size_t copy_atomic_words(uint64_t *addrs, uint32_t *bytes, size_t max) {
  size_t i = 0;
  for (auto const &[a, n] : atomic_words) {
    if (i == max) break;
    addrs[i] = a;
    bytes[i++] = n;
  }
  return atomic_words.size();
}

size_t cvta_generic_to_shared(void const *p) {
  Block *b = tls_block;
  uintptr_t const a = reinterpret_cast<uintptr_t>(p);
  if (b && (a < b->shared_lo || a >= b->shared_hi))
    abort_block(prefix("invalid address") + describe_thread(tls_thread->tid) +
                " passes a pointer that is not shared memory to __cvta_generic_to_shared");
  return b ? a - b->shared_lo : 0;
}

namespace {

constexpr unsigned char kCanary = 0xa5;

// The first byte of p[0, n) that is not the canary, or n: memcmp against 1 KB of canaries, then
// bytes. A loop over bytes was most of the runner's own time in a small task (perf): up to 227 KB
// lie past a task's shared memory, checked after every task.
size_t first_not_canary(unsigned char const *p, size_t n) {
  struct Page {
    unsigned char bytes[1024];
    Page() { memset(bytes, kCanary, sizeof bytes); }
  };
  static Page const page;
  size_t at = 0;
  while (at < n) {
    size_t const k = std::min(sizeof page.bytes, n - at);
    if (memcmp(p + at, page.bytes, k) != 0) break;
    at += k;
  }
  while (at < n && p[at] == kCanary) ++at;
  return at;
}

// The bytes past a task's dynamic shared memory that it wrote (empty: none).
std::string canary_report(RunConfig const &cfg, unsigned char const *past, size_t n) {
  size_t const first = first_not_canary(past, n);
  if (first == n) return {};
  size_t last = n - 1;
  while (past[last] == kCanary) --last;
  return "dynamic shared memory overflow in task " + std::to_string(cfg.task_id) + ": bytes " +
         std::to_string(cfg.dynamic_smem_bytes + first) + ".." + std::to_string(cfg.dynamic_smem_bytes + last) +
         " of dynamic shared memory were written, past the " + std::to_string(cfg.dynamic_smem_bytes) +
         " bytes the task was given (its spec's smem_function); --mpk-emulate-check names the thread and line";
}

}  // namespace

int run_block(RunConfig const &cfg, void (*thread_main)(void *), void *arg, std::string &report) {
  report.clear();
  if (cfg.num_threads < 1 || cfg.num_threads > kMaxThreads) {
    report = "a block has 1 to " + std::to_string(kMaxThreads) + " threads, not " + std::to_string(cfg.num_threads);
    return kRunInvalid;
  }
  if (cfg.dynamic_smem_bytes > cfg.dynamic_smem_capacity) {
    report = "dynamic shared memory of " + std::to_string(cfg.dynamic_smem_bytes) + " bytes asked, " +
             std::to_string(cfg.dynamic_smem_capacity) + " available";
    return kRunInvalid;
  }
  if (tls_block) {
    report = "run_block called from inside an emulated block";
    return kRunInvalid;
  }
  if (!arena.reserve(cfg.num_threads)) {
    report = "could not map fiber stacks for " + std::to_string(cfg.num_threads) + " threads";
    return kRunInvalid;
  }
  Block b;
  b.cfg = cfg;
  b.threads = reinterpret_cast<Thread *>(arena.base);
  b.thread_main = thread_main;
  b.arg = arg;
  static thread_local void const *window_of = nullptr;
  static thread_local uintptr_t window_lo = 0, window_hi = 0;
  if (window_of != cfg.dynamic_smem) {
    find_shared_window(cfg.dynamic_smem, window_lo, window_hi);
    if (window_lo == window_hi) {  // no PT_TLS found: at least the dynamic shared memory is shared
      window_lo = reinterpret_cast<uintptr_t>(cfg.dynamic_smem);
      window_hi = window_lo + cfg.dynamic_smem_capacity;
    }
    window_of = cfg.dynamic_smem;
  }
  b.shared_lo = window_lo;
  b.shared_hi = window_hi;
  b.stacks_lo = reinterpret_cast<uintptr_t>(arena.base);
  b.stacks_hi = b.stacks_lo + arena.bytes;
  for (int i = 0; i < cfg.num_threads; ++i) {
    // Everything but the cp.async queue starts zeroed: that queue (3 KB a thread) is read only up to
    // num_copies, and value-initializing whole Threads wrote 1.2 MB for every task of 256 threads.
    Thread &t = *new (b.threads + i) Thread;
    auto *const raw = reinterpret_cast<unsigned char *>(&t);
    memset(raw, 0, offsetof(Thread, copies));
    memset(raw + offsetof(Thread, num_copies), 0, sizeof(Thread) - offsetof(Thread, num_copies));
    t.tid = i;
    t.view.thread_idx = uint3{static_cast<unsigned>(i), 0, 0};
    t.view.block_idx = uint3{0, 0, 0};
    t.view.block_dim = dim3(cfg.num_threads, 1, 1);
    t.view.grid_dim = dim3(1, 1, 1);
    t.state = State::kRunnable;
    make_context(t.ctx, arena.stack(i), kStackBytes, &fiber_main, &t);
  }
  // Shared memory is not cleared between blocks on the device: make stale reads visible. One poison
  // is not enough: NaN (0xff) vanishes in fmaxf / fminf and comparisons, so the tasks cycle through
  // NaN, a huge positive (0x7f: 3.4e38 as fp32 / bf16) and a huge negative (0xfe: -1.7e38) value,
  // which a max, a min or a sum cannot hide.
  static constexpr unsigned char kPoison[3] = {0xff, 0x7f, 0xfe};
  memset(cfg.dynamic_smem, kPoison[cfg.task_id % 3], cfg.dynamic_smem_bytes);
  // Past what the task was given, up to what the block has, a canary: on the device those bytes are
  // another variant's or none, so a write there is a bug even where it changes no result here.
  unsigned char *const past = static_cast<unsigned char *>(cfg.dynamic_smem) + cfg.dynamic_smem_bytes;
  size_t const past_bytes = cfg.dynamic_smem_capacity - cfg.dynamic_smem_bytes;
  memset(past, kCanary, past_bytes);
  tls_block = &b;
  if (cfg.race_check) race_begin(b);
  {
    FaultScope const faults(cfg.time_limit_s);
    schedule(b);
  }
  std::string const races = cfg.race_check ? race_end(b) : std::string();
  report = b.fault.sig ? describe_fault(b) : !b.failure.empty() ? b.failure : mbarriers_at_task_end(b);
  if (report.empty() && races.empty()) report = canary_report(cfg, past, past_bytes);
  tls_block = nullptr;
  if (!races.empty()) report += (report.empty() ? "" : "\n") + races;
  return report.empty() ? kRunOk : kRunDetected;
}

void release_stacks() { arena.release(); }

double measure_switch_ns(int n) {
  struct Ping {
    Context main, fiber;
  } ping;
  std::vector<char> stack(64 << 10);
  make_context(
      ping.fiber, stack.data(), stack.size(),
      [](void *p) {
        auto &q = *static_cast<Ping *>(p);
        for (;;) switch_context(q.fiber, q.main);
      },
      &ping);
  switch_context(ping.main, ping.fiber);
  auto const t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) switch_context(ping.main, ping.fiber);
  std::chrono::duration<double, std::nano> const dt = std::chrono::steady_clock::now() - t0;
  return dt.count() / (2.0 * n);
}

}  // namespace emu
}  // namespace mpk
