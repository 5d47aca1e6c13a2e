// mbarriers and TMA tensor copies for the block runner (shim_api.h, primitives/tma.cuh): each
// barrier's state by its shared address, from the task's mbarrier_init; copies queued on their
// barrier and landed (global -> shared, with the 128-byte swizzle) at a wait on it; a phase that
// completes once its arrivals are in and its announced bytes have landed. Mistakes a device would
// turn into a hang, a fault or memory another task reads stop the run with a report.
#include <string.h>

#include <algorithm>
#include <string>
#include <vector>

#include "emulation/block_state.h"

namespace mpk {
namespace emu {

// "dynamic_smem+64", "shared bars+8" (a __shared__ variable), for reports.
std::string shared_name(Block const &b, uintptr_t a) {
  uintptr_t const dyn = reinterpret_cast<uintptr_t>(b.cfg.dynamic_smem);
  if (a - dyn < b.cfg.dynamic_smem_capacity) return "dynamic_smem+" + std::to_string(a - dyn);
  uintptr_t const off = a - b.shared_lo;
  for (TlsSymbol const &s : tls_symbols())
    if (off - s.offset < s.size) return "shared " + s.name + "+" + std::to_string(off - s.offset);
  return "shared memory offset " + std::to_string(off);
}

// Where a barrier's current phase stands, for a hang report.
std::string mbarrier_state(Block const &b, uintptr_t a) {
  Mbarrier const &m = b.mbarriers.at(a);
  std::string s = "its mbarrier at " + shared_name(b, a) + " is in phase " + std::to_string(m.phase) +
                  " and waits for " + std::to_string(m.pending) + " of its " + std::to_string(m.arrivals) + " arrivals";
  if (m.tx > 0) s += " and " + std::to_string(m.tx) + " bytes that no TMA copy queued on it brings";
  if (m.tx < 0) s += ", " + std::to_string(-m.tx) + " bytes already landed past those announced";
  return s;
}

namespace {

constexpr int64_t kMaxCount = (1 << 20) - 1;  // the PTX ISA's bound on an mbarrier's arrival and tx counts

// The caller's barrier, which this task's mbarrier_init must have set up.
Mbarrier &mbarrier_of(Thread const &t, Site site, uint64_t const *bar, char const *does) {
  Block &b = *tls_block;
  uintptr_t const a = reinterpret_cast<uintptr_t>(bar);
  auto it = b.mbarriers.find(a);
  if (it != b.mbarriers.end()) return it->second;
  std::string const who = describe_thread(t.tid) + " at " + where(site) + " " + does;
  if (a < b.shared_lo || a + sizeof *bar > b.shared_hi)
    abort_block(finding("invalid mbarrier") + who + " an address that is not shared memory");
  abort_block(finding("uninitialized mbarrier") + who + " the mbarrier at " + shared_name(b, a) +
              ", which no mbarrier_init of this task initialized: on the device it holds what an earlier task left "
              "there");
}

// A phase completes once its arrivals are in and the bytes announced for it have landed, no more.
void complete_phase(Thread const &t, Site site, uint64_t const *bar, Mbarrier &m) {
  if (m.pending || !m.copies.empty()) return;
  if (m.tx < 0)
    abort_block(finding("mbarrier tx-count below zero") + describe_thread(t.tid) + " at " + where(site) +
                ": the TMA copies on the mbarrier at " + shared_name(*tls_block, reinterpret_cast<uintptr_t>(bar)) +
                " have brought " + std::to_string(-m.tx) +
                " bytes more than arrive_expect_tx announced for its phase " + std::to_string(m.phase) +
                ", which therefore never completes");
  if (m.tx) return;
  ++m.phase;
  m.pending = m.arrivals;
}

// What cuTensorMapEncodeTiled refuses in a geometry, or the emulator does not model ("" if neither).
std::string tma_geometry_error(TmaBox const &x) {
  auto const at = [](char const *name, int d, long long v) {
    return std::string(name) + "[" + std::to_string(d) + "] = " + std::to_string(v);
  };
  if (x.elem_bytes != 1 && x.elem_bytes != 2 && x.elem_bytes != 4 && x.elem_bytes != 8)
    return "elem_bytes = " + std::to_string(x.elem_bytes) + ": 1, 2, 4 or 8";
  if (reinterpret_cast<uintptr_t>(x.base) % 16) return "a base address that is not 16-byte aligned";
  for (int d = 0; d < x.rank; ++d) {
    if (x.dims[d] < 1) return at("dims", d, x.dims[d]) + ": at least 1";
    if (x.box[d] < 1 || x.box[d] > 256) return at("box", d, x.box[d]) + ": 1 to 256";
  }
  for (int d = 0; d + 1 < x.rank; ++d)
    if (x.strides[d] < 16 || x.strides[d] % 16) return at("strides", d, x.strides[d]) + ": a multiple of 16 bytes";
  int const row = x.box[0] * x.elem_bytes;
  if (row % 16) return "rows of box[0] * elem_bytes = " + std::to_string(row) + " bytes: a multiple of 16";
  // The encoder allows narrower swizzled rows; how the device lays those out is not modelled here.
  if (x.swizzle128 && row != 128)
    return "swizzle128 with rows of box[0] * elem_bytes = " + std::to_string(row) +
           " bytes: the emulator swizzles 128-byte rows only";
  return {};
}

// Lands a copy: the box's rows (runs of dim 0) in order, zeros where the box reaches outside the
// tensor (nothing is read there); with swizzle128 each 16-byte chunk goes where the device's
// 128-byte swizzle puts it, bits 4-6 of its shared address XOR bits 7-9.
void land_tma_copy(Block &b, Mbarrier const &m, TmaCopy const &c) {
  TmaBox const &x = c.box;
  size_t const row = static_cast<size_t>(x.box[0]) * x.elem_bytes, rows = c.bytes / row;
  unsigned char *const dst = static_cast<unsigned char *>(c.dst);
  std::vector<unsigned char> staged(x.swizzle128 ? c.bytes : 0);
  unsigned char *const out = x.swizzle128 ? staged.data() : dst;
  long long const lo = std::max(0, -x.coords[0]);  // the box's run of dim 0 inside the tensor: [lo, hi)
  long long const hi = std::min<long long>(x.box[0], static_cast<long long>(x.dims[0]) - x.coords[0]);
  for (size_t r = 0; r < rows; ++r) {
    unsigned char *const o = out + r * row;
    memset(o, 0, row);
    bool inside = lo < hi;
    long long offset = (x.coords[0] + lo) * x.elem_bytes;
    size_t rest = r;
    for (int d = 1; d < x.rank; ++d) {
      long long const g = static_cast<long long>(x.coords[d]) + static_cast<long long>(rest % x.box[d]);
      rest /= x.box[d];
      inside &= g >= 0 && g < x.dims[d];
      offset += g * x.strides[d - 1];
    }
    if (!inside) continue;
    unsigned char const *const src = static_cast<unsigned char const *>(x.base) + offset;
    size_t const n = static_cast<size_t>(hi - lo) * x.elem_bytes;
    if (b.cfg.race_check) race_tma_read(reinterpret_cast<uintptr_t>(src), static_cast<uint32_t>(n), c.pc);
    memcpy(o + lo * x.elem_bytes, src, n);
  }
  if (b.cfg.race_check) race_tma_land(reinterpret_cast<uintptr_t>(dst), c.bytes, c.pc, m.slot, m.phase);
  if (!x.swizzle128) return;
  uintptr_t const at = reinterpret_cast<uintptr_t>(dst) - b.shared_lo;
  for (size_t k = 0; k < c.bytes; k += 16) {
    uintptr_t const s = at + k, to = s ^ (((s >> 7) & 7) << 4);
    memcpy(dst + (to - at), staged.data() + k, 16);
  }
}

// How `map` (tensor_maps.py's, for CPU tensors) differs from the geometry the body gives ("" when it
// does not, or when there is nothing to compare: a null map, or one the driver encoded).
std::string map_mismatch(void const *map, TmaBox const &x) {
  if (!map) return {};
  EmuTensorMap m;
  memcpy(&m, map, sizeof m);
  unsigned char const *raw = static_cast<unsigned char const *>(map);
  if (std::all_of(raw, raw + 128, [](unsigned char c) { return c == 0; }))
    return " copies through a tensor map of zeros, which no layer encoded (TaskSpec.tensor_maps makes a layer's "
           "maps); on the device the copy faults";
  if (memcmp(m.magic, kEmuTensorMapMagic, sizeof m.magic) != 0) return {};
  auto const list = [](auto const *v, int n) {
    std::string s = "[";
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  long long body_dims[5], map_strides[4];
  for (int d = 0; d < x.rank; ++d) body_dims[d] = x.dims[d];
  for (int d = 0; d + 1 < x.rank; ++d) map_strides[d] = m.strides[d];
  bool same = m.rank == x.rank && m.elem_bytes == x.elem_bytes && (m.swizzle_bytes == 128) == x.swizzle128 &&
              (m.swizzle_bytes == 0 || m.swizzle_bytes == 128);
  for (int d = 0; same && d < x.rank; ++d) same = m.dims[d] == x.dims[d] && m.box[d] == x.box[d];
  for (int d = 0; same && d + 1 < x.rank; ++d) same = m.strides[d] == x.strides[d];
  if (same) return {};
  return " copies a box " + list(x.box, x.rank) + " of dims " + list(body_dims, x.rank) + " (strides " +
         list(x.strides, x.rank - 1) + " bytes, " + std::to_string(x.elem_bytes) + "-byte elements, swizzle " +
         (x.swizzle128 ? "128" : "none") + ") through a map of a box " + list(m.box, m.rank) + " of dims " +
         list(m.dims, m.rank) + " (strides " + list(map_strides, m.rank - 1) + " bytes, " +
         std::to_string(m.elem_bytes) + "-byte elements, swizzle " + std::to_string(m.swizzle_bytes) +
         " bytes): the layer's TaskSpec.tensor_maps and the body must describe the same box";
}

}  // namespace

// What the task left behind in its mbarriers: a copy queued when it ended (on the device it lands
// later, in whatever runs next), or a barrier still valid (its memory is the next task's).
std::string mbarriers_at_task_end(Block const &b) {
  for (auto const &[a, m] : b.mbarriers)
    if (!m.copies.empty()) {
      TmaCopy const &c = m.copies[0];
      return finding("TMA copy in flight") + describe_thread(c.tid) + " at " + where(c.site) + " started a copy to " +
             shared_name(b, reinterpret_cast<uintptr_t>(c.dst)) + " on the mbarrier at " + shared_name(b, a) +
             ", and the task ended without a wait on it: on the device it may land in the shared memory of the task "
             "that runs next";
    }
  for (auto const &[a, m] : b.mbarriers)
    return finding("mbarrier left valid") + "the mbarrier at " + shared_name(b, a) + ", initialized at " +
           where(m.init) +
           ", is still valid when the task ends: its memory is the next task's shared memory, which the PTX ISA leaves "
           "undefined before an mbarrier_inval";
  return {};
}

void mbarrier_init(Site site, uint64_t *bar, unsigned arrivals) {
  Thread &t = current("mbarrier.init");
  Block &b = *tls_block;
  uintptr_t const a = reinterpret_cast<uintptr_t>(bar);
  auto const invalid = [&](std::string const &why) {
    abort_block(finding("invalid mbarrier") + describe_thread(t.tid) + " at " + where(site) +
                " initializes an mbarrier" + why);
  };
  if (a < b.shared_lo || a + sizeof *bar > b.shared_hi) invalid(" at an address that is not shared memory");
  if (a % 8) invalid(" at " + shared_name(b, a) + ", not 8-byte aligned");
  if (arrivals < 1 || arrivals > kMaxCount) invalid(" for " + std::to_string(arrivals) + " arrivals: 1 to 2^20 - 1");
  auto it = b.mbarriers.find(a);
  if (it != b.mbarriers.end() && !it->second.copies.empty())
    invalid(" at " + shared_name(b, a) + " that TMA copies still count on (issued at " +
            where(it->second.copies[0].site) + ")");
  if (it != b.mbarriers.end())
    invalid(" at " + shared_name(b, a) + " that is still valid (initialized at " + where(it->second.init) +
            "): the PTX ISA leaves an init of a valid mbarrier undefined; mbarrier_inval it first");
  b.mbarriers[a] = Mbarrier{b.mbarrier_inits++, arrivals, arrivals, 0, 0, {}, site};  // a new slot: phases restart
}

void mbarrier_inval(Site site, uint64_t *bar) {
  Thread &t = current("mbarrier.inval");
  Block &b = *tls_block;
  Mbarrier const &m = mbarrier_of(t, site, bar, "invalidates");
  if (!m.copies.empty())
    abort_block(finding("invalid mbarrier") + describe_thread(t.tid) + " at " + where(site) +
                " invalidates the mbarrier at " + shared_name(b, reinterpret_cast<uintptr_t>(bar)) +
                " while TMA copies still count on it (issued at " + where(m.copies[0].site) + ")");
  b.mbarriers.erase(reinterpret_cast<uintptr_t>(bar));
}

void mbarrier_arrive_expect_tx(Site site, uint64_t *bar, unsigned bytes) {
  Thread &t = current("mbarrier.arrive.expect_tx");
  Mbarrier &m = mbarrier_of(t, site, bar, "arrives on");
  auto const who = [&] {
    return describe_thread(t.tid) + " at " + where(site) + " arrives on the mbarrier at " +
           shared_name(*tls_block, reinterpret_cast<uintptr_t>(bar));
  };
  if (!m.pending)
    abort_block(finding("mbarrier arrival past the count") + who() + ", whose phase " + std::to_string(m.phase) +
                " has had its " + std::to_string(m.arrivals) +
                " arrivals and still waits for bytes: whether this arrival counts toward it or the next depends on "
                "when those land (wait for the phase first)");
  if (m.tx + bytes > kMaxCount)
    abort_block(finding("mbarrier tx-count overflow") + who() + ", announcing " + std::to_string(bytes) +
                " bytes on top of " + std::to_string(m.tx) + ": a phase's tx-count is at most 2^20 - 1");
  m.tx += bytes;
  --m.pending;
  complete_phase(t, site, bar, m);
}

// try_wait.parity: true once the phase of that parity has completed, i.e. the current phase (not
// complete) has the other parity. A phase completes here, at a wait that lands its copies, or at its
// last arrival.
void mbarrier_wait_parity(Site site, uint64_t *bar, unsigned parity) {
  Thread &t = current("mbarrier.try_wait.parity");
  Block &b = *tls_block;
  if (parity > 1)
    abort_block(finding("invalid mbarrier wait") + describe_thread(t.tid) + " at " + where(site) +
                " waits for parity " + std::to_string(parity) + ": 0 or 1");
  for (;;) {
    Mbarrier &m = mbarrier_of(t, site, bar, "waits on");
    for (TmaCopy const &c : m.copies) {
      land_tma_copy(b, m, c);
      m.tx -= c.bytes;
    }
    m.copies.clear();
    complete_phase(t, site, bar, m);
    if ((m.phase & 1u) != parity) {
      if (m.slot < kTrackedMbarriers) t.mbarrier_seen[m.slot] = std::max(t.mbarrier_seen[m.slot], m.phase);
      return;
    }
    t.state = State::kYielded;
    t.site = site;
    t.mbarrier = reinterpret_cast<uintptr_t>(bar);
    t.parity = parity;
    suspend(t);
    t.mbarrier = 0;
  }
}

void tma_load(Site site, void *smem_dst, TmaBox const &copy, void const *map, uint64_t *bar) {
  Thread &t = current("cp.async.bulk.tensor");
  uint32_t const pc =
      static_cast<uint32_t>(reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1 - module_base());
  Block &b = *tls_block;
  auto const who = [&] { return describe_thread(t.tid) + " at " + where(site); };
  std::string const bad = tma_geometry_error(copy);
  if (!bad.empty()) abort_block(finding("invalid TMA geometry") + who() + " copies a box of a tensor with " + bad);
  std::string const differs = map_mismatch(map, copy);
  if (!differs.empty()) abort_block(finding("TMA copy through another map") + who() + differs);
  uint64_t bytes = copy.elem_bytes;
  for (int d = 0; d < copy.rank; ++d) bytes *= copy.box[d];
  uintptr_t const d = reinterpret_cast<uintptr_t>(smem_dst);
  if (d < b.shared_lo || d + bytes > b.shared_hi)
    abort_block(finding("invalid TMA copy") + who() + " copies " + std::to_string(bytes) +
                " bytes to an address that is not shared memory");
  if ((d - b.shared_lo) % 128)
    abort_block(finding("misaligned TMA copy") + who() + " copies to " + shared_name(b, d) +
                ", which is not 128-byte aligned (a TMA tensor copy's shared destination must be)");
  mbarrier_of(t, site, bar, "counts a TMA copy on")
      .copies.push_back(TmaCopy{smem_dst, copy, static_cast<uint32_t>(bytes), pc, t.tid, site});
  if (b.cfg.race_check) race_tma_issue(d, static_cast<uint32_t>(bytes), pc);
}

}  // namespace emu
}  // namespace mpk
