// Compile-time configuration of one build: the target architecture and the worker thread count
// every task body is written against. The build passes both: -DMPK_TARGET_SM and
// -DMPK_WORKER_THREADS (128 for the Ampere-path bodies, written for 4 warps; 256 for the Hopper
// and Blackwell bodies, written for 8).
#pragma once

#ifndef MPK_TARGET_SM
#error "MPK_TARGET_SM must be set by the build: -DMPK_TARGET_SM=80, 90 or 100"
#endif
#ifndef MPK_WORKER_THREADS
#error "MPK_WORKER_THREADS must be set by the build: -DMPK_WORKER_THREADS=128 (sm80) or 256 (sm90, sm100)"
#endif

namespace mpk {

constexpr int kTargetSm = MPK_TARGET_SM;
static_assert(kTargetSm == 80 || kTargetSm == 90 || kTargetSm == 100, "MPK_TARGET_SM must be 80, 90 or 100");
// The opt-in maximum of dynamic shared memory per block (what cudaFuncSetAttribute accepts).
constexpr unsigned kMaxDynamicSmemBytes = kTargetSm >= 90 ? 227u << 10 : 163u << 10;

constexpr int kWarpSize = 32;

// Threads of every worker CTA. Task bodies use this constant, never a literal.
constexpr int kWorkerThreads = MPK_WORKER_THREADS;
static_assert(kWorkerThreads == 128 || kWorkerThreads == 256, "MPK_WORKER_THREADS must be 128 or 256");
static_assert(kWorkerThreads % kWarpSize == 0, "MPK_WORKER_THREADS must be a whole number of warps");
constexpr int kWorkerWarps = kWorkerThreads / kWarpSize;

}  // namespace mpk
