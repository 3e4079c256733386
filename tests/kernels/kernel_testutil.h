// Helpers for the CPU kernel tests: owning tensors (with canary bytes that catch writes
// past the end), attribute lists, a KernelContext, reference-side conversions and
// comparisons. Reference values are computed in the tests themselves, in double or
// int64, independently of the kernels' code.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"
#include "kiln/format/ops.h"

namespace kiln::cpu::testing {

using Shape = std::vector<std::int64_t>;

std::int64_t numel_of(const Shape& shape);
std::string shape_string(const Shape& shape);

/// IEEE half bits <-> value, written with ldexp/ilogb (independent of the kernels' bit
/// tricks); float -> half rounds to nearest even.
double half_bits_to_double(std::uint16_t bits);
std::uint16_t float_to_half_bits(float value);

/// Element value <-> double for the reference side.
double read_element(const void* data, DType dtype, std::int64_t i);
void write_element(void* data, DType dtype, std::int64_t i, double value);

/// An owning tensor. Storage is 64-byte aligned and followed by canary bytes.
class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // zero-filled
  /// Converts `values` (numel of them) into the dtype.
  static Tensor of(DType dtype, Shape shape, const std::vector<double>& values);
  /// Uniform random values in [lo, hi) (integers: rounded down; bool: 0/1).
  static Tensor random(DType dtype, Shape shape, std::mt19937& rng, double lo = -2.0, double hi = 2.0);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return numel_of(shape_); }
  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  double at(std::int64_t i) const { return read_element(data_, dtype_, i); }
  void set(std::int64_t i, double v) { write_element(data_, dtype_, i, v); }
  std::vector<double> values() const;
  /// A view of this tensor (data is null when it holds no bytes).
  TensorView view() const;
  /// True while the canary bytes after the data are intact.
  bool canary_intact() const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::shared_ptr<unsigned char[]> storage_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Attribute values with owned storage.
class AttrList {
 public:
  AttrList& i(std::int64_t v);
  AttrList& f(double v);
  AttrList& b(bool v);
  AttrList& s(std::string v);
  AttrList& ints(std::vector<std::int64_t> v);
  AttrList& exprs(std::vector<std::int64_t> v);
  AttrList& dtype(DType v);
  AttrList& none();
  std::span<const AttrValue> span() const { return values_; }

 private:
  std::vector<std::shared_ptr<std::vector<std::int64_t>>> ints_;  // shared: copies stay valid
  std::vector<std::shared_ptr<std::string>> strings_;
  std::vector<AttrValue> values_;
};

class TestContext : public KernelContext {
 public:
  Result<TensorView> allocate_output(int index, DType dtype, std::span<const std::int64_t> shape) override;
  ThreadPool& pool() override;
  std::map<int, Tensor> allocated;
};

/// A TestContext with its own pool of `threads` threads.
class PoolContext : public TestContext {
 public:
  explicit PoolContext(int threads) : pool_(threads) {}
  ThreadPool& pool() override { return pool_; }

 private:
  ThreadPool pool_;
};

/// Runs the kernel of `op` (looked up with cpu_kernel) on the given tensors.
Status run(OpKind op, const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
           const AttrList& attrs = {});
/// Runs with explicit views (for absent optionals and hostile views).
Status run_views(OpKind op, std::vector<TensorView> inputs, std::vector<TensorView>& outputs,
                 const AttrList& attrs, TestContext* ctx = nullptr);

/// A view that marks an absent optional input.
inline TensorView absent() { return TensorView{}; }

/// Compares element-wise: |got - want| <= atol + rtol * |want|; NaNs must match.
::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, double rtol = 1e-5,
                                     double atol = 1e-6);
/// Exact comparison (integers, bools, data movement).
::testing::AssertionResult all_equal(const Tensor& got, const std::vector<double>& want);

/// Expects a non-ok status with `code` whose message starts with "[op] " and contains `part`.
::testing::AssertionResult fails_with(const Status& s, StatusCode code, std::string_view op,
                                      std::string_view part = {});

// Index helpers for reference implementations.
std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape);
std::int64_t ravel(const std::vector<std::int64_t>& index, const Shape& shape);
/// Offset into a tensor of `shape` broadcast (right-aligned) to an index of a larger shape.
std::int64_t broadcast_offset(const std::vector<std::int64_t>& out_index, const Shape& shape);
/// The numpy broadcast of two shapes (assumes compatibility).
Shape broadcast_shapes(const Shape& a, const Shape& b);
/// A random shape of `rank` dims in [lo, hi].
Shape random_shape(std::mt19937& rng, int rank, std::int64_t lo = 1, std::int64_t hi = 5);

}  // namespace kiln::cpu::testing
