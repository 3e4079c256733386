// Helpers for the Vulkan backend tests: a shared backend (validation layer on, failing on
// any message), segment builders, and a runner that compares a prepared segment's outputs
// with the CPU kernels run node by node on the same data.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "kernels/kernel_testutil.h"

namespace kiln::vulkan::testing {

using cpu::testing::AttrList;
using cpu::testing::Shape;
using cpu::testing::Tensor;

/// The process-wide validated backend, or null with `why` (no Vulkan device at all).
backend::Backend* shared_backend(std::string* why);

#define KILN_VULKAN_BACKEND_OR_SKIP(var)            \
  std::string var##_why;                            \
  backend::Backend* var = shared_backend(&var##_why); \
  if (var == nullptr) GTEST_SKIP() << var##_why

/// True when a create_backend error means "no Vulkan here at all" (the only skip reason).
bool is_no_device(const Status& s);

class Graph {
 public:
  Graph() { desc.nodes.reserve(64); }
  std::uint32_t input(Tensor t);
  /// `index` documents intent only: indices are made process-unique (see the .cpp).
  std::uint32_t constant(Tensor t, std::uint32_t index);
  std::uint32_t internal(DType dtype, Shape shape);
  std::uint32_t output(DType dtype, Shape shape);
  void node(OpKind op, std::vector<std::uint32_t> inputs, std::vector<std::uint32_t> outputs, AttrList attrs = {});

  backend::SegmentDesc desc;
  std::map<std::uint32_t, Tensor> host;  // inputs and constants
  std::vector<AttrList> attrs;           // keeps attribute storage alive
};

class Constants : public backend::ConstantSource {
 public:
  explicit Constants(const Graph& g);
  std::span<const std::uint8_t> constant_data(std::uint32_t index) const override;

 private:
  std::map<std::uint32_t, Tensor> data_;
};

/// Runs every node on the CPU kernels; returns the outputs in io_index order.
Result<std::vector<Tensor>> run_cpu(const Graph& g);
/// Prepares and runs on `b`; returns the outputs in io_index order.
Result<std::vector<Tensor>> run_vulkan(backend::Backend& b, const Graph& g);
/// Compares outputs (f32 within atol + rtol |want|, others exactly).
::testing::AssertionResult outputs_match(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                                         double rtol, double atol);

}  // namespace kiln::vulkan::testing
