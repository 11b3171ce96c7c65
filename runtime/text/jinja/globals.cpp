// jinja2's tests and the environment's global functions: range, dict, namespace, cycler,
// joiner, and Hugging Face's raise_exception and strftime_now.
#include <fmt/format.h>

#include <ctime>
#include <map>

#include "runtime/text/jinja/builtins.h"
#include "runtime/text/jinja/builtins_util.h"

namespace offgen::jinja {
namespace {

// ---- tests --------------------------------------------------------------------------------

const Value& arg0(const Args& a, std::string_view test) {
  if (a.pos.empty() && a.kw.empty()) fail(fmt::format("test '{}' takes an argument", test));
  return a.pos.empty() ? a.kw.front().second : a.pos.front();
}

bool t_defined(Interp&, const Value& v, const Args&) { return !v.is_undefined(); }
bool t_undefined(Interp&, const Value& v, const Args&) { return v.is_undefined(); }
bool t_none(Interp&, const Value& v, const Args&) { return v.is_none(); }
bool t_boolean(Interp&, const Value& v, const Args&) { return v.type() == Type::kBool; }
bool t_true(Interp&, const Value& v, const Args&) { return v.type() == Type::kBool && v.as_bool(); }
bool t_false(Interp&, const Value& v, const Args&) {
  return v.type() == Type::kBool && !v.as_bool();
}
bool t_integer(Interp&, const Value& v, const Args&) { return v.type() == Type::kInt; }
bool t_float(Interp&, const Value& v, const Args&) { return v.type() == Type::kFloat; }
bool t_number(Interp&, const Value& v, const Args&) { return v.is_number(); }
bool t_string(Interp&, const Value& v, const Args&) { return v.is_string(); }
bool t_mapping(Interp&, const Value& v, const Args&) { return v.is_dict(); }
bool t_callable(Interp&, const Value& v, const Args&) {
  return v.type() == Type::kObject && v.obj().callable();
}
// Python's iter() succeeds: strings, lists, dicts; jinja2's Undefined iterates as empty.
bool t_iterable(Interp&, const Value& v, const Args&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
// len() and __getitem__: strings, lists, dicts (and Undefined, which has both).
bool t_sequence(Interp&, const Value& v, const Args&) {
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
}
bool t_lower(Interp&, const Value& v, const Args&) {
  const MarkedText s = to_str(v);
  return to_lower(s.text()) == s.text() && to_upper(s.text()) != s.text();
}
bool t_upper(Interp&, const Value& v, const Args&) {
  const MarkedText s = to_str(v);
  return to_upper(s.text()) == s.text() && to_lower(s.text()) != s.text();
}
bool t_even(Interp&, const Value& v, const Args&) { return want_int(v, "even") % 2 == 0; }
bool t_odd(Interp&, const Value& v, const Args&) { return want_int(v, "odd") % 2 != 0; }
bool t_divisibleby(Interp&, const Value& v, const Args& a) {
  const int64_t d = want_int(arg0(a, "divisibleby"), "divisibleby");
  if (d == 0) fail("integer division or modulo by zero");
  return want_int(v, "divisibleby") % d == 0;
}
bool t_eq(Interp&, const Value& v, const Args& a) { return equal(v, arg0(a, "eq")); }
bool t_ne(Interp&, const Value& v, const Args& a) { return !equal(v, arg0(a, "ne")); }
bool t_lt(Interp&, const Value& v, const Args& a) { return compare(v, arg0(a, "lt")) < 0; }
bool t_le(Interp&, const Value& v, const Args& a) { return compare(v, arg0(a, "le")) <= 0; }
bool t_gt(Interp&, const Value& v, const Args& a) { return compare(v, arg0(a, "gt")) > 0; }
bool t_ge(Interp&, const Value& v, const Args& a) { return compare(v, arg0(a, "ge")) >= 0; }
bool t_in(Interp& in, const Value& v, const Args& a) {
  const Value& seq = arg0(a, "in");
  if (seq.is_string()) return v.is_string() && seq.text().find(v.text()) != std::string::npos;
  if (seq.is_dict()) return seq.dict_value().find(v) != nullptr;
  for (const Value& x : in.iterate(seq))
    if (equal(v, x)) return true;
  return false;
}
bool t_sameas(Interp&, const Value& v, const Args& a) {
  const Value& o = arg0(a, "sameas");
  if (v.type() != o.type()) return false;
  switch (v.type()) {
    case Type::kNone:
    case Type::kUndefined:
      return true;
    case Type::kBool:
      return v.as_bool() == o.as_bool();
    case Type::kInt:
    case Type::kFloat:
      return equal(v, o);
    case Type::kString:
    case Type::kList:
    case Type::kDict:
    case Type::kObject:
      return v.identity() == o.identity();
  }
  return false;
}
bool t_escaped(Interp&, const Value&, const Args&) { return false; }
bool t_filter(Interp&, const Value& v, const Args&) {
  return v.is_string() && find_filter(v.text()) != nullptr;
}
bool t_test(Interp&, const Value& v, const Args&) {
  return v.is_string() && find_test(v.text()) != nullptr;
}

const std::map<std::string_view, TestFn>& tests() {
  static const std::map<std::string_view, TestFn> table = {
      {"!=", t_ne},
      {"<", t_lt},
      {"<=", t_le},
      {"==", t_eq},
      {">", t_gt},
      {">=", t_ge},
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"escaped", t_escaped},
      {"even", t_even},
      {"false", t_false},
      {"filter", t_filter},
      {"float", t_float},
      {"ge", t_ge},
      {"greaterthan", t_gt},
      {"gt", t_gt},
      {"in", t_in},
      {"integer", t_integer},
      {"iterable", t_iterable},
      {"le", t_le},
      {"lessthan", t_lt},
      {"lower", t_lower},
      {"lt", t_lt},
      {"mapping", t_mapping},
      {"ne", t_ne},
      {"none", t_none},
      {"number", t_number},
      {"odd", t_odd},
      {"sameas", t_sameas},
      {"sequence", t_sequence},
      {"string", t_string},
      {"test", t_test},
      {"true", t_true},
      {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return table;
}

// ---- global functions ---------------------------------------------------------------------

using GlobalFn = Value (*)(Interp& in, Args& args);

class Builtin : public Object {
 public:
  Builtin(std::string_view name, GlobalFn fn) : name_(name), fn_(fn) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  Value call(Interp& in, Args args) override { return fn_(in, args); }
  std::string str() const override { return fmt::format("<built-in function {}>", name_); }

 private:
  std::string name_;
  GlobalFn fn_;
};

// Hugging Face's TemplateNamespace: jinja2's Namespace refusing "_"-prefixed names.
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  void release() override { attrs_ = Dict(); }
  Value attr(Interp&, const Value&, std::string_view name) override {
    if (const Value* v = attrs_.find(name)) return *v;
    return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
  }
  bool set_attr(std::string_view name, Value v) override {
    check(name);
    attrs_.set(Value::string(std::string(name)), std::move(v));
    return true;
  }
  static void check(std::string_view name) {
    if (!name.empty() && name[0] == '_')
      fail(
          fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, "
                      "but got '{}'. Please rename the attribute.",
                      name));
  }
  std::string str() const override {
    MarkedText m;
    append_repr(m, Value::dict(attrs_));
    return "<Namespace " + m.text() + ">";
  }

 private:
  Dict attrs_;
};

// dict(mapping or pairs, **kwargs): the entries, as Python's dict() takes them.
Dict dict_of(Interp& in, const Args& args, std::string_view fn) {
  if (args.pos.size() > 1)
    fail(fmt::format("{} expected at most 1 argument, got {}", fn, args.pos.size()));
  Dict d;
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict_value().items()) d.set(k, v);
    } else {
      for (const Value& pair : in.iterate(src)) {
        const std::vector<Value> kv = in.iterate(pair);
        if (kv.size() != 2)
          fail(fmt::format("dictionary update sequence element has length {}; 2 is required",
                           kv.size()));
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.kw) d.set(Value::string(k), v);
  return d;
}

Value g_dict(Interp& in, Args& args) { return Value::dict(dict_of(in, args, "dict")); }

Value g_namespace(Interp& in, Args& args) {
  auto ns = std::make_shared<Namespace>();
  const Dict attrs = dict_of(in, args, "namespace");
  for (const auto& [k, v] : attrs.items()) {
    if (!k.is_string()) fail("namespace() attribute names must be strings");
    ns->set_attr(k.text(), v);
  }
  return Value::object(ns);
}

// The sandbox's safe_range: at most 100000 items.
Value g_range(Interp& in, Args& args) {
  if (!args.kw.empty()) fail("range() takes no keyword arguments");
  if (args.pos.empty() || args.pos.size() > 3)
    fail(fmt::format("range expected 1 to 3 arguments, got {}", args.pos.size()));
  int64_t start = 0, stop = 0, step = 1;
  if (args.pos.size() == 1) {
    stop = want_int(args.pos[0], "range()");
  } else {
    start = want_int(args.pos[0], "range()");
    stop = want_int(args.pos[1], "range()");
    if (args.pos.size() == 3) step = want_int(args.pos[2], "range()");
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  const long double n =
      step > 0
          ? std::ceil(static_cast<long double>(stop - static_cast<long double>(start)) / step)
          : std::ceil(static_cast<long double>(start - static_cast<long double>(stop)) / -step);
  if (n > 100000) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    out.push_back(Value::integer(i));
  in.charge_items(out.size());
  return Value::list(std::move(out));
}

Value g_raise_exception(Interp&, Args& args) {
  const auto a = args_of("raise_exception", args, {"message"}, {});
  throw RaisedError(to_str(a[0]).text());
}

// Python's datetime.now().strftime(format): C strftime on the render's clock.
Value g_strftime_now(Interp& in, Args& args) {
  const auto a = args_of("strftime_now", args, {"format"}, {});
  const std::string& f = want_str(a[0], "strftime_now() format").text();
  if (f.empty()) return Value::string(std::string());
  std::string out(f.size() * 4 + 64, '\0');
  const size_t n = std::strftime(out.data(), out.size(), f.c_str(), &in.now());
  if (n == 0) fail("strftime_now(): the formatted date is too long");
  out.resize(n);
  return Value::string(std::move(out));
}

class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "Cycler"; }
  void release() override { items_.clear(); }
  Value attr(Interp& in, const Value& self, std::string_view name) override {
    if (name == "current") return items_[pos_];
    if (name == "next" || name == "reset")
      return Value::object(std::make_shared<Method>(self, name == "next"));
    return Object::attr(in, self, name);
  }

 private:
  class Method : public Object {
   public:
    Method(Value c, bool next) : c_(std::move(c)), next_(next) {}
    std::string type_name() const override { return "method"; }
    void release() override { c_ = Value(); }
    bool callable() const override { return true; }
    Value call(Interp&, Args) override {
      auto& c = static_cast<Cycler&>(c_.obj());
      if (!next_) {
        c.pos_ = 0;
        return Value::none();
      }
      Value v = c.items_[c.pos_];
      c.pos_ = (c.pos_ + 1) % c.items_.size();
      return v;
    }

   private:
    Value c_;
    bool next_;
  };
  std::vector<Value> items_;
  size_t pos_ = 0;
};

Value g_cycler(Interp&, Args& args) {
  if (args.pos.empty()) fail("at least one item has to be provided");
  return Value::object(std::make_shared<Cycler>(args.pos));
}

class Joiner : public Object {
 public:
  explicit Joiner(Value sep) : sep_(std::move(sep)) {}
  std::string type_name() const override { return "Joiner"; }
  void release() override { sep_ = Value(); }
  bool callable() const override { return true; }
  Value call(Interp&, Args) override {
    if (!used_) {
      used_ = true;
      return Value::string(std::string());
    }
    return sep_;
  }

 private:
  Value sep_;
  bool used_ = false;
};

Value g_joiner(Interp&, Args& args) {
  const auto a = args_of("joiner", args, {"sep"}, {Value::string(", ")});
  return Value::object(std::make_shared<Joiner>(a[0]));
}

const std::map<std::string_view, Value>& globals() {
  static const std::map<std::string_view, Value> table = [] {
    std::map<std::string_view, Value> t;
    for (auto [name, fn] : std::initializer_list<std::pair<std::string_view, GlobalFn>>{
             {"range", g_range},
             {"dict", g_dict},
             {"namespace", g_namespace},
             {"cycler", g_cycler},
             {"joiner", g_joiner},
             {"raise_exception", g_raise_exception},
             {"strftime_now", g_strftime_now}})
      t.emplace(name, Value::object(std::make_shared<Builtin>(name, fn)));
    return t;
  }();
  return table;
}

}  // namespace

TestFn find_test(std::string_view name) {
  const auto& t = tests();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

Value find_global(std::string_view name) {
  const auto& g = globals();
  auto it = g.find(name);
  return it == g.end() ? Value() : it->second;
}

}  // namespace offgen::jinja
