// The portable build of simd_math.inc, and the run-time choice between it and AVX2.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "backends/cpu/kernels/simd.h"

// See common.h: GCC 12 -O2 vectorizes run-time-length loops only with this cost model.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

// 8-lane vectors in a non-AVX build: every function using them is internal (static), so
// the ABI note about passing them in registers does not apply.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"  // the same, for clang (the fuzz preset)
#endif

namespace kiln::cpu::kernels {
namespace simd_baseline_impl {

#define KILN_SIMD_FMA(a, b, c) ((a) * (b) + (c))
#define KILN_SIMD_FMA8(a, b, c) ((a) * (b) + (c))
#define KILN_SIMD_NAME "baseline"
#include "backends/cpu/kernels/simd_math.inc"
#undef KILN_SIMD_FMA
#undef KILN_SIMD_FMA8
#undef KILN_SIMD_NAME

}  // namespace simd_baseline_impl

// Defined in simd_avx2.cpp (x86 only): the AVX2+FMA table.
const SimdKernels& simd_avx2_table();

const SimdKernels& simd_baseline() { return simd_baseline_impl::kTable; }

#if defined(__x86_64__) || defined(__i386__)
namespace {
// KILN_CPU_ISA=baseline: run the portable kernels on an AVX2 machine (tests, triage).
bool forced_baseline() {
  const char* isa = std::getenv("KILN_CPU_ISA");
  return isa != nullptr && std::strcmp(isa, "baseline") == 0;
}

// F16C through CPUID (leaf 1, ECX bit 29): older clangs reject __builtin_cpu_supports("f16c").
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}
}  // namespace
#endif

const SimdKernels* simd_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c() &&
                                !forced_baseline();
  return supported ? &simd_avx2_table() : nullptr;
#else
  return nullptr;
#endif
}

bool cpu_avx512_usable() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = [] {
    const char* isa = std::getenv("KILN_CPU_ISA");
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
           !(isa != nullptr && std::strcmp(isa, "avx2") == 0);
  }();
  return supported && simd_avx2() != nullptr;
#else
  return false;
#endif
}

const SimdKernels& simd() {
  static const SimdKernels* const best = simd_avx2() != nullptr ? simd_avx2() : &simd_baseline();
  return *best;
}

}  // namespace kiln::cpu::kernels
