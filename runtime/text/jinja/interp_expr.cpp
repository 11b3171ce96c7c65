// The evaluator's expressions: names, literals, attribute and item access (the sandbox's
// getattr/getitem), calls, filters and tests, Python's operators and comparisons, slicing.
#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "runtime/text/jinja/builtins.h"
#include "runtime/text/jinja/interp.h"
#include "runtime/text/jinja/pystr.h"

namespace offgen::jinja {
namespace {

// Python's arbitrary-precision integers are 64-bit here: an overflow is an error.
void check_overflow(bool overflow) {
  if (overflow) fail("integer overflow (the engine's integers are 64-bit)");
}

std::string object_repr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.type() == Type::kObject) return v.type_name() + " object";
  return v.type_name() + " object";
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                   b.type_name()));
}

// Python's floor division and modulo for integers.
int64_t floor_div(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) fail("integer overflow (the engine's integers are 64-bit)");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t py_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  const int64_t r = a % b;
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

}  // namespace

Value Interp::lookup(const Expr& e, const ScopePtr& scope) {
  if (const Value* v = scope->find(e.name)) return *v;
  Value g = find_global(e.name);
  if (!g.is_undefined()) return g;
  return Value::undefined(fmt::format("'{}' is undefined", e.name));
}

Value Interp::eval(const Expr& e, const ScopePtr& scope) {
  DepthGuard guard(*this);
  step();
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return lookup(e, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.kids.size());
      for (const ExprPtr& k : e.kids) items.push_back(eval(*k, scope));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
        Value k = eval(*e.kids[i], scope);
        d.set(std::move(k), eval(*e.kids[i + 1], scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kAttr: {
      const Value obj = eval(*e.kids[0], scope);
      line_ = e.line;
      return getattr(obj, e.name);
    }
    case ExprKind::kItem: {
      const Value obj = eval(*e.kids[0], scope);
      const Value key = eval(*e.kids[1], scope);
      line_ = e.line;
      return getitem(obj, key);
    }
    case ExprKind::kSlice: {
      if (e.kids.size() == 3)  // a slice among several subscripts (obj[a:b, c]): no such key
        return Value::undefined("slice objects are not supported as keys");
      const Value obj = eval(*e.kids[0], scope);
      Value parts[3];
      for (int i = 0; i < 3; ++i)
        parts[i] = e.kids[i + 1] ? eval(*e.kids[i + 1], scope) : Value::none();
      line_ = e.line;
      return slice(obj, parts[0], parts[1], parts[2]);
    }
    case ExprKind::kCall: {
      const Value f = eval(*e.kids[0], scope);
      Args args = eval_args(e.args, scope);
      line_ = e.line;
      return call(f, std::move(args));
    }
    case ExprKind::kFilter:
      return eval_filter(e, scope, nullptr);
    case ExprKind::kTest: {
      const Value v = eval(*e.kids[0], scope);
      const Args args = eval_args(e.args, scope);
      line_ = e.line;
      if (!e.test) fail(fmt::format("no test named '{}'", e.name));
      return Value::boolean(e.test(*this, v, args) != e.negate);
    }
    case ExprKind::kNot:
      return Value::boolean(!eval(*e.kids[0], scope).truthy());
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      const Value v = eval(*e.kids[0], scope);
      line_ = e.line;
      if (v.is_undefined()) undefined_error(v);
      if (!v.is_number())
        fail(fmt::format("bad operand type for unary {}: '{}'",
                         e.kind == ExprKind::kNeg ? '-' : '+', v.type_name()));
      if (e.kind == ExprKind::kPos) return v.type() == Type::kBool ? Value::integer(v.as_int()) : v;
      if (v.type() == Type::kFloat) return Value::real(-v.as_float());
      check_overflow(v.as_int() == INT64_MIN);
      return Value::integer(-v.as_int());
    }
    case ExprKind::kBinary: {
      const Value a = eval(*e.kids[0], scope);
      const Value b = eval(*e.kids[1], scope);
      line_ = e.line;
      return binary(e.name, a, b);
    }
    case ExprKind::kConcat: {
      MarkedText out;
      for (const ExprPtr& k : e.kids) append_str(out, eval(*k, scope));
      line_ = e.line;
      return make_string(std::move(out));
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.kids[0], scope);
      return a.truthy() ? eval(*e.kids[1], scope) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.kids[0], scope);
      return a.truthy() ? a : eval(*e.kids[1], scope);
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.kids[0], scope);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.kids[i + 1], scope);
        line_ = e.line;
        if (!compare_op(e.ops[i], left, right)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kCond:
      if (eval(*e.kids[1], scope).truthy()) return eval(*e.kids[0], scope);
      if (e.kids[2]) return eval(*e.kids[2], scope);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was "
          "defined.",
          e.line));
  }
  return Value();
}

Value Interp::eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input) {
  const Value input = e.kids[0] ? (e.kids[0]->kind == ExprKind::kFilter
                                       ? eval_filter(*e.kids[0], scope, block_input)
                                       : eval(*e.kids[0], scope))
                                : *block_input;
  const Args args = eval_args(e.args, scope);
  line_ = e.line;
  step();
  if (!e.filter) fail(fmt::format("no filter named '{}'", e.name));
  return e.filter(*this, input, args);
}

Args Interp::eval_args(const std::vector<CallArg>& args, const ScopePtr& scope) {
  Args out;
  for (const CallArg& a : args) {
    Value v = eval(*a.value, scope);
    if (a.star == 1) {
      for (Value& x : iterate(v)) out.pos.push_back(std::move(x));
    } else if (a.star == 2) {
      if (!v.is_dict()) fail("argument after ** must be a mapping");
      for (const auto& [k, x] : v.dict_value().items()) {
        if (!k.is_string()) fail("keywords must be strings");
        out.kw.emplace_back(k.text(), x);
      }
    } else if (!a.name.empty()) {
      out.kw.emplace_back(a.name, std::move(v));
    } else {
      out.pos.push_back(std::move(v));
    }
  }
  return out;
}

Value Interp::call(const Value& f, Args args) {
  if (f.is_undefined()) undefined_error(f);
  if (f.type() != Type::kObject || !f.obj().callable())
    fail(fmt::format("'{}' object is not callable", f.type_name()));
  return f.obj().call(*this, std::move(args));
}

Value Interp::getattr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) undefined_error(obj);
  // Python attributes first (the sandbox refuses "__" names, which every object has), then items.
  if (name.starts_with("__"))
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, obj.type_name()));
  if (obj.type() == Type::kObject) return obj.obj().attr(*this, obj, name);
  Value m = method(obj, name);
  if (!m.is_undefined()) return m;
  if (obj.is_dict())
    if (const Value* v = obj.dict_value().find(name)) return *v;
  if (obj.is_number() && (name == "real" || name == "imag")) {
    if (name == "imag") return obj.type() == Type::kFloat ? Value::real(0.0) : Value::integer(0);
    return obj.type() == Type::kBool ? Value::integer(obj.as_int()) : obj;
  }
  if (obj.is_list() && !obj.list_value().names.empty()) {
    const auto& names = obj.list_value().names;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == name) return obj.items()[i];
  }
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_repr(obj), name));
}

Value Interp::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) undefined_error(obj);
  switch (obj.type()) {
    case Type::kDict:
      if (const Value* v = obj.dict_value().find(key)) return *v;
      break;
    case Type::kList:
    case Type::kString:
      if (key.is_integer()) {
        int64_t i = key.as_int();
        if (obj.is_list()) {
          const auto n = static_cast<int64_t>(obj.items().size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return obj.items()[i];
          return Value::undefined(
              fmt::format("'{}' has no element {}", object_repr(obj), key.as_int()));
        }
        const std::string& s = obj.text();
        if (is_ascii(s)) {
          const auto n = static_cast<int64_t>(s.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value::string(obj.str().slice(i, i + 1));
        } else {
          const std::vector<size_t> at = cp_starts(s);
          const auto n = static_cast<int64_t>(at.size()) - 1;
          if (i < 0) i += n;
          if (i >= 0 && i < n) return Value::string(obj.str().slice(at[i], at[i + 1]));
        }
        return Value::undefined(
            fmt::format("'{}' has no element {}", object_repr(obj), key.as_int()));
      }
      break;
    case Type::kObject:
    case Type::kUndefined:
    case Type::kNone:
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat:
      break;
  }
  if (key.is_string()) {
    if (obj.type() == Type::kObject) return obj.obj().attr(*this, obj, key.text());
    if (!key.text().starts_with("__")) {
      Value m = method(obj, key.text());
      if (!m.is_undefined()) return m;
    }
    return Value::undefined(
        fmt::format("'{}' has no attribute '{}'", object_repr(obj), key.text()));
  }
  MarkedText k;
  append_repr(k, key);
  return Value::undefined(fmt::format("'{}' has no element {}", object_repr(obj), k.text()));
}

Value Interp::slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v) {
  if (obj.is_undefined()) undefined_error(obj);
  auto index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_integer())
      fail(fmt::format("slice {} must be an integer or None, not '{}'", what, v.type_name()));
    return v.as_int();
  };
  const auto b = index(start, "indices"), e = index(stop, "indices"), st = index(step_v, "step");
  const int64_t step_n = st.value_or(1);
  if (step_n == 0) fail("slice step cannot be zero");
  if (!obj.is_list() && !obj.is_string())
    return Value::undefined(fmt::format("'{}' is not subscriptable", object_repr(obj)));
  const bool ascii = obj.is_string() && is_ascii(obj.text());
  std::vector<size_t> at;
  int64_t len = 0;
  if (obj.is_list()) {
    len = static_cast<int64_t>(obj.items().size());
  } else if (ascii) {
    len = static_cast<int64_t>(obj.text().size());
  } else {
    at = cp_starts(obj.text());
    len = static_cast<int64_t>(at.size()) - 1;
  }
  const SliceIdx s = slice_indices(len, b ? &*b : nullptr, e ? &*e : nullptr, step_n);
  if (obj.is_string() && s.step == 1) {
    if (s.start >= s.stop) return Value::string(std::string());
    const size_t from = ascii ? s.start : at[s.start], to = ascii ? s.stop : at[s.stop];
    return make_string(obj.str().slice(from, to));
  }
  std::vector<Value> items;
  MarkedText str;
  for (int64_t i = s.start; s.step > 0 ? i < s.stop : i > s.stop; i += s.step) {
    step();
    if (obj.is_list()) {
      items.push_back(obj.items()[i]);
    } else {
      const size_t from = ascii ? i : at[i], to = ascii ? i + 1 : at[i + 1];
      str.append(obj.str(), from, to);
    }
  }
  if (obj.is_string()) return make_string(std::move(str));
  charge_items(items.size());
  return Value::list(std::move(items), obj.is_tuple());
}

bool Interp::compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return equal(a, b);
  if (op == "!=") return !equal(a, b);
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) {
      if (a.is_undefined()) undefined_error(a);
      if (!a.is_string())
        fail(fmt::format("'in <string>' requires string as left operand, not {}", a.type_name()));
      found = b.text().find(a.text()) != std::string::npos;
    } else if (b.is_list()) {
      for (const Value& x : b.items()) {
        step();
        if (equal(a, x)) {
          found = true;
          break;
        }
      }
    } else if (b.is_dict()) {
      found = b.dict_value().find(a) != nullptr;
    } else if (b.type() == Type::kObject && dynamic_cast<Generator*>(&b.obj())) {
      for (const Value& x : iterate(b)) {
        if (equal(a, x)) {
          found = true;
          break;
        }
      }
    } else if (!b.is_undefined()) {
      fail(fmt::format("argument of type '{}' is not iterable", b.type_name()));
    }
    return op == "in" ? found : !found;
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const int c = compare(a, b);
  if (op == "<") return c < 0;
  if (op == "<=") return c <= 0;
  if (op == ">") return c > 0;
  return c >= 0;  // ">="
}

Value Interp::binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  const bool ints = a.is_integer() && b.is_integer();
  const bool nums = a.is_number() && b.is_number();
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      check_overflow(__builtin_add_overflow(a.as_int(), b.as_int(), &r));
      return Value::integer(r);
    }
    if (nums) return Value::real(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) {  // Markup escapes the plain string it is added to
        MarkedText s = html_escape(a);
        s.append(html_escape(b));
        charge(s.size());
        return Value::markup(std::move(s));
      }
      MarkedText s = a.str();
      s.append(b.str());
      return make_string(std::move(s));
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      charge_items(items.size());
      return Value::list(std::move(items), a.is_tuple());
    }
    if (a.is_string())
      fail(fmt::format("can only concatenate str (not \"{}\") to str", b.type_name()));
    if (a.is_list())
      fail(fmt::format("can only concatenate {0} (not \"{1}\") to {0}", a.type_name(),
                       b.type_name()));
    unsupported("+", a, b);
  }
  if (op == "-") {
    if (ints) {
      check_overflow(__builtin_sub_overflow(a.as_int(), b.as_int(), &r));
      return Value::integer(r);
    }
    if (nums) return Value::real(a.as_float() - b.as_float());
    unsupported("-", a, b);
  }
  if (op == "*") {
    if (ints) {
      check_overflow(__builtin_mul_overflow(a.as_int(), b.as_int(), &r));
      return Value::integer(r);
    }
    if (nums) return Value::real(a.as_float() * b.as_float());
    const Value* seq = a.is_integer() ? &b : b.is_integer() ? &a : nullptr;
    const Value* times = a.is_integer() ? &a : &b;
    if (seq && (seq->is_string() || seq->is_list())) {
      const int64_t n = std::max<int64_t>(0, times->as_int());
      const size_t unit =
          seq->is_string() ? seq->text().size() : seq->items().size() * sizeof(Value);
      if (unit > 0 && static_cast<uint64_t>(n) > limits_.max_output_bytes / unit)
        charge(limits_.max_output_bytes + 1);
      charge(unit * n);
      if (seq->is_string()) {
        MarkedText s;
        for (int64_t i = 0; i < n; ++i) s.append(seq->str());
        return Value::string(std::move(s));
      }
      std::vector<Value> items;
      for (int64_t i = 0; i < n; ++i)
        items.insert(items.end(), seq->items().begin(), seq->items().end());
      return Value::list(std::move(items), seq->is_tuple());
    }
    unsupported("*", a, b);
  }
  if (op == "/") {
    if (!nums) unsupported("/", a, b);
    if (b.as_float() == 0.0) fail("division by zero");
    return Value::real(a.as_float() / b.as_float());
  }
  if (op == "//") {
    if (!nums) unsupported("//", a, b);
    if (ints) {
      if (b.as_int() == 0) fail("integer division or modulo by zero");
      return Value::integer(floor_div(a.as_int(), b.as_int()));
    }
    if (b.as_float() == 0.0) fail("float floor division by zero");
    return Value::real(std::floor(a.as_float() / b.as_float()));
  }
  if (op == "%") {
    if (a.is_string() && a.is_markup()) {  // Markup % args escapes the string arguments
      Value args = b;
      auto esc = [](const Value& x) { return x.is_string() ? Value::markup(html_escape(x)) : x; };
      if (b.is_tuple()) {
        std::vector<Value> items;
        for (const Value& x : b.items()) items.push_back(esc(x));
        args = Value::list(std::move(items), true);
      } else if (!b.is_dict()) {
        args = esc(b);
      }
      MarkedText s = percent_format(*this, a.str(), args);
      charge(s.size());
      return Value::markup(std::move(s));
    }
    if (a.is_string()) return make_string(percent_format(*this, a.str(), b));
    if (!nums) unsupported("%", a, b);
    if (ints) {
      if (b.as_int() == 0) fail("integer division or modulo by zero");
      return Value::integer(py_mod(a.as_int(), b.as_int()));
    }
    const double x = a.as_float(), y = b.as_float();
    if (y == 0.0) fail("float modulo");
    double m = std::fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return Value::real(m);
  }
  if (op == "**") {
    if (!nums) unsupported("** or pow()", a, b);
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), acc = 1;
      while (e > 0) {
        step();
        if (e & 1) check_overflow(__builtin_mul_overflow(acc, base, &acc));
        e >>= 1;
        if (e) check_overflow(__builtin_mul_overflow(base, base, &base));
      }
      return Value::integer(acc);
    }
    if (a.as_float() == 0.0 && b.as_float() < 0) fail("0.0 cannot be raised to a negative power");
    return Value::real(std::pow(a.as_float(), b.as_float()));
  }
  fail(fmt::format("unknown operator '{}'", op));
}

Value Interp::apply_filter(std::string_view name, const Value& v, const Args& args) {
  const FilterFn f = find_filter(name);
  if (!f) fail(fmt::format("no filter named '{}'", name));
  step();
  return f(*this, v, args);
}

bool Interp::apply_test(std::string_view name, const Value& v, const Args& args) {
  const TestFn t = find_test(name);
  if (!t) fail(fmt::format("no test named '{}'", name));
  step();
  return t(*this, v, args);
}

}  // namespace offgen::jinja
