// The kernel table and properties every kernel shares: one kernel per non-higher-order op,
// "[opname] " error messages, and no crash or out-of-bounds write on hostile views and
// attributes (random fuzzing over every op).
#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "kernel_testutil.h"
#include "kiln/format/dtype.h"
#include "kiln/format/ops.h"

namespace kiln::cpu::testing {
namespace {

bool is_higher_order(OpKind op) {
  return op == OpKind::Cond || op == OpKind::WhileLoop || op == OpKind::InvokeSubgraph;
}

TEST(KernelTable, EveryOpHasAKernelExceptHigherOrderOps) {
  for (std::size_t i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<OpKind>(i);
    if (is_higher_order(op)) {
      EXPECT_EQ(cpu_kernel(op), nullptr) << op_name(op);
    } else {
      EXPECT_NE(cpu_kernel(op), nullptr) << op_name(op);
    }
  }
}

TEST(KernelTable, OutOfRangeOpHasNoKernel) {
  EXPECT_EQ(cpu_kernel(static_cast<OpKind>(kOpCount)), nullptr);
  EXPECT_EQ(cpu_kernel(static_cast<OpKind>(0xffff)), nullptr);
}

TEST(KernelErrors, EveryKernelRejectsMissingOutputsWithItsName) {
  for (std::size_t i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<OpKind>(i);
    if (is_higher_order(op)) continue;
    std::vector<TensorView> outputs;
    const Status s = run_views(op, {}, outputs, {});
    EXPECT_TRUE(fails_with(s, StatusCode::kInvalidBundle, op_name(op))) << op_name(op);
  }
}

TEST(KernelErrors, UnknownDtypeInViewIsRejected) {
  Tensor x(DType::kF32, {2});
  TensorView bad = x.view();
  bad.dtype = static_cast<DType>(42);
  std::vector<TensorView> out{x.view()};
  EXPECT_TRUE(fails_with(run_views(OpKind::Neg, {bad}, out, {}), StatusCode::kInvalidBundle, "neg", "unknown dtype"));
}

TEST(KernelErrors, NegativeDimAndMissingDataAreRejected) {
  Tensor x(DType::kF32, {2, 3});
  TensorView neg = x.view();
  neg.shape[1] = -3;
  std::vector<TensorView> out{x.view()};
  EXPECT_TRUE(fails_with(run_views(OpKind::Relu, {neg}, out, {}), StatusCode::kInvalidBundle, "relu", "negative"));
  TensorView no_data = x.view();
  no_data.data = nullptr;
  EXPECT_TRUE(fails_with(run_views(OpKind::Relu, {no_data}, out, {}), StatusCode::kInvalidBundle, "relu", "no data"));
  TensorView huge = x.view();
  huge.rank = 3;
  huge.shape = {1 << 30, 1 << 30, 1 << 30};
  EXPECT_TRUE(fails_with(run_views(OpKind::Relu, {huge}, out, {}), StatusCode::kInvalidBundle, "relu", "too large"));
  TensorView rank = x.view();
  rank.rank = 9;
  EXPECT_TRUE(fails_with(run_views(OpKind::Relu, {rank}, out, {}), StatusCode::kInvalidBundle, "relu", "rank"));
}

TEST(KernelRobustness, EmptyTensorsWithHugeDimsFinishAtOnce) {
  // A 0 dim makes numel 0 whatever the other dims are; kernels must not loop over them.
  // (Views whose running dim product overflows int64 are rejected by every kernel, so the
  // dims here are large but keep that product in range.)
  constexpr std::int64_t kHuge = std::int64_t{1} << 58;
  const Tensor x2(DType::kF32, {kHuge, 0}), x3(DType::kF32, {kHuge, 3, 0});
  Tensor o2(DType::kF32, {kHuge, 0}), o3(DType::kF32, {kHuge, 0, 0}), oi(DType::kI64, {kHuge, 0});
  for (int dim = 0; dim < 2; ++dim) {
    EXPECT_TRUE(run(OpKind::Softmax, {&x2}, {&o2}, AttrList().i(dim)).ok());
    EXPECT_TRUE(run(OpKind::LogSoftmax, {&x2}, {&o2}, AttrList().i(dim)).ok());
    EXPECT_TRUE(run(OpKind::Cumsum, {&x2}, {&o2}, AttrList().i(dim)).ok());
  }
  EXPECT_TRUE(run(OpKind::Sum, {&x3}, {&o2}, AttrList().ints({1}).b(false)).ok());
  EXPECT_TRUE(run(OpKind::Amax, {&x3}, {&o2}, AttrList().ints({1}).b(false)).ok());
  EXPECT_TRUE(run(OpKind::Var, {&x3}, {&o2}, AttrList().ints({1}).f(1).b(false)).ok());
  EXPECT_TRUE(run(OpKind::Argmax, {&x3}, {&oi}, AttrList().i(1).b(false)).ok());
  const Tensor idx = Tensor::of(DType::kI64, {2}, {0, 2});
  Tensor osel(DType::kF32, {kHuge, 2, 0});
  EXPECT_TRUE(run(OpKind::IndexSelect, {&x3, &idx}, {&osel}, AttrList().i(1)).ok());
  const Tensor a(DType::kF32, {kHuge, 0, 3}), b(DType::kF32, {kHuge, 3, 0});
  EXPECT_TRUE(run(OpKind::Bmm, {&a, &b}, {&o3}).ok());
  EXPECT_TRUE(run(OpKind::Matmul, {&a, &b}, {&o3}).ok());
  const Tensor w(DType::kF32, {0, 0});
  EXPECT_TRUE(run(OpKind::Linear, {&x2, &w}, {&o2}).ok());
  EXPECT_TRUE(run(OpKind::LayerNorm, {&x2}, {&o2}, AttrList().i(1).f(1e-5)).ok());
  EXPECT_TRUE(run(OpKind::Add, {&x2, &x2}, {&o2}).ok());
  EXPECT_TRUE(run(OpKind::Exp, {&x2}, {&o2}).ok());
  Tensor perm(DType::kF32, {0, kHuge});
  EXPECT_TRUE(run(OpKind::Permute, {&x2}, {&perm}, AttrList().ints({1, 0})).ok());
  EXPECT_TRUE(run(OpKind::Flip, {&x2}, {&o2}, AttrList().ints({0, 1})).ok());
  EXPECT_TRUE(run(OpKind::Tril, {&x2}, {&o2}, AttrList().i(0)).ok());
  Tensor cat(DType::kF32, {kHuge, 0});
  EXPECT_TRUE(run(OpKind::Cat, {&x2, &x2}, {&cat}, AttrList().i(1)).ok());
  EXPECT_TRUE(run(OpKind::Pad, {&x2}, {&o2}, AttrList().ints({0, 0}).f(1)).ok());
}

// ---------------------------------------------------------------------------------------
// Fuzzing: random dtypes, shapes (including 0 dims and huge dims next to a 0 dim) and
// attribute values for every op. Any Status is fine; a crash, a hang, a write past an
// output or a message without the "[op] " prefix is not.

struct Fuzzer {
  std::mt19937 rng{1234};

  std::int64_t pick(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  }

  Shape shape() {
    Shape s = random_shape(rng, static_cast<int>(pick(0, 4)), 0, 4);
    if (!s.empty() && pick(0, 9) == 0) {
      s[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(s.size()) - 1))] = 0;
      s[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(s.size()) - 1))] = std::int64_t{1} << pick(20, 62);
      if (std::find(s.begin(), s.end(), 0) == s.end()) s[0] = 0;  // keep numel 0
    }
    return s;
  }

  DType dtype() {
    static const DType kCommon[] = {DType::kF32, DType::kF32, DType::kI64, DType::kBool, DType::kI32, DType::kF16};
    return pick(0, 3) == 0 ? static_cast<DType>(pick(0, kDTypeCount - 1)) : kCommon[pick(0, 5)];
  }

  Tensor tensor(DType dt, const Shape& s) {
    Tensor t(dt, s);
    if (t.numel() > 0 && t.numel() < 100000) {
      for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(pick(-3, 5)));
    }
    return t;
  }

  std::vector<std::int64_t> int_list() {
    std::vector<std::int64_t> v(static_cast<std::size_t>(pick(0, 4)));
    for (auto& x : v) x = pick(0, 7) == 0 ? std::int64_t{1} << pick(31, 62) : pick(-2, 4);
    return v;
  }

  void attrs_for(OpKind op, AttrList& attrs) {
    for (const AttrSpec& spec : op_info(op).attrs) {
      if (spec.optional && pick(0, 2) == 0) {
        attrs.none();
        continue;
      }
      switch (spec.type) {
        case AttrType::kInt:
        case AttrType::kExpr: attrs.i(pick(0, 7) == 0 ? std::int64_t{1} << pick(31, 62) : pick(-2, 4)); break;
        case AttrType::kFloat: attrs.f(static_cast<double>(pick(-2, 3)) * 0.5); break;
        case AttrType::kBool: attrs.b(pick(0, 1) == 1); break;
        case AttrType::kString: {
          static const char* kStrings[] = {"", "none", "tanh", "trunc", "floor", "bogus"};
          attrs.s(kStrings[pick(0, 5)]);
          break;
        }
        case AttrType::kInts:
        case AttrType::kExprs: attrs.ints(int_list()); break;
        case AttrType::kDType: attrs.dtype(static_cast<DType>(pick(0, kDTypeCount))); break;
        default: attrs.none(); break;
      }
    }
  }
};

// KILN_KERNEL_FUZZ_TRIALS (trials per op) and KILN_KERNEL_FUZZ_SEED allow longer local runs.
int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

TEST(KernelRobustness, RandomViewsAndAttributesNeverCrashOrOverflow) {
  Fuzzer fz;
  fz.rng.seed(static_cast<unsigned>(env_int("KILN_KERNEL_FUZZ_SEED", 1234)));
  const int trials = env_int("KILN_KERNEL_FUZZ_TRIALS", 200);
  for (std::size_t i = 0; i < kOpCount; ++i) {
    const auto op = static_cast<OpKind>(i);
    if (is_higher_order(op)) continue;
    const OpInfo& info = op_info(op);
    for (int trial = 0; trial < trials; ++trial) {
      const int max_in = info.max_inputs < 0 ? info.min_inputs + 3 : info.max_inputs;
      const auto num_in = static_cast<int>(fz.pick(0, 4) == 0 ? fz.pick(0, 4) : fz.pick(info.min_inputs, max_in));
      const int num_out = info.num_outputs < 0 ? static_cast<int>(fz.pick(1, 3)) : info.num_outputs;
      // Inputs mostly share one shape and dtype, so that kernels get past the first checks.
      const Shape base = fz.shape();
      const DType base_dtype = fz.dtype();
      std::vector<Tensor> inputs;
      for (int k = 0; k < num_in; ++k) {
        inputs.push_back(fz.tensor(fz.pick(0, 2) == 0 ? fz.dtype() : base_dtype, fz.pick(0, 2) == 0 ? fz.shape() : base));
      }
      std::vector<Tensor> outputs;
      for (int k = 0; k < num_out; ++k) {
        outputs.push_back(fz.tensor(fz.pick(0, 2) == 0 ? fz.dtype() : base_dtype, fz.pick(0, 2) == 0 ? fz.shape() : base));
      }
      AttrList attrs;
      fz.attrs_for(op, attrs);
      std::vector<TensorView> in_views;
      for (const Tensor& t : inputs) in_views.push_back(fz.pick(0, 9) == 0 ? absent() : t.view());
      std::vector<TensorView> out_views;
      for (const Tensor& t : outputs) out_views.push_back(t.view());
      TestContext ctx;
      const Status s = run_views(op, in_views, out_views, attrs, &ctx);
      if (!s.ok()) {
        ASSERT_EQ(s.message().rfind("[" + std::string(info.name) + "] ", 0), 0u) << s.message();
      }
      for (const Tensor& t : outputs) ASSERT_TRUE(t.canary_intact()) << info.name << " wrote past an output";
      for (const Tensor& t : inputs) ASSERT_TRUE(t.canary_intact()) << info.name << " wrote past an input";
    }
  }
}

}  // namespace
}  // namespace kiln::cpu::testing
