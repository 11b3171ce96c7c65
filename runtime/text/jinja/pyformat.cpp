// Python's text formatting as templates reach it: json.dumps (Hugging Face's tojson), the printf
// style `%` operator and the format filter, and str.format with the format mini-language.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/text/jinja/builtins.h"
#include "runtime/text/jinja/builtins_util.h"
#include "runtime/text/jinja/pystr.h"

namespace offgen::jinja {
namespace {

// ---- json.dumps ---------------------------------------------------------------------------

void json_string(MarkedText& out, const MarkedText& s, bool ensure_ascii) {
  std::string lit = "\"";
  const std::string& t = s.text();
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (ensure_ascii && static_cast<unsigned char>(c) >= 0x80) {
      const utf8::Decoded d = utf8::decode(t, i);
      uint32_t cp = d.cp;
      if (cp >= 0x10000) {
        cp -= 0x10000;
        lit += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        lit += fmt::format("\\u{:04x}", cp);
      }
      i += d.len - 1;
      continue;
    }
    switch (c) {
      case '"':
        lit += "\\\"";
        break;
      case '\\':
        lit += "\\\\";
        break;
      case '\n':
        lit += "\\n";
        break;
      case '\r':
        lit += "\\r";
        break;
      case '\t':
        lit += "\\t";
        break;
      case '\b':
        lit += "\\b";
        break;
      case '\f':
        lit += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          lit += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          lit.push_back(c);
        }
    }
  }
  lit += '"';
  if (s.marked())
    out.append(lit, s.marks().front().tag);
  else
    out.append(lit);
}

std::string json_float(double f) {
  if (std::isnan(f)) return "NaN";
  if (std::isinf(f)) return f < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(f);
}

void json_value(Interp& in, MarkedText& out, const Value& v, const JsonFormat& st, int level) {
  in.step();
  if (level > 256) fail("tojson: the value nests too deeply");
  auto newline = [&](int lvl) {
    if (!st.pretty) return;
    out.append("\n");
    for (int i = 0; i < lvl; ++i) out.append(st.indent);
    in.charge(out.size());
  };
  switch (v.type()) {
    case Type::kNone:
      out.append("null");
      return;
    case Type::kBool:
      out.append(v.as_bool() ? "true" : "false");
      return;
    case Type::kInt:
      out.append(std::to_string(v.as_int()));
      return;
    case Type::kFloat:
      out.append(json_float(v.as_float()));
      return;
    case Type::kString:
      json_string(out, v.str(), st.ensure_ascii);
      return;
    case Type::kList: {
      if (v.items().empty()) {
        out.append("[]");
        return;
      }
      out.append("[");
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i) out.append(st.item_sep);
        newline(level + 1);
        json_value(in, out, v.items()[i], st, level + 1);
      }
      newline(level);
      out.append("]");
      in.charge(out.size());
      return;
    }
    case Type::kDict: {
      if (v.dict_value().empty()) {
        out.append("{}");
        return;
      }
      std::vector<std::pair<MarkedText, const Value*>> entries;
      for (const auto& [k, x] : v.dict_value().items()) {
        MarkedText key;
        switch (k.type()) {
          case Type::kString:
            key = k.str();
            break;
          case Type::kNone:
            key = MarkedText("null");
            break;
          case Type::kBool:
            key = MarkedText(k.as_bool() ? "true" : "false");
            break;
          case Type::kInt:
            key = MarkedText(std::to_string(k.as_int()));
            break;
          case Type::kFloat:
            key = MarkedText(json_float(k.as_float()));
            break;
          case Type::kUndefined:
          case Type::kList:
          case Type::kDict:
          case Type::kObject:
            fail(fmt::format("keys must be str, int, float, bool or None, not {}", k.type_name()));
        }
        entries.emplace_back(std::move(key), &x);
      }
      if (st.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
          return a.first.text() < b.first.text();
        });
      out.append("{");
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out.append(st.item_sep);
        newline(level + 1);
        json_string(out, entries[i].first, st.ensure_ascii);
        out.append(st.key_sep);
        json_value(in, out, *entries[i].second, st, level + 1);
      }
      newline(level);
      out.append("}");
      in.charge(out.size());
      return;
    }
    case Type::kUndefined:
    case Type::kObject:
      break;
  }
  fail(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
}

// ---- printf-style -------------------------------------------------------------------------

std::string c_format(const std::string& spec, auto value) {
  const int n = std::snprintf(nullptr, 0, spec.c_str(), value);
  std::string out(static_cast<size_t>(std::max(n, 0)) + 1, '\0');
  std::snprintf(out.data(), out.size(), spec.c_str(), value);
  out.resize(static_cast<size_t>(std::max(n, 0)));
  return out;
}

double want_real(const Value& v, char type) {
  if (!v.is_number())
    fail(fmt::format("%{} format: a real number is required, not {}", type, v.type_name()));
  return v.as_float();
}

}  // namespace

MarkedText to_json(Interp& in, const Value& v, const JsonFormat& f) {
  MarkedText out;
  json_value(in, out, v, f, 0);
  return out;
}

MarkedText percent_format(Interp& in, const MarkedText& fm, const Value& args) {
  const std::string& f = fm.text();
  const bool mapping = args.is_dict();
  std::vector<Value> pos;
  if (args.is_tuple()) {
    pos = args.items();
  } else if (!mapping) {
    pos.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  auto take = [&]() -> Value {
    if (next >= pos.size()) fail("not enough arguments for format string");
    return pos[next++];
  };
  MarkedText out;
  size_t lit = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') continue;
    out.append(fm, lit, i);
    size_t j = i + 1;
    Value arg;
    bool have_arg = false;
    if (j < f.size() && f[j] == '(') {
      const size_t close = f.find(')', j);
      if (close == std::string::npos) fail("incomplete format key");
      if (!mapping) fail("format requires a mapping");
      const Value* v = args.dict_value().find(std::string_view(f).substr(j + 1, close - j - 1));
      if (!v) fail(fmt::format("KeyError: '{}'", f.substr(j + 1, close - j - 1)));
      arg = *v;
      have_arg = used_mapping = true;
      j = close + 1;
    }
    std::string flags;
    while (j < f.size() && std::string_view("#0- +").find(f[j]) != std::string_view::npos)
      flags += f[j++];
    std::string width, prec;
    if (j < f.size() && f[j] == '*') {
      width = std::to_string(want_int(take(), "* width"));
      ++j;
    } else {
      while (j < f.size() && f[j] >= '0' && f[j] <= '9') width += f[j++];
    }
    bool has_prec = false;
    if (j < f.size() && f[j] == '.') {
      has_prec = true;
      ++j;
      if (j < f.size() && f[j] == '*') {
        prec = std::to_string(want_int(take(), "* precision"));
        ++j;
      } else {
        while (j < f.size() && f[j] >= '0' && f[j] <= '9') prec += f[j++];
      }
      if (prec.empty()) prec = "0";
    }
    while (j < f.size() && (f[j] == 'h' || f[j] == 'l' || f[j] == 'L')) ++j;
    if (j >= f.size()) fail("incomplete format");
    const char type = f[j];
    lit = j + 1;
    i = j;
    if (type == '%') {
      out.append("%");
      continue;
    }
    if (!have_arg) arg = take();
    if (width.size() > 6 || prec.size() > 6) fail("format width or precision too big");
    in.charge(static_cast<size_t>(width.empty() ? 0 : std::stoi(width)));
    const std::string spec_head = "%" + flags + width + (has_prec ? "." + prec : "");
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        MarkedText s;
        if (type == 's') {
          s = to_str(arg);
        } else {
          append_repr(s, arg);
        }
        if (has_prec) {
          const std::vector<size_t> at = cp_starts(s.text());
          const size_t p = std::min<size_t>(std::stoul(prec), at.size() - 1);
          s = s.slice(0, at[p]);
        }
        const int64_t w = width.empty() ? 0 : std::stoll(width);
        out.append(py_pad(s, w, ' ', flags.find('-') != std::string::npos ? '<' : '>'));
        break;
      }
      case 'd':
      case 'i':
      case 'u': {
        if (arg.type() == Type::kFloat) {
          if (!std::isfinite(arg.as_float()))
            fail("cannot convert float infinity or NaN to integer");
          out.append(c_format(spec_head + "lld", static_cast<long long>(arg.as_float())));
        } else {
          if (!arg.is_integer())
            fail(fmt::format("%{} format: a real number is required, not {}", type,
                             arg.type_name()));
          out.append(c_format(spec_head + "lld", static_cast<long long>(arg.as_int())));
        }
        break;
      }
      case 'o':
      case 'x':
      case 'X': {
        if (!arg.is_integer())
          fail(fmt::format("%{} format: an integer is required, not {}", type, arg.type_name()));
        const int64_t v = arg.as_int();
        std::string body =
            c_format("%" + std::string(flags.find('#') != std::string::npos ? "#" : "") +
                         std::string(1, type == 'o' ? 'o' : type),
                     static_cast<unsigned long long>(v < 0 ? -v : v));
        if (type == 'o' && flags.find('#') != std::string::npos) body = "0o" + body.substr(1);
        const std::string sign = v < 0                                  ? "-"
                                 : flags.find('+') != std::string::npos ? "+"
                                 : flags.find(' ') != std::string::npos ? " "
                                                                        : "";
        std::string s = sign + body;
        const int64_t w = width.empty() ? 0 : std::stoll(width);
        if (flags.find('-') == std::string::npos && flags.find('0') != std::string::npos &&
            static_cast<int64_t>(s.size()) < w)
          s = sign + std::string(w - s.size(), '0') + body;
        out.append(py_pad(MarkedText(s), w, ' ', flags.find('-') != std::string::npos ? '<' : '>'));
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G':
        out.append(c_format(spec_head + type, want_real(arg, type)));
        break;
      case 'c': {
        std::string ch;
        if (arg.is_integer()) {
          if (arg.as_int() < 0 || arg.as_int() > 0x10FFFF) fail("%c arg not in range(0x110000)");
          utf8::append(ch, static_cast<char32_t>(arg.as_int()));
        } else if (arg.is_string() && cp_count(arg.text()) == 1) {
          ch = arg.text();
        } else {
          fail("%c requires int or char");
        }
        out.append(ch);
        break;
      }
      default:
        fail(fmt::format("unsupported format character '{}' (0x{:x}) at index {}", type,
                         static_cast<unsigned>(static_cast<unsigned char>(type)), j));
    }
  }
  out.append(fm, std::min(lit, f.size()), f.size());
  if (!mapping && next < pos.size()) fail("not all arguments converted during string formatting");
  (void)used_mapping;
  return out;
}

// ---- str.format ---------------------------------------------------------------------------

namespace {

struct Spec {
  char fill = ' ', align = 0, sign = '-', type = 0;
  bool alt = false, zero = false;
  int64_t width = -1, precision = -1;
  std::string grouping;
};

Spec parse_spec(const std::string& s) {
  Spec sp;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (s.size() >= 2 && is_align(s[1])) {
    sp.fill = s[0];
    sp.align = s[1];
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    sp.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) sp.sign = s[i++];
  if (i < s.size() && s[i] == '#') sp.alt = (++i, true);
  if (i < s.size() && s[i] == '0') sp.zero = (++i, true);
  std::string w;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') w += s[i++];
  if (!w.empty()) sp.width = w.size() > 6 ? (fail("format width too big"), 0) : std::stoll(w);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) sp.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    std::string p;
    ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') p += s[i++];
    if (p.empty() || p.size() > 6) fail("Format specifier missing precision");
    sp.precision = std::stoll(p);
  }
  if (i < s.size()) sp.type = s[i++];
  if (i != s.size()) fail(fmt::format("Invalid format specifier '{}'", s));
  return sp;
}

MarkedText align(MarkedText body, const Spec& sp, char default_align,
                 const std::string& sign = {}) {
  const char a = sp.align ? sp.align : (sp.zero ? '=' : default_align);
  const char fill = sp.align ? sp.fill : (sp.zero ? '0' : ' ');
  if (a == '=') {
    MarkedText rest = body.slice(sign.size(), body.size());
    const int64_t w = sp.width - static_cast<int64_t>(sign.size());
    MarkedText out(sign);
    out.append(py_pad(rest, w, static_cast<unsigned char>(fill), '>'));
    return out;
  }
  return py_pad(body, sp.width, static_cast<unsigned char>(fill), a);
}

MarkedText format_value(const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return to_str(v);
  const Spec sp = parse_spec(spec_text);
  if (v.is_string()) {
    if (sp.type && sp.type != 's')
      fail(fmt::format("Unknown format code '{}' for object of type 'str'", sp.type));
    MarkedText s = v.str();
    if (sp.precision >= 0) {
      const std::vector<size_t> at = cp_starts(s.text());
      s = s.slice(0, at[std::min<size_t>(sp.precision, at.size() - 1)]);
    }
    return align(std::move(s), sp, '<');
  }
  if (!v.is_number())
    fail(fmt::format("unsupported format string passed to {}.__format__", v.type_name()));
  const bool as_int = v.is_integer() && (!sp.type || std::string_view("bcdoxXn").find(sp.type) !=
                                                         std::string_view::npos);
  std::string body, sign;
  if (as_int) {
    const int64_t x = v.as_int();
    const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    const char t = sp.type ? sp.type : 'd';
    if (t == 'c') {
      utf8::append(body, static_cast<char32_t>(x));
    } else if (t == 'x' || t == 'X' || t == 'o' || t == 'b') {
      body = t == 'x'   ? fmt::format("{:x}", mag)
             : t == 'X' ? fmt::format("{:X}", mag)
             : t == 'o' ? fmt::format("{:o}", mag)
                        : fmt::format("{:b}", mag);
      if (sp.alt) body = std::string("0") + (t == 'X' ? 'X' : t) + body;
    } else {
      body = std::to_string(mag);
      if (!sp.grouping.empty())
        for (int i = static_cast<int>(body.size()) - 3; i > 0; i -= 3) body.insert(i, sp.grouping);
    }
    if (x < 0) sign = "-";
  } else {
    const double x = v.as_float();
    const int p = sp.precision >= 0 ? static_cast<int>(sp.precision) : 6;
    const double mag = std::fabs(x);
    const char t = sp.type ? sp.type : 0;
    switch (t) {
      case 'f':
      case 'F':
        body = c_format("%." + std::to_string(p) + (t == 'F' ? "F" : "f"), mag);
        break;
      case 'e':
      case 'E':
        body = c_format("%." + std::to_string(p) + t, mag);
        break;
      case 'g':
      case 'G':
        body = c_format(std::string("%") + (sp.alt ? "#" : "") + "." + std::to_string(p) + t, mag);
        break;
      case '%':
        body = c_format("%." + std::to_string(p) + "f", mag * 100) + "%";
        break;
      case 0:
        body =
            sp.precision >= 0 ? c_format("%." + std::to_string(p) + "g", mag) : py_float_repr(mag);
        break;
      default:
        fail(fmt::format("Unknown format code '{}' for object of type 'float'", t));
    }
    if (std::signbit(x) && !std::isnan(x)) sign = "-";
  }
  if (sign.empty() && sp.sign == '+') sign = "+";
  if (sign.empty() && sp.sign == ' ') sign = " ";
  return align(MarkedText(sign + body), sp, '>', sign);
}

}  // namespace

MarkedText str_format(Interp& in, const MarkedText& fm, const Args& args) {
  const std::string& f = fm.text();
  MarkedText out;
  size_t auto_index = 0, lit = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.append(fm, lit, i + 1);
        lit = ++i + 1;
        continue;
      }
      fail("Single '}' encountered in format string");
    }
    if (c != '{') continue;
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.append(fm, lit, i + 1);
      lit = ++i + 1;
      continue;
    }
    out.append(fm, lit, i);
    // The field up to its matching '}' (one level of nested fields in the spec).
    size_t j = i + 1;
    int depth = 1;
    while (j < f.size() && depth > 0) {
      if (f[j] == '{') ++depth;
      if (f[j] == '}') --depth;
      if (depth > 0) ++j;
    }
    if (j >= f.size()) fail("expected '}' before end of string");
    const std::string field = f.substr(i + 1, j - i - 1);
    lit = j + 1;
    i = j;
    size_t k = 0;
    while (k < field.size() && field[k] != '!' && field[k] != ':' && field[k] != '.' &&
           field[k] != '[')
      ++k;
    const std::string first = field.substr(0, k);
    Value v;
    if (first.empty() ||
        std::all_of(first.begin(), first.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      const size_t idx = first.empty() ? auto_index++ : std::stoul(first);
      if (idx >= args.pos.size())
        fail(fmt::format("Replacement index {} out of range for positional args tuple", idx));
      v = args.pos[idx];
    } else {
      bool found = false;
      for (const auto& [name, x] : args.kw)
        if (name == first) v = x, found = true;
      if (!found) fail(fmt::format("KeyError: '{}'", first));
    }
    while (k < field.size() && (field[k] == '.' || field[k] == '[')) {
      if (field[k] == '.') {
        size_t e = k + 1;
        while (e < field.size() && field[e] != '.' && field[e] != '[' && field[e] != '!' &&
               field[e] != ':')
          ++e;
        v = in.getattr(v, field.substr(k + 1, e - k - 1));
        k = e;
      } else {
        const size_t e = field.find(']', k);
        if (e == std::string::npos) fail("Missing ']' in format string");
        const std::string key = field.substr(k + 1, e - k - 1);
        const bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) {
          return ch >= '0' && ch <= '9';
        });
        v = in.getitem(
            v, digits && key.size() < 18 ? Value::integer(std::stoll(key)) : Value::string(key));
        k = e + 1;
      }
    }
    char conv = 0;
    if (k < field.size() && field[k] == '!') {
      if (k + 1 >= field.size()) fail("end of string while looking for conversion specifier");
      conv = field[k + 1];
      k += 2;
    }
    std::string spec;
    if (k < field.size()) {
      if (field[k] != ':') fail("expected ':' after conversion specifier");
      spec = str_format(in, MarkedText(field.substr(k + 1)), args).text();
    }
    if (conv == 'r' || conv == 'a') {
      MarkedText r;
      append_repr(r, v);
      v = Value::string(std::move(r));
    } else if (conv == 's') {
      v = Value::string(to_str(v));
    } else if (conv) {
      fail(fmt::format("Unknown conversion specifier {}", conv));
    }
    if (v.is_undefined() && spec.empty()) {
      out.append(MarkedText());
    } else {
      out.append(format_value(v, spec));
    }
    in.charge(out.size());
  }
  out.append(fm, std::min(lit, f.size()), f.size());
  return out;
}

}  // namespace offgen::jinja
