// The .pt2 importer's internals: the Importer walks the serialized graphs and emits
// ir::Program nodes; aten_elementwise.cpp, aten_nn.cpp and aten_shape.cpp map each aten op
// with the helpers declared here (importer.cpp builds the table from them).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "import/archive.h"
#include "import/tensor_data.h"
#include "kiln/export/import_pt2.h"
#include "kiln/export/ir.h"

namespace kiln::pt2 {

using json = nlohmann::json;
/// A value's dims. Indexing is bounds-checked: a hostile archive's TensorMeta can give a
/// value another rank than its op implies, and a handler that reads dim 3 of what it
/// expects to be a 4-D tensor then gets std::out_of_range (a clean "malformed archive"
/// error naming the node, see map_node) instead of reading past the vector.
class Shape : public std::vector<sym::Expr> {
 public:
  using std::vector<sym::Expr>::vector;
  Shape() = default;
  Shape(const std::vector<sym::Expr>& v) : std::vector<sym::Expr>(v) {}  // NOLINT: implicit by design
  Shape(std::vector<sym::Expr>&& v) : std::vector<sym::Expr>(std::move(v)) {}  // NOLINT
  sym::Expr& operator[](std::size_t i) { return data()[check(i)]; }
  const sym::Expr& operator[](std::size_t i) const { return data()[check(i)]; }
  sym::Expr& front() { return data()[check(0)]; }
  const sym::Expr& front() const { return data()[check(0)]; }
  sym::Expr& back() { return data()[check(size() - 1)]; }
  const sym::Expr& back() const { return data()[check(size() - 1)]; }

 private:
  std::size_t check(std::size_t i) const {
    if (i >= size()) {
      throw std::out_of_range("dim " + std::to_string(static_cast<std::ptrdiff_t>(i)) + " of a value of rank " +
                              std::to_string(size()) + " (its TensorMeta does not fit the op)");
    }
    return i;
  }
};

/// Thrown inside the importer; import_pt2 returns it as a Status.
class ImportError : public std::runtime_error {
 public:
  ImportError(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

[[noreturn]] void fail(StatusCode code, const std::string& message);

/// The member `key` of a JSON object, or null when absent or null.
const json* member(const json& j, const char* key);
/// The member `key`, or a kInvalidBundle error naming `where` and the field.
const json& need(const json& j, const char* key, const std::string& where);

/// PyTorch's promotion of two tensor dtypes (bool < integers < floating, wider wins).
DType promote_types(DType a, DType b);

/// A scalar-or-tensor operand of an aten op.
struct Operand {
  int value = -1;  // a tensor value id, or -1 for a scalar
  double number = 0;
  bool is_int = false;   // int (or bool) literal
  bool is_bool = false;  // bool literal
  std::optional<sym::Expr> symbolic;  // a SymInt / SymBool scalar
  bool is_tensor() const { return value >= 0; }
};

/// How a tensor name aliases another (the training IR's view ops; mutations.cpp): in-place
/// writes to a view are written back into its base, and views read after their base was
/// written are recomputed from it.
struct ViewEdge {
  std::string parent;          // the tensor it views
  const json* node = nullptr;  // the view node; nullptr: the result of an in-place op (self itself)
  std::size_t output = 0;      // which output of `node`
  bool contiguous = false;     // known to be a contiguous view (reshape / contiguous of it are views)
  bool ambiguous = false;      // reshape / contiguous of a maybe non-contiguous view: a view or a copy
  std::size_t order = 0;       // creation order (recomputation replays views in this order)
};

/// One pt2 graph being emitted into one ir::Graph.
struct Scope {
  int graph = -1;
  const json* jgraph = nullptr;
  std::unordered_map<std::string, int> tensors;     // pt2 tensor name -> value id
  std::unordered_map<std::string, sym::Expr> syms;  // pt2 SymInt/SymBool name -> expression
  std::unordered_map<int, int> constant_values;     // program constant -> value id
  std::unordered_map<int, int> binder;              // unbacked symbol -> binding node
  std::set<sym::Expr, sym::ExprLess> asserted;      // asserts already added
  // In-place ops (mutations.cpp).
  std::unordered_map<std::string, ViewEdge> views;         // view name -> how it views its parent
  std::unordered_map<std::string, std::size_t> last_use;   // name -> index of its last reader (outputs: #nodes)
  std::set<std::string> contiguous;                        // non-view names known to be contiguous
  std::map<std::string, std::string> placeholders;         // graph input name -> what it is ("buffer 'total'")
  std::size_t node_index = 0;                              // the node being mapped
  bool entry = false;
};

/// Why output `index` with this OutputSpec cannot be imported ("output 0 is a loss
/// (LOSS_OUTPUT): training programs are not supported").
std::string non_user_output_message(const json& spec, std::size_t index);

class Importer;
using Handler = std::function<void(Importer&)>;
/// The aten op table (built in importer.cpp by the register_* functions below), keyed by
/// packet name ("aten.add"); the handler sees the overload through Importer::overload().
using HandlerTable = std::unordered_map<std::string, Handler>;
const HandlerTable& aten_handlers();
void register_elementwise(HandlerTable& t);  // aten_elementwise.cpp
void register_nn(HandlerTable& t);           // aten_nn.cpp
void register_shape(HandlerTable& t);        // aten_shape.cpp
void register_volume(HandlerTable& t);       // aten_volume.cpp: 3-D convolution and pooling
void register_scatter(HandlerTable& t);      // aten_scatter.cpp: scatter, index_add, searches
void register_recurrent(HandlerTable& t);    // aten_recurrent.cpp: LSTM, GRU, RNN; grid sampling
/// conv2d as Kiln's conv2d node (x [N, C, H, W], w [O, C/g, kH, kW]; aten_nn.cpp).
int conv2d_node(Importer& im, int x, int w, std::optional<int> bias, std::vector<std::int64_t> stride,
                std::vector<std::int64_t> padding, std::vector<std::int64_t> dilation, std::int64_t groups, DType dt,
                const Shape& out);
/// conv_transpose2d by decomposition (x [N, C, H, W], w [C, O/g, kH, kW]; aten_nn.cpp).
int conv_transpose2d_nodes(Importer& im, int x, int w, std::optional<int> bias, std::vector<std::int64_t> stride,
                           std::vector<std::int64_t> padding, std::vector<std::int64_t> output_padding,
                           std::vector<std::int64_t> dilation, std::int64_t groups, DType dt, const Shape& out);
/// Checks the window arguments of a convolution or pooling op the importer decomposes:
/// kernel, stride and dilation >= 1, padding >= 0, each below 2^20, and at most 65536
/// kernel taps; bad() naming `what` and the argument otherwise (aten_nn.cpp).
void check_window(Importer& im, const std::string& what, const std::vector<std::int64_t>& kernel,
                  const std::vector<std::int64_t>& stride, const std::vector<std::int64_t>& padding,
                  const std::vector<std::int64_t>& dilation);
/// PyTorch's pooling output size (pooling_output_shape) along one dim.
std::int64_t pooling_output_size(std::int64_t in, std::int64_t k, std::int64_t pad, std::int64_t stride, std::int64_t dilation,
                                 bool ceil_mode);
/// Convolutions aten_nn.cpp does not map itself (3-D, 1-D transposed): the convolution
/// node's arguments, already read and cast to `dt` (aten_volume.cpp).
int convolution_volume(Importer& im, int x, int w, std::optional<int> bias, std::vector<std::int64_t> stride,
                       std::vector<std::int64_t> padding, std::vector<std::int64_t> dilation, bool transposed,
                       std::vector<std::int64_t> output_padding, std::int64_t groups, DType dt, const Shape& out);
/// slice_scatter(self, src, d, start, end) with step 1, Python-clamped bounds (aten_shape.cpp).
int slice_scatter_impl(Importer& im, int self, int src, std::int64_t d, sym::Expr start, sym::Expr end);

class Importer {
 public:
  /// The archive schema major version read (torch/_export/serde/schema.py SCHEMA_VERSION).
  static constexpr std::int64_t kSchemaMajor = 8;
  ir::Program program;

  // ---- building ---------------------------------------------------------------------
  Status run(const std::string& path, const ImportOptions& options);

  // ---- the node being mapped (valid inside a handler) ---------------------------------
  const std::string& target() const { return target_; }      // "aten.add.Tensor"
  const std::string& overload() const { return overload_; }  // "Tensor"
  ir::Graph& graph() { return program.graphs[static_cast<std::size_t>(scope_->graph)]; }
  const ir::Value& value(int id) { return graph().values[static_cast<std::size_t>(id)]; }
  Shape shape(int id) { return value(id).shape; }
  DType dtype(int id) { return value(id).dtype; }
  std::int64_t rank(int id) { return static_cast<std::int64_t>(value(id).shape.size()); }

  /// The argument by schema name, else by position; nullptr when absent or None.
  const json* arg(std::size_t pos, const char* name) const;
  bool has(std::size_t pos, const char* name) const { return arg(pos, name) != nullptr; }
  int tensor(std::size_t pos, const char* name);
  std::optional<int> opt_tensor(std::size_t pos, const char* name);
  std::vector<int> tensor_list(std::size_t pos, const char* name);
  std::vector<std::optional<int>> opt_tensor_list(std::size_t pos, const char* name);
  sym::Expr sym_int(std::size_t pos, const char* name);
  std::optional<sym::Expr> opt_sym_int(std::size_t pos, const char* name);
  std::vector<sym::Expr> sym_int_list(std::size_t pos, const char* name);
  std::int64_t int_arg(std::size_t pos, const char* name, std::optional<std::int64_t> fallback = std::nullopt);
  std::vector<std::int64_t> int_list(std::size_t pos, const char* name, std::vector<std::int64_t> fallback = {});
  double float_arg(std::size_t pos, const char* name, std::optional<double> fallback = std::nullopt);
  bool bool_arg(std::size_t pos, const char* name, bool fallback = false);
  std::string string_arg(std::size_t pos, const char* name, const std::string& fallback = "");
  std::optional<DType> dtype_arg(std::size_t pos, const char* name);
  Operand operand(std::size_t pos, const char* name);
  sym::Expr sym_expr_of(const json& a);  // as_sym_int / as_sym_bool / as_int / as_bool
  std::size_t num_args() const { return args_.size(); }

  std::size_t num_outputs() const;
  /// Declared dtype / shape of tensor output k (flattening as_tensors lists).
  DType out_dtype(std::size_t k = 0);
  Shape out_shape(std::size_t k = 0);
  bool output_used(std::size_t k) const;
  /// Binds output k's name to `value`.
  void define(std::size_t k, int value);
  /// The expression the archive records for symbolic output k (sym_int_values /
  /// sym_bool_values), and binding output k's name to it.
  sym::Expr declared_sym(std::size_t k);
  void define_declared_sym(std::size_t k) { define_sym(k, declared_sym(k)); }
  /// Binds a SymInt/SymBool output to an expression.
  void define_sym(std::size_t k, sym::Expr e);

  // ---- emitting -------------------------------------------------------------------------
  int emit(OpKind op, std::vector<int> inputs, std::vector<ir::Attr> attrs, DType dtype, Shape shape);
  std::vector<int> emit_multi(OpKind op, std::vector<int> inputs, std::vector<ir::Attr> attrs, DType dtype,
                              std::vector<Shape> shapes);
  /// emit() with output k's declared dtype and shape, then define(k).
  int emit_out(OpKind op, std::vector<int> inputs, std::vector<ir::Attr> attrs = {}, std::size_t k = 0);
  int cast(int v, DType dtype);
  int reshape(int v, Shape shape);
  int permute(int v, std::vector<std::int64_t> dims);
  int unsqueeze(int v, std::int64_t dim);
  /// A 0-d constant of `dtype` holding `v`.
  int scalar(double v, DType dtype);
  /// An operand as a tensor of `dtype` (casts tensors; scalars become 0-d constants,
  /// SymInts a computed 0-d tensor).
  int as_tensor(const Operand& o, DType dtype);
  int constant(DType dtype, std::vector<std::int64_t> shape, std::vector<std::uint8_t> bytes, const std::string& name);
  int constant_value(int constant_index);
  /// An absent optional operand.
  int none_value();
  /// An int32/int64 index constant (1-D).
  int index_constant(const std::vector<std::int64_t>& values);
  /// Normalizes a possibly negative dim against `rank`.
  std::int64_t norm_dim(std::int64_t d, std::int64_t rank);
  sym::Expr simplify(sym::Expr e) { return program.env.simplify(e); }
  /// Binds the unbacked symbol `e` (if it is one and unbound) to a scalar output.
  void bind_scalar(sym::Expr e, int node_index, int output);
  [[noreturn]] void unsupported(const std::string& why);
  [[noreturn]] void bad(const std::string& why);

 private:
  friend struct ImporterAccess;
  void read_archive(const std::string& path);
  void check_schema_version();
  /// Rejects (kUnsupported) every output that is neither a user output nor a BUFFER_MUTATION,
  /// and every in-place write to a parameter, constant or user input (or a view of one);
  /// collects the buffers written in place (training IR) into inplace_buffers_ (mutations.cpp).
  void check_mutations();
  /// Before the graph's nodes are mapped: every name's last reader and the inputs' kinds.
  void start_alias_tracking(const json& jgraph, const std::map<std::string, std::string>& placeholders);
  /// After `node` was mapped: records its outputs as views of their input, or, for an in-place
  /// op, rebinds self to the result, writes it back through the views it was reached by and
  /// recomputes the views of the same base read later (mutations.cpp).
  void track_aliases(const json& node);
  /// Sets the node context (target_, args_, outputs_, meta_) to `node`.
  void enter_node(const json& node);
  /// Runs the aten handler of the node in context (the in-place base for `relu_`).
  void apply_handler();
  /// Runs `fn` with `node` as the node context (and `meta` for emitted nodes, when given).
  void in_context(const json& node, const ir::NodeMeta* meta, const std::function<void()>& fn);
  std::optional<int> write_back(const ViewEdge& edge, int base, int value);
  void recompute_views(const std::string& root, const std::vector<std::string>& path);
  ir::ValueKind value_kind(int id) { return value(id).kind; }
  void create_symbols();
  sym::Expr parse_sym(const std::string& srepr);
  Shape tensor_shape(const json& meta);
  void check_supported();
  void build_signature();
  int build_graph(const json& jgraph, const std::string& name, bool entry);
  void map_node(const json& node);
  void map_hop();
  int subgraph(const json& arg);
  void bind_unbacked(int node_index);
  void add_assert(sym::Expr e, const std::string& message);
  void add_range_asserts(int symbol, int node_index);
  void apply_options(const ImportOptions& options);
  ir::NodeMeta node_meta(const json& node) const;
  const json& tensor_meta(const std::string& name) const;
  std::optional<int> resolve_name(std::string_view name) const;

  std::unique_ptr<ZipArchive> archive_;
  json model_;
  std::string path_;
  std::map<std::string, int> weights_;    // parameter / buffer name -> constant index
  std::map<std::string, int> constants_;  // tensor constant name -> constant index
  std::map<std::string, int> symbols_;    // archive symbol name -> symbol id
  std::map<std::string, std::int64_t> hints_;
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> ranges_;
  std::map<std::string, int> subgraphs_;  // pt2 subgraph name -> graph index
  std::set<std::string> inplace_buffers_; // buffers the training IR writes in place (state)
  std::vector<std::pair<std::string, std::string>> input_dims_;  // "x.0" -> archive symbol
  std::unordered_map<int, std::string> symbol_origin_;           // u0 -> "item(n_t)" for messages
  std::string origin_of(int node_index, const std::string& suffix);
  Scope* scope_ = nullptr;
  // The node being mapped. Mapping another node inside it (a subgraph's nodes, a view
  // recomputed in its view node's context) saves it first and restores it afterwards.
  struct NodeContext {
    const json* node = nullptr;
    std::string target, overload;
    ir::NodeMeta meta;
    std::vector<const json*> args;
    std::map<std::string, const json*> kwargs;
    std::vector<const json*> outputs;  // flattened output arguments
  };
  NodeContext save_context() const { return {node_, target_, overload_, meta_, args_, kwargs_, outputs_}; }
  void restore_context(NodeContext&& c);
  const json* node_ = nullptr;
  std::string target_, overload_;
  ir::NodeMeta meta_;
  std::vector<const json*> args_;
  std::map<std::string, const json*> kwargs_;
  std::vector<const json*> outputs_;  // flattened output arguments
  std::set<std::string> used_names_;  // tensor names used by any node or output (dead outputs)
};

}  // namespace kiln::pt2
