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
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/export/tensor.h"

namespace kiln {

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
  /// Registers an eager tensor as a parameter; returns it (store it in a member).
  Tensor register_parameter(const std::string& name, Tensor value);
  Tensor register_buffer(const std::string& name, Tensor value) { return register_parameter(name, std::move(value)); }
  /// Registers `child` (which must outlive this module) under `name`.
  void register_module(const std::string& name, Module& child);

 private:
  void set_path(const std::string& path);
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
