// How fast can one SM stream from DRAM, by how many warps load and how many bytes each keeps in
// flight? The task bodies stream with the worker's 8 warps (cp.async into shared memory, or 16-byte
// loads into registers), so this is the ceiling they work under. bench_sm_stream.py builds and runs it.
//
// Each warp streams its own contiguous region, 512 bytes a warp-wide instruction:
//   ld:       D 16-byte loads a lane into registers, then all of them consumed (D x 512 B in flight)
//   cp.async: D 16-byte copies a lane into shared memory per stage, 2 stages (up to 2 D x 512 B)
// Printed per case: blocks (1: one SM alone; all: one block per SM), warps, D, bytes in flight a
// block can have, and the bandwidth per SM and in total.
#include <cuda_runtime.h>
#include <stdint.h>

#include <cstdio>
#include <cstdlib>

#include "cuda_check.h"

// D loads a lane in flight, then consumed: the pattern of a task body's batch of k-blocks. The next
// batch's addresses depend on this batch's values (through `zero`, 0 at run time), so that the
// compiler cannot hoist its loads: exactly D are in flight.
template <int D>
__global__ void stream_ld(uint4 const *src, long long words_per_warp, unsigned long long *sink, unsigned zero) {
  int const lane = threadIdx.x % 32;
  long long const warp = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  uint4 const *p = src + warp * words_per_warp + lane;
  unsigned acc = 0;
  for (long long i = 0; i < words_per_warp; i += 32 * D) {
    uint4 v[D];
    uint4 const *q = p + (acc & zero);
#pragma unroll
    for (int d = 0; d < D; ++d)
      asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(v[d].x), "=r"(v[d].y), "=r"(v[d].z), "=r"(v[d].w)
                   : "l"(q + i + 32 * d));
#pragma unroll
    for (int d = 0; d < D; ++d) acc ^= v[d].x ^ v[d].y ^ v[d].z ^ v[d].w;
  }
  if (acc == 0x12345678u) atomicAdd(sink, 1ull);  // keeps the loads
}

// D copies a lane per stage into shared memory, two stages in flight: the pattern of a tile pipeline.
template <int D>
__global__ void stream_cp_async(uint4 const *src, long long words_per_warp, unsigned long long *sink, unsigned) {
  extern __shared__ uint4 smem[];
  int const lane = threadIdx.x % 32, w = threadIdx.x / 32;
  long long const warp = blockIdx.x * (blockDim.x / 32) + w;
  uint4 const *p = src + warp * words_per_warp + lane;
  uint4 *mine = smem + w * 2 * 32 * D + lane;
  auto issue = [&](long long i, int stage) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      unsigned const dst = static_cast<unsigned>(__cvta_generic_to_shared(mine + (stage * D + d) * 32));
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(p + i + 32 * d) : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  long long const step = 32 * D;
  issue(0, 0);
  unsigned acc = 0;
  int stage = 0;
  for (long long i = 0; i < words_per_warp; i += step, stage ^= 1) {
    if (i + step < words_per_warp)
      issue(i + step, stage ^ 1);
    else
      asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 1;" ::: "memory");
    __syncwarp();
    acc ^= mine[stage * D * 32].x;  // a read of the stage, as a body's math would
    __syncwarp();
  }
  if (acc == 0x12345678u) atomicAdd(sink, 1ull);
}

using Kernel = void (*)(uint4 const *, long long, unsigned long long *, unsigned);

template <int D>
Kernel kernel_of(bool cp) {
  return cp ? stream_cp_async<D> : stream_ld<D>;
}

Kernel pick(bool cp, int d) {
  switch (d) {
    case 1:
      return kernel_of<1>(cp);
    case 2:
      return kernel_of<2>(cp);
    case 4:
      return kernel_of<4>(cp);
    case 8:
      return kernel_of<8>(cp);
    case 16:
      return kernel_of<16>(cp);
    default:
      return nullptr;
  }
}

int main() {
  int sms;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  size_t const bytes = size_t(2) << 30;  // far past L2
  uint4 *src;
  unsigned long long *sink;
  CHECK(cudaMalloc(&src, bytes));
  CHECK(cudaMemset(src, 1, bytes));
  CHECK(cudaMalloc(&sink, 8));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::printf("mode blocks warps D in_flight_KB_per_block GBps_per_SM TBps_total\n");
  for (int cp = 0; cp < 2; ++cp)
    for (int blocks : {1, sms})
      for (int warps : {1, 2, 4, 8, 16})
        for (int d : {1, 2, 4, 8, 16}) {
          Kernel k = pick(cp, d);
          size_t const smem = cp ? size_t(warps) * 2 * 32 * d * 16 : 0;
          if (smem > 200 * 1024) continue;
          if (cp) CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
          // A warp streams 8 MB (one SM alone) or 4 MB (every SM), within the buffer.
          size_t per_warp = size_t(blocks == 1 ? 8 : 4) << 20;
          if (per_warp * blocks * warps > bytes) per_warp = bytes / (size_t(blocks) * warps);
          long long const words_per_warp = (long long)(per_warp / 16) / (32 * d) * (32 * d);
          float best = 1e30f;
          for (int rep = 0; rep < 3; ++rep) {
            CHECK(cudaEventRecord(a));
            k<<<blocks, warps * 32, smem>>>(src, words_per_warp, sink, 0u);
            CHECK(cudaEventRecord(b));
            CHECK(cudaEventSynchronize(b));
            CHECK(cudaGetLastError());
            float ms;
            CHECK(cudaEventElapsedTime(&ms, a, b));
            best = ms < best ? ms : best;
          }
          double const moved = double(words_per_warp) * 16 * blocks * warps;
          double const gbps = moved / (best * 1e-3) / 1e9;
          int const in_flight = warps * d * 512 * (cp ? 2 : 1);
          std::printf("%s %d %d %d %.1f %.1f %.3f\n", cp ? "cp.async" : "ld", blocks, warps, d, in_flight / 1024.0,
                      gbps / blocks, gbps / 1e3);
        }
  return 0;
}
