// Modules: named parameters and buffers under a dotted module path ("layers.3.attn.q").
//
//   struct Linear : kiln::Module {
//     kiln::Tensor weight, bias;
//     Linear(int in, int out) {
//       weight = register_parameter("weight", kiln::Tensor::randn({out, in}));
//       bias = register_parameter("bias", kiln::Tensor::randn({out}));
//     }
//     kiln::Tensor operator()(const kiln::Tensor& x) const {
//       kiln::ModuleScope scope(*this);   // nodes traced here get this module path
//       return kiln::linear(x, weight, bias);
//     }
//   };
//
// Parameters are eager tensors; when a traced op uses one it becomes a bundle constant
// named by its full path. Nodes get the module path of the innermost ModuleScope, or
// (outside any scope) of the first parameter they use.
//
// Buffers are the same, except for **state** buffers (`{.state = true}`): mutable tensors
// that persist across runs of one runtime Session, such as a KV cache or a step counter.
//
//   struct Counter : kiln::Module {
//     kiln::Tensor total;
//     Counter() { total = register_buffer("total", kiln::zeros({4}), {.state = true}); }
//     kiln::Tensor operator()(const kiln::Tensor& x) {
//       total.add_(x);        // traced: total_new = add(total, x); later reads see total_new
//       return total * 2.0;
//     }
//   };
//
// While tracing, the first op that uses a state makes it one of the program's state tensors
// (Program::states, in first-use order): its name is the buffer's full path, its initial
// value the buffer's bytes at export time, and it becomes an entry-graph input after the
// user inputs. In-place updates (add_, copy_, index_copy_, slice_scatter_, ...; ops.h) are
// traced functionally: the update computes a new value, later reads in the same forward see
// it, and the final value is the state's extra graph output (the input itself when the
// forward only reads it). A state the forward never uses is not part of the program.
// Updating a state inside a cond branch, while_loop function or compile region is an export
// error (as for any captured tensor). In-place updates of parameters and non-state buffers
// while tracing are export errors naming the tensor and the source line: they are constants
// of the exported program. Outside a trace (eager mode: self-tests, references) a state is a
// plain eager tensor and in-place ops update its bytes; export_program restores the bytes
// it had once its self-tests ran.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/export/tensor.h"

namespace kiln {

/// Options of Module::register_buffer.
struct BufferOptions {
  /// A mutable state tensor (see above) rather than a constant. Needs a static shape.
  bool state = false;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The dotted path of this module in its root ("" for the root).
  const std::string& path() const { return path_; }
  /// Every parameter and buffer of this module and its children, by full dotted name.
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;

 protected:
  /// Registers an eager tensor as a parameter; returns it (store it in a member). kUsage
  /// (thrown) for a traced or undefined tensor, an empty name or a name used twice.
  Tensor register_parameter(const std::string& name, Tensor value);
  /// Registers an eager tensor as a buffer: a constant like a parameter, or with
  /// `{.state = true}` a state tensor (static shape required). Same errors.
  Tensor register_buffer(const std::string& name, Tensor value, BufferOptions options = {});
  /// Registers `child` (which must outlive this module) under `name`.
  void register_module(const std::string& name, Module& child);

 private:
  void set_path(const std::string& path);
  enum class Kind { kParameter, kBuffer, kState };
  Tensor register_tensor(std::string_view what, const std::string& name, Tensor value, Kind kind);
  std::string path_;
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
};

/// While alive, traced nodes record `module.path()` as their module path.
class ModuleScope {
 public:
  explicit ModuleScope(const Module& module);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;
};

}  // namespace kiln
