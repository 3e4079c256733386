#include "import/pickle.h"

#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>


namespace kiln::pt2 {
namespace {

// ---- the objects a restricted pickle can build ------------------------------------------

enum class Kind : std::uint8_t { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kGlobal, kStorage, kTensor };

struct Object {
  Kind kind = Kind::kNone;
  std::int64_t number = 0;      // kBool / kInt; kStorage: numel; kTensor: index into tensors
  std::string text;             // kString; kGlobal "module.name"; kStorage: key
  std::vector<int> items;       // kTuple / kList; kDict: key, value, key, value, ...
  std::optional<DType> dtype;   // kStorage (nullopt for an untyped storage); kGlobal of a dtype
  bool untyped = false;         // kStorage: numel counts bytes
};

Object of(Kind kind, std::int64_t number = 0) {
  Object o;
  o.kind = kind;
  o.number = number;
  return o;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "None";
    case Kind::kBool: return "a bool";
    case Kind::kInt: return "an int";
    case Kind::kFloat: return "a float";
    case Kind::kString: return "a string";
    case Kind::kTuple: return "a tuple";
    case Kind::kList: return "a list";
    case Kind::kDict: return "a dict";
    case Kind::kGlobal: return "a global";
    case Kind::kStorage: return "a storage";
    case Kind::kTensor: return "a tensor";
  }
  return "?";
}

// torch.<Name>Storage -> dtype; nullopt for known storage types Kiln has no dtype for.
struct StorageType {
  const char* name;
  std::optional<DType> dtype;
};
constexpr StorageType kStorageTypes[] = {
    {"torch.FloatStorage", DType::kF32},   {"torch.DoubleStorage", DType::kF64}, {"torch.HalfStorage", DType::kF16},
    {"torch.BFloat16Storage", DType::kBF16}, {"torch.LongStorage", DType::kI64}, {"torch.IntStorage", DType::kI32},
    {"torch.ShortStorage", DType::kI16},   {"torch.CharStorage", DType::kI8},    {"torch.ByteStorage", DType::kU8},
    {"torch.BoolStorage", DType::kBool},   {"torch.ComplexFloatStorage", std::nullopt},
    {"torch.ComplexDoubleStorage", std::nullopt}, {"torch.QInt8Storage", std::nullopt},
    {"torch.QUInt8Storage", std::nullopt}, {"torch.QInt32Storage", std::nullopt},
    {"torch.QUInt4x2Storage", std::nullopt}, {"torch.QUInt2x4Storage", std::nullopt},
};

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypeNames[] = {
    {"torch.float32", DType::kF32}, {"torch.float", DType::kF32},    {"torch.float64", DType::kF64},
    {"torch.double", DType::kF64},  {"torch.float16", DType::kF16},  {"torch.half", DType::kF16},
    {"torch.bfloat16", DType::kBF16}, {"torch.int64", DType::kI64},  {"torch.long", DType::kI64},
    {"torch.int32", DType::kI32},   {"torch.int", DType::kI32},      {"torch.int16", DType::kI16},
    {"torch.short", DType::kI16},   {"torch.int8", DType::kI8},      {"torch.uint8", DType::kU8},
    {"torch.bool", DType::kBool},
};

constexpr const char* kCallables[] = {
    "collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3",
    "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state",
};

std::string opcode_text(std::uint8_t op) {
  static const std::map<std::uint8_t, const char*> names = {
      {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"}, {'I', "INT"},
      {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"}, {'N', "NONE"}, {'P', "PERSID"},
      {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
      {'V', "UNICODE"}, {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"},
      {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"}, {'j', "LONG_BINGET"},
      {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"}, {'q', "BINPUT"}, {'r', "LONG_BINPUT"},
      {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"}, {'u', "SETITEMS"}, {'G', "BINFLOAT"},
      {0x80, "PROTO"}, {0x81, "NEWOBJ"}, {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"}, {0x85, "TUPLE1"},
      {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {0x8a, "LONG1"}, {0x8b, "LONG4"},
      {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"}, {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"},
      {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"},
      {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"}, {0x95, "FRAME"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"},
      {0x98, "READONLY_BUFFER"},
  };
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", op);
  std::string text = hex;
  if (op >= 0x20 && op < 0x7f) text += std::string(" ('") + static_cast<char>(op) + "'";
  else text += " (";
  auto it = names.find(op);
  text += (op >= 0x20 && op < 0x7f ? ", " : "") + std::string(it == names.end() ? "unknown" : it->second) + ")";
  return text;
}

class Unpickler {
 public:
  Unpickler(std::span<const std::uint8_t> bytes, const std::string& where) : bytes_(bytes), where_(where) {}

  Result<std::vector<PickledTensor>> run() {
    while (true) {
      if (!error_.ok()) return error_;
      if (pos_ >= bytes_.size()) return fail("ends without a STOP opcode");
      const std::size_t at = pos_;
      const std::uint8_t op = bytes_[pos_++];
      if (op == '.') break;
      if (!step(op, at)) return error_;
    }
    if (!error_.ok()) return error_;
    if (stack_.size() != 1 || !marks_.empty()) return fail("leaves " + std::to_string(stack_.size()) + " values on the stack at STOP");
    return result(stack_.back());
  }

 private:
  // ---- errors ----
  Status fail(const std::string& why) {
    if (error_.ok()) error_ = Status(StatusCode::kInvalidBundle, "pickle '" + where_ + "': " + why);
    return error_;
  }
  bool failed(const std::string& why) {
    (void)fail(why);
    return false;
  }

  // ---- reading ----
  bool need(std::size_t n) {
    if (bytes_.size() - pos_ < n) return failed("truncated at byte " + std::to_string(pos_));
    return true;
  }
  std::uint64_t read_le(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t{bytes_[pos_ + i]} << (8 * i);
    pos_ += n;
    return v;
  }
  bool read_string(std::uint64_t n, std::string& out) {
    if (n > PickleLimits::kMaxStringBytes) return failed("a string of " + std::to_string(n) + " bytes is too long");
    if (!need(static_cast<std::size_t>(n))) return false;
    out.assign(reinterpret_cast<const char*>(bytes_.data() + pos_), static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return true;
  }

  // ---- objects and the stack ----
  int make(Object o) {
    if (objects_.size() >= PickleLimits::kMaxObjects) {
      (void)fail("builds more than " + std::to_string(PickleLimits::kMaxObjects) + " objects");
      return -1;
    }
    objects_.push_back(std::move(o));
    return static_cast<int>(objects_.size()) - 1;
  }
  bool push(int id) {
    if (id < 0) return false;
    if (stack_.size() >= PickleLimits::kMaxStack) return failed("more than " + std::to_string(PickleLimits::kMaxStack) + " values on the stack");
    stack_.push_back(id);
    return true;
  }
  bool push_new(Object o) { return push(make(std::move(o))); }
  bool pop(int& id) {
    const std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) return failed("pops an empty stack");
    id = stack_.back();
    stack_.pop_back();
    return true;
  }
  // The values above the last MARK, and the MARK removed.
  bool pop_mark(std::vector<int>& out) {
    if (marks_.empty()) return failed("uses a MARK that was never set");
    const std::size_t from = marks_.back();
    marks_.pop_back();
    out.assign(stack_.begin() + static_cast<std::ptrdiff_t>(from), stack_.end());
    stack_.resize(from);
    return true;
  }
  Object& obj(int id) { return objects_[static_cast<std::size_t>(id)]; }
  int top() {
    const std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) {
      (void)fail("expects a value on the stack");
      return -1;
    }
    return stack_.back();
  }
  bool memo_put(std::uint64_t key) {
    const int id = top();
    if (id < 0) return false;
    if (memo_.size() >= PickleLimits::kMaxObjects && !memo_.count(key)) return failed("stores more than " + std::to_string(PickleLimits::kMaxObjects) + " memo entries");
    memo_[key] = id;
    return true;
  }
  bool memo_get(std::uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return failed("reads memo entry " + std::to_string(key) + ", which was never stored");
    return push(it->second);
  }

  bool step(std::uint8_t op, std::size_t at) {
    switch (op) {
      case 0x80:  // PROTO
        if (!need(1)) return false;
        if (bytes_[pos_] < 2 || bytes_[pos_] > 5) return failed("protocol " + std::to_string(bytes_[pos_]) + " is not supported (2 to 5)");
        ++pos_;
        return true;
      case 0x95:  // FRAME: a length hint
        if (!need(8)) return false;
        pos_ += 8;
        return true;
      case '}': return push_new(of(Kind::kDict));
      case ']': return push_new(of(Kind::kList));
      case ')': return push_new(of(Kind::kTuple));
      case 'N': return push_new(of(Kind::kNone));
      case 0x88: return push_new(of(Kind::kBool, 1));
      case 0x89: return push_new(of(Kind::kBool, 0));
      case '(':
        if (marks_.size() >= PickleLimits::kMaxStack) return failed("too many MARKs");
        marks_.push_back(stack_.size());
        return true;
      case 't': {
        Object t = of(Kind::kTuple);
        if (!pop_mark(t.items)) return false;
        return push_new(std::move(t));
      }
      case 0x85: case 0x86: case 0x87: {
        Object t = of(Kind::kTuple);
        t.items.resize(op - 0x84u);
        for (std::size_t i = t.items.size(); i-- > 0;) if (!pop(t.items[i])) return false;
        return push_new(std::move(t));
      }
      case 'q': return need(1) && memo_put(read_le(1));
      case 'r': return need(4) && memo_put(read_le(4));
      case 0x94: return memo_put(memo_.size());
      case 'h': return need(1) && memo_get(read_le(1));
      case 'j': return need(4) && memo_get(read_le(4));
      case 'X': case 'T': case 0x8c: case 'U': case 0x8d: {
        const std::size_t width = op == 'X' || op == 'T' ? 4 : op == 0x8d ? 8 : 1;
        if (!need(width)) return false;
        std::uint64_t n = read_le(width);
        if (op == 'T' && n > 0x7fffffffu) return failed("a string of negative length");
        Object s = of(Kind::kString);
        if (!read_string(n, s.text)) return false;
        return push_new(std::move(s));
      }
      case 'K': return need(1) && push_new(of(Kind::kInt, static_cast<std::int64_t>(read_le(1))));
      case 'M': return need(2) && push_new(of(Kind::kInt, static_cast<std::int64_t>(read_le(2))));
      case 'J': return need(4) && push_new(of(Kind::kInt, static_cast<std::int32_t>(static_cast<std::uint32_t>(read_le(4)))));
      case 0x8a: {  // LONG1: n little-endian two's complement bytes
        if (!need(1)) return false;
        const std::size_t n = bytes_[pos_++];
        if (n > 8) return failed("an integer of " + std::to_string(n) + " bytes does not fit 64 bits");
        if (!need(n)) return false;
        std::uint64_t v = read_le(n);
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~std::uint64_t{0} << (8 * n);  // sign-extend
        return push_new(of(Kind::kInt, static_cast<std::int64_t>(v)));
      }
      case 'G': {
        if (!need(8)) return false;
        pos_ += 8;  // the value is never used: no float is an argument of an allowed call
        return push_new(of(Kind::kFloat));
      }
      case 'c': {
        std::string module, name;
        if (!read_line(module) || !read_line(name)) return false;
        return push_global(module + "." + name);
      }
      case 0x93: {  // STACK_GLOBAL
        int name = -1, module = -1;
        if (!pop(name) || !pop(module)) return false;
        if (obj(module).kind != Kind::kString || obj(name).kind != Kind::kString) return failed("STACK_GLOBAL needs two strings");
        return push_global(obj(module).text + "." + obj(name).text);
      }
      case 'Q': return persistent_id();
      case 'R': return reduce();
      case 'b': {  // BUILD: state for an OrderedDict (its _metadata) or a tensor; ignored
        int state = -1;
        if (!pop(state)) return false;
        const int target = top();
        if (target < 0) return false;
        if (obj(target).kind != Kind::kDict && obj(target).kind != Kind::kTensor) {
          return failed("BUILD on " + std::string(kind_name(obj(target).kind)) + " is not allowed");
        }
        return true;
      }
      case 's': {
        int key = -1, value = -1;
        if (!pop(value) || !pop(key)) return false;
        const int dict = top();
        if (dict < 0) return false;
        if (obj(dict).kind != Kind::kDict) return failed("SETITEM on " + std::string(kind_name(obj(dict).kind)));
        obj(dict).items.push_back(key);
        obj(dict).items.push_back(value);
        return true;
      }
      case 'u': {
        std::vector<int> kv;
        if (!pop_mark(kv)) return false;
        if (kv.size() % 2 != 0) return failed("SETITEMS with an odd number of values");
        const int dict = top();
        if (dict < 0) return false;
        if (obj(dict).kind != Kind::kDict) return failed("SETITEMS on " + std::string(kind_name(obj(dict).kind)));
        obj(dict).items.insert(obj(dict).items.end(), kv.begin(), kv.end());
        return true;
      }
      case 'a': case 'e': {
        std::vector<int> values(1);
        if (op == 'a' ? !pop(values[0]) : !pop_mark(values)) return false;
        const int list = top();
        if (list < 0) return false;
        if (obj(list).kind != Kind::kList) return failed("APPEND on " + std::string(kind_name(obj(list).kind)));
        obj(list).items.insert(obj(list).items.end(), values.begin(), values.end());
        return true;
      }
      default:
        return failed("opcode " + opcode_text(op) + " at byte " + std::to_string(at) + " is not allowed");
    }
  }

  bool read_line(std::string& out) {
    const std::size_t start = pos_;
    while (pos_ < bytes_.size() && bytes_[pos_] != '\n') {
      if (pos_ - start > 256) return failed("a GLOBAL name longer than 256 bytes");
      ++pos_;
    }
    if (pos_ >= bytes_.size()) return failed("truncated GLOBAL name");
    out.assign(reinterpret_cast<const char*>(bytes_.data() + start), pos_ - start);
    ++pos_;
    return true;
  }

  static std::string printable(const std::string& s) {
    std::string out;
    for (unsigned char c : s) {
      if (c >= 0x20 && c < 0x7f) {
        out += static_cast<char>(c);
      } else {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", c);
        out += hex;
      }
    }
    return out;
  }

  bool push_global(const std::string& name) {
    Object g = of(Kind::kGlobal);
    g.text = name;
    for (const StorageType& s : kStorageTypes) {
      if (name == s.name) return push_new(std::move(g));
    }
    for (const DTypeName& d : kDTypeNames) {
      if (name == d.name) {
        g.dtype = d.dtype;
        return push_new(std::move(g));
      }
    }
    if (name == "torch.storage.UntypedStorage") return push_new(std::move(g));
    for (const char* c : kCallables) {
      if (name == c) return push_new(std::move(g));
    }
    return failed("global '" + printable(name) + "' is not allowed (only tensors, storages and ordered dicts)");
  }

  // ('storage', storage type, key, location, numel) -> a storage.
  bool persistent_id() {
    int pid = -1;
    if (!pop(pid)) return false;
    const Object& t = obj(pid);
    if (t.kind != Kind::kTuple || t.items.size() != 5 || obj(t.items[0]).kind != Kind::kString || obj(t.items[0]).text != "storage") {
      return failed("a persistent id must be ('storage', type, key, location, numel)");
    }
    const Object& type = obj(t.items[1]);
    const Object& key = obj(t.items[2]);
    const Object& numel = obj(t.items[4]);
    if (type.kind != Kind::kGlobal || key.kind != Kind::kString || numel.kind != Kind::kInt || obj(t.items[3]).kind != Kind::kString) {
      return failed("a persistent id must be ('storage', type, key, location, numel)");
    }
    if (key.text.empty() || key.text.size() > 64 || key.text.find_first_of("/\\") != std::string::npos || key.text.find("..") != std::string::npos) {
      return failed("storage key '" + printable(key.text) + "' is not a plain name");
    }
    Object s = of(Kind::kStorage);
    s.text = key.text;
    s.number = numel.number;
    if (type.text == "torch.storage.UntypedStorage") {
      s.untyped = true;
    } else {
      bool known = false;
      for (const StorageType& st : kStorageTypes) {
        if (type.text != st.name) continue;
        known = true;
        if (!st.dtype) {
          error_ = Status(StatusCode::kUnsupported, "pickle '" + where_ + "': storage type " + type.text + " has no Kiln dtype");
          return false;
        }
        s.dtype = st.dtype;
      }
      if (!known) return failed("persistent id names " + type.text + ", which is not a storage type");
    }
    return push_new(std::move(s));
  }

  bool is_empty_dict(int id) { return obj(id).kind == Kind::kDict && obj(id).items.empty(); }

  bool int_tuple(int id, const char* what, std::vector<std::int64_t>& out) {
    const Object& t = obj(id);
    if (t.kind != Kind::kTuple) return failed(std::string("tensor ") + what + " is " + kind_name(t.kind) + ", not a tuple");
    if (t.items.size() > PickleLimits::kMaxRank) return failed(std::string("tensor ") + what + " has " + std::to_string(t.items.size()) + " dims (at most 64)");
    out.clear();
    for (int e : t.items) {
      if (obj(e).kind != Kind::kInt) return failed(std::string("tensor ") + what + " holds " + kind_name(obj(e).kind));
      out.push_back(obj(e).number);
    }
    return true;
  }

  bool reduce() {
    int args = -1, callable = -1;
    if (!pop(args) || !pop(callable)) return false;
    const Object& f = obj(callable);
    if (f.kind != Kind::kGlobal) return failed("REDUCE calls " + std::string(kind_name(f.kind)));
    if (obj(args).kind != Kind::kTuple) return failed("REDUCE of " + f.text + " without an argument tuple");
    const std::vector<int> a = obj(args).items;
    const std::string& name = f.text;
    if (name == "collections.OrderedDict") {
      if (!a.empty()) return failed("collections.OrderedDict is only allowed with no arguments");
      return push_new(of(Kind::kDict));
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor_v3") {
      const bool v3 = name.back() == '3';
      const std::size_t n = v3 ? 7 : 6;
      if (a.size() != n && a.size() != n + 1) return failed(name + " takes " + std::to_string(n) + " or " + std::to_string(n + 1) + " arguments, got " + std::to_string(a.size()));
      const Object& storage = obj(a[0]);
      if (storage.kind != Kind::kStorage) return failed(name + ": the first argument is " + kind_name(storage.kind) + ", not a storage");
      if (obj(a[1]).kind != Kind::kInt) return failed(name + ": the storage offset is not an int");
      PickledTensor t;
      t.storage_key = storage.text;
      t.offset = obj(a[1]).number;
      if (!int_tuple(a[2], "size", t.sizes) || !int_tuple(a[3], "stride", t.strides)) return false;
      if (t.sizes.size() != t.strides.size()) return failed(name + ": " + std::to_string(t.sizes.size()) + " sizes but " + std::to_string(t.strides.size()) + " strides");
      if (obj(a[4]).kind != Kind::kBool) return failed(name + ": requires_grad is not a bool");
      if (!is_empty_dict(a[5])) return failed(name + ": backward hooks are not allowed");
      if (v3) {
        const Object& d = obj(a[6]);
        if (d.kind != Kind::kGlobal || !d.dtype) return failed(name + ": the dtype argument is not a supported torch dtype");
        t.dtype = *d.dtype;
      } else {
        if (!storage.dtype) return failed(name + " on an untyped storage");
        t.dtype = *storage.dtype;
      }
      if (storage.untyped) {
        const std::int64_t es = static_cast<std::int64_t>(dtype_size(t.dtype));
        if (storage.number % es != 0) return failed("untyped storage '" + storage.text + "' of " + std::to_string(storage.number) + " bytes holds no whole " + std::string(dtype_name(t.dtype)) + " elements");
        t.storage_numel = storage.number / es;
      } else {
        if (storage.dtype != t.dtype) return failed(name + ": the dtype disagrees with the storage type");
        t.storage_numel = storage.number;
      }
      Object o = of(Kind::kTensor);
      o.number = static_cast<std::int64_t>(tensors_.size());
      tensors_.push_back(std::move(t));
      return push_new(std::move(o));
    }
    if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
      const std::size_t n = name.back() == 'r' ? 3 : 4;
      if (a.size() != n) return failed(name + " takes " + std::to_string(n) + " arguments, got " + std::to_string(a.size()));
      if (obj(a[0]).kind != Kind::kTensor) return failed(name + ": the first argument is not a tensor");
      if (!is_empty_dict(a[2])) return failed(name + ": backward hooks are not allowed");
      return push(a[0]);
    }
    return failed("global '" + name + "' cannot be called");
  }

  Result<std::vector<PickledTensor>> result(int id) {
    const Object& d = obj(id);
    if (d.kind != Kind::kDict) return fail("holds " + std::string(kind_name(d.kind)) + ", not a dict of tensors");
    std::vector<PickledTensor> out;
    std::unordered_map<std::string, std::size_t> index;
    for (std::size_t i = 0; i + 1 < d.items.size(); i += 2) {
      const Object& k = obj(d.items[i]);
      const Object& v = obj(d.items[i + 1]);
      if (k.kind != Kind::kString) return fail("a dict key is " + std::string(kind_name(k.kind)) + ", not a string");
      if (v.kind != Kind::kTensor) return fail("entry '" + printable(k.text) + "' is " + kind_name(v.kind) + ", not a tensor");
      PickledTensor t = tensors_[static_cast<std::size_t>(v.number)];
      t.name = k.text;
      auto [it, fresh] = index.emplace(k.text, out.size());
      if (fresh) out.push_back(std::move(t));
      else out[it->second] = std::move(t);  // a repeated key: the last value wins, as in Python
    }
    return out;
  }

  std::span<const std::uint8_t> bytes_;
  std::string where_;
  std::size_t pos_ = 0;
  std::vector<Object> objects_;
  std::vector<int> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, int> memo_;
  std::vector<PickledTensor> tensors_;
  Status error_;
};

}  // namespace

Result<std::vector<PickledTensor>> unpickle_tensor_dict(std::span<const std::uint8_t> bytes, const std::string& where) {
  return Unpickler(bytes, where).run();
}

}  // namespace kiln::pt2
