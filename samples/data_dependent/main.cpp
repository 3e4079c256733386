// Data-dependent sizes: values known only at run time become *unbacked* symbols (u0, u1,
// ...), bound by the node that computes them. `nonzero` and boolean masking give outputs
// whose length depends on the data; `item` turns a tensor element into a size, and
// `check` states what the code needs of it: the range of the symbol narrows and the
// condition becomes a runtime assert, checked right after the node that binds it. The
// printed graph shows the symbols and the asserts; a value breaking a check fails the run
// with the check's source line.
//
//   kiln_sample_data_dependent out/data_dependent.kiln
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/export/export.h"
#include "kiln/export/guards.h"
#include "kiln/export/ops.h"
#include "kiln/runtime/program.h"

using namespace kiln;

namespace {

// scores: f32[n, 6]; keep: i64[1], how many leading columns to keep (1..6).
std::tuple<Tensor, Tensor, Tensor> hot_scores(const Tensor& scores, const Tensor& keep) {
  const Tensor hot = gt(scores, 0.5);
  const Tensor where = nonzero(hot);                // i64[u0, 2]: (row, column) of each hot score
  const Tensor values = masked_select(scores, hot);  // f32[u1]: the hot scores, in row-major order
  const SymInt k = keep.item();                      // an unbacked symbol
  check(k <= scores.size(1));
  check(k >= 1);
  const Tensor leading = scores.slice(1, 0, k).sum({1});  // f32[n]: sum of the first k columns
  return {where, values, leading};
}

HostValue host(const Tensor& t) { return HostValue::of({t.dtype(), t.concrete_shape(), t.bytes()}); }

std::string shape(const HostTensor& t) {
  std::string s = std::string(dtype_name(t.dtype)) + "[";
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

Tensor keep_tensor(std::int64_t k) { return Tensor::from_ints({1}, std::vector<std::int64_t>{k}); }

}  // namespace

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "data_dependent.kiln";
  auto ep = export_program([](Tensor scores, Tensor keep) { return hot_scores(scores, keep); },
                           {input("scores", Tensor::randn({4, 6}, 3), {Dim("n", 1, 256)}), input("keep", keep_tensor(3))},
                           {.name = "data_dependent"});
  if (!ep.ok()) return std::fprintf(stderr, "export failed: %s\n", ep.status().message().c_str()), exit_code(ep.status().code());
  std::printf("%s\n", ep->print().c_str());
  if (Status s = ep->save(path); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), exit_code(s.code());

  auto bundle = Bundle::open(path);
  if (!bundle.ok()) return std::fprintf(stderr, "%s\n", bundle.status().message().c_str()), 2;
  auto program = Program::load(std::move(bundle).value());
  if (!program.ok()) return std::fprintf(stderr, "%s\n", program.status().message().c_str()), exit_code(program.status().code());
  Session session(**program);

  std::printf("%-3s %-4s  %-12s %-10s %-10s %s\n", "n", "keep", "where", "values", "leading", "matches eager");
  for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{4, 3}, {1, 6}, {50, 1}}) {
    const Tensor scores = Tensor::randn({n, 6}, static_cast<std::uint64_t>(10 * n + k));
    auto r = session.run(std::vector<HostValue>{host(scores), host(keep_tensor(k))});
    if (!r.ok()) return std::fprintf(stderr, "run failed: %s\n", r.status().message().c_str()), exit_code(r.status().code());
    const auto [where, values, leading] = hot_scores(scores, keep_tensor(k));  // eager
    const auto& out = r->outputs;
    const bool same = out[0].tensor.data == where.bytes() && out[1].tensor.data == values.bytes() &&
                      out[2].tensor.shape == leading.concrete_shape();
    std::printf("%-3lld %-4lld  %-12s %-10s %-10s %s\n", static_cast<long long>(n), static_cast<long long>(k),
                shape(out[0].tensor).c_str(), shape(out[1].tensor).c_str(), shape(out[2].tensor).c_str(), same ? "yes" : "NO");
    if (!same) return 5;
  }

  // keep = 0 breaks `check(k >= 1)`: the assert runs right after the `item` node.
  auto bad = session.run(std::vector<HostValue>{host(Tensor::randn({2, 6}, 1)), host(keep_tensor(0))});
  if (bad.ok()) return std::fprintf(stderr, "keep = 0 was accepted\n"), 1;
  std::printf("\nkeep = 0: %s\n", bad.status().message().c_str());
  return 0;
}
