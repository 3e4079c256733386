// Int inputs. `len` is marked Dim::DYNAMIC: it becomes a symbol of the graph, so shapes
// computed from it (`len - seq` rows of padding, `len + 1` positions, `2 * len` as an int
// output) stay symbolic and the bundle runs with any value. `copies` is a static int (the
// default): its example value 2 is folded into the graph, and the runtime refuses any other.
//
//   kiln_sample_dynamic_int out/dynamic_int.kiln
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

// x: f32[seq, 4], len >= seq  ->  (padded f32[copies, len, 4], positions i64[len + 1], 2 * len)
std::tuple<Tensor, Tensor, SymInt> pad_to(const Tensor& x, const SymInt& len, const SymInt& copies) {
  check(len >= x.size(0));  // a runtime assert on the inputs: padding cannot be negative
  const Tensor padded = cat({x, zeros({len - x.size(0), x.size(1)})}, 0);
  return {padded.unsqueeze(0).expand({copies, len, x.size(1)}), arange(len + 1), 2 * len};
}

HostValue host(const Tensor& t) { return HostValue::of({t.dtype(), t.concrete_shape(), t.bytes()}); }

std::string shape(const HostTensor& t) {
  std::string s = std::string(dtype_name(t.dtype)) + "[";
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "dynamic_int.kiln";
  Dim seq("seq", 1, 64);
  auto ep = export_program([](Tensor x, SymInt len, SymInt copies) { return pad_to(x, len, copies); },
                           {input("x", Tensor::randn({3, 4}, 1), {seq}),
                            int_input("len", 5, Dim::DYNAMIC),  // a symbol: any value that passes the checks
                            int_input("copies", 2)},             // static: must be 2 at run time
                           {.name = "dynamic_int"});
  if (!ep.ok()) return std::fprintf(stderr, "export failed: %s\n", ep.status().message().c_str()), exit_code(ep.status().code());
  std::printf("%s\n", ep->print().c_str());
  if (Status s = ep->save(path); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), exit_code(s.code());

  auto bundle = Bundle::open(path);
  if (!bundle.ok()) return std::fprintf(stderr, "%s\n", bundle.status().message().c_str()), 2;
  auto program = Program::load(std::move(bundle).value());
  if (!program.ok()) return std::fprintf(stderr, "%s\n", program.status().message().c_str()), exit_code(program.status().code());
  Session session(**program);

  std::printf("%-4s %-4s  %-16s %-12s %s\n", "seq", "len", "padded", "positions", "2*len");
  for (auto [rows, len] : {std::pair<std::int64_t, std::int64_t>{3, 5}, {3, 3}, {7, 20}, {1, 100}}) {
    const Tensor x = Tensor::randn({rows, 4}, static_cast<std::uint64_t>(rows));
    auto r = session.run(std::vector<HostValue>{host(x), HostValue::integer(len), HostValue::integer(2)});
    if (!r.ok()) return std::fprintf(stderr, "run failed: %s\n", r.status().message().c_str()), exit_code(r.status().code());
    const auto& out = r->outputs;
    std::printf("%-4lld %-4lld  %-16s %-12s %lld\n", static_cast<long long>(rows), static_cast<long long>(len),
                shape(out[0].tensor).c_str(), shape(out[1].tensor).c_str(), static_cast<long long>(out[2].int_value));
    if (out[0].tensor.shape != std::vector<std::int64_t>{2, len, 4} || out[2].int_value != 2 * len) return 5;
  }

  // The check on `len` is a runtime assert over the inputs; `copies` is static.
  const Tensor x = Tensor::randn({6, 4}, 6);
  auto too_short = session.run(std::vector<HostValue>{host(x), HostValue::integer(4), HostValue::integer(2)});
  auto wrong_static = session.run(std::vector<HostValue>{host(x), HostValue::integer(8), HostValue::integer(3)});
  if (too_short.ok() || wrong_static.ok()) return std::fprintf(stderr, "a bad input was accepted\n"), 1;
  std::printf("\nseq 6, len 4:    %s\n", too_short.status().message().c_str());
  std::printf("copies 3:        %s\n", wrong_static.status().message().c_str());
  return 0;
}
