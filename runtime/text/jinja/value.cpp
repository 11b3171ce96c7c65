// Jinja values: construction, Python equality/ordering/hashing, str() and repr().
#include "runtime/text/jinja/value.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/text/utf8.h"

namespace offgen::jinja {

void fail(std::string message) { throw Error(ErrorCategory::kInput, std::move(message)); }

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.p_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.type_ = Type::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.type_ = Type::kInt;
  v.i_ = i;
  return v;
}

Value Value::real(double f) {
  Value v;
  v.type_ = Type::kFloat;
  v.f_ = f;
  return v;
}

Value Value::string(std::string s) { return string(MarkedText(std::move(s))); }

Value Value::string(MarkedText s) {
  Value v;
  v.type_ = Type::kString;
  v.p_ = std::make_shared<const MarkedText>(std::move(s));
  return v;
}

Value Value::markup(MarkedText s) {
  Value v = string(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::list(std::vector<Value> items, bool tuple) {
  Value v;
  v.type_ = Type::kList;
  v.p_ = std::make_shared<const List>(List{std::move(items), tuple, {}});
  return v;
}

Value Value::named_tuple(std::vector<Value> items, std::vector<std::string> names) {
  Value v;
  v.type_ = Type::kList;
  v.p_ = std::make_shared<const List>(List{std::move(items), true, std::move(names)});
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.type_ = Type::kDict;
  v.p_ = std::make_shared<const Dict>(std::move(d));
  return v;
}

namespace {
thread_local ObjectRegistry* current_registry = nullptr;
}  // namespace

void ObjectRegistry::add(const std::shared_ptr<Object>& o) {
  if (objects_.size() >= prune_at_) {  // drop the dead ones; amortised O(1) per object
    std::erase_if(objects_, [](const std::weak_ptr<Object>& w) { return w.expired(); });
    prune_at_ = std::max<size_t>(1024, objects_.size() * 2);
  }
  objects_.push_back(o);
}

void ObjectRegistry::release_all() {
  // Releasing one object can free others (and their weak entries): collect them first.
  std::vector<std::shared_ptr<Object>> alive;
  for (const std::weak_ptr<Object>& w : objects_)
    if (auto o = w.lock()) alive.push_back(std::move(o));
  objects_.clear();
  for (const auto& o : alive) o->release();
}

ObjectRegistry::Install::Install(ObjectRegistry& r) : previous_(current_registry) {
  current_registry = &r;
}

ObjectRegistry::Install::~Install() { current_registry = previous_; }

Value Value::object(std::shared_ptr<Object> o) {
  if (current_registry) current_registry->add(o);
  Value v;
  v.type_ = Type::kObject;
  v.p_ = std::move(o);
  return v;
}

std::string Value::undefined_hint() const {
  if (type_ == Type::kUndefined && p_) return *static_cast<const std::string*>(p_.get());
  return "a value is undefined";
}

bool Value::truthy() const {
  switch (type_) {
    case Type::kUndefined:
    case Type::kNone:
      return false;
    case Type::kBool:
      return b_;
    case Type::kInt:
      return i_ != 0;
    case Type::kFloat:
      return f_ != 0.0;
    case Type::kString:
      return !text().empty();
    case Type::kList:
      return !items().empty();
    case Type::kDict:
      return !dict_value().empty();
    case Type::kObject:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (type_) {
    case Type::kUndefined:
      return "Undefined";
    case Type::kNone:
      return "NoneType";
    case Type::kBool:
      return "bool";
    case Type::kInt:
      return "int";
    case Type::kFloat:
      return "float";
    case Type::kString:
      return "str";
    case Type::kList:
      return is_tuple() ? "tuple" : "list";
    case Type::kDict:
      return "dict";
    case Type::kObject:
      return obj().type_name();
  }
  return "object";
}

// ---- dict ---------------------------------------------------------------------------------

namespace {

// prefix + text, built by appending (GCC 12's -Wrestrict misfires on "x" + std::string).
std::string tagged(char prefix, std::string_view text) {
  std::string k(1, prefix);
  k.append(text);
  return k;
}

}  // namespace

std::string hash_key(const Value& v) {
  switch (v.type()) {
    case Type::kString:
      return tagged('s', v.text());
    case Type::kBool:
    case Type::kInt:
      return tagged('n', std::to_string(v.as_int()));
    case Type::kFloat: {
      const double f = v.as_float();
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18)
        return tagged('n', std::to_string(static_cast<int64_t>(f)));
      return tagged('f', py_float_repr(f));
    }
    case Type::kNone:
      return "N";
    case Type::kList:
      if (v.is_tuple()) {
        std::string k = "t";
        for (const Value& e : v.items()) {
          const std::string part = hash_key(e);
          k += std::to_string(part.size());
          k += ':';
          k += part;
        }
        return k;
      }
      break;
    case Type::kUndefined:
    case Type::kDict:
    case Type::kObject:
      break;
  }
  fail("unhashable type: '" + v.type_name() + "'");
}

void Dict::set(Value key, Value value) {
  std::string k = hash_key(key);
  auto it = index_.find(k);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(std::move(k), items_.size());
  items_.emplace_back(std::move(key), std::move(value));
}

const Value* Dict::find(const Value& key) const {
  if (key.type() == Type::kList && !key.is_tuple()) return nullptr;
  if (key.type() == Type::kDict || key.type() == Type::kObject || key.is_undefined())
    return nullptr;
  auto it = index_.find(hash_key(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::find(std::string_view key) const {
  std::string k = "s";
  k.append(key);
  auto it = index_.find(k);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

// ---- arguments and objects ----------------------------------------------------------------

std::vector<Value> bind_args(std::string_view fn, const Args& args,
                             std::initializer_list<std::string_view> names,
                             std::vector<Value> defaults) {
  const size_t n = names.size();
  if (args.pos.size() > n)
    fail(fmt::format("{}() takes {} positional arguments but {} were given", fn, n,
                     args.pos.size()));
  std::vector<Value> out(n);
  std::vector<bool> given(n, false);
  for (size_t i = 0; i < args.pos.size(); ++i) {
    out[i] = args.pos[i];
    given[i] = true;
  }
  for (const auto& [name, v] : args.kw) {
    size_t i = 0;
    for (std::string_view nm : names) {
      if (nm == name) break;
      ++i;
    }
    if (i == n) fail(fmt::format("{}() got an unexpected keyword argument '{}'", fn, name));
    if (given[i]) fail(fmt::format("{}() got multiple values for argument '{}'", fn, name));
    out[i] = v;
    given[i] = true;
  }
  const size_t first_default = n - defaults.size();
  size_t i = 0;
  for (std::string_view nm : names) {
    if (!given[i]) {
      if (i < first_default) fail(fmt::format("{}() missing required argument '{}'", fn, nm));
      out[i] = defaults[i - first_default];
    }
    ++i;
  }
  return out;
}

Value Object::attr(Interp&, const Value&, std::string_view name) {
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(), name));
}

bool Object::set_attr(std::string_view, Value) { return false; }

Value Object::call(Interp&, Args) { fail(fmt::format("'{}' object is not callable", type_name())); }

std::vector<Value> Generator::take() {
  if (spent_) return {};
  spent_ = true;
  return std::move(items_);
}

Value make_generator(std::vector<Value> items) {
  return Value::object(std::make_shared<Generator>(std::move(items)));
}

std::string Object::str() const { return fmt::format("<{} object>", type_name()); }

// ---- equality and ordering ----------------------------------------------------------------

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::kUndefined:
    case Type::kNone:
      return true;
    case Type::kString:
      return a.text() == b.text();
    case Type::kList: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Type::kDict: {
      if (a.dict_value().size() != b.dict_value().size()) return false;
      for (const auto& [k, v] : a.dict_value().items()) {
        const Value* other = b.dict_value().find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    }
    case Type::kObject:
      return a.identity() == b.identity();
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat:
      break;
  }
  return false;
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_integer() && b.is_integer())
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    const double x = a.as_float(), y = b.as_float();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.text().compare(b.text());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail(fmt::format("'<' not supported between instances of '{}' and '{}'", a.type_name(),
                   b.type_name()));
}

// ---- str() and repr() ---------------------------------------------------------------------

std::string py_float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // "-d.ddde+XX": the shortest digits that round-trip
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (exp < -4 || exp >= 16) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    return fmt::format("{}{}e{}{:02d}", sign, m, exp < 0 ? '-' : '+', std::abs(exp));
  }
  std::string out;
  if (exp < 0) {
    out = "0." + std::string(-exp - 1, '0') + digits;
  } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
    out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
  }
  return sign + out;
}

namespace {

bool printable(char32_t cp) {
  if (cp < 0x20 || cp == 0x7F) return false;
  if (cp < 0x7F) return true;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

}  // namespace

std::string py_repr_string(std::string_view s) {
  const bool single = s.find('\'') != std::string_view::npos;
  const bool dbl = s.find('"') != std::string_view::npos;
  const char quote = single && !dbl ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const utf8::Decoded d = utf8::decode(s, i);
    const char32_t c = d.cp;
    if (!d.valid) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (printable(c)) {
      out.append(s.substr(i, d.len));
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
    i += d.len;
  }
  out += quote;
  return out;
}

namespace {

void append_scalar(MarkedText& out, const Value& v) {
  switch (v.type()) {
    case Type::kNone:
      out.append("None");
      break;
    case Type::kBool:
      out.append(v.as_bool() ? "True" : "False");
      break;
    case Type::kInt:
      out.append(std::to_string(v.as_int()));
      break;
    case Type::kFloat:
      out.append(py_float_repr(v.as_float()));
      break;
    case Type::kObject:
      out.append(v.obj().str());
      break;
    case Type::kUndefined:
    case Type::kString:
    case Type::kList:
    case Type::kDict:
      break;
  }
}

}  // namespace

void append_repr(MarkedText& out, const Value& v) {
  switch (v.type()) {
    case Type::kString: {
      const std::string r = py_repr_string(v.text());
      if (v.str().marked())
        out.append(r, v.str().marks().front().tag);
      else
        out.append(r);
      return;
    }
    case Type::kUndefined:
      out.append("Undefined");
      return;
    case Type::kList: {
      out.append(v.is_tuple() ? "(" : "[");
      const auto& items = v.items();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out.append(", ");
        append_repr(out, items[i]);
      }
      if (v.is_tuple() && items.size() == 1) out.append(",");
      out.append(v.is_tuple() ? ")" : "]");
      return;
    }
    case Type::kDict: {
      out.append("{");
      bool first = true;
      for (const auto& [k, val] : v.dict_value().items()) {
        if (!first) out.append(", ");
        first = false;
        append_repr(out, k);
        out.append(": ");
        append_repr(out, val);
      }
      out.append("}");
      return;
    }
    case Type::kNone:
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat:
    case Type::kObject:
      append_scalar(out, v);
      return;
  }
}

void append_str(MarkedText& out, const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
      return;
    case Type::kString:
      out.append(v.str());
      return;
    case Type::kList:
    case Type::kDict:
      append_repr(out, v);
      return;
    case Type::kNone:
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat:
    case Type::kObject:
      append_scalar(out, v);
      return;
  }
}

MarkedText html_escape(const Value& v) {
  MarkedText s = to_str(v);
  if (v.is_markup()) return s;
  std::string out;
  out.reserve(s.size());
  for (char c : s.text()) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  if (out.size() == s.size()) return s;
  return s.marked() ? MarkedText(std::move(out), s.marks().front().tag)
                    : MarkedText(std::move(out));
}

MarkedText to_str(const Value& v) {
  if (v.is_string()) return v.str();
  MarkedText out;
  append_str(out, v);
  return out;
}

}  // namespace offgen::jinja
