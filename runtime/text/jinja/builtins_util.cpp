// Python string operations over marked UTF-8 text, argument binding and attribute getters.
#include "runtime/text/jinja/builtins_util.h"

#include <fmt/format.h>
#include <unicode/ustring.h>

#include "runtime/text/jinja/pystr.h"
#include "runtime/text/utf8.h"

namespace offgen::jinja {

const MarkedText& want_str(const Value& v, std::string_view what) {
  if (v.is_undefined()) Interp::undefined_error(v);
  if (!v.is_string()) fail(fmt::format("{} must be str, not {}", what, v.type_name()));
  return v.str();
}

int64_t want_int(const Value& v, std::string_view what) {
  if (v.is_undefined()) Interp::undefined_error(v);
  if (!v.is_integer())
    fail(fmt::format("{}: '{}' object cannot be interpreted as an integer", what, v.type_name()));
  return v.as_int();
}

std::vector<Value> args_of(std::string_view fn, const Args& args,
                           std::initializer_list<std::string_view> names,
                           std::vector<Value> defaults) {
  return bind_args(fn, args, names, std::move(defaults));
}

namespace {

std::string case_map(std::string_view s, bool upper) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out) {
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    }
    return out;
  }
  UErrorCode err = U_ZERO_ERROR;
  int32_t n16 = 0;
  u_strFromUTF8(nullptr, 0, &n16, s.data(), static_cast<int32_t>(s.size()), &err);
  err = U_ZERO_ERROR;
  std::vector<UChar> u16(n16 + 1);
  u_strFromUTF8(u16.data(), n16 + 1, nullptr, s.data(), static_cast<int32_t>(s.size()), &err);
  if (U_FAILURE(err)) return std::string(s);
  auto map = upper ? u_strToUpper : u_strToLower;
  const int32_t cap = map(nullptr, 0, u16.data(), n16, "", &err);
  err = U_ZERO_ERROR;
  std::vector<UChar> m(cap + 1);
  map(m.data(), cap + 1, u16.data(), n16, "", &err);
  if (U_FAILURE(err)) return std::string(s);
  int32_t n8 = 0;
  u_strToUTF8(nullptr, 0, &n8, m.data(), cap, &err);
  err = U_ZERO_ERROR;
  std::string out(n8, '\0');
  u_strToUTF8(out.data(), n8 + 1, nullptr, m.data(), cap, &err);
  return out;
}

bool is_space_at(std::string_view s, size_t i, int* len) {
  const utf8::Decoded d = utf8::decode(s, i);
  *len = d.len;
  return d.valid && utf8::is_python_space(d.cp);
}

// Code points of `chars` (for strip(chars)).
bool in_chars(std::string_view chars, std::string_view ch) {
  for (size_t i = 0; i < chars.size();) {
    const int n = utf8::decode(chars, i).len;
    if (chars.substr(i, n) == ch) return true;
    i += n;
  }
  return false;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

}  // namespace

std::string to_upper(std::string_view s) { return case_map(s, true); }
std::string to_lower(std::string_view s) { return case_map(s, false); }

MarkedText remark(std::string text, const MarkedText& src) {
  if (!src.marked()) return MarkedText(std::move(text));
  return MarkedText(std::move(text), src.marks().front().tag);
}

MarkedText py_strip(const MarkedText& m, const std::string* chars, bool left, bool right) {
  const std::string& s = m.text();
  size_t b = 0, e = s.size();
  auto strip_here = [&](size_t i, int* len) {
    if (!chars) return is_space_at(s, i, len);
    *len = utf8::decode(s, i).len;
    return in_chars(*chars, std::string_view(s).substr(i, *len));
  };
  if (left) {
    int n = 0;
    while (b < e && strip_here(b, &n)) b += n;
  }
  if (right) {
    while (e > b) {
      size_t st = e - 1;
      while (st > b && (static_cast<uint8_t>(s[st]) & 0xC0) == 0x80 && e - st < 4) --st;
      int n = 0;
      if (!strip_here(st, &n) || st + n != e) break;
      e = st;
    }
  }
  return m.slice(b, e);
}

std::vector<Value> py_split(const MarkedText& m, const std::string* sep, int64_t maxsplit,
                            bool from_right) {
  const std::string& s = m.text();
  std::vector<Value> out;
  if (sep) {
    if (sep->empty()) fail("empty separator");
    std::vector<std::pair<size_t, size_t>> parts;
    if (!from_right) {
      size_t b = 0;
      for (size_t at = s.find(*sep);
           at != std::string::npos &&
           (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit);
           at = s.find(*sep, b)) {
        parts.emplace_back(b, at);
        b = at + sep->size();
      }
      parts.emplace_back(b, s.size());
    } else {
      size_t e = s.size();
      std::vector<std::pair<size_t, size_t>> rev;
      while (maxsplit < 0 || static_cast<int64_t>(rev.size()) < maxsplit) {
        if (e < sep->size()) break;
        const size_t at = s.rfind(*sep, e - sep->size());
        if (at == std::string::npos) break;
        rev.emplace_back(at + sep->size(), e);
        e = at;
      }
      rev.emplace_back(0, e);
      parts.assign(rev.rbegin(), rev.rend());
    }
    for (auto [b, e] : parts) out.push_back(Value::string(m.slice(b, e)));
    return out;
  }
  // Whitespace: runs of whitespace separate, ends are ignored.
  std::vector<std::pair<size_t, size_t>> words;
  size_t i = 0;
  int n = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space_at(s, i, &n)) i += n;
    if (i >= s.size()) break;
    size_t b = i;
    while (i < s.size() && !is_space_at(s, i, &n)) i += n;
    words.emplace_back(b, i);
  }
  if (maxsplit >= 0 && static_cast<int64_t>(words.size()) > maxsplit + 1) {
    // The piece past the last split runs to the end (split) or from the start (rsplit) of the
    // text, whitespace included.
    if (!from_right) {
      const size_t b = words[maxsplit].first;
      words.resize(maxsplit);
      words.emplace_back(b, s.size());
    } else {
      const size_t keep = words.size() - maxsplit;
      std::vector<std::pair<size_t, size_t>> w{{0, words[keep - 1].second}};
      w.insert(w.end(), words.begin() + keep, words.end());
      words = std::move(w);
    }
  }
  for (auto [b, e] : words) out.push_back(Value::string(m.slice(b, e)));
  return out;
}

std::vector<Value> py_splitlines(const MarkedText& m, bool keepends) {
  const std::string& s = m.text();
  std::vector<Value> out;
  size_t b = 0, i = 0;
  while (i < s.size()) {
    const utf8::Decoded d = utf8::decode(s, i);
    if (d.valid && is_line_break(d.cp)) {
      size_t end = i + d.len;
      if (d.cp == '\r' && end < s.size() && s[end] == '\n') ++end;
      out.push_back(Value::string(m.slice(b, keepends ? end : i)));
      b = i = end;
    } else {
      i += d.len;
    }
  }
  if (b < s.size()) out.push_back(Value::string(m.slice(b, s.size())));
  return out;
}

MarkedText py_replace(Interp& in, const MarkedText& m, std::string_view old, const MarkedText& repl,
                      int64_t count) {
  const std::string& s = m.text();
  MarkedText out;
  if (old.empty()) {  // inserts `repl` before every character and at the end
    size_t i = 0;
    int64_t done = 0;
    while (true) {
      if (count >= 0 && done >= count) break;
      out.append(repl);
      ++done;
      if (i >= s.size()) break;
      const int n = utf8::decode(s, i).len;
      out.append(m, i, i + n);
      i += n;
      in.charge(out.size());
    }
    out.append(m, std::min(i, s.size()), s.size());
    return out;
  }
  size_t b = 0;
  int64_t done = 0;
  for (size_t at = s.find(old); at != std::string::npos && (count < 0 || done < count);
       at = s.find(old, b)) {
    out.append(m, b, at);
    out.append(repl);
    b = at + old.size();
    ++done;
    in.charge(out.size());
  }
  out.append(m, b, s.size());
  return out;
}

MarkedText py_pad(const MarkedText& s, int64_t width, char32_t fill, char align) {
  const int64_t len = cp_count(s.text());
  if (width <= len) return s;
  const int64_t marg = width - len;
  int64_t left = 0;
  if (align == '>') left = marg;
  if (align == '^') left = marg / 2 + (marg & width & 1);
  std::string f;
  utf8::append(f, fill);
  MarkedText out;
  std::string pad;
  for (int64_t i = 0; i < left; ++i) pad += f;
  out.append(pad);
  out.append(s);
  pad.clear();
  for (int64_t i = 0; i < marg - left; ++i) pad += f;
  out.append(pad);
  return out;
}

std::function<Value(const Value&)> attr_getter(Interp& in, const Value& attribute,
                                               const Value* dflt) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    const std::string& a = attribute.text();
    size_t b = 0;
    while (true) {
      const size_t dot = a.find('.', b);
      const std::string part = a.substr(b, dot == std::string::npos ? std::string::npos : dot - b);
      bool digits = !part.empty();
      for (char c : part) digits = digits && c >= '0' && c <= '9';
      parts.push_back(digits && part.size() < 18 ? Value::integer(std::stoll(part))
                                                 : Value::string(part));
      if (dot == std::string::npos) break;
      b = dot + 1;
    }
  } else {
    parts.push_back(attribute);
  }
  const Value fallback = dflt ? *dflt : Value();
  const bool has_default = dflt != nullptr;
  return [&in, parts, fallback, has_default](const Value& item) {
    Value v = item;
    for (const Value& p : parts) {
      v = in.getitem(v, p);
      if (has_default && v.is_undefined()) return fallback;
    }
    return v;
  };
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(to_lower(v.text()));
  return v;
}

int64_t py_len(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
      return 0;
    case Type::kString:
      return cp_count(v.text());
    case Type::kList:
      return static_cast<int64_t>(v.items().size());
    case Type::kDict:
      return static_cast<int64_t>(v.dict_value().size());
    case Type::kNone:
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat:
    case Type::kObject:
      break;
  }
  fail(fmt::format("object of type '{}' has no len()", v.type_name()));
}

}  // namespace offgen::jinja
