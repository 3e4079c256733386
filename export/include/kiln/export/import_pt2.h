// Importing `torch.export` archives (`.pt2`, as written by `torch.export.save`) into the
// same ir::Program the C++ tracer produces, so the same passes and writer apply.
//
//   kiln::ImportOptions options;
//   options.specializations = {"s77 % 16 == 0"};
//   auto ep = kiln::import_pt2("model.pt2", options);
//   if (!ep.ok()) { std::cerr << ep.status().message(); return exit_code(ep.status().code()); }
//   ep->save("model.kiln");
//
// What is read (see docs/IMPORT.md for the op table):
//  * `*/models/*.json` (PyTorch >= 2.7) or `serialized_exported_program.json` (the legacy
//    layout of PyTorch <= 2.6): the serialized ExportedProgram (torch/_export/serde/schema.py,
//    schema 8.x, PyTorch 2.6 to 2.11): graph, signature, range_constraints; both the training
//    IR and the core ATen IR (after run_decompositions());
//  * `*/data/weights/*` and `*/data/constants/*` per their `*_config.json`, or the legacy
//    `serialized_state_dict.pt` / `serialized_constants.pt` (torch.save zips read by a
//    restricted unpickler that executes nothing): dtype, sizes, strides, storage offset,
//    range-checked and made C-contiguous; PT2 entries with use_pickle are refused.
// Symbols: every backed symbol of range_constraints (`s77`) becomes a backed Kiln symbol
// with that range and the example value as hint; unbacked symbols (`u0`) become unbacked
// symbols bound by the node that produces them (bindings are recomputed from the output
// shapes, not trusted from the file). Kiln renumbers symbols (`s77` may print as `s0`).
// `_assert_scalar` / `sym_constrain_range*` become runtime asserts; every finite bound of
// an unbacked symbol's range becomes one too. `stack_trace` gives each node the user's
// `file:line` (the innermost frame outside torch), `nn_module_stack` its module path.
//
// Errors (never a partial program):
//   kInvalidBundle  a missing or non-regular file (FIFO, directory, device: never read), not
//                   a zip, no model json, malformed json, a missing or ill-typed field, a
//                   schema major other than 8, a member over its size cap, a tensor view
//                   outside its storage, a pickle global or opcode outside the allow-list
//                   (the message names the member / tensor / global; docs/IMPORT.md, Limits);
//   kUnsupported    aten ops (or arguments) Kiln cannot express: ONE error listing every
//                   unsupported op with its count; a mutated buffer, parameter or input, or
//                   any non-user output (stateful and training programs), named;
//   kUsage          bad options (unknown symbol in --dim, malformed predicate).
#pragma once

#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/export/export.h"
#include "kiln/runtime/program.h"

namespace kiln {

struct ImportOptions {
  /// Program name; empty: the archive's file name without extension.
  std::string name;
  /// Range overrides `NAME=MIN:MAX` (MAX may be `inf`). NAME is an archive symbol (`s77`)
  /// or an input dim written `INPUT.DIM` (`x.0`). The new range must lie inside
  /// what the archive's graph needs only in the sense that the runtime checks it:
  /// narrowing is always safe, widening past range_constraints is refused (kUsage).
  std::vector<std::string> dims;
  /// Specialization predicates over archive symbol names or `INPUT.DIM`
  /// (`"s77 % 16 == 0"`, `"x.0 == 1"`), in dispatch order (SEMANTICS.md).
  std::vector<std::string> specializations;
};

/// Reads the archive at `path` and maps it into an ExportedProgram (no self-tests).
Result<ExportedProgram> import_pt2(const std::string& path, const ImportOptions& options = {});

/// At most this many self-tests (cases and sequence steps) per manifest read.
inline constexpr std::size_t kMaxSelfTests = 4096;
/// A case's or sequence's `name`: 1 to this many bytes.
inline constexpr std::size_t kMaxSelfTestNameBytes = 256;

/// Golden cases in the fixtures' `manifest.json` format: `{"valid": [{"name": ...,
/// "inputs": {"x": "cases/a.npy", ...}, "outputs": ["cases/o.npy", ...]}, ...],
/// "sequences": [{"name": "s", "steps": [case, case, ...]}, ...]}` (either list may be
/// absent, not both), paths relative to the manifest's folder. Inputs are matched to
/// `program`'s signature by name (else by position); an int input reads a 0-d or
/// one-element integer .npy. Appends one SelfTestCase per valid case, then one per
/// sequence step (named `s[j]`, with `sequence` = the sequence's name: the steps run one
/// after another on one state), with tolerances `rtol` / `atol`.
/// Errors: kIoError (unreadable files), kUsage (malformed manifest: a wrong type, a missing
/// or empty `steps` list, two sequences of one name, a name of 0 or more than
/// kMaxSelfTestNameBytes bytes, more than kMaxSelfTests cases and steps, count mismatch).
Status add_self_tests_from_manifest(ir::Program& program, const std::string& manifest_path, double rtol = 1e-4,
                                    double atol = 1e-5);
/// One golden case from explicit files: `inputs` in signature order (`NAME=FILE.npy` or
/// `FILE.npy`; ints may be a literal integer), `outputs` in signature order.
Status add_self_test_case(ir::Program& program, const std::string& name, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, double rtol = 1e-4, double atol = 1e-5);

/// read_npy that also accepts Fortran-order arrays (NumPy writes transposed results that
/// way), returning them C-contiguous. Errors as read_npy.
Result<HostTensor> read_npy_any_order(const std::string& path);

}  // namespace kiln
