// Recursive-descent parser, expressions: jinja2's precedence from the inline if down to
// primaries, postfix access, calls, filters and tests.
#include <charconv>
#include <cmath>

#include "runtime/text/jinja/builtins.h"
#include "runtime/text/jinja/parser_impl.h"

namespace offgen::jinja::detail {
namespace {

constexpr std::string_view kCompareOps[] = {"==", "!=", "<", "<=", ">", ">="};

}  // namespace

bool Parser::tuple_end(std::initializer_list<std::string_view> extra) const {
  if (cur().kind == Tok::kVarEnd || cur().kind == Tok::kBlockEnd || is_op(")")) return true;
  for (std::string_view e : extra)
    if (is_name(e)) return true;
  return false;
}

ExprPtr Parser::parse_tuple(bool with_condexpr, bool explicit_parens,
                            std::initializer_list<std::string_view> extra_ends) {
  const int line = cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (tuple_end(extra_ends)) break;
    items.push_back(parse_expression(with_condexpr));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items.front());
    if (!explicit_parens) fail(fmt::format("expected an expression, got {}", describe(cur())));
  }
  auto e = make(ExprKind::kTuple, line);
  e->kids = std::move(items);
  return e;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  const int line = cur().line;
  ExprPtr e = parse_or();
  while (skip_name("if")) {
    auto c = make(ExprKind::kCond, line);
    ExprPtr test = parse_or();
    ExprPtr other = skip_name("else") ? parse_condexpr() : nullptr;
    c->kids.push_back(std::move(e));
    c->kids.push_back(std::move(test));
    c->kids.push_back(std::move(other));
    e = std::move(c);
  }
  return e;
}

ExprPtr Parser::binary(ExprKind k, ExprPtr l, ExprPtr r, int line, std::string op) {
  auto e = make(k, line);
  e->name = std::move(op);
  e->kids.push_back(std::move(l));
  e->kids.push_back(std::move(r));
  return e;
}

ExprPtr Parser::parse_or() {
  const int line = cur().line;
  ExprPtr l = parse_and();
  while (skip_name("or")) l = binary(ExprKind::kOr, std::move(l), parse_and(), line);
  return l;
}

ExprPtr Parser::parse_and() {
  const int line = cur().line;
  ExprPtr l = parse_not();
  while (skip_name("and")) l = binary(ExprKind::kAnd, std::move(l), parse_not(), line);
  return l;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    const int line = next().line;
    Nest nest(*this);
    auto e = make(ExprKind::kNot, line);
    e->kids.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  std::vector<std::string> ops;
  std::vector<ExprPtr> operands;
  while (true) {
    std::string op;
    if (cur().kind == Tok::kOp) {
      for (std::string_view c : kCompareOps)
        if (cur().value == c) op = c;
    }
    if (!op.empty()) {
      next();
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && look().kind == Tok::kName && look().value == "in") {
      next();
      next();
      op = "notin";
    } else {
      break;
    }
    ops.push_back(op);
    operands.push_back(parse_math1());
  }
  if (ops.empty()) return first;
  auto e = make(ExprKind::kCompare, line);
  e->kids.push_back(std::move(first));
  for (auto& o : operands) e->kids.push_back(std::move(o));
  e->ops = std::move(ops);
  return e;
}

ExprPtr Parser::parse_math1() {
  const int line = cur().line;
  ExprPtr l = parse_concat();
  while (is_op("+") || is_op("-")) {
    const std::string op = next().value;
    l = binary(ExprKind::kBinary, std::move(l), parse_concat(), line, op);
  }
  return l;
}

ExprPtr Parser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = make(ExprKind::kConcat, line);
  e->kids.push_back(std::move(first));
  while (skip_op("~")) e->kids.push_back(parse_math2());
  return e;
}

ExprPtr Parser::parse_math2() {
  const int line = cur().line;
  ExprPtr l = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const std::string op = next().value;
    l = binary(ExprKind::kBinary, std::move(l), parse_pow(), line, op);
  }
  return l;
}

ExprPtr Parser::parse_pow() {
  const int line = cur().line;
  ExprPtr l = parse_unary(true);
  while (skip_op("**")) l = binary(ExprKind::kBinary, std::move(l), parse_unary(true), line, "**");
  return l;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  Nest nest(*this);
  const int line = cur().line;
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const bool neg = next().value == "-";
    e = make(neg ? ExprKind::kNeg : ExprKind::kPos, line);
    e->kids.push_back(parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary() {
  const Token& t = cur();
  const int line = t.line;
  if (t.kind == Tok::kName) {
    const std::string n = next().value;
    if (n == "true" || n == "True" || n == "false" || n == "False") {
      auto e = make(ExprKind::kConst, line);
      e->value = Value::boolean(n[0] == 't' || n[0] == 'T');
      return e;
    }
    if (n == "none" || n == "None") {
      auto e = make(ExprKind::kConst, line);
      e->value = Value::none();
      return e;
    }
    for (MacroDef* m : macros_) {
      if (n == "varargs") m->catch_varargs = true;
      if (n == "kwargs") m->catch_kwargs = true;
      if (n == "caller") m->caller = true;
    }
    auto e = make(ExprKind::kName, line);
    e->name = n;
    return e;
  }
  if (t.kind == Tok::kString) {
    std::string s;
    while (cur().kind == Tok::kString) s += next().value;
    auto e = make(ExprKind::kConst, line);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.kind == Tok::kInt || t.kind == Tok::kFloat) {
    auto e = make(ExprKind::kConst, line);
    e->value = number(next());
    return e;
  }
  if (is_op("(")) {
    next();
    ExprPtr e = parse_tuple(true, true, {});
    expect_op(")");
    return e;
  }
  if (is_op("[")) {
    next();
    auto e = make(ExprKind::kList, line);
    while (!is_op("]")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op("]")) break;
      e->kids.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }
  if (is_op("{")) {
    next();
    auto e = make(ExprKind::kDict, line);
    while (!is_op("}")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op("}")) break;
      e->kids.push_back(parse_expression(true));
      expect_op(":");
      e->kids.push_back(parse_expression(true));
    }
    expect_op("}");
    return e;
  }
  fail(fmt::format("unexpected {}", describe(t)));
}

Value Parser::number(const Token& t) const {
  if (t.kind == Tok::kFloat) {
    double d = 0;
    const auto r = std::from_chars(t.value.data(), t.value.data() + t.value.size(), d);
    if (r.ec != std::errc() && r.ec != std::errc::result_out_of_range)
      fail_at(t.line, fmt::format("invalid float literal '{}'", t.value));
    if (r.ec == std::errc::result_out_of_range)
      d = t.value.find("e-") != std::string::npos ? 0.0 : HUGE_VAL;
    return Value::real(d);
  }
  int base = 10;
  std::string_view digits = t.value;
  if (digits.size() > 2 && digits[0] == '0' &&
      (digits[1] == 'x' || digits[1] == 'o' || digits[1] == 'b')) {
    base = digits[1] == 'x' ? 16 : digits[1] == 'o' ? 8 : 2;
    digits.remove_prefix(2);
  }
  int64_t v = 0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size())
    fail_at(t.line, fmt::format("integer literal {} is out of range (the engine's integers "
                                "are 64-bit)",
                                t.value));
  return Value::integer(v);
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      e = parse_subscript(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr obj) {
  const Token& t = next();
  const int line = t.line;
  if (t.value == ".") {
    const Token& a = cur();
    if (a.kind == Tok::kName) {
      auto e = make(ExprKind::kAttr, line);
      e->name = next().value;
      e->kids.push_back(std::move(obj));
      return e;
    }
    if (a.kind != Tok::kInt) fail("expected name or number");
    auto e = make(ExprKind::kItem, line);
    auto k = make(ExprKind::kConst, line);
    k->value = number(next());
    e->kids.push_back(std::move(obj));
    e->kids.push_back(std::move(k));
    return e;
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  ExprPtr index;
  if (args.size() == 1) {
    index = std::move(args.front());
  } else {
    index = make(ExprKind::kTuple, line);
    index->kids = std::move(args);
  }
  if (index->kind == ExprKind::kSlice) {  // obj[a:b:c]: the slice node takes the object
    index->kids.insert(index->kids.begin(), std::move(obj));
    return index;
  }
  auto e = make(ExprKind::kItem, line);
  e->kids.push_back(std::move(obj));
  e->kids.push_back(std::move(index));
  return e;
}

ExprPtr Parser::parse_subscribed() {
  const int line = cur().line;
  std::vector<ExprPtr> parts;
  if (is_op(":")) {
    next();
    parts.push_back(nullptr);
  } else {
    ExprPtr e = parse_expression(true);
    if (!is_op(":")) return e;
    next();
    parts.push_back(std::move(e));
  }
  if (is_op(":")) {
    parts.push_back(nullptr);
  } else if (!is_op("]") && !is_op(",")) {
    parts.push_back(parse_expression(true));
  } else {
    parts.push_back(nullptr);
  }
  if (skip_op(":")) {
    parts.push_back(!is_op("]") && !is_op(",") ? parse_expression(true) : nullptr);
  } else {
    parts.push_back(nullptr);
  }
  auto s = make(ExprKind::kSlice, line);
  s->kids = std::move(parts);
  return s;
}

std::vector<CallArg> Parser::parse_call_args() {
  const int line = cur().line;
  expect_op("(");
  std::vector<CallArg> args;
  bool dyn_args = false, dyn_kwargs = false, kwargs = false, need_comma = false;
  auto ensure = [&](bool ok) {
    if (!ok) fail_at(line, "invalid syntax for function call expression");
  };
  while (!is_op(")")) {
    if (need_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    CallArg a;
    if (skip_op("*")) {
      ensure(!dyn_args && !dyn_kwargs);
      a.star = 1;
      dyn_args = true;
    } else if (skip_op("**")) {
      ensure(!dyn_kwargs);
      a.star = 2;
      dyn_kwargs = true;
    } else if (cur().kind == Tok::kName && look().kind == Tok::kOp && look().value == "=") {
      ensure(!dyn_kwargs);
      a.name = next().value;
      next();
      kwargs = true;
    } else {
      ensure(!dyn_args && !dyn_kwargs && !kwargs);
    }
    a.value = parse_expression(true);
    args.push_back(std::move(a));
    need_comma = true;
  }
  expect_op(")");
  return args;
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  const int line = cur().line;
  auto e = make(ExprKind::kCall, line);
  e->args = parse_call_args();
  e->kids.push_back(std::move(callee));
  return e;
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      e = parse_filter(std::move(e), false);
    } else if (is_name("is")) {
      e = parse_test(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

std::string Parser::dotted_name() {
  std::string name = expect_name();
  while (skip_op(".")) {
    name += '.';
    name += expect_name();
  }
  return name;
}

ExprPtr Parser::parse_filter(ExprPtr input, bool inline_first) {
  while (is_op("|") || inline_first) {
    if (!inline_first) next();
    inline_first = false;
    const int line = cur().line;
    auto f = make(ExprKind::kFilter, line);
    f->name = dotted_name();
    f->filter = find_filter(f->name);
    if (is_op("(")) f->args = parse_call_args();
    f->kids.push_back(std::move(input));
    input = std::move(f);
  }
  return input;
}

ExprPtr Parser::parse_test(ExprPtr input) {
  const int line = next().line;  // "is"
  auto t = make(ExprKind::kTest, line);
  t->negate = skip_name("not");
  t->name = dotted_name();
  t->test = find_test(t->name);
  if (is_op("(")) {
    t->args = parse_call_args();
  } else if ((cur().kind == Tok::kName || cur().kind == Tok::kString || cur().kind == Tok::kInt ||
              cur().kind == Tok::kFloat || is_op("(") || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("you cannot chain multiple tests with is");
    CallArg a;
    a.value = parse_postfix(parse_primary());
    t->args.push_back(std::move(a));
  }
  t->kids.push_back(std::move(input));
  return t;
}

}  // namespace offgen::jinja::detail
