// Calibration data of `kiln quantize --calibrate DIR` (docs/QUANTIZATION.md, "GPTQ"): the
// bundle run on a directory of sample inputs with every node observed, measuring
// E[x x^T] of the inputs x of each linear and matmul whose weight is a constant.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/runtime/program.h"

namespace kiln::cli {

class Calibration {
 public:
  /// Where the runs of `dir` are: each subdirectory of `dir` (sorted by name) is one run,
  /// or `dir` itself when it has none. A run holds `<input name>.npy` for every input of the
  /// bundle's signature (an int input: a 0-d or one-element integer array), read and
  /// checked like `kiln run`'s inputs when the run is made; each run starts from the
  /// initial state of a stateful bundle. Loads the f32 bundle at `bundle_path` a second
  /// time, with activation fusion off so that every node's output is observed.
  /// kUsage when `dir` is not a directory or holds no run, or an input's name cannot be a
  /// file name; the loader's errors otherwise.
  /// `memory_bytes`: the most memory the moments of one pass over the runs may take.
  static Result<std::unique_ptr<Calibration>> open(const std::string& bundle_path, const std::string& dir,
                                                   std::uint64_t memory_bytes = std::uint64_t{1} << 30);
  ~Calibration();

  /// The mean x x^T (k x k, row-major) of the inputs of every linear (weight input 1) and
  /// matmul (constant B, `transposed`) node whose weight is constant `constant` of the
  /// bundle, over all runs; nullptr when no such node ran or its input could not be
  /// observed (`why` says which). Moments are measured in passes over the runs, each for
  /// as many layers as fit in `memory_bytes` (2 k^2 doubles a layer; at least one layer a
  /// pass), in the order of the nodes, the order the quantizer asks in: a model larger
  /// than that runs the calibration more than once. All runs share one Session, its state
  /// reset before each. A run's copies of layer inputs (added to the moments after the
  /// run) are added at once past 256 MiB. Layers whose inputs are the same values (the q, k
  /// and v projections of one activation) share one measurement (the same pointer) when
  /// they fall in one pass.
  /// Errors: a run whose inputs are invalid or whose run fails, with the run's path.
  Result<std::shared_ptr<const std::vector<double>>> moments(std::uint32_t constant, bool transposed, std::string& why);

  /// Rows of inputs behind moments(constant, transposed) (0 before it was measured).
  std::int64_t rows(std::uint32_t constant, bool transposed) const;
  /// Rows left out of those moments because they held a non-finite value.
  std::int64_t skipped_rows(std::uint32_t constant, bool transposed) const;
  std::size_t run_count() const { return runs_.size(); }
  /// How many passes over the runs were made so far.
  int passes() const { return passes_; }

  struct Use;  // where a layer's input value comes from in one graph

 private:
  struct Target;  // one weight (constant, layout): its k and where its inputs are
  Calibration() = default;
  void find_targets();
  // Sets each target's leader: the first earlier target reading the same values.
  void find_leaders();
  // Whether t takes its leader's moments in the pass starting at first_target.
  bool shares(const Target& t, std::size_t first_target) const;
  // One pass over the runs measuring targets [first_target, pass_end(first_target)).
  Status measure_from(std::size_t first_target);
  std::size_t pass_end(std::size_t first_target) const;
  // Whether t's moments alone exceed memory_bytes_.
  bool too_wide(const Target& t) const;

  std::shared_ptr<const Program> program_;
  std::vector<std::string> runs_;
  std::uint64_t memory_bytes_ = 0;
  std::vector<std::unique_ptr<Target>> targets_;
  std::map<std::pair<std::uint32_t, bool>, std::size_t> target_index_;
  int passes_ = 0;
};

}  // namespace kiln::cli
