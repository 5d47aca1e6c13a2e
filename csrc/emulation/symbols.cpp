// Names for what the emulator reports: source lines of program counters (addr2line on the module,
// built with -g), the module's __shared__ variables (its thread_local symbols, by readelf), and the
// tensor and element an address falls in. Only called once a run has something to report.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emulation/block_state.h"

namespace mpk {
namespace emu {
namespace {

std::string module_path() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void *>(&module_path), &info) && info.dli_fname ? info.dli_fname : "";
}

std::string hex(uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

uintptr_t module_base() {
  static uintptr_t base = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void *>(&module_base), &info) ? reinterpret_cast<uintptr_t>(info.dli_fbase)
                                                                 : uintptr_t{0};
  }();
  return base;
}

std::unordered_map<uint32_t, std::string> symbolize(std::vector<uint32_t> const &pcs) {
  std::unordered_map<uint32_t, std::string> out;
  std::string cmd = "addr2line -i -a -e '" + module_path() + "'";
  for (uint32_t pc : pcs) cmd += " 0x" + hex(pc);
  FILE *f = popen((cmd + " 2>/dev/null").c_str(), "r");
  if (!f) return out;
  char line[4096];
  uint32_t pc = 0;
  int frames = 0;
  while (fgets(line, sizeof line, f)) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.rfind("0x", 0) == 0) {
      pc = static_cast<uint32_t>(strtoull(s.c_str(), nullptr, 16));
      frames = 0;
      continue;
    }
    size_t const d = s.find(" (discriminator");
    if (d != std::string::npos) s.resize(d);
    if (s.rfind("??", 0) == 0 || s.find("emulation/cuda_shim.h") != std::string::npos) continue;
    std::string &loc = out[pc];
    if (frames == 0)
      loc = s;
    else if (frames == 1)
      loc += " (inlined at " + s;
    else if (frames < 4)
      loc += ", " + s;
    ++frames;
  }
  pclose(f);
  for (auto &[pc, loc] : out)
    if (loc.find(" (inlined at ") != std::string::npos) loc += ")";
  return out;
}

std::string location(std::unordered_map<uint32_t, std::string> const &where, uint32_t pc) {
  auto it = where.find(pc);
  if (it != where.end() && !it->second.empty()) return it->second;
  return "module+0x" + hex(pc) + " (no line information)";
}

std::vector<TlsSymbol> tls_symbols() {
  std::vector<TlsSymbol> out;
  FILE *f = popen(("readelf -sW --demangle '" + module_path() + "' 2>/dev/null").c_str(), "r");
  if (!f) return out;
  char line[4096];
  while (fgets(line, sizeof line, f)) {
    unsigned long value, size;
    char type[16], ndx[16];
    int name_at = 0;
    if (sscanf(line, " %*s %lx %lu %15s %*s %*s %15s %n", &value, &size, type, ndx, &name_at) < 4 || !name_at) continue;
    if (strcmp(type, "TLS") || !strcmp(ndx, "UND")) continue;
    std::string name(line + name_at);
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    size_t const open = name.find('(');
    if (open != std::string::npos) {  // a function's static: leave its parameters out
      int depth = 0;
      size_t close = open;
      for (; close < name.size(); ++close)
        if (name[close] == '(')
          ++depth;
        else if (name[close] == ')' && --depth == 0)
          break;
      if (close < name.size()) name.replace(open, close - open + 1, "()");
    }
    out.push_back({value, size, name});
  }
  pclose(f);
  return out;
}

MpkEmuTensor const *tensor_at(Memory const &m, uintptr_t a) {
  for (int i = 0; i < m.num_tensors; ++i)
    if (a - m.tensors[i].lo < m.tensors[i].hi - m.tensors[i].lo) return &m.tensors[i];
  return nullptr;
}

std::string tensor_address(Memory const &m, uintptr_t a) {
  MpkEmuTensor const *t = tensor_at(m, a);
  if (!t) {
    // Within the 16-byte alignment the emulator keeps around each tensor copy (host_memory.py), no
    // page guard faults: name the tensor the access is next to.
    for (int i = 0; i < m.num_tensors; ++i) {
      MpkEmuTensor const &n = m.tensors[i];
      if (a >= n.hi && a - n.hi < 16)
        return "global memory 0x" + hex(a) + ", " + std::to_string(a - n.hi) + " bytes past the end of tensor " +
               n.name;
      if (a < n.lo && n.lo - a <= 16)
        return "global memory 0x" + hex(a) + ", " + std::to_string(n.lo - a) + " bytes before the start of tensor " +
               n.name;
    }
    return "global memory 0x" + hex(a);
  }
  uint64_t const offset = a - t->lo;
  int64_t element = t->elem_size > 0 ? static_cast<int64_t>(offset / t->elem_size) : 0;
  std::string index;
  for (int d = t->ndim - 1; d >= 0; --d) {
    int64_t const n = t->shape[d] > 0 ? t->shape[d] : 1;
    index = std::to_string(element % n) + (index.empty() ? "" : ", ") + index;
    element /= n;
  }
  std::string out = std::string(t->name) + "[" + index + "]";
  if (t->elem_size > 0 && offset % t->elem_size) out += " (byte " + std::to_string(offset % t->elem_size) + ")";
  return out;
}

}  // namespace emu
}  // namespace mpk
