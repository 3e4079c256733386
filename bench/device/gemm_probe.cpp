// GEMM probe for an unfamiliar CPU (bench/device/pack.sh builds it against the static runtime,
// once per K block of the wide tile: gemm_probe_kc192, gemm_probe_kc256). Prints the measured
// 512-bit / 256-bit FMA throughput ratio, then single-thread and 2-thread GFLOP/s of
// sgemm_prepacked for model shapes on the AVX2 and the AVX-512 kernels, alternating.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/gemm/gemm_kernels.h"
#include "backends/cpu/thread_pool.h"

using namespace kiln::cpu;

int main() {
  std::printf("512/256-bit FMA throughput ratio: %.2f\n", gemm_detail::avx512_fma_speedup());
  struct Shape { long m, n, k; const char* what; };
  const Shape shapes[] = {{1024, 1024, 1024, "square"},         {3136, 384, 96, "convnext s1 fc1"},
                          {3136, 96, 384, "convnext s1 fc2"},   {196, 3072, 768, "vit mlp"},
                          {49, 3072, 768, "swin s4 fc1"},       {784, 1024, 256, "resnet50 1x1"}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  ThreadPool pool2(2);
  for (const Shape& s : shapes) {
    std::vector<float> a(s.m * s.k), b(s.k * s.n), c(s.m * s.n);
    for (float& v : a) v = u(rng);
    for (float& v : b) v = u(rng);
    auto packed = pack_b(b.data(), s.n, s.k, s.n, false, nullptr);
    GemmParams p{.m = s.m, .n = s.n, .k = s.k, .a = a.data(), .lda = s.k, .c = c.data(), .ldc = s.n};
    const double flops = 2.0 * s.m * s.n * s.k;
    for (int threads : {1, 2}) {
      double best[2] = {1e9, 1e9};
      for (int round = 0; round < 5; ++round) {
        for (int w = 0; w < 2; ++w) {
          if (!set_gemm_isa_for_testing(w == 0 ? GemmIsa::kAvx2 : GemmIsa::kAvx512)) continue;
          const int reps = std::max(1, static_cast<int>(2e9 / flops / 4));
          auto t0 = std::chrono::steady_clock::now();
          for (int r = 0; r < reps; ++r) (void)sgemm_prepacked(p, *packed, threads == 2 ? &pool2 : nullptr);
          best[w] = std::min(best[w], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps);
        }
      }
      std::printf("%-16s %5ldx%5ldx%5ld  %dt  avx2 %7.1f GFLOP/s  avx512 %7.1f GFLOP/s  (x%.2f)\n", s.what, s.m, s.n, s.k,
                  threads, flops / best[0] * 1e-9, flops / best[1] * 1e-9, best[0] / best[1]);
    }
  }
  set_gemm_isa_for_testing(GemmIsa::kAuto);
  return 0;
}
