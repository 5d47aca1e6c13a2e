// Compile-time configuration of one build: the target architecture and the worker thread count
// every task body is written against. The build passes -DMPK_TARGET_SM.
#pragma once

#ifndef MPK_TARGET_SM
#error "MPK_TARGET_SM must be set by the build: -DMPK_TARGET_SM=80, 90 or 100"
#endif

namespace mpk {

constexpr int kTargetSm = MPK_TARGET_SM;
static_assert(kTargetSm == 80 || kTargetSm == 90 || kTargetSm == 100, "MPK_TARGET_SM must be 80, 90 or 100");

// Threads of every worker CTA: Ampere-path bodies are written for 4 warps, Hopper and Blackwell
// bodies for 8. Task bodies use this constant, never a literal.
constexpr int kWorkerThreads = kTargetSm >= 90 ? 256 : 128;
constexpr int kWarpSize = 32;
constexpr int kWorkerWarps = kWorkerThreads / kWarpSize;

}  // namespace mpk
