// jinja2's built-in filters (those that do not need an HTML or URL context) and Hugging Face's
// tojson, with jinja2's argument names and defaults.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "runtime/text/jinja/builtins.h"
#include "runtime/text/jinja/builtins_util.h"
#include "runtime/text/jinja/pystr.h"

namespace offgen::jinja {
namespace {

Value str_value(Interp& in, const Value& v) { return in.make_string(to_str(v)); }

bool boolean_arg(const Value& v) { return v.truthy(); }

// ---- strings ------------------------------------------------------------------------------

Value f_string(Interp& in, const Value& v, const Args&) {
  return v.is_markup() ? v : str_value(in, v);
}

Value f_safe(Interp& in, const Value& v, const Args&) {
  return Value::markup(str_value(in, v).str());
}

// A filter that keeps a Markup input Markup (jinja2 calls the str method on soft_str(value)).
template <FilterFn F>
Value keeps_markup(Interp& in, const Value& v, const Args& a) {
  Value out = F(in, v, a);
  return v.is_markup() ? Value::markup(out.str()) : out;
}

Value f_upper(Interp& in, const Value& v, const Args&) {
  const MarkedText s = to_str(v);
  return in.make_string(remark(to_upper(s.text()), s));
}

Value f_lower(Interp& in, const Value& v, const Args&) {
  const MarkedText s = to_str(v);
  return in.make_string(remark(to_lower(s.text()), s));
}

// Python's str.capitalize: the first character upper (title) case, the rest lower case.
Value f_capitalize(Interp& in, const Value& v, const Args&) {
  const MarkedText s = to_str(v);
  if (s.empty()) return Value::string(s);
  const int n = utf8::decode(s.text(), 0).len;
  return in.make_string(remark(to_upper(s.text().substr(0, n)) + to_lower(s.text().substr(n)), s));
}

// jinja2's title: words split at whitespace, -, (, {, [ and <.
Value f_title(Interp& in, const Value& v, const Args&) {
  const MarkedText s = to_str(v);
  const std::string& t = s.text();
  std::string out;
  bool word_start = true;
  for (size_t i = 0; i < t.size();) {
    const utf8::Decoded d = utf8::decode(t, i);
    const bool sep = (d.valid && utf8::is_python_space(d.cp)) || d.cp == '-' || d.cp == '(' ||
                     d.cp == '{' || d.cp == '[' || d.cp == '<';
    const std::string_view ch(t.data() + i, d.len);
    out += sep ? std::string(ch) : word_start ? to_upper(ch) : to_lower(ch);
    word_start = sep;
    i += d.len;
  }
  return in.make_string(remark(std::move(out), s));
}

Value f_trim(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("trim", args, {"chars"}, {Value::none()});
  const MarkedText s = to_str(v);
  if (a[0].is_none()) return in.make_string(py_strip(s, nullptr, true, true));
  const std::string chars = want_str(a[0], "trim() chars").text();
  return in.make_string(py_strip(s, &chars, true, true));
}

Value f_replace(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("replace", args, {"old", "new", "count"}, {Value::none()});
  const int64_t count = a[2].is_none() ? -1 : want_int(a[2], "replace() count");
  return in.make_string(py_replace(in, to_str(v), to_str(a[0]).text(), to_str(a[1]), count));
}

Value f_center(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("center", args, {"width"}, {Value::integer(80)});
  return in.make_string(py_pad(to_str(v), want_int(a[0], "center() width"), ' ', '^'));
}

// jinja2 3.x indent(s, width=4, first=False, blank=False); width may be a string.
Value f_indent(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("indent", args, {"width", "first", "blank"},
                         {Value::integer(4), Value::boolean(false), Value::boolean(false)});
  std::string ind;
  if (a[0].is_string()) {
    ind = a[0].text();
  } else {
    const int64_t w = want_int(a[0], "indent() width");
    in.charge(static_cast<size_t>(std::max<int64_t>(0, w)));
    ind.assign(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
  }
  MarkedText s = to_str(v);
  s.append("\n");
  const std::vector<Value> lines = py_splitlines(s, false);
  MarkedText out;
  if (boolean_arg(a[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) out.append("\n" + ind);
      out.append(lines[i].str());
    }
  } else {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) {
        out.append("\n");
        if (!lines[i].text().empty()) out.append(ind);
      }
      out.append(lines[i].str());
    }
  }
  if (boolean_arg(a[1])) {
    MarkedText r(ind);
    r.append(out);
    out = std::move(r);
  }
  return in.make_string(std::move(out));
}

Value f_truncate(Interp& in, const Value& v, const Args& args) {
  const auto a =
      args_of("truncate", args, {"length", "killwords", "end", "leeway"},
              {Value::integer(255), Value::boolean(false), Value::string("..."), Value::none()});
  const MarkedText s = to_str(v);
  const int64_t length = want_int(a[0], "truncate() length");
  const int64_t leeway = a[3].is_none() ? 5 : want_int(a[3], "truncate() leeway");
  const std::string end = to_str(a[2]).text();
  const int64_t n = cp_count(s.text()), end_len = cp_count(end);
  if (length < end_len) fail("expected length >= len(end)");
  if (n <= length + leeway) return Value::string(s);
  const std::vector<size_t> at = cp_starts(s.text());
  MarkedText out = s.slice(0, at[length - end_len]);
  if (!boolean_arg(a[1])) {
    const size_t sp = out.text().rfind(' ');
    if (sp != std::string::npos) out = out.slice(0, sp);
  }
  out.append(end);
  return in.make_string(std::move(out));
}

Value f_wordcount(Interp&, const Value& v, const Args&) {
  return Value::integer(static_cast<int64_t>(py_split(to_str(v), nullptr, -1, false).size()));
}

Value f_format(Interp& in, const Value& v, const Args& args) {
  if (!args.pos.empty() && !args.kw.empty())
    fail("can't handle positional and keyword arguments at the same time");
  Value fmt_args;
  if (!args.kw.empty()) {
    Dict d;
    for (const auto& [k, x] : args.kw) d.set(Value::string(k), x);
    fmt_args = Value::dict(std::move(d));
  } else {
    fmt_args = Value::list(args.pos, true);
  }
  return in.make_string(percent_format(in, to_str(v), fmt_args));
}

Value f_escape(Interp& in, const Value& v, const Args&) {
  MarkedText s = html_escape(v);
  in.charge(s.size());
  return Value::markup(std::move(s));
}

Value f_forceescape(Interp& in, const Value& v, const Args&) {
  return f_escape(in, Value::string(to_str(v)), {});
}

Value f_tojson(Interp& in, const Value& v, const Args& args) {
  const auto a =
      args_of("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"},
              {Value::boolean(false), Value::none(), Value::none(), Value::boolean(false)});
  JsonFormat f;
  f.ensure_ascii = a[0].truthy();
  if (a[1].is_string()) {
    f.indent = a[1].text();
    f.pretty = true;
  } else if (!a[1].is_none()) {
    const int64_t n = std::clamp<int64_t>(want_int(a[1], "tojson() indent"), 0, 256);
    f.indent.assign(static_cast<size_t>(n), ' ');
    f.pretty = true;
  }
  f.item_sep = f.pretty ? "," : ", ";
  f.key_sep = ": ";
  if (!a[2].is_none()) {
    const std::vector<Value> seps = in.iterate(a[2]);
    if (seps.size() != 2)
      fail("tojson() separators must be an (item_separator, key_separator) pair");
    f.item_sep = want_str(seps[0], "separator").text();
    f.key_sep = want_str(seps[1], "separator").text();
  }
  f.sort_keys = a[3].truthy();
  return in.make_string(to_json(in, v, f));
}

// ---- numbers ------------------------------------------------------------------------------

bool parse_int(std::string_view s, int base, int64_t* out) {
  std::string t;
  const MarkedText m{std::string(s)};
  t = py_strip(m, nullptr, true, true).text();
  bool neg = false;
  size_t i = 0;
  if (i < t.size() && (t[i] == '+' || t[i] == '-')) neg = t[i++] == '-';
  if (base == 16 && t.compare(i, 2, "0x") == 0) i += 2;
  if (i >= t.size()) return false;
  int64_t v = 0;
  bool prev_us = true;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_' && !prev_us) {
      prev_us = true;
      continue;
    }
    int d = c >= '0' && c <= '9'                     ? c - '0'
            : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10
                                                     : 99;
    if (d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
    prev_us = false;
  }
  if (prev_us) return false;
  *out = neg ? -v : v;
  return true;
}

bool parse_float(std::string_view s, double* out) {
  const MarkedText m{std::string(s)};
  std::string t = py_strip(m, nullptr, true, true).text();
  std::string lower = to_lower(t);
  size_t i = lower[0] == '+' || lower[0] == '-' ? 1 : 0;
  const std::string body = lower.substr(i);
  const double sign = !lower.empty() && lower[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") {
    *out = sign * HUGE_VAL;
    return true;
  }
  if (body == "nan") {
    *out = std::nan("");
    return true;
  }
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  if (t.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end && *end == '\0' && t.find_first_of("xXpP") == std::string::npos;
}

Value f_int(Interp&, const Value& v, const Args& args) {
  const auto a = args_of("int", args, {"default", "base"}, {Value::integer(0), Value::integer(10)});
  int64_t i = 0;
  if (v.is_string()) {
    if (parse_int(v.text(), static_cast<int>(want_int(a[1], "int() base")), &i))
      return Value::integer(i);
    double f = 0;
    if (parse_float(v.text(), &f) && std::isfinite(f))
      return Value::integer(static_cast<int64_t>(f));
    return a[0];
  }
  if (v.is_integer()) return Value::integer(v.as_int());
  if (v.type() == Type::kFloat && std::isfinite(v.as_float()))
    return Value::integer(static_cast<int64_t>(v.as_float()));
  return a[0];
}

Value f_float(Interp&, const Value& v, const Args& args) {
  const auto a = args_of("float", args, {"default"}, {Value::real(0.0)});
  if (v.is_number()) return Value::real(v.as_float());
  double f = 0;
  if (v.is_string() && parse_float(v.text(), &f)) return Value::real(f);
  return a[0];
}

Value f_abs(Interp&, const Value& v, const Args&) {
  if (v.type() == Type::kFloat) return Value::real(std::fabs(v.as_float()));
  if (v.is_integer()) {
    if (v.as_int() == INT64_MIN) fail("integer overflow (the engine's integers are 64-bit)");
    return Value::integer(std::llabs(v.as_int()));
  }
  fail(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

// jinja2's round: Python's round() (half to even; an int stays an int) for "common", else
// math.ceil / math.floor of value * 10**precision divided back (a float).
Value f_round(Interp&, const Value& v, const Args& args) {
  const auto a =
      args_of("round", args, {"precision", "method"}, {Value::integer(0), Value::string("common")});
  if (!v.is_number()) fail(fmt::format("round: '{}' is not a number", v.type_name()));
  const int64_t prec = want_int(a[0], "round() precision");
  const std::string& m = want_str(a[1], "round() method").text();
  if (m != "common" && m != "ceil" && m != "floor") fail("method must be common, ceil or floor");
  const double p = std::pow(10.0, static_cast<double>(prec));
  const double x = v.as_float() * p;
  if (m == "common") {
    if (v.is_integer() && prec >= 0) return Value::integer(v.as_int());
    return Value::real(std::nearbyint(x) / p);
  }
  return Value::real((m == "ceil" ? std::ceil(x) : std::floor(x)) / p);
}

// ---- sequences ----------------------------------------------------------------------------

Value f_length(Interp&, const Value& v, const Args&) { return Value::integer(py_len(v)); }

Value f_list(Interp& in, const Value& v, const Args&) { return Value::list(in.iterate(v)); }

Value f_first(Interp& in, const Value& v, const Args&) {
  const std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(Interp& in, const Value& v, const Args&) {
  const std::vector<Value> items = in.iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_reverse(Interp& in, const Value& v, const Args&) {
  if (v.is_string()) {
    const std::vector<Value> chars = in.iterate(v);
    MarkedText out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out.append(it->str());
    return Value::string(std::move(out));
  }
  std::vector<Value> items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  return make_generator(std::move(items));
}

Value f_join(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("join", args, {"d", "attribute"}, {Value::string(""), Value::none()});
  const MarkedText sep = to_str(a[0]);
  std::function<Value(const Value&)> get;
  if (!a[1].is_none()) get = attr_getter(in, a[1]);
  MarkedText out;
  bool first = true;
  for (const Value& item : in.iterate(v)) {
    if (!first) out.append(sep);
    first = false;
    append_str(out, get ? get(item) : item);
    in.charge(out.size());
  }
  return Value::string(std::move(out));
}

Value f_default(Interp&, const Value& v, const Args& args) {
  const auto a = args_of("default", args, {"default_value", "boolean"},
                         {Value::string(""), Value::boolean(false)});
  if (v.is_undefined() || (a[1].truthy() && !v.truthy())) return a[0];
  return v;
}

Value f_items(Interp&, const Value& v, const Args&) {
  if (v.is_undefined()) return make_generator({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, x] : v.dict_value().items()) out.push_back(Value::list({k, x}, true));
  return make_generator(std::move(out));
}

Value f_dictsort(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("dictsort", args, {"case_sensitive", "by", "reverse"},
                         {Value::boolean(false), Value::string("key"), Value::boolean(false)});
  if (!v.is_dict()) fail("You can only sort by either 'key' or 'value' of a mapping");
  const std::string& by = want_str(a[1], "dictsort() by").text();
  if (by != "key" && by != "value") fail("You can only sort by either 'key' or 'value'");
  const bool cs = a[0].truthy();
  std::vector<Value> pairs;
  for (const auto& [k, x] : v.dict_value().items()) pairs.push_back(Value::list({k, x}, true));
  const size_t pos = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& l, const Value& r) {
    in.step();
    return compare(sort_key(l.items()[pos], cs), sort_key(r.items()[pos], cs)) < 0;
  });
  if (a[2].truthy()) std::reverse(pairs.begin(), pairs.end());
  return Value::list(std::move(pairs));
}

Value f_sort(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("sort", args, {"reverse", "case_sensitive", "attribute"},
                         {Value::boolean(false), Value::boolean(false), Value::none()});
  std::vector<Value> items = in.iterate(v);
  const bool cs = a[1].truthy();
  std::function<Value(const Value&)> get = [](const Value& x) { return x; };
  if (!a[2].is_none()) get = attr_getter(in, a[2]);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& x : items) keyed.emplace_back(sort_key(get(x), cs), std::move(x));
  const bool rev = a[0].truthy();
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& l, const auto& r) {
    in.step();
    return rev ? compare(r.first, l.first) < 0 : compare(l.first, r.first) < 0;
  });
  items.clear();
  for (auto& kv : keyed) items.push_back(std::move(kv.second));
  return Value::list(std::move(items));
}

Value f_unique(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("unique", args, {"case_sensitive", "attribute"},
                         {Value::boolean(false), Value::none()});
  std::function<Value(const Value&)> get = [](const Value& x) { return x; };
  if (!a[1].is_none()) get = attr_getter(in, a[1]);
  std::vector<Value> out;
  Dict seen;
  for (const Value& x : in.iterate(v)) {
    const Value k = sort_key(get(x), a[0].truthy());
    if (seen.find(k)) continue;
    seen.set(k, Value::none());
    out.push_back(x);
  }
  return make_generator(std::move(out));
}

Value min_max(Interp& in, const Value& v, const Args& args, bool max) {
  const auto a = args_of(max ? "max" : "min", args, {"case_sensitive", "attribute"},
                         {Value::boolean(false), Value::none()});
  std::function<Value(const Value&)> get = [](const Value& x) { return x; };
  if (!a[1].is_none()) get = attr_getter(in, a[1]);
  const std::vector<Value> items = in.iterate(v);
  if (items.empty())
    return Value::undefined(fmt::format("No aggregated item, sequence was empty."));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const int c =
        compare(sort_key(get(items[i]), a[0].truthy()), sort_key(get(items[best]), a[0].truthy()));
    if (max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}
Value f_max(Interp& in, const Value& v, const Args& args) { return min_max(in, v, args, true); }
Value f_min(Interp& in, const Value& v, const Args& args) { return min_max(in, v, args, false); }

Value f_sum(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("sum", args, {"attribute", "start"}, {Value::none(), Value::integer(0)});
  std::function<Value(const Value&)> get = [](const Value& x) { return x; };
  if (!a[0].is_none()) get = attr_getter(in, a[0]);
  Value total = a[1];
  for (const Value& x : in.iterate(v)) {
    const Value y = get(x);
    if (!total.is_number() || !y.is_number())
      fail(fmt::format("unsupported operand type(s) for +: '{}' and '{}'", total.type_name(),
                       y.type_name()));
    int64_t r = 0;
    if (total.is_integer() && y.is_integer()) {
      if (__builtin_add_overflow(total.as_int(), y.as_int(), &r))
        fail("integer overflow (the engine's integers are 64-bit)");
      total = Value::integer(r);
    } else {
      total = Value::real(total.as_float() + y.as_float());
    }
  }
  return total;
}

Value f_batch(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("batch", args, {"linecount", "fill_with"}, {Value::none()});
  const int64_t n = want_int(a[0], "batch() linecount");
  if (n <= 0) fail("batch() linecount must be positive");
  std::vector<Value> out, cur;
  for (const Value& x : in.iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (!a[1].is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(a[1]);
    out.push_back(Value::list(std::move(cur)));
  }
  return make_generator(std::move(out));
}

// map(attribute=..., default=...) or map('filter', *args).
Value f_map(Interp& in, const Value& v, const Args& args) {
  std::vector<Value> out;
  // jinja2 maps nothing over a false value (None, "", an empty list) without iterating it.
  const std::vector<Value> items = v.truthy() ? in.iterate(v) : std::vector<Value>();
  if (args.pos.empty()) {
    Value attribute, dflt;
    bool has_attr = false, has_default = false;
    for (const auto& [k, x] : args.kw) {
      if (k == "attribute") {
        attribute = x;
        has_attr = true;
      } else if (k == "default") {
        dflt = x;
        has_default = true;
      } else {
        fail(fmt::format("Unexpected keyword argument '{}'", k));
      }
    }
    if (!has_attr) fail("map requires a filter argument");
    auto get = attr_getter(in, attribute, has_default ? &dflt : nullptr);
    for (const Value& x : items) out.push_back(get(x));
    return make_generator(std::move(out));
  }
  const std::string name = want_str(args.pos[0], "map() filter").text();
  Args rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const Value& x : items) out.push_back(in.apply_filter(name, x, rest));
  return make_generator(std::move(out));
}

// select / reject / selectattr / rejectattr.
Value select(Interp& in, const Value& v, const Args& args, bool attr, bool keep) {
  std::vector<Value> out;
  size_t i = 0;
  std::function<Value(const Value&)> get = [](const Value& x) { return x; };
  if (attr) {
    if (args.pos.empty()) fail("Missing parameter for attribute name");
    get = attr_getter(in, args.pos[0]);
    i = 1;
  }
  std::string test;
  if (i < args.pos.size()) test = want_str(args.pos[i++], "test name").text();
  Args rest;
  rest.pos.assign(args.pos.begin() + std::min(i, args.pos.size()), args.pos.end());
  rest.kw = args.kw;
  if (!v.truthy()) return make_generator({});  // jinja2 does not iterate a false value
  for (const Value& x : in.iterate(v)) {
    const Value y = get(x);
    const bool ok = test.empty() ? y.truthy() : in.apply_test(test, y, rest);
    if (ok == keep) out.push_back(x);
  }
  return make_generator(std::move(out));
}
Value f_select(Interp& in, const Value& v, const Args& a) { return select(in, v, a, false, true); }
Value f_reject(Interp& in, const Value& v, const Args& a) { return select(in, v, a, false, false); }
Value f_selectattr(Interp& in, const Value& v, const Args& a) {
  return select(in, v, a, true, true);
}
Value f_rejectattr(Interp& in, const Value& v, const Args& a) {
  return select(in, v, a, true, false);
}

// jinja2's attr: a Python attribute only (never an item of a dict).
Value f_attr(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("attr", args, {"name"}, {});
  const std::string name = to_str(a[0]).text();
  if (v.is_undefined()) return Value::undefined(v.undefined_hint());
  if (name.starts_with("__"))
    return Value::undefined(
        fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, v.type_name()));
  if (v.type() == Type::kObject) return v.obj().attr(in, v, name);
  Value m = method(v, name);
  if (!m.is_undefined()) return m;
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", v.type_name(), name));
}

Value f_groupby(Interp& in, const Value& v, const Args& args) {
  const auto a = args_of("groupby", args, {"attribute", "default", "case_sensitive"},
                         {Value::none(), Value::boolean(false)});
  const Value dflt = a[1];
  auto get = attr_getter(in, a[0], dflt.is_none() ? nullptr : &dflt);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& x : in.iterate(v)) keyed.emplace_back(sort_key(get(x), a[2].truthy()), x);
  std::stable_sort(keyed.begin(), keyed.end(),
                   [](const auto& l, const auto& r) { return compare(l.first, r.first) < 0; });
  std::vector<Value> groups;
  for (size_t i = 0; i < keyed.size();) {
    size_t j = i;
    std::vector<Value> members;
    while (j < keyed.size() && equal(keyed[j].first, keyed[i].first))
      members.push_back(keyed[j++].second);
    Value grouper = a[2].truthy() ? keyed[i].first : get(members.front());
    groups.push_back(Value::named_tuple({std::move(grouper), Value::list(std::move(members))},
                                        {"grouper", "list"}));
    i = j;
  }
  return Value::list(std::move(groups));
}

Value f_pprint(Interp& in, const Value& v, const Args&) {
  MarkedText out;
  append_repr(out, v);
  return in.make_string(std::move(out));
}

const std::map<std::string_view, FilterFn>& filters() {
  static const std::map<std::string_view, FilterFn> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"batch", f_batch},
      {"capitalize", keeps_markup<f_capitalize>},
      {"center", keeps_markup<f_center>},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"forceescape", f_forceescape},
      {"format", f_format},
      {"groupby", f_groupby},
      {"indent", keeps_markup<f_indent>},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", keeps_markup<f_lower>},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"pprint", f_pprint},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", keeps_markup<f_title>},
      {"tojson", f_tojson},
      {"trim", keeps_markup<f_trim>},
      {"truncate", f_truncate},
      {"unique", f_unique},
      {"upper", keeps_markup<f_upper>},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  const auto& t = filters();
  auto it = t.find(name);
  return it == t.end() ? nullptr : it->second;
}

}  // namespace offgen::jinja
