#include "kernel_testutil.h"

#include "backends/cpu/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "kiln/format/dtype.h"

namespace kiln::cpu::testing {
namespace {

constexpr std::size_t kCanary = 64;
constexpr unsigned char kCanaryByte = 0xA5;

std::uint16_t bf16_bits(double v) {
  const auto f = static_cast<float>(v);
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(x >> 16);
}

}  // namespace

double half_bits_to_double(std::uint16_t bits) {
  const double sign = (bits & 0x8000u) != 0 ? -1.0 : 1.0;
  const int exp = (bits >> 10) & 0x1f;
  const int mant = bits & 0x3ff;
  if (exp == 0x1f) return mant != 0 ? std::nan("") : sign * INFINITY;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

std::uint16_t float_to_half_bits(float value) {
  const double v = value;
  if (std::isnan(v)) return 0x7e00;
  const std::uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double a = std::fabs(v);
  if (a >= 65520.0) return sign | 0x7c00;  // rounds to infinity
  // Quantum of the binade (subnormals share the smallest one), then round to nearest even.
  const int e = a < std::ldexp(1.0, -14) ? -14 : std::ilogb(a);
  const double q = std::nearbyint(std::ldexp(a, 10 - e));  // in [0, 2048]
  const double r = std::ldexp(q, e - 10);
  if (r == 0) return sign;
  const int re = std::ilogb(r);
  if (re < -14) return sign | static_cast<std::uint16_t>(std::ldexp(r, 24));
  const auto mant = static_cast<std::uint16_t>(std::ldexp(r, 10 - re) - 1024);
  return sign | static_cast<std::uint16_t>((re + 15) << 10) | mant;
}

std::int64_t numel_of(const Shape& shape) {
  for (std::int64_t d : shape) {
    if (d == 0) return 0;  // before multiplying: the fuzzer pairs 0 with huge dims
  }
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const Shape& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

double read_element(const void* data, DType dtype, std::int64_t i) {
  const auto* p = static_cast<const unsigned char*>(data);
  switch (dtype) {
    case DType::kF32: return reinterpret_cast<const float*>(p)[i];
    case DType::kF64: return reinterpret_cast<const double*>(p)[i];
    case DType::kF16: return half_bits_to_double(reinterpret_cast<const std::uint16_t*>(p)[i]);
    case DType::kBF16: {
      const std::uint32_t bits = static_cast<std::uint32_t>(reinterpret_cast<const std::uint16_t*>(p)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DType::kI8: return reinterpret_cast<const std::int8_t*>(p)[i];
    case DType::kI16: return reinterpret_cast<const std::int16_t*>(p)[i];
    case DType::kI32: return reinterpret_cast<const std::int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(reinterpret_cast<const std::int64_t*>(p)[i]);
    case DType::kU8: return reinterpret_cast<const std::uint8_t*>(p)[i];
    case DType::kBool: return p[i] != 0 ? 1.0 : 0.0;
  }
  return 0;
}

void write_element(void* data, DType dtype, std::int64_t i, double v) {
  auto* p = static_cast<unsigned char*>(data);
  switch (dtype) {
    case DType::kF32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kF64: reinterpret_cast<double*>(p)[i] = v; break;
    case DType::kF16: reinterpret_cast<std::uint16_t*>(p)[i] = float_to_half_bits(static_cast<float>(v)); break;
    case DType::kBF16: reinterpret_cast<std::uint16_t*>(p)[i] = bf16_bits(v); break;
    case DType::kI8: reinterpret_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v); break;
    case DType::kI16: reinterpret_cast<std::int16_t*>(p)[i] = static_cast<std::int16_t>(v); break;
    case DType::kI32: reinterpret_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v); break;
    case DType::kI64: reinterpret_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v); break;
    case DType::kU8: reinterpret_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v); break;
    case DType::kBool: p[i] = v != 0 ? 1 : 0; break;
  }
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  bytes_ = static_cast<std::size_t>(numel()) * dtype_size(dtype);
  storage_.reset(new unsigned char[bytes_ + kCanary + 64]);
  auto addr = reinterpret_cast<std::uintptr_t>(storage_.get());
  data_ = storage_.get() + ((64 - addr % 64) % 64);
  std::memset(data_, 0, bytes_);
  std::memset(static_cast<unsigned char*>(data_) + bytes_, kCanaryByte, kCanary);
}

Tensor Tensor::of(DType dtype, Shape shape, const std::vector<double>& values) {
  Tensor t(dtype, std::move(shape));
  EXPECT_EQ(static_cast<std::int64_t>(values.size()), t.numel()) << "Tensor::of value count";
  for (std::int64_t i = 0; i < t.numel() && i < static_cast<std::int64_t>(values.size()); ++i) t.set(i, values[i]);
  return t;
}

Tensor Tensor::random(DType dtype, Shape shape, std::mt19937& rng, double lo, double hi) {
  Tensor t(dtype, std::move(shape));
  std::uniform_real_distribution<double> dist(lo, hi);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    double v = dist(rng);
    if (dtype == DType::kBool) v = v > (lo + hi) / 2 ? 1 : 0;
    else if (!dtype_is_floating(dtype)) v = std::floor(v);
    t.set(i, v);
  }
  return t;
}

std::vector<double> Tensor::values() const {
  std::vector<double> v(static_cast<std::size_t>(numel()));
  for (std::int64_t i = 0; i < numel(); ++i) v[i] = at(i);
  return v;
}

TensorView Tensor::view() const {
  TensorView v;
  v.dtype = dtype_;
  v.rank = static_cast<int>(shape_.size());
  for (int i = 0; i < v.rank && i < kMaxRank; ++i) v.shape[i] = shape_[i];
  v.data = bytes_ > 0 || v.rank == 0 ? data_ : nullptr;
  return v;
}

bool Tensor::canary_intact() const {
  if (!storage_) return true;
  const auto* c = static_cast<const unsigned char*>(data_) + bytes_;
  for (std::size_t i = 0; i < kCanary; ++i) {
    if (c[i] != kCanaryByte) return false;
  }
  return true;
}

AttrList& AttrList::i(std::int64_t v) {
  values_.push_back(AttrValue{.type = AttrType::kInt, .i = v});
  return *this;
}
AttrList& AttrList::f(double v) {
  values_.push_back(AttrValue{.type = AttrType::kFloat, .f = v});
  return *this;
}
AttrList& AttrList::b(bool v) {
  values_.push_back(AttrValue{.type = AttrType::kBool, .i = v ? 1 : 0});
  return *this;
}
AttrList& AttrList::s(std::string v) {
  strings_.push_back(std::make_shared<std::string>(std::move(v)));
  values_.push_back(AttrValue{.type = AttrType::kString, .s = *strings_.back()});
  return *this;
}
AttrList& AttrList::ints(std::vector<std::int64_t> v) {
  ints_.push_back(std::make_shared<std::vector<std::int64_t>>(std::move(v)));
  values_.push_back(AttrValue{.type = AttrType::kInts, .ints = *ints_.back()});
  return *this;
}
AttrList& AttrList::exprs(std::vector<std::int64_t> v) {
  ints(std::move(v));
  values_.back().type = AttrType::kExprs;
  return *this;
}
AttrList& AttrList::dtype(DType v) {
  values_.push_back(AttrValue{.type = AttrType::kDType, .i = static_cast<std::int64_t>(v)});
  return *this;
}
AttrList& AttrList::none() {
  values_.push_back(AttrValue{});
  return *this;
}

Result<TensorView> TestContext::allocate_output(int index, DType dtype, std::span<const std::int64_t> shape) {
  allocated[index] = Tensor(dtype, Shape(shape.begin(), shape.end()));
  return allocated[index].view();
}

ThreadPool& TestContext::pool() {
  // Two threads, so that the kernels' parallel paths run in every test (KILN_TEST_THREADS
  // overrides; one thread per process, shared: the tests run kernels one at a time).
  static ThreadPool shared([] {
    const char* env = std::getenv("KILN_TEST_THREADS");
    return env != nullptr ? std::max(1, std::atoi(env)) : 2;
  }());
  return shared;
}

Status run_views(OpKind op, std::vector<TensorView> inputs, std::vector<TensorView>& outputs, const AttrList& attrs,
                 TestContext* ctx) {
  KernelFn fn = cpu_kernel(op);
  if (fn == nullptr) return Status(StatusCode::kUnsupported, "no kernel");
  TestContext local;
  return fn(ctx != nullptr ? *ctx : local, inputs, outputs, attrs.span());
}

Status run(OpKind op, const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
           const AttrList& attrs) {
  std::vector<TensorView> in;
  for (const Tensor* t : inputs) in.push_back(t->view());
  std::vector<TensorView> out;
  for (Tensor* t : outputs) out.push_back(t->view());
  Status s = run_views(op, in, out, attrs);
  for (const Tensor* t : inputs) EXPECT_TRUE(t->canary_intact()) << "input canary overwritten";
  for (Tensor* t : outputs) EXPECT_TRUE(t->canary_intact()) << op_name(op) << ": wrote past the end of an output";
  return s;
}

::testing::AssertionResult all_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol) {
  if (got.numel() != static_cast<std::int64_t>(want.size())) {
    return ::testing::AssertionFailure() << "size " << got.numel() << " != expected " << want.size();
  }
  int bad = 0;
  std::ostringstream os;
  for (std::int64_t i = 0; i < got.numel(); ++i) {
    const double g = got.at(i), w = want[i];
    const bool ok = (std::isnan(w) && std::isnan(g)) || (std::isinf(w) && g == w) ||
                    std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok && bad++ < 5) os << "\n  [" << i << "] got " << g << " want " << w;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.numel() << " elements differ" << os.str();
}

::testing::AssertionResult all_equal(const Tensor& got, const std::vector<double>& want) {
  return all_close(got, want, 0.0, 0.0);
}

::testing::AssertionResult fails_with(const Status& s, StatusCode code, std::string_view op, std::string_view part) {
  if (s.ok()) return ::testing::AssertionFailure() << "expected an error, got ok";
  const std::string prefix = "[" + std::string(op) + "] ";
  if (s.code() != code) {
    return ::testing::AssertionFailure() << "code " << status_code_name(s.code()) << " != "
                                         << status_code_name(code) << ": " << s.message();
  }
  if (s.message().rfind(prefix, 0) != 0) {
    return ::testing::AssertionFailure() << "message lacks prefix '" << prefix << "': " << s.message();
  }
  if (!part.empty() && s.message().find(part) == std::string::npos) {
    return ::testing::AssertionFailure() << "message lacks '" << part << "': " << s.message();
  }
  return ::testing::AssertionSuccess();
}

std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = shape[d] == 0 ? 0 : flat % shape[d];
    flat = shape[d] == 0 ? 0 : flat / shape[d];
  }
  return index;
}

std::int64_t ravel(const std::vector<std::int64_t>& index, const Shape& shape) {
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + index[d];
  return flat;
}

std::int64_t broadcast_offset(const std::vector<std::int64_t>& out_index, const Shape& shape) {
  const std::size_t skip = out_index.size() - shape.size();
  std::int64_t flat = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : out_index[skip + d]);
  return flat;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t x = d + a.size() >= rank ? a[d + a.size() - rank] : 1;
    const std::int64_t y = d + b.size() >= rank ? b[d + b.size() - rank] : 1;
    out[d] = x == 1 ? y : x;
  }
  return out;
}

Shape random_shape(std::mt19937& rng, int rank, std::int64_t lo, std::int64_t hi) {
  std::uniform_int_distribution<std::int64_t> dist(lo, hi);
  Shape s(static_cast<std::size_t>(rank));
  for (auto& d : s) d = dist(rng);
  return s;
}

}  // namespace kiln::cpu::testing
