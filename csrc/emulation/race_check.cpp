// Data races inside one block, found from every load and store of the task code.
//
// The generated translation unit is compiled with g++ -fsanitize=thread, which makes it call
// __tsan_read4(addr), __tsan_write16(addr), __tsan_atomic32_fetch_add(...) and so on around each
// access; ThreadSanitizer's own runtime is not linked: the hooks below are ours. They keep a shadow
// record per byte of the memory the task touches (the fiber stacks, i.e. registers and local memory,
// are skipped): the last write and the last two reads, each with its thread, its barrier epoch, its
// warp clock and its program counter.
//
// Ordering within a block comes only from barriers and __syncwarp (shuffles and votes order no
// memory; atomics are relaxed), so happens-before is cheap to decide: two accesses are ordered if a
// block barrier lies between them (the epoch grew), if one thread made both, if they are lanes of
// one warp joined by __syncwarp since (a vector clock over the 32 lanes, reset at each barrier), or
// if the second thread has since passed a named barrier (bar.sync id, n) that the first one's warp
// passed after the access, directly or through other named barriers (a vector clock over the warps,
// counting the named barriers each passed, reset at each block barrier). Two
// unordered accesses to a byte, at least one a write and not both atomic, are a race; it is reported
// with both threads and both source lines (addr2line on the module, -g). A write is checked against
// the first and the last other reader of the epoch, so a race with a reader in between can be missed.
//
// Also reported: a read of shared memory that no thread of this task wrote (on the device it would
// read what an earlier task left there), an access to dynamic shared memory past the bytes the task
// asked for, and a misaligned vector access (a uint4 load from an address that is not a multiple of
// 16 works on x86; the device faults). memcpy / memset calls are not seen (ThreadSanitizer intercepts them; we do not).
//
// Global accesses are also checked against the task's slices (RunConfig::memory): a read outside its
// input and output slices (and the meta tensors) reads data no dependency orders before the task, a
// write outside its output slices clobbers another task's data or an input, and an address in no
// tensor at all is reported as such. A cp.async destination counts as written by an agent that
// nothing orders with until the issuing thread's wait, which then reads the source and writes it.
// A TMA destination likewise, until a wait on its mbarrier lands it; that write is then ordered
// before the accesses of threads that know its phase complete (block_state.h, race_tma_land).
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "emulation/block_state.h"

namespace mpk {
namespace emu {
namespace {

enum : uint16_t { kAtomic = 1, kAsync = 2, kTma = 4, kLanded = 8 };
// A kLanded access keeps its landing's number in the flags' other bits: 1 + its index in
// RaceState::landings, or 0 once those run out (then it is ordered before everything).
constexpr int kLandingShift = 4;
constexpr size_t kMaxLandings = (1u << (16 - kLandingShift)) - 1;

struct Landing {  // the mbarrier phase whose copies a wait landed
  uint32_t slot, phase;
};

struct Access {
  uint32_t epoch;  // 0, or below the task's first epoch: none
  uint32_t clock;  // the thread's own lane clock at the access
  uint32_t warp_clock;  // the named barriers the thread's warp had passed
  uint32_t pc;  // offset in the module
  uint16_t tid;
  uint16_t flags;  // kAtomic, kAsync (a copy in flight: ordered with nothing; kTma: a TMA copy), kLanded
};

struct Cell {  // one byte of application memory
  Access write, read1, read2;
};

constexpr uintptr_t kPageBytes = 4096;

enum class Finding : uint8_t {
  kRace,
  kUninitialized,
  kPastDynamicSmem,
  kMisaligned,
  kReadOutsideSlices,
  kWriteOutsideSlices,
  kNoTensor
};

struct Report {
  Finding kind;
  bool write, atomic;
  uint16_t tid;
  uint32_t pc;
  uint32_t size;
  uintptr_t addr;
  Access prior;  // kRace: the other access
  bool prior_write;
};

struct RaceState {
  bool on = false;
  uint32_t epoch = 0, task_epoch = 0;
  uintptr_t skip_lo = 0, skip_size = 0;  // fiber records and stacks
  uintptr_t view_lo = 0;  // the tls_view pointer itself
  uintptr_t shared_lo = 0, shared_size = 0;
  std::vector<TlsSymbol> const *init_guards = nullptr;  // g++'s guards of __shared__ arrays (see race_begin)
  uintptr_t dyn_lo = 0, dyn_capacity = 0, dyn_bytes = 0;
  uintptr_t module_base = 0;
  Memory const *memory = nullptr;  // with check_slices: the task's slices
  uintptr_t host_lo = 0, host_size = 0;  // the emulator's descriptor and runtime view
  uintptr_t image_lo = 0, image_size = 0;  // the module's own data (__constant__ tables, ...)
  std::unordered_map<uintptr_t, Cell *> pages;
  std::vector<Cell *> spare;
  uintptr_t last_page = ~uintptr_t{0};
  Cell *last_cells = nullptr;
  std::vector<Report> reports;
  size_t dropped = 0;
  std::vector<Landing> landings;  // in landing order, one per phase landed (a run of copies)
};
// Per OS thread, created on first use; a plain pointer so that reaching it costs one TLS lookup
// (a thread_local object with a constructor costs an initialization check at every access).
thread_local RaceState *tls_race = nullptr;

RaceState &race_state() {
  if (!tls_race) tls_race = new RaceState();
  return *tls_race;
}

constexpr size_t kMaxReports = 16;

Cell *page_cells(RaceState &rs, uintptr_t page) {
  if (page == rs.last_page) return rs.last_cells;
  Cell *&cells = rs.pages[page];
  if (!cells) {
    if (!rs.spare.empty()) {
      cells = rs.spare.back();
      rs.spare.pop_back();
    } else {
      void *p = mmap(nullptr, kPageBytes * sizeof(Cell), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        fprintf(stderr, "mpk emulation: out of memory for race-check shadow\n");
        abort();
      }
      cells = static_cast<Cell *>(p);  // zero: no access yet
    }
  }
  rs.last_page = page;
  rs.last_cells = cells;
  return cells;
}

void add_report(RaceState &rs, Report const &r) {
  for (Report const &o : rs.reports)
    if (o.kind == r.kind && o.pc == r.pc && (r.kind != Finding::kRace || o.prior.pc == r.prior.pc)) return;
  if (rs.reports.size() < kMaxReports)
    rs.reports.push_back(r);
  else
    ++rs.dropped;
}

inline bool live(RaceState const &rs, Access const &a) { return a.epoch >= rs.task_epoch; }

inline bool ordered_before(RaceState const &rs, Access const &a, Thread const &t) {
  if (a.flags & kAsync) return false;
  if (a.flags & kLanded) {  // a TMA copy a wait landed: ordered for those who know its phase complete
    uint32_t const n = a.flags >> kLandingShift;
    if (!n || t.mbarrier_seen[rs.landings[n - 1].slot] > rs.landings[n - 1].phase) return true;
  }
  return a.epoch < rs.epoch || a.tid == t.tid || (a.tid / 32 == t.tid / 32 && t.clock[a.tid % 32] >= a.clock) ||
         t.warp_clock[a.tid / 32] > a.warp_clock;
}

// [a, a + n) inside one of the sorted, disjoint ranges.
bool covered(MpkEmuRange const *r, int count, uintptr_t a, uintptr_t n) {
  int lo = 0, hi = count;
  while (lo < hi) {  // the first range ending after a
    int const mid = (lo + hi) / 2;
    if (r[mid].hi <= a)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < count && r[lo].lo <= a && a + n <= r[lo].hi;
}

// A global access of the task: inside its slices? (memory the emulator or the module owns is exempt)
Finding check_slices(RaceState const &rs, uintptr_t addr, uintptr_t size, bool write) {
  Memory const &m = *rs.memory;
  if (addr - rs.host_lo < rs.host_size || addr - rs.image_lo < rs.image_size) return Finding::kRace;
  if (write ? covered(m.writable, m.num_writable, addr, size) : covered(m.readable, m.num_readable, addr, size))
    return Finding::kRace;
  if (!tensor_at(m, addr) && !tensor_at(m, addr + size - 1)) return Finding::kNoTensor;
  return write ? Finding::kWriteOutsideSlices : Finding::kReadOutsideSlices;
}

// aligned: g++ called the hook for an access whose type has the alignment of its size (uint4,
// float2, ...); the device faults when such an access is misaligned, x86 does not. flags: kAtomic,
// kAsync (a cp.async or, with kTma, TMA issue), landing (its wait: the thread's own async write, or
// with kLanded any TMA copy's, is complete).
void access(uintptr_t addr, uintptr_t size, bool write, uint16_t flags, uint32_t pc, bool aligned = false,
            bool landing = false) {
  RaceState *state = tls_race;
  if (!state || !state->on) return;
  RaceState &rs = *state;
  Thread const *t = tls_thread;
  if (!t || addr - rs.skip_lo < rs.skip_size || addr - rs.view_lo < sizeof(void *)) return;
  bool const atomic = flags & kAtomic;
  bool const shared = addr - rs.shared_lo < rs.shared_size;
  if (shared && rs.init_guards)
    for (TlsSymbol const &g : *rs.init_guards)
      if (addr - rs.shared_lo - g.offset < g.size) return;  // compiler bookkeeping, not the body's memory
  Report r{Finding::kRace, write, atomic, static_cast<uint16_t>(t->tid), pc, static_cast<uint32_t>(size),
           addr,           {},    false};
  if (!shared && rs.memory) {
    r.kind = check_slices(rs, addr, size, write);
    if (r.kind != Finding::kRace) add_report(rs, r);
    if (r.kind == Finding::kNoTensor) return;  // no shadow for memory that is not ours
  }
  if (shared && addr - rs.dyn_lo < rs.dyn_capacity && addr + size - rs.dyn_lo > rs.dyn_bytes) {
    r.kind = Finding::kPastDynamicSmem;
    add_report(rs, r);
  }
  if (aligned && addr % size) {
    r.kind = Finding::kMisaligned;
    add_report(rs, r);
  }
  Access const me{rs.epoch, t->clock[t->tid % 32],         t->warp_clock[t->tid / 32],
                  pc,       static_cast<uint16_t>(t->tid), flags};
  bool found = false, uninitialized = false;
  for (uintptr_t a = addr; a < addr + size; ++a) {
    Cell &c = page_cells(rs, a / kPageBytes)[a % kPageBytes];
    auto conflicts = [&](Access const &o) {
      if (landing && (o.flags & kAsync) && (o.tid == me.tid || (flags & kLanded))) return false;
      return live(rs, o) && !ordered_before(rs, o, *t) && !((o.flags & kAtomic) && atomic);
    };
    if (!found) {
      Access const *prior = nullptr;
      bool prior_write = true;
      if (conflicts(c.write))
        prior = &c.write;
      else if (write && conflicts(c.read1))
        prior = &c.read1, prior_write = false;
      else if (write && conflicts(c.read2))
        prior = &c.read2, prior_write = false;
      if (prior) {
        r.kind = Finding::kRace;
        r.prior = *prior;
        r.prior_write = prior_write;
        add_report(rs, r);
        found = true;
      }
    }
    if (shared && (!write || atomic) && !live(rs, c.write)) uninitialized = true;
    if (write) {
      c.write = me;
      c.read1.epoch = c.read2.epoch = 0;
    } else if (!live(rs, c.read1) || c.read1.epoch < rs.epoch || c.read1.tid == me.tid) {
      c.read1 = me;
    } else {
      c.read2 = me;
    }
  }
  if (uninitialized) {
    r.kind = Finding::kUninitialized;
    add_report(rs, r);
  }
}

std::string address(RaceState const &rs, uintptr_t a, std::vector<TlsSymbol> const &symbols) {
  char b[64];
  if (a - rs.dyn_lo < rs.dyn_capacity) {
    snprintf(b, sizeof b, "dynamic_smem+%zu", static_cast<size_t>(a - rs.dyn_lo));
    return b;
  }
  if (a - rs.shared_lo < rs.shared_size) {
    uintptr_t const off = a - rs.shared_lo;
    for (TlsSymbol const &s : symbols)
      if (off - s.offset < s.size) return "shared " + s.name + "+" + std::to_string(off - s.offset);
    snprintf(b, sizeof b, "static shared memory %p", reinterpret_cast<void *>(a));
    return b;
  }
  return rs.memory ? tensor_address(*rs.memory, a) : tensor_address(Memory{}, a);
}

char const *verb(bool write, bool atomic, bool past, bool async = false, bool tma = false) {
  if (tma) return past ? "started a TMA copy that writes" : "starts a TMA copy that writes";
  if (async) return past ? "started a cp.async that writes" : "starts a cp.async that writes";
  if (atomic) return past ? "did an atomic on" : "does an atomic on";
  if (write) return past ? "wrote" : "writes";
  return past ? "read" : "reads";
}

// The address range of the module's loaded segments (its static data among them).
void module_image(uintptr_t &lo, uintptr_t &hi) {
  struct Query {
    uintptr_t base, lo, hi;
  } q{module_base(), ~uintptr_t{0}, 0};
  dl_iterate_phdr(
      [](dl_phdr_info *info, size_t, void *data) -> int {
        auto &q = *static_cast<Query *>(data);
        if (info->dlpi_addr != q.base) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          ElfW(Phdr) const &ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD) continue;
          q.lo = std::min<uintptr_t>(q.lo, info->dlpi_addr + ph.p_vaddr);
          q.hi = std::max<uintptr_t>(q.hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
        }
        return 1;
      },
      &q);
  lo = q.hi ? q.lo : 0;
  hi = q.hi;
}

}  // namespace

void race_begin(Block &b) {
  RaceState &rs = race_state();
  for (auto &[page, cells] : rs.pages) rs.spare.push_back(cells);  // stale epochs read as empty
  rs.pages.clear();
  rs.last_page = ~uintptr_t{0};
  rs.reports.clear();
  rs.dropped = 0;
  rs.landings.clear();
  rs.task_epoch = ++rs.epoch;
  rs.skip_lo = b.stacks_lo;
  rs.skip_size = b.stacks_hi - b.stacks_lo;
  rs.view_lo = reinterpret_cast<uintptr_t>(&tls_view);
  rs.shared_lo = b.shared_lo;
  rs.shared_size = b.shared_hi - b.shared_lo;
  // __shared__ is thread_local here, and g++ guards a thread_local array of a class type (__nv_bfloat16,
  // __half) with an init flag that every thread reads and the first one sets: not the body's shared
  // memory, and reported as a race or an uninitialized read it would hide real findings behind false
  // ones. The module's guard variables, read once (by readelf, like the report's names).
  static std::vector<TlsSymbol> const guards = [] {
    std::vector<TlsSymbol> out;
    for (TlsSymbol const &s : tls_symbols())
      if (s.name.rfind("guard variable for ", 0) == 0) out.push_back(s);
    return out;
  }();
  rs.init_guards = &guards;
  rs.dyn_lo = reinterpret_cast<uintptr_t>(b.cfg.dynamic_smem);
  rs.dyn_capacity = b.cfg.dynamic_smem_capacity;
  rs.dyn_bytes = b.cfg.dynamic_smem_bytes;
  rs.module_base = module_base();
  Memory const &m = b.cfg.memory;
  rs.memory = m.check_slices ? &m : nullptr;
  rs.host_lo = m.host_lo;
  rs.host_size = m.host_hi - m.host_lo;
  if (!rs.image_size) {
    uintptr_t lo, hi;
    module_image(lo, hi);
    rs.image_lo = lo;
    rs.image_size = hi - lo;
  }
  for (int i = 0; i < b.cfg.num_threads; ++i) {
    memset(b.threads[i].clock, 0, sizeof b.threads[i].clock);
    memset(b.threads[i].warp_clock, 0, sizeof b.threads[i].warp_clock);
    b.threads[i].clock[i % 32] = 1;
  }
  rs.on = true;
}

void race_async_issue(uintptr_t dst, uint32_t bytes, uint32_t pc) { access(dst, bytes, true, kAsync, pc); }

void race_async_land(uintptr_t dst, uintptr_t src, uint32_t bytes, uint32_t pc) {
  if (src) access(src, bytes, false, 0, pc);  // a zero-filling copy reads nothing
  access(dst, bytes, true, 0, pc, false, true);
}

void race_tma_issue(uintptr_t dst, uint32_t bytes, uint32_t pc) { access(dst, bytes, true, kAsync | kTma, pc); }

void race_tma_read(uintptr_t src, uint32_t bytes, uint32_t pc) { access(src, bytes, false, 0, pc); }

void race_tma_land(uintptr_t dst, uint32_t bytes, uint32_t pc, uint32_t slot, uint32_t phase) {
  std::vector<Landing> &l = race_state().landings;
  auto const last = [&] { return !l.empty() && l.back().slot == slot && l.back().phase == phase; };
  if (slot < kTrackedMbarriers && !last() && l.size() < kMaxLandings) l.push_back({slot, phase});
  uint32_t const n = slot < kTrackedMbarriers && last() ? static_cast<uint32_t>(l.size()) : 0;  // 0: untracked
  access(dst, bytes, true, static_cast<uint16_t>(kLanded | n << kLandingShift), pc, false, true);
}

void race_barrier(Block &b) {
  ++race_state().epoch;
  for (int i = 0; i < b.cfg.num_threads; ++i) {
    memset(b.threads[i].clock, 0, sizeof b.threads[i].clock);
    memset(b.threads[i].warp_clock, 0, sizeof b.threads[i].warp_clock);
    b.threads[i].clock[i % 32] = 1;
  }
}

void race_syncwarp(Block &b, uint32_t warp, unsigned mask) {
  uint32_t joined[32] = {};
  Thread *lanes = b.threads + warp * 32;
  uint32_t seen[kTrackedMbarriers] = {};
  for (unsigned m = mask; m; m &= m - 1) {
    Thread const &t = lanes[__builtin_ctz(m)];
    for (int l = 0; l < 32; ++l) joined[l] = std::max(joined[l], t.clock[l]);
    for (int k = 0; k < kTrackedMbarriers; ++k) seen[k] = std::max(seen[k], t.mbarrier_seen[k]);
  }
  for (unsigned m = mask; m; m &= m - 1) {
    Thread &t = lanes[__builtin_ctz(m)];
    memcpy(t.clock, joined, sizeof joined);
    memcpy(t.mbarrier_seen, seen, sizeof seen);
    ++t.clock[t.tid % 32];
  }
}

void race_named_barrier(Block &b, std::vector<uint32_t> const &tids) {
  uint32_t joined[kMaxWarps] = {};
  unsigned masks[kMaxWarps] = {};  // the lanes of each warp that passed
  uint32_t seen[kTrackedMbarriers] = {};
  for (uint32_t tid : tids) {
    masks[tid / 32] |= 1u << (tid % 32);
    for (int w = 0; w < kMaxWarps; ++w) joined[w] = std::max(joined[w], b.threads[tid].warp_clock[w]);
    for (int k = 0; k < kTrackedMbarriers; ++k) seen[k] = std::max(seen[k], b.threads[tid].mbarrier_seen[k]);
  }
  for (uint32_t tid : tids) memcpy(b.threads[tid].mbarrier_seen, seen, sizeof seen);
  for (int w = 0; w < kMaxWarps; ++w)
    if (masks[w]) ++joined[w];  // each warp that passed has passed one more
  for (uint32_t tid : tids) memcpy(b.threads[tid].warp_clock, joined, sizeof joined);
  for (int w = 0; w < kMaxWarps; ++w)  // and its lanes are joined as by __syncwarp
    if (masks[w]) race_syncwarp(b, w, masks[w]);
}

std::string race_end(Block &b) {
  RaceState &rs = race_state();
  rs.on = false;
  if (rs.reports.empty()) return {};
  std::vector<uint32_t> pcs;
  for (Report const &r : rs.reports) {
    pcs.push_back(r.pc);
    if (r.kind == Finding::kRace) pcs.push_back(r.prior.pc);
  }
  auto const where = symbolize(pcs);
  bool named = false;
  for (Report const &r : rs.reports) named |= r.addr - rs.shared_lo < rs.shared_size;
  std::vector<TlsSymbol> const symbols = named ? tls_symbols() : std::vector<TlsSymbol>();
  std::string out;
  std::string const task = " in task " + std::to_string(b.cfg.task_id) + ": ";
  std::vector<std::string> seen;  // one finding per kind and source lines (a vector access may be several)
  for (Report const &r : rs.reports) {
    std::string const key = std::to_string(static_cast<int>(r.kind)) + location(where, r.pc) +
                            (r.kind == Finding::kRace ? location(where, r.prior.pc) : std::string());
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    if (!out.empty()) out += "\n";
    std::string const who = describe_thread(r.tid) + " " + verb(r.write, r.atomic, false) + " " +
                            std::to_string(r.size) + " bytes at " + address(rs, r.addr, symbols) + " at " +
                            location(where, r.pc);
    switch (r.kind) {
      case Finding::kRace:
        if (r.prior.flags & kTma)
          out += "data race" + task + who + "; " + describe_thread(r.prior.tid) + " " +
                 verb(true, false, true, true, true) + " it at " + location(where, r.prior.pc) +
                 ", which lands only at a wait on its mbarrier that completes the phase";
        else if (r.prior.flags & kLanded)
          out += "data race" + task + who + "; the TMA copy started at " + location(where, r.prior.pc) +
                 " wrote it, landed by " + describe_thread(r.prior.tid) +
                 "'s wait on its mbarrier, and this thread has not waited for that phase (nor synchronized with a "
                 "thread that did)";
        else if (r.prior.flags & kAsync)
          out += "data race" + task + who + "; " + describe_thread(r.prior.tid) + " " + verb(true, false, true, true) +
                 " it at " + location(where, r.prior.pc) +
                 ", which lands only at that thread's cp_async_wait_all() (and, for other threads, a "
                 "__syncthreads() after it)";
        else
          out += "data race" + task + who + "; " + describe_thread(r.prior.tid) + " " +
                 verb(r.prior_write, r.prior.flags & kAtomic, true) + " it at " + location(where, r.prior.pc) +
                 ", with no barrier in between (__syncthreads(), a named barrier of both, or __syncwarp() within a "
                 "warp)";
        break;
      case Finding::kReadOutsideSlices:
        out += "read outside the task's slices" + task + who + "; the task " + rs.memory->slices +
               ": no dependency orders this read after the task that writes that data (a missing input?)";
        break;
      case Finding::kWriteOutsideSlices:
        out += "write outside the task's output slices" + task + who + "; the task " + rs.memory->slices +
               ": it clobbers another task's data or an input";
        break;
      case Finding::kNoTensor:
        out += "access outside every tensor" + task + who + "; the task " + rs.memory->slices;
        break;
      case Finding::kUninitialized:
        out += "uninitialized shared memory" + task + who + ", which no thread of this task wrote";
        break;
      case Finding::kPastDynamicSmem:
        out += "dynamic shared memory overflow" + task + who + ", past the " + std::to_string(rs.dyn_bytes) +
               " bytes the task was given";
        break;
      case Finding::kMisaligned:
        out += "misaligned access" + task + who + ", not a multiple of " + std::to_string(r.size) +
               " (the device stops the kernel with a misaligned address error)";
        break;
    }
  }
  if (rs.dropped) out += "\n(" + std::to_string(rs.dropped) + " more findings not shown)";
  return out;
}

}  // namespace emu
}  // namespace mpk

// The hooks g++ -fsanitize=thread calls. Each takes the program counter of its caller: the access.
namespace {

inline uint32_t pc_of(void *ret) {
  return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ret) - 1 - mpk::emu::module_base());
}

// One hook: the access at the caller's return address.
inline void on_access(uintptr_t addr, uintptr_t size, bool write, bool atomic, void *ret, bool aligned = false) {
  mpk::emu::access(addr, size, write, atomic ? mpk::emu::kAtomic : 0, pc_of(ret), aligned);
}

}  // namespace

extern "C" {

void __tsan_init() {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}

#define MPK_EMU_PLAIN(N)                                                                           \
  void __tsan_read##N(void *a) {                                                                   \
    on_access(reinterpret_cast<uintptr_t>(a), N, false, false, __builtin_return_address(0), true); \
  }                                                                                                \
  void __tsan_write##N(void *a) {                                                                  \
    on_access(reinterpret_cast<uintptr_t>(a), N, true, false, __builtin_return_address(0), true);  \
  }                                                                                                \
  void __tsan_unaligned_read##N(void *a) {                                                         \
    on_access(reinterpret_cast<uintptr_t>(a), N, false, false, __builtin_return_address(0));       \
  }                                                                                                \
  void __tsan_unaligned_write##N(void *a) {                                                        \
    on_access(reinterpret_cast<uintptr_t>(a), N, true, false, __builtin_return_address(0));        \
  }                                                                                                \
  void __tsan_volatile_read##N(void *a) {                                                          \
    on_access(reinterpret_cast<uintptr_t>(a), N, false, false, __builtin_return_address(0));       \
  }                                                                                                \
  void __tsan_volatile_write##N(void *a) {                                                         \
    on_access(reinterpret_cast<uintptr_t>(a), N, true, false, __builtin_return_address(0));        \
  }
MPK_EMU_PLAIN(1)
MPK_EMU_PLAIN(2)
MPK_EMU_PLAIN(4)
MPK_EMU_PLAIN(8)
MPK_EMU_PLAIN(16)
#undef MPK_EMU_PLAIN

void __tsan_read_range(void *a, unsigned long n) {
  on_access(reinterpret_cast<uintptr_t>(a), n, false, false, __builtin_return_address(0));
}
void __tsan_write_range(void *a, unsigned long n) {
  on_access(reinterpret_cast<uintptr_t>(a), n, true, false, __builtin_return_address(0));
}

void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

// Atomics: do the operation (one OS thread runs the block, so relaxed is exact) and record it.
#define MPK_EMU_ATOMIC_RMW(N, T, OP, EXPR)                                                         \
  T __tsan_atomic##N##_##OP(volatile T *a, T v, int) {                                             \
    on_access(reinterpret_cast<uintptr_t>(a), sizeof(T), true, true, __builtin_return_address(0)); \
    T const old = *a;                                                                              \
    *a = EXPR;                                                                                     \
    return old;                                                                                    \
  }
#define MPK_EMU_ATOMICS(N, T)                                                                       \
  T __tsan_atomic##N##_load(volatile T const *a, int) {                                             \
    on_access(reinterpret_cast<uintptr_t>(a), sizeof(T), false, true, __builtin_return_address(0)); \
    return *a;                                                                                      \
  }                                                                                                 \
  void __tsan_atomic##N##_store(volatile T *a, T v, int) {                                          \
    on_access(reinterpret_cast<uintptr_t>(a), sizeof(T), true, true, __builtin_return_address(0));  \
    *a = v;                                                                                         \
  }                                                                                                 \
  MPK_EMU_ATOMIC_RMW(N, T, exchange, v)                                                             \
  MPK_EMU_ATOMIC_RMW(N, T, fetch_add, static_cast<T>(old + v))                                      \
  MPK_EMU_ATOMIC_RMW(N, T, fetch_sub, static_cast<T>(old - v))                                      \
  MPK_EMU_ATOMIC_RMW(N, T, fetch_and, static_cast<T>(old & v))                                      \
  MPK_EMU_ATOMIC_RMW(N, T, fetch_or, static_cast<T>(old | v))                                       \
  MPK_EMU_ATOMIC_RMW(N, T, fetch_xor, static_cast<T>(old ^ v))                                      \
  MPK_EMU_ATOMIC_RMW(N, T, fetch_nand, static_cast<T>(~(old & v)))                                  \
  int __tsan_atomic##N##_compare_exchange_strong(volatile T *a, T *expected, T v, int, int) {       \
    on_access(reinterpret_cast<uintptr_t>(a), sizeof(T), true, true, __builtin_return_address(0));  \
    if (*a == *expected) {                                                                          \
      *a = v;                                                                                       \
      return 1;                                                                                     \
    }                                                                                               \
    *expected = *a;                                                                                 \
    return 0;                                                                                       \
  }                                                                                                 \
  int __tsan_atomic##N##_compare_exchange_weak(volatile T *a, T *expected, T v, int, int) {         \
    on_access(reinterpret_cast<uintptr_t>(a), sizeof(T), true, true, __builtin_return_address(0));  \
    if (*a == *expected) {                                                                          \
      *a = v;                                                                                       \
      return 1;                                                                                     \
    }                                                                                               \
    *expected = *a;                                                                                 \
    return 0;                                                                                       \
  }                                                                                                 \
  T __tsan_atomic##N##_compare_exchange_val(volatile T *a, T expected, T v, int, int) {             \
    on_access(reinterpret_cast<uintptr_t>(a), sizeof(T), true, true, __builtin_return_address(0));  \
    T const old = *a;                                                                               \
    if (old == expected) *a = v;                                                                    \
    return old;                                                                                     \
  }
MPK_EMU_ATOMICS(8, uint8_t)
MPK_EMU_ATOMICS(16, uint16_t)
MPK_EMU_ATOMICS(32, uint32_t)
MPK_EMU_ATOMICS(64, uint64_t)
#undef MPK_EMU_ATOMICS
#undef MPK_EMU_ATOMIC_RMW

}  // extern "C"
