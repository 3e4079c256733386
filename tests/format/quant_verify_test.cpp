// The verifier's rules for quantized weights (Constant.quant, format 1.2) and for the
// operands of linear_q / embedding_q: a bundle with one int4 linear layer, rewritten by hand
// and then broken one field at a time.
#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <functional>
#include <memory>

#include "kiln/export/bundle_writer.h"
#include "kiln/export/export.h"
#include "kiln/export/ops.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

using Mutate = std::function<void(fb::ProgramT&)>;

// linear(x[2, 64], W[8, 64]) exported, then W replaced by an int4 constant (group 16,
// f16 scales, zero points) read by linear_q; `mutate` edits the program before writing.
Result<std::unique_ptr<Bundle>> quantized_bundle(const Mutate& mutate = {}) {
  const Tensor w = Tensor::randn({8, 64}, 1);
  auto ep = export_program([&](Tensor x) { return linear(x, w); }, {input("x", Tensor::randn({2, 64}, 2))},
                           {.name = "q", .self_tests = 0});
  if (!ep.ok()) return ep.status();
  KILN_ASSIGN_OR_RETURN(auto bytes, serialize_bundle(ep->program()));
  KILN_ASSIGN_OR_RETURN(auto f32, Bundle::from_bytes(bytes));
  std::unique_ptr<fb::ProgramT> p(f32->program().UnPack());
  static const std::vector<std::uint8_t> data(8 * 32, 0x98), scales(8 * 4 * 2, 0x3c), zeros(8 * 4, 8);
  auto add = [&](const char* name, fb::DType dtype, std::vector<std::int64_t> shape) {
    auto c = std::make_unique<fb::ConstantT>();
    c->name = name;
    c->dtype = dtype;
    c->shape = std::move(shape);
    p->constants.push_back(std::move(c));
    return static_cast<std::uint32_t>(p->constants.size() - 1);
  };
  // Constant 0 (the f32 weight) becomes the int4 data; 1 and 2 are its scales and zeros.
  p->constants.clear();
  const std::uint32_t wq = add("w", fb::DType::u8, {8, 32});
  const std::uint32_t sc = add("w.scales", fb::DType::f16, {8, 4});
  const std::uint32_t zp = add("w.zero_points", fb::DType::u8, {8, 4});
  auto q = std::make_unique<fb::QuantizationT>();
  q->format = fb::QuantFormat::Int4;
  q->shape = {8, 64};
  q->group_size = 16;
  q->scales = sc;
  q->zero_points = static_cast<std::int32_t>(zp);
  q->source_dtype = fb::DType::f32;
  p->constants[wq]->quant = std::move(q);
  ExprPool pool(*p);
  auto& graph = *p->graphs[p->entry_graph];
  auto& node = *graph.nodes[0];
  auto& wv = *graph.values[node.inputs[1]];
  wv.dtype = fb::DType::u8;
  wv.constant = wq;
  wv.shape = {pool.constant(8), pool.constant(32)};
  auto value = [&](std::uint32_t constant, fb::DType dtype) {
    auto v = std::make_unique<fb::ValueT>();
    v->kind = constant == UINT32_MAX ? fb::ValueKind::None : fb::ValueKind::Constant;
    v->dtype = dtype;
    if (constant != UINT32_MAX) {
      v->constant = constant;
      v->shape = {pool.constant(8), pool.constant(4)};
    }
    graph.values.push_back(std::move(v));
    return static_cast<std::uint32_t>(graph.values.size() - 1);
  };
  const std::uint32_t sv = value(sc, fb::DType::f16), none = value(UINT32_MAX, fb::DType::f32),
                      zv = value(zp, fb::DType::u8);
  p->op_names.push_back("linear_q");
  node.op = static_cast<std::uint32_t>(p->op_names.size() - 1);
  node.inputs = {node.inputs[0], node.inputs[1], sv, none, zv};
  if (mutate) mutate(*p);
  BundleWriter writer;
  const std::vector<const std::vector<std::uint8_t>*> sources{&data, &scales, &zeros};
  for (std::size_t i = 0; i < p->constants.size(); ++i) {
    const DataRef ref = writer.add_data(*sources[std::min<std::size_t>(i, 2)]);
    p->constants[i]->segment = ref.segment;
    p->constants[i]->offset = ref.offset;
    p->constants[i]->nbytes = ref.nbytes;
  }
  KILN_ASSIGN_OR_RETURN(auto out, writer.to_bytes(*p));
  return Bundle::from_bytes(out);
}

std::string error_of(const Mutate& mutate) {
  auto b = quantized_bundle(mutate);
  if (b.ok()) return "(loaded)";
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidBundle) << b.status().message();
  return b.status().message();
}

fb::QuantizationT& quant(fb::ProgramT& p) { return *p.constants[0]->quant; }

TEST(QuantVerify, WellFormedInt4BundleLoadsAndRuns) {
  auto b = quantized_bundle();
  ASSERT_TRUE(b.ok()) << b.status().message();
  auto program = Program::load(std::move(b).value());
  ASSERT_TRUE(program.ok()) << program.status().message();
  Session session(**program);
  HostTensor x{DType::kF32, {2, 64}, std::vector<std::uint8_t>(2 * 64 * 4, 0)};
  float one = 1.0f;
  for (int i = 0; i < 128; ++i) std::memcpy(x.data.data() + i * 4, &one, 4);
  auto r = session.run(std::vector<HostValue>{HostValue::of(x)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  // Every byte 0x98: nibbles 8 (low) and 9 (high), zero point 8, scale 1.0 (f16 0x3c3c ~ 1.06):
  // each row sums 32 ones times (9 - 8) * scale.
  float y0 = 0;
  std::memcpy(&y0, r->outputs[0].tensor.data.data(), 4);
  EXPECT_NEAR(y0, 32 * 1.05859375, 1e-4);
}

TEST(QuantVerify, RejectsUnknownFormatAndStorageMismatches) {
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).format = static_cast<fb::QuantFormat>(7); })
                .find("constant 0 'w', quantization: unknown format 7 (int8 = 1, int4 = 2)"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).format = fb::QuantFormat::None; }).find("unknown format 0"), std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).shape = {8, 64, 1}; })
                .find("the logical shape must be 2-D [N, K], got [8, 64, 1]"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).shape = {8, -64}; }).find("must have dims in [1, 2^40]"), std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).shape = {8, 66}; })
                .find("storage shape [8, 32] does not hold logical [8, 66] as int4 (expected [8, 33])"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).shape = {8, 63}; }).find("int4 needs an even K, got K=63"), std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).format = fb::QuantFormat::Int8; }).find("int8 data must be stored as i8"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).axis = 1; }).find("axis 1 is not supported"), std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).source_dtype = fb::DType::f16; }).find("source dtype must be f32"),
            std::string::npos);
}

TEST(QuantVerify, RejectsGroupsThatDoNotDivideOrAreOdd) {
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).group_size = 0; }).find("group size 0 does not divide K=64"), std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).group_size = 24; }).find("group size 24 does not divide K=64"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).group_size = 4294967295u; }).find("does not divide K=64"), std::string::npos);
  // A group that divides K but is odd cannot be stored as nibbles; 32 divides but needs 2 scales per row.
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).group_size = 1; }).find("int4 group size 1 must be even"), std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).group_size = 32; })
                .find("scales (constant 1): shape [8, 4] != [N, K / group_size] = [8, 2]"),
            std::string::npos);
}

TEST(QuantVerify, RejectsBadScalesAndZeroPoints) {
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).scales = 99; }).find("scales (constant 99): does not exist (3 constants)"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).scales = 0; }).find("scales (constant 0): is the weight itself"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { p.constants[1]->dtype = fb::DType::i16; }).find("scales (constant 1): must be f32 or f16"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { p.constants[2]->dtype = fb::DType::i8; })
                .find("zero points (constant 2): must be u8"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).zero_points = -5; }).find("zero_points -5 is not a constant or -1"),
            std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) { quant(p).zero_points = 1 << 30; }).find("does not exist"), std::string::npos);
  EXPECT_NE(error_of([](fb::ProgramT& p) {
              p.constants[2]->quant = std::make_unique<fb::QuantizationT>(quant(p));
            }).find("zero points (constant 2): is itself quantized"),
            std::string::npos);
}

TEST(QuantVerify, RejectsLinearQOperandsThatAreNotTheWeightsOwn) {
  // The scales input swapped for the zero points constant.
  EXPECT_NE(error_of([](fb::ProgramT& p) {
              auto& n = *p.graphs[p.entry_graph]->nodes[0];
              std::swap(n.inputs[2], n.inputs[4]);
            }).find("(linear_q), input 2 (scales): must be constant 1, the weight's scales"),
            std::string::npos);
  // Zero points left out although the weight has them.
  EXPECT_NE(error_of([](fb::ProgramT& p) { p.graphs[p.entry_graph]->nodes[0]->inputs.resize(3); })
                .find("input 4 (zero_points): the weight's zero points are missing"),
            std::string::npos);
  // A plain (not quantized) weight.
  EXPECT_NE(error_of([](fb::ProgramT& p) {
              p.constants[0]->quant.reset();
            }).find("input 1 (weight): must be a quantized constant"),
            std::string::npos);
}

}  // namespace
}  // namespace kiln
