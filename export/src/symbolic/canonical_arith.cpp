// Canonicalizing builders for the integer ops (see the canonical-form list in expr.h).
// A fold that would overflow is skipped: the operands stay as separate (still sorted) args.
#include <algorithm>
#include <limits>

#include "symbolic/detail.h"

namespace kiln::sym::detail {

std::optional<std::int64_t> py_floordiv(std::int64_t a, std::int64_t b) {
  if (b == 0 || (a == std::numeric_limits<std::int64_t>::min() && b == -1)) return std::nullopt;
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::optional<std::int64_t> py_mod(std::int64_t a, std::int64_t b) {
  if (b == 0) return std::nullopt;
  if (b == -1) return 0;
  std::int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

std::optional<std::int64_t> py_ceildiv(std::int64_t a, std::int64_t b) {
  if (b == 0 || (a == std::numeric_limits<std::int64_t>::min() && b == -1)) return std::nullopt;
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) == (b < 0))) ++q;
  return q;
}

std::optional<std::int64_t> gcd64(std::int64_t a, std::int64_t b) {
  std::uint64_t x = a < 0 ? 0 - static_cast<std::uint64_t>(a) : static_cast<std::uint64_t>(a);
  std::uint64_t y = b < 0 ? 0 - static_cast<std::uint64_t>(b) : static_cast<std::uint64_t>(b);
  while (y != 0) {
    std::uint64_t t = x % y;
    x = y;
    y = t;
  }
  if (x > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
  return static_cast<std::int64_t>(x);
}

Term split_term(Expr e) {
  if (e.op() != ExprOp::Mul) return {1, e};
  auto args = e.args();
  auto c = args[0].constant_value();
  if (!c || args[1].is_constant()) return {1, e};  // (a product of constants that overflowed)
  auto rest = args.subspan(1);
  return {*c, rest.size() == 1 ? rest[0] : intern(ExprOp::Mul, false, 0, rest)};
}

std::optional<LinearForm> to_linear(Expr e) {
  LinearForm f;
  if (auto c = e.constant_value()) {
    f.constant = *c;
    return f;
  }
  if (e.op() != ExprOp::Add) {
    f.terms.push_back(split_term(e));
    return f;
  }
  for (Expr a : e.args()) {
    if (auto c = a.constant_value()) {
      auto sum = checked_add(f.constant, *c);
      if (!sum) {
        note_overflow();
        return std::nullopt;
      }
      f.constant = *sum;
    } else {
      f.terms.push_back(split_term(a));
    }
  }
  return f;
}

Expr from_linear(const LinearForm& form) {
  std::vector<Expr> xs;
  xs.reserve(form.terms.size() + 1);
  if (form.constant != 0) xs.push_back(Expr::constant(form.constant));
  for (const Term& t : form.terms) {
    if (t.coef != 0) xs.push_back(t.coef == 1 ? t.base : mul2(Expr::constant(t.coef), t.base));
  }
  return xs.empty() ? Expr::constant(0) : build_add(xs);
}

std::optional<std::int64_t> content(const LinearForm& form) {
  std::optional<std::int64_t> g = form.constant < 0 ? gcd64(form.constant, 0) : form.constant;
  for (const Term& t : form.terms) {
    if (g) g = gcd64(*g, t.coef);
  }
  if (!g) note_overflow();
  return g;
}

LinearForm divide(const LinearForm& form, std::int64_t g) {  // g >= 1
  LinearForm out{form.constant / g, {}};
  for (const Term& t : form.terms) out.terms.push_back({t.coef / g, t.base});
  return out;
}

namespace {

void collect_add_operand(Expr x, std::vector<std::int64_t>& consts, std::vector<Term>& terms) {
  if (x.op() == ExprOp::Add) {
    for (Expr a : x.args()) collect_add_operand(a, consts, terms);
  } else if (auto c = x.constant_value()) {
    consts.push_back(*c);
  } else {
    terms.push_back(split_term(x));
  }
}

__extension__ using Wide = __int128;

// Sums the values (exactly, in 128 bits); when the total does not fit int64, returns them
// sorted (none zero) instead.
std::vector<std::int64_t> fold_sum(std::vector<std::int64_t> values) {
  Wide total = 0;
  for (std::int64_t v : values) total += v;  // |values| < 2^64: cannot overflow 128 bits
  if (total >= std::numeric_limits<std::int64_t>::min() && total <= std::numeric_limits<std::int64_t>::max()) {
    return total == 0 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{static_cast<std::int64_t>(total)};
  }
  note_overflow();
  std::erase(values, 0);
  std::sort(values.begin(), values.end());
  return values;
}

Expr add_impl(std::span<const Expr> xs) {
  std::vector<std::int64_t> consts;
  std::vector<Term> terms;
  for (Expr x : xs) collect_add_operand(x, consts, terms);
  std::stable_sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) {
    int c = canonical_compare(a.base, b.base);
    return c != 0 ? c < 0 : a.coef < b.coef;
  });
  std::vector<Expr> args;
  for (std::int64_t c : fold_sum(std::move(consts))) args.push_back(Expr::constant(c));
  for (std::size_t i = 0; i < terms.size();) {
    std::vector<std::int64_t> coefs;
    std::size_t j = i;
    for (; j < terms.size() && terms[j].base == terms[i].base; ++j) coefs.push_back(terms[j].coef);
    for (std::int64_t c : fold_sum(std::move(coefs))) {
      args.push_back(c == 1 ? terms[i].base : mul2(Expr::constant(c), terms[i].base));
    }
    i = j;
  }
  if (args.empty()) return Expr::constant(0);
  if (args.size() == 1) return args[0];
  return intern(ExprOp::Add, false, 0, args);
}


// In a product of several factors, a sum factor gives its content and sign to the
// coefficient (`(-2*a - 2*b)*c -> -2*(a + b)*c`), so the product's form does not depend on
// the order it was built in. Returns the new coefficient.
std::int64_t make_sum_factors_primitive(std::vector<Expr>& factors, std::int64_t coef) {
  for (Expr& f : factors) {
    if (f.op() != ExprOp::Add) continue;
    auto form = to_linear(f);
    auto g = form ? content(*form) : std::nullopt;
    if (!g || *g == 0 || form->terms.empty()) continue;
    const bool negative = form->terms[0].coef < 0;
    auto c = checked_mul(coef, negative ? -*g : *g);
    if (!c) note_overflow();
    if ((*g == 1 && !negative) || !c) continue;
    LinearForm primitive = divide(*form, *g);
    auto flip = [](std::int64_t& v) {
      auto n = checked_neg(v);
      if (n) v = *n;
      return n.has_value();
    };
    bool ok = !negative || flip(primitive.constant);
    for (Term& t : primitive.terms) ok = (!negative || flip(t.coef)) && ok;
    if (!ok) {
      note_overflow();
      continue;
    }
    f = from_linear(primitive);
    coef = *c;
  }
  return coef;
}


void collect_mul_operand(Expr x, std::vector<std::int64_t>& consts, std::vector<Expr>& factors) {
  if (x.op() == ExprOp::Mul) {
    for (Expr f : x.args()) collect_mul_operand(f, consts, factors);
  } else if (auto c = x.constant_value()) {
    consts.push_back(*c);
  } else {
    factors.push_back(x);
  }
}

Expr mul_impl(std::span<const Expr> xs) {
  std::vector<Expr> factors;
  std::vector<std::int64_t> consts;
  for (Expr x : xs) collect_mul_operand(x, consts, factors);
  if (std::find(consts.begin(), consts.end(), 0) != consts.end()) return Expr::constant(0);
  std::int64_t coef = 1;
  bool overflow = false;
  for (std::int64_t c : consts) {
    auto p = checked_mul(coef, c);
    if (!p) overflow = true;
    else coef = *p;
  }
  if (overflow) {
    note_overflow();
    std::sort(consts.begin(), consts.end());
  } else {
    if (factors.size() >= 2) coef = make_sum_factors_primitive(factors, coef);
    consts = coef == 1 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{coef};
  }
  std::stable_sort(factors.begin(), factors.end(), ExprLess{});
  if (factors.empty()) {
    if (consts.size() <= 1) return Expr::constant(consts.empty() ? 1 : consts[0]);
  } else if (consts.empty() && factors.size() == 1) {
    return factors[0];
  } else if (consts.size() == 1 && factors.size() == 1 && factors[0].op() == ExprOp::Add) {
    std::vector<Expr> terms;  // distribute the coefficient over the sum
    for (Expr t : factors[0].args()) terms.push_back(mul2(Expr::constant(consts[0]), t));
    return build_add(terms);
  }
  std::vector<Expr> args;
  for (std::int64_t c : consts) args.push_back(Expr::constant(c));
  args.insert(args.end(), factors.begin(), factors.end());
  return intern(ExprOp::Mul, false, 0, args);
}


enum class DivKind { Floor, Ceil };

std::optional<std::int64_t> fold_div(DivKind kind, std::int64_t a, std::int64_t b) {
  return kind == DivKind::Floor ? py_floordiv(a, b) : py_ceildiv(a, b);
}

Expr build_div(DivKind kind, Expr a, Expr b) {
  const ExprOp op = kind == DivKind::Floor ? ExprOp::FloorDiv : ExprOp::CeilDiv;
  auto raw = [&] { return intern2(op, false, a, b); };
  auto kb = b.constant_value();
  if (!kb || *kb == 0) return raw();
  std::int64_t k = *kb;
  if (auto ka = a.constant_value()) {
    auto q = fold_div(kind, *ka, k);
    if (!q) note_overflow();
    return q ? Expr::constant(*q) : raw();
  }
  if (k == 1) return a;
  if (k < 0) {
    if (k == std::numeric_limits<std::int64_t>::min()) {
      note_overflow();
      return raw();
    }
    return build_div(kind, negate(a), Expr::constant(-k));
  }
  auto form = to_linear(a);
  auto g = form ? content(*form) : std::nullopt;
  if (!g) return raw();
  if (std::int64_t d = *gcd64(*g, k); d > 1) {
    form = divide(*form, d);
    k /= d;
    if (k == 1) return from_linear(*form);
  }
  LinearForm moved, rest;
  if (form->constant % k == 0) moved.constant = form->constant / k;
  else rest.constant = form->constant;
  for (const Term& t : form->terms) {
    if (t.coef % k == 0) moved.terms.push_back({t.coef / k, t.base});
    else rest.terms.push_back(t);
  }
  Expr inner;
  if (rest.terms.empty()) {
    inner = Expr::constant(*fold_div(kind, rest.constant, k));
  } else {
    Expr r = from_linear(rest);
    auto k2 = r.op() == op ? r.args()[1].constant_value() : std::nullopt;
    auto kk = k2 && *k2 > 0 ? checked_mul(k, *k2) : std::nullopt;
    if (k2 && *k2 > 0 && !kk) note_overflow();
    inner = kk ? build_div(kind, r.args()[0], Expr::constant(*kk)) : intern2(op, false, r, Expr::constant(k));
  }
  return add2(from_linear(moved), inner);
}


Expr mod_impl(Expr a, Expr b) {
  auto raw = [&] { return intern2(ExprOp::Mod, false, a, b); };
  auto kb = b.constant_value();
  if (!kb || *kb == 0) return raw();
  const std::int64_t k = *kb;
  if (auto ka = a.constant_value()) return Expr::constant(*py_mod(*ka, k));
  if (k == 1 || k == -1) return Expr::constant(0);
  if (k < 0) {
    if (k == std::numeric_limits<std::int64_t>::min()) {
      note_overflow();
      return raw();
    }
    return negate(build_mod(negate(a), Expr::constant(-k)));
  }
  auto form = to_linear(a);
  if (!form) return raw();
  LinearForm reduced{*py_mod(form->constant, k), {}};
  for (const Term& t : form->terms) {
    if (std::int64_t c = *py_mod(t.coef, k); c != 0) reduced.terms.push_back({c, t.base});
  }
  if (reduced.terms.empty()) return Expr::constant(reduced.constant);
  const std::int64_t g = *gcd64(*content(reduced), k);  // all values in [0, k): no overflow
  if (g > 1) return mul2(Expr::constant(g), build_mod(from_linear(divide(reduced, g)), Expr::constant(k / g)));
  Expr r = from_linear(reduced);
  if (r.op() == ExprOp::Mod) {  // (x % k2) % k == x % k when k divides k2
    auto k2 = r.args()[1].constant_value();
    if (k2 && *k2 > 0 && *k2 % k == 0) return build_mod(r.args()[0], Expr::constant(k));
  }
  return intern2(ExprOp::Mod, false, r, Expr::constant(k));
}

Expr minmax_impl(ExprOp op, std::span<const Expr> xs) {
  const bool is_max = op == ExprOp::Max;
  std::vector<Expr> args;
  std::optional<std::int64_t> folded;
  for (Expr x : xs) {
    for (Expr a : x.op() == op ? x.args() : std::span<const Expr>(&x, 1)) {
      if (auto c = a.constant_value()) {
        folded = !folded ? *c : (is_max ? std::max(*folded, *c) : std::min(*folded, *c));
      } else {
        args.push_back(a);
      }
    }
  }
  if (folded) args.push_back(Expr::constant(*folded));
  std::sort(args.begin(), args.end(), ExprLess{});
  args.erase(std::unique(args.begin(), args.end()), args.end());
  // Drop an operand dominated by another that differs from it by a constant.
  if (args.size() <= 8) {
    std::vector<bool> drop(args.size(), false);
    for (std::size_t i = 0; i < args.size(); ++i) {
      for (std::size_t j = i + 1; j < args.size(); ++j) {
        if (drop[i] || drop[j]) continue;
        SpeculativeScope probe;
        auto d = sub2(args[i], args[j]).constant_value();  // args[i] - args[j]
        if (!d) continue;
        ((*d > 0) == is_max ? drop[j] : drop[i]) = true;
      }
    }
    std::vector<Expr> kept;
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (!drop[i]) kept.push_back(args[i]);
    }
    args = std::move(kept);
  }
  if (args.size() == 1) return args[0];
  return intern(op, false, 0, args);
}

}  // namespace

Expr build_add(std::span<const Expr> xs) {
  return guarded(ExprOp::Add, false, xs, [&] { return add_impl(xs); });
}
Expr build_mul(std::span<const Expr> xs) {
  return guarded(ExprOp::Mul, false, xs, [&] { return mul_impl(xs); });
}
Expr build_floordiv(Expr a, Expr b) {
  const Expr args[] = {a, b};
  return guarded(ExprOp::FloorDiv, false, args, [&] { return build_div(DivKind::Floor, a, b); });
}
Expr build_ceildiv(Expr a, Expr b) {
  const Expr args[] = {a, b};
  return guarded(ExprOp::CeilDiv, false, args, [&] { return build_div(DivKind::Ceil, a, b); });
}
Expr build_mod(Expr a, Expr b) {
  const Expr args[] = {a, b};
  return guarded(ExprOp::Mod, false, args, [&] { return mod_impl(a, b); });
}
Expr build_minmax(ExprOp op, std::span<const Expr> xs) {
  return guarded(op, false, xs, [&] { return minmax_impl(op, xs); });
}

}  // namespace kiln::sym::detail
