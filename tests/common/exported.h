// Test helpers shared by the export and runtime suites: an exported program loaded by the
// runtime (through the bundle bytes, as a deployed model would be), and eager tensors as
// runtime inputs.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>
#include <utility>

#include "kiln/export/export.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln::testing {

/// Serializes, opens and loads `program`; null (with a test failure) when any step fails.
inline std::shared_ptr<const Program> load_program(const ir::Program& program, ProgramOptions options = {}) {
  auto bytes = serialize_bundle(program);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  if (!bytes.ok()) return nullptr;
  auto bundle = Bundle::from_bytes(*bytes);
  EXPECT_TRUE(bundle.ok()) << bundle.status().message();
  if (!bundle.ok()) return nullptr;
  auto loaded = Program::load(std::move(bundle).value(), options);
  EXPECT_TRUE(loaded.ok()) << loaded.status().message();
  return loaded.ok() ? *loaded : nullptr;
}

/// The same for an exported program.
inline std::shared_ptr<const Program> load_exported(const ExportedProgram& ep, ProgramOptions options = {}) {
  return load_program(ep.program(), options);
}

/// A 1-D f32 runtime input.
inline HostValue floats(const std::vector<float>& v) {
  HostTensor t;
  t.dtype = DType::kF32;
  t.shape = {static_cast<std::int64_t>(v.size())};
  t.data.resize(v.size() * sizeof(float));
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return HostValue::of(std::move(t));
}

/// An eager (or example) tensor as a runtime tensor.
inline HostTensor host_tensor(const Tensor& t) {
  HostTensor h;
  h.dtype = t.dtype();
  h.shape = t.concrete_shape();
  h.data = t.bytes();
  return h;
}

}  // namespace kiln::testing
