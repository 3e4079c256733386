// Declaring which input sizes are dynamic (SEMANTICS.md, "Dynamic-shape spec").
//
//   auto batch = kiln::Dim("batch", 2, 1024);        // strict: export fails if code narrows it
//   auto h = kiln::Dim("h", 1, 32);
//   input("x", example, {batch, kiln::Dim::STATIC, 32 * h, 32 * h});
//   input("y", example, {batch});                     // the same Dim: declared equal
//   int_input("n", 3, kiln::Dim::DYNAMIC);           // a SymInt graph input
//
// Copies of a Dim are the same Dim (they share identity).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace kiln {

class Dim {
 public:
  enum class Kind : std::uint8_t {
    kNamed,    // strict: narrowing, specializing or relating it undeclared is an error
    kAuto,     // never fails: ranges and relations inferred; may end up static
    kDynamic,  // fails only if specialized to a constant
    kStatic,   // the example's size
    kDerived,  // coefficient * root + offset over a named root Dim
  };
  static constexpr std::int64_t kInf = std::numeric_limits<std::int64_t>::max();

  /// A strict named dim with inclusive range [min, max].
  explicit Dim(std::string name, std::int64_t min = 1, std::int64_t max = kInf);

  static const Dim AUTO;
  static const Dim DYNAMIC;
  static const Dim STATIC;

  /// Predicates over this dim, in dispatch order, written with the dim's name or `d`:
  /// "seq % 16 == 0", "batch == 1". Each yields a specialized graph (SEMANTICS.md).
  Dim& specialize_on(std::vector<std::string> predicates);

  Kind kind() const;
  const std::string& name() const;
  std::int64_t min() const;
  std::int64_t max() const;
  /// For kDerived: value = coefficient * root + offset.
  const Dim* root() const;
  std::int64_t coefficient() const;
  std::int64_t offset() const;
  const std::vector<std::string>& specializations() const;
  /// Identity: two Dims are the same declaration (copies compare equal).
  const void* id() const;

  friend Dim operator*(std::int64_t k, const Dim& d);
  friend struct DimFactory;
  friend Dim operator*(const Dim& d, std::int64_t k) { return k * d; }
  friend Dim operator+(const Dim& d, std::int64_t c);
  friend Dim operator-(const Dim& d, std::int64_t c) { return d + (-c); }

  struct Data;  // shared state; defined in dim.cpp

 private:
  explicit Dim(std::shared_ptr<Data> data) : data_(std::move(data)) {}
  std::shared_ptr<Data> data_;
};

}  // namespace kiln
