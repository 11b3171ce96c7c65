// Methods of str, list and dict values as the immutable sandbox exposes them: bound methods
// with Python's semantics; the ones that modify a list or dict fail with jinja2's message.
#include <fmt/format.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <set>

#include "runtime/text/jinja/builtins.h"
#include "runtime/text/jinja/builtins_util.h"
#include "runtime/text/jinja/pystr.h"

namespace offgen::jinja {
namespace {

using MethodFn = Value (*)(Interp& in, const Value& self, const Args& args);

class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string_view name, MethodFn fn)
      : self_(std::move(self)), name_(name), fn_(fn) {}
  std::string type_name() const override { return "builtin_function_or_method"; }
  void release() override { self_ = Value(); }
  bool callable() const override { return true; }
  Value call(Interp& in, Args args) override {
    if (!fn_)
      fail(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name_,
                       self_.type_name()));
    in.step();
    return fn_(in, self_, args);
  }
  std::string str() const override {
    return fmt::format("<built-in method {} of {} object>", name_, self_.type_name());
  }

 private:
  Value self_;
  std::string name_;
  MethodFn fn_;
};

const std::string* opt_str(const Value& v, std::string_view what, std::string& buf) {
  if (v.is_none()) return nullptr;
  buf = want_str(v, what).text();
  return &buf;
}

// ---- str ----------------------------------------------------------------------------------

Value s_strip(Interp& in, const Value& s, const Args& a, bool l, bool r, const char* fn) {
  const auto v = args_of(fn, a, {"chars"}, {Value::none()});
  std::string buf;
  return in.make_string(py_strip(s.str(), opt_str(v[0], "chars", buf), l, r));
}
Value m_strip(Interp& in, const Value& s, const Args& a) {
  return s_strip(in, s, a, true, true, "strip");
}
Value m_lstrip(Interp& in, const Value& s, const Args& a) {
  return s_strip(in, s, a, true, false, "lstrip");
}
Value m_rstrip(Interp& in, const Value& s, const Args& a) {
  return s_strip(in, s, a, false, true, "rstrip");
}

Value s_split(Interp& in, const Value& s, const Args& a, bool right) {
  const auto v = args_of(right ? "rsplit" : "split", a, {"sep", "maxsplit"},
                         {Value::none(), Value::integer(-1)});
  std::string buf;
  in.charge(s.text().size());
  return Value::list(
      py_split(s.str(), opt_str(v[0], "sep", buf), want_int(v[1], "maxsplit"), right));
}
Value m_split(Interp& in, const Value& s, const Args& a) { return s_split(in, s, a, false); }
Value m_rsplit(Interp& in, const Value& s, const Args& a) { return s_split(in, s, a, true); }

Value m_splitlines(Interp& in, const Value& s, const Args& a) {
  const auto v = args_of("splitlines", a, {"keepends"}, {Value::boolean(false)});
  in.charge(s.text().size());
  return Value::list(py_splitlines(s.str(), v[0].truthy()));
}

// startswith / endswith: a str or a tuple of them, optional start and end (code points).
Value s_affix(Interp&, const Value& s, const Args& a, bool ends) {
  const auto v = args_of(ends ? "endswith" : "startswith", a, {"prefix", "start", "end"},
                         {Value::none(), Value::none()});
  std::string_view text = s.text();
  if (!v[1].is_none() || !v[2].is_none()) {
    const std::vector<size_t> at = cp_starts(text);
    const int64_t n = static_cast<int64_t>(at.size()) - 1;
    const int64_t b = v[1].is_none() ? 0 : want_int(v[1], "start");
    const int64_t e = v[2].is_none() ? n : want_int(v[2], "end");
    const SliceIdx idx = slice_indices(n, &b, &e, 1);
    if (idx.start > n) return Value::boolean(false);
    text = idx.stop > idx.start ? text.substr(at[idx.start], at[idx.stop] - at[idx.start])
                                : text.substr(at[std::min(idx.start, n)], 0);
  }
  std::vector<Value> options;
  if (v[0].is_list() && v[0].is_tuple()) {
    options = v[0].items();
  } else if (v[0].is_string()) {
    options.push_back(v[0]);
  } else {
    fail(fmt::format("{} first arg must be str or a tuple of str, not {}",
                     ends ? "endswith" : "startswith", v[0].type_name()));
  }
  for (const Value& o : options) {
    const std::string& p = want_str(o, "prefix").text();
    if (ends ? text.ends_with(p) : text.starts_with(p)) return Value::boolean(true);
  }
  return Value::boolean(false);
}
Value m_startswith(Interp& in, const Value& s, const Args& a) { return s_affix(in, s, a, false); }
Value m_endswith(Interp& in, const Value& s, const Args& a) { return s_affix(in, s, a, true); }

// find / rfind / index / rindex / count over code-point positions.
Value s_find(Interp&, const Value& s, const Args& a, bool reverse, bool raise, const char* fn) {
  const auto v = args_of(fn, a, {"sub", "start", "end"}, {Value::none(), Value::none()});
  const std::string& sub = want_str(v[0], "substring").text();
  const std::string& text = s.text();
  const std::vector<size_t> at = cp_starts(text);
  const int64_t n = static_cast<int64_t>(at.size()) - 1;
  const int64_t b0 = v[1].is_none() ? 0 : want_int(v[1], "start");
  const int64_t e0 = v[2].is_none() ? n : want_int(v[2], "end");
  const SliceIdx idx = slice_indices(n, &b0, &e0, 1);
  int64_t found = -1;
  if (idx.start <= idx.stop) {
    const size_t lo = at[idx.start], hi = at[idx.stop];
    const std::string_view window(text.data() + lo, hi - lo);
    const size_t p = reverse ? window.rfind(sub) : window.find(sub);
    if (p != std::string_view::npos)
      found = std::lower_bound(at.begin(), at.end(), lo + p) - at.begin();
  }
  if (found < 0 && raise) fail("substring not found");
  return Value::integer(found);
}
Value m_find(Interp& in, const Value& s, const Args& a) {
  return s_find(in, s, a, false, false, "find");
}
Value m_rfind(Interp& in, const Value& s, const Args& a) {
  return s_find(in, s, a, true, false, "rfind");
}
Value m_index(Interp& in, const Value& s, const Args& a) {
  return s_find(in, s, a, false, true, "index");
}
Value m_rindex(Interp& in, const Value& s, const Args& a) {
  return s_find(in, s, a, true, true, "rindex");
}

Value m_count(Interp&, const Value& s, const Args& a) {
  const auto v = args_of("count", a, {"sub"}, {});
  const std::string& sub = want_str(v[0], "substring").text();
  const std::string& text = s.text();
  if (sub.empty()) return Value::integer(cp_count(text) + 1);
  int64_t n = 0;
  for (size_t p = text.find(sub); p != std::string::npos; p = text.find(sub, p + sub.size())) ++n;
  return Value::integer(n);
}

Value m_replace(Interp& in, const Value& s, const Args& a) {
  const auto v = args_of("replace", a, {"old", "new", "count"}, {Value::integer(-1)});
  return in.make_string(py_replace(in, s.str(), want_str(v[0], "replace() old").text(),
                                   want_str(v[1], "replace() new"), want_int(v[2], "count")));
}

Value m_upper(Interp& in, const Value& s, const Args& a) {
  args_of("upper", a, {}, {});
  return in.make_string(remark(to_upper(s.text()), s.str()));
}
Value m_lower(Interp& in, const Value& s, const Args& a) {
  args_of("lower", a, {}, {});
  return in.make_string(remark(to_lower(s.text()), s.str()));
}
Value m_capitalize(Interp& in, const Value& s, const Args& a) {
  args_of("capitalize", a, {}, {});
  if (s.text().empty()) return s;
  const int n = utf8::decode(s.text(), 0).len;
  return in.make_string(
      remark(to_upper(s.text().substr(0, n)) + to_lower(s.text().substr(n)), s.str()));
}
// Python's str.title: a letter after a non-letter is upper-cased, other letters lower-cased.
Value m_title(Interp& in, const Value& s, const Args& a) {
  args_of("title", a, {}, {});
  const std::string& t = s.text();
  std::string out;
  bool prev_letter = false;
  for (size_t i = 0; i < t.size();) {
    const utf8::Decoded d = utf8::decode(t, i);
    const std::string_view ch(t.data() + i, d.len);
    const bool letter = d.valid && u_isalpha(static_cast<UChar32>(d.cp));
    out += letter ? (prev_letter ? to_lower(ch) : to_upper(ch)) : std::string(ch);
    prev_letter = letter;
    i += d.len;
  }
  return in.make_string(remark(std::move(out), s.str()));
}
Value m_swapcase(Interp& in, const Value& s, const Args& a) {
  args_of("swapcase", a, {}, {});
  const std::string& t = s.text();
  std::string out;
  for (size_t i = 0; i < t.size();) {
    const int n = utf8::decode(t, i).len;
    const std::string ch = t.substr(i, n);
    const std::string up = to_upper(ch);
    out += up != ch ? up : to_lower(ch);
    i += n;
  }
  return in.make_string(remark(std::move(out), s.str()));
}

// is* predicates: every character matches and there is at least one.
template <bool (*Pred)(char32_t)>
Value s_is(Interp&, const Value& s, const Args&) {
  const std::string& t = s.text();
  if (t.empty()) return Value::boolean(false);
  for (size_t i = 0; i < t.size();) {
    const utf8::Decoded d = utf8::decode(t, i);
    if (!d.valid || !Pred(d.cp)) return Value::boolean(false);
    i += d.len;
  }
  return Value::boolean(true);
}
bool p_alpha(char32_t c) { return u_isalpha(static_cast<UChar32>(c)); }
bool p_digit(char32_t c) { return u_isdigit(static_cast<UChar32>(c)); }
bool p_alnum(char32_t c) { return u_isalnum(static_cast<UChar32>(c)); }
bool p_space(char32_t c) { return utf8::is_python_space(c); }
bool p_ascii(char32_t c) { return c < 0x80; }

Value s_case_is(const Value& s, bool upper) {
  const std::string& t = s.text();
  bool cased = false;
  for (size_t i = 0; i < t.size();) {
    const utf8::Decoded d = utf8::decode(t, i);
    const auto c = static_cast<UChar32>(d.cp);
    if (upper ? u_islower(c) : u_isupper(c)) return Value::boolean(false);
    cased = cased || u_isupper(c) || u_islower(c);
    i += d.len;
  }
  return Value::boolean(cased);
}
Value m_isupper(Interp&, const Value& s, const Args&) { return s_case_is(s, true); }
Value m_islower(Interp&, const Value& s, const Args&) { return s_case_is(s, false); }

Value s_just(Interp& in, const Value& s, const Args& a, char align, const char* fn) {
  const auto v = args_of(fn, a, {"width", "fillchar"}, {Value::string(" ")});
  const std::string& f = want_str(v[1], "fillchar").text();
  if (cp_count(f) != 1) fail("The fill character must be exactly one character long");
  const int64_t w = want_int(v[0], "width");
  in.charge(static_cast<size_t>(std::max<int64_t>(0, w)) * f.size());
  return in.make_string(py_pad(s.str(), w, utf8::decode(f, 0).cp, align));
}
Value m_center(Interp& in, const Value& s, const Args& a) {
  return s_just(in, s, a, '^', "center");
}
Value m_ljust(Interp& in, const Value& s, const Args& a) { return s_just(in, s, a, '<', "ljust"); }
Value m_rjust(Interp& in, const Value& s, const Args& a) { return s_just(in, s, a, '>', "rjust"); }

Value m_zfill(Interp& in, const Value& s, const Args& a) {
  const auto v = args_of("zfill", a, {"width"}, {});
  const int64_t w = want_int(v[0], "width");
  const std::string& t = s.text();
  const int64_t n = cp_count(t);
  if (w <= n) return s;
  in.charge(static_cast<size_t>(w));
  const bool sign = !t.empty() && (t[0] == '+' || t[0] == '-');
  MarkedText out(sign ? t.substr(0, 1) : std::string());
  out.append(std::string(w - n, '0'));
  out.append(s.str(), sign ? 1 : 0, t.size());
  return Value::string(std::move(out));
}

Value m_join(Interp& in, const Value& s, const Args& a) {
  const auto v = args_of("join", a, {"iterable"}, {});
  MarkedText out;
  size_t i = 0;
  for (const Value& x : in.iterate(v[0])) {
    if (!x.is_string())
      fail(fmt::format("sequence item {}: expected str instance, {} found", i, x.type_name()));
    if (i++) out.append(s.str());
    out.append(x.str());
    in.charge(out.size());
  }
  return Value::string(std::move(out));
}

Value s_partition(Interp&, const Value& s, const Args& a, bool right) {
  const auto v = args_of(right ? "rpartition" : "partition", a, {"sep"}, {});
  const std::string& sep = want_str(v[0], "sep").text();
  if (sep.empty()) fail("empty separator");
  const std::string& t = s.text();
  const size_t p = right ? t.rfind(sep) : t.find(sep);
  const Value empty = Value::string(std::string());
  if (p == std::string::npos)
    return right ? Value::list({empty, empty, s}, true) : Value::list({s, empty, empty}, true);
  return Value::list(
      {Value::string(s.str().slice(0, p)), Value::string(s.str().slice(p, p + sep.size())),
       Value::string(s.str().slice(p + sep.size(), t.size()))},
      true);
}
Value m_partition(Interp& in, const Value& s, const Args& a) {
  return s_partition(in, s, a, false);
}
Value m_rpartition(Interp& in, const Value& s, const Args& a) {
  return s_partition(in, s, a, true);
}

Value s_remove_affix(Interp&, const Value& s, const Args& a, bool suffix) {
  const auto v = args_of(suffix ? "removesuffix" : "removeprefix", a, {"affix"}, {});
  const std::string& x = want_str(v[0], "affix").text();
  const std::string& t = s.text();
  if (x.empty()) return s;
  if (!suffix && t.starts_with(x)) return Value::string(s.str().slice(x.size(), t.size()));
  if (suffix && t.ends_with(x)) return Value::string(s.str().slice(0, t.size() - x.size()));
  return s;
}
Value m_removeprefix(Interp& in, const Value& s, const Args& a) {
  return s_remove_affix(in, s, a, false);
}
Value m_removesuffix(Interp& in, const Value& s, const Args& a) {
  return s_remove_affix(in, s, a, true);
}

Value m_format(Interp& in, const Value& s, const Args& a) {
  return in.make_string(str_format(in, s.str(), a));
}

Value m_format_map(Interp& in, const Value& s, const Args& a) {
  const auto v = args_of("format_map", a, {"mapping"}, {});
  if (!v[0].is_dict()) fail("format_map() argument must be a mapping");
  Args kw;
  for (const auto& [k, x] : v[0].dict_value().items()) kw.kw.emplace_back(to_str(k).text(), x);
  return in.make_string(str_format(in, s.str(), kw));
}

// ---- list and dict ------------------------------------------------------------------------

Value l_count(Interp& in, const Value& l, const Args& a) {
  const auto v = args_of("count", a, {"value"}, {});
  int64_t n = 0;
  for (const Value& x : l.items()) {
    in.step();
    n += equal(x, v[0]);
  }
  return Value::integer(n);
}

Value l_index(Interp& in, const Value& l, const Args& a) {
  const auto v = args_of("index", a, {"value"}, {});
  for (size_t i = 0; i < l.items().size(); ++i) {
    in.step();
    if (equal(l.items()[i], v[0])) return Value::integer(static_cast<int64_t>(i));
  }
  fail(fmt::format("{} is not in list", to_str(v[0]).text()));
}

Value l_copy(Interp& in, const Value& l, const Args&) {
  in.charge_items(l.items().size());
  return Value::list(l.items(), l.is_tuple());
}

Value d_get(Interp&, const Value& d, const Args& a) {
  const auto v = args_of("get", a, {"key", "default"}, {Value::none()});
  const Value* x = d.dict_value().find(v[0]);
  return x ? *x : v[1];
}

Value d_items(Interp& in, const Value& d, const Args& a) {
  args_of("items", a, {}, {});
  std::vector<Value> out;
  for (const auto& [k, x] : d.dict_value().items()) out.push_back(Value::list({k, x}, true));
  in.charge_items(out.size());
  return Value::list(std::move(out));
}

Value d_keys(Interp& in, const Value& d, const Args& a) {
  args_of("keys", a, {}, {});
  return Value::list(in.iterate(d));
}

Value d_values(Interp& in, const Value& d, const Args& a) {
  args_of("values", a, {}, {});
  std::vector<Value> out;
  for (const auto& kv : d.dict_value().items()) out.push_back(kv.second);
  in.charge_items(out.size());
  return Value::list(std::move(out));
}

Value d_copy(Interp& in, const Value& d, const Args&) {
  in.charge_items(d.dict_value().size());
  return d;
}

struct MethodEntry {
  std::string_view name;
  MethodFn fn;  // nullptr: unsafe in the immutable sandbox
};

constexpr MethodEntry kStrMethods[] = {
    {"capitalize", m_capitalize},
    {"center", m_center},
    {"count", m_count},
    {"endswith", m_endswith},
    {"find", m_find},
    {"format", m_format},
    {"format_map", m_format_map},
    {"index", m_index},
    {"isalnum", s_is<p_alnum>},
    {"isalpha", s_is<p_alpha>},
    {"isascii", s_is<p_ascii>},
    {"isdecimal", s_is<p_digit>},
    {"isdigit", s_is<p_digit>},
    {"islower", m_islower},
    {"isnumeric", s_is<p_digit>},
    {"isspace", s_is<p_space>},
    {"isupper", m_isupper},
    {"join", m_join},
    {"ljust", m_ljust},
    {"lower", m_lower},
    {"lstrip", m_lstrip},
    {"partition", m_partition},
    {"removeprefix", m_removeprefix},
    {"removesuffix", m_removesuffix},
    {"replace", m_replace},
    {"rfind", m_rfind},
    {"rindex", m_rindex},
    {"rjust", m_rjust},
    {"rpartition", m_rpartition},
    {"rsplit", m_rsplit},
    {"rstrip", m_rstrip},
    {"split", m_split},
    {"splitlines", m_splitlines},
    {"startswith", m_startswith},
    {"strip", m_strip},
    {"swapcase", m_swapcase},
    {"title", m_title},
    {"upper", m_upper},
    {"zfill", m_zfill},
    {"casefold", m_lower},
};

constexpr MethodEntry kListMethods[] = {
    {"count", l_count},  {"index", l_index},   {"copy", l_copy},    {"append", nullptr},
    {"clear", nullptr},  {"extend", nullptr},  {"insert", nullptr}, {"pop", nullptr},
    {"remove", nullptr}, {"reverse", nullptr}, {"sort", nullptr},
};

constexpr MethodEntry kTupleMethods[] = {{"count", l_count}, {"index", l_index}};

constexpr MethodEntry kDictMethods[] = {
    {"get", d_get},          {"items", d_items},  {"keys", d_keys},      {"values", d_values},
    {"copy", d_copy},        {"clear", nullptr},  {"pop", nullptr},      {"popitem", nullptr},
    {"setdefault", nullptr}, {"update", nullptr}, {"fromkeys", nullptr},
};

template <size_t N>
Value find_in(const MethodEntry (&table)[N], const Value& obj, std::string_view name) {
  for (const MethodEntry& m : table)
    if (m.name == name) return Value::object(std::make_shared<BoundMethod>(obj, name, m.fn));
  return Value();
}

}  // namespace

Value method(const Value& obj, std::string_view name) {
  switch (obj.type()) {
    case Type::kString:
      return find_in(kStrMethods, obj, name);
    case Type::kList:
      return obj.is_tuple() ? find_in(kTupleMethods, obj, name) : find_in(kListMethods, obj, name);
    case Type::kDict:
      return find_in(kDictMethods, obj, name);
    case Type::kUndefined:
    case Type::kNone:
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat:
    case Type::kObject:
      break;
  }
  return Value();
}

}  // namespace offgen::jinja
