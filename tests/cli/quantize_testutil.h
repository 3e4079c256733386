// Shared by the quantization tests: inputs with a known correlation, and a bundle's first
// output on given inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln::quant_test {

/// `rows` inputs x = z A + 0.05 noise, row-major [rows, k]: k channels driven by `rank`
/// shared normal factors (correlated, as a layer's inputs are). `seed` draws A, and the
/// rows too unless `sample_seed` (then the same A, other rows).
inline std::vector<float> correlated_inputs(std::int64_t rows, std::int64_t k, std::int64_t rank, unsigned seed,
                                            unsigned sample_seed = 0) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> a(static_cast<std::size_t>(rank * k)), x(static_cast<std::size_t>(rows * k));
  for (float& v : a) v = normal(rng);
  if (sample_seed != 0) rng.seed(sample_seed);
  std::vector<float> z(static_cast<std::size_t>(rank));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (float& v : z) v = normal(rng);
    for (std::int64_t j = 0; j < k; ++j) {
      float s = 0.05f * normal(rng);
      for (std::int64_t t = 0; t < rank; ++t) s += z[static_cast<std::size_t>(t)] * a[static_cast<std::size_t>(t * k + j)];
      x[static_cast<std::size_t>(r * k + j)] = s;
    }
  }
  return x;
}

/// Output 0 of bundle `file` run on `inputs` (f32), or empty after a test failure.
inline std::vector<float> run_output0(const std::string& file, const std::vector<HostValue>& inputs) {
  auto bundle = Bundle::open(file);
  EXPECT_TRUE(bundle.ok()) << bundle.status().message();
  if (!bundle.ok()) return {};
  auto program = Program::load(std::move(bundle).value());
  EXPECT_TRUE(program.ok()) << program.status().message();
  if (!program.ok()) return {};
  Session session(**program);
  auto r = session.run(inputs);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  std::vector<float> out(static_cast<std::size_t>(r->outputs[0].tensor.numel()));
  std::memcpy(out.data(), r->outputs[0].tensor.data.data(), out.size() * 4);
  return out;
}

}  // namespace kiln::quant_test
