// Test helpers shared by the export and runtime suites: an exported program loaded by the
// runtime (through the bundle bytes, as a deployed model would be), and eager tensors as
// runtime inputs.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <utility>

#include "kiln/export/export.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln::testing {

/// Serializes, opens and loads `ep`; null (with a test failure) when any step fails.
inline std::shared_ptr<const Program> load_exported(const ExportedProgram& ep, ProgramOptions options = {}) {
  auto bytes = serialize_bundle(ep.program());
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  if (!bytes.ok()) return nullptr;
  auto bundle = Bundle::from_bytes(*bytes);
  EXPECT_TRUE(bundle.ok()) << bundle.status().message();
  if (!bundle.ok()) return nullptr;
  auto program = Program::load(std::move(bundle).value(), options);
  EXPECT_TRUE(program.ok()) << program.status().message();
  return program.ok() ? *program : nullptr;
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
