// JsonReader: nlohmann's SAX parser over a position-tracking iterator, with a frame per open
// object/array for paths and duplicate keys; read_json builds the DOM from its events.
#include "runtime/core/json_reader.h"

#include <cmath>
#include <iterator>
#include <string>
#include <utility>

namespace offgen {
namespace {

using json = nlohmann::json;

// Input iterator over the text that records how far the lexer has read, so that SAX events
// (which carry no position) can be placed in the text.
class TrackingIter {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  TrackingIter(const char* p, const char** read_to) : p_(p), read_to_(read_to) {}
  reference operator*() const { return *p_; }
  TrackingIter& operator++() {
    *read_to_ = ++p_;
    return *this;
  }
  TrackingIter operator++(int) {
    TrackingIter t = *this;
    ++*this;
    return t;
  }
  bool operator==(const TrackingIter& o) const { return p_ == o.p_; }

 private:
  const char* p_;
  const char** read_to_;
};

std::string field_error_message(const std::string& field, const std::string& detail) {
  return field.empty() ? detail : fmt::format("field '{}': {}", field, detail);
}

}  // namespace

JsonParseError::JsonParseError(Kind kind, uint64_t byte, std::string path, std::string key,
                               std::string detail)
    : Error(ErrorCategory::kInput,
            kind == Kind::kDuplicateKey
                ? fmt::format("duplicate key \"{}\" at byte {}", key, byte)
                : fmt::format("not valid JSON at byte {}: {}", byte, detail)),
      kind_(kind),
      byte_(byte),
      path_(std::move(path)),
      key_(std::move(key)),
      detail_(std::move(detail)) {}

std::string JsonParseError::reason() const {
  // "[json.exception.parse_error.101] parse error at line 1, column 9: <reason>"
  const size_t col = detail_.find("column ");
  const size_t colon = col == std::string::npos ? col : detail_.find(": ", col);
  return colon == std::string::npos ? detail_ : detail_.substr(colon + 2);
}

std::string JsonReader::path() const {
  std::string p;
  for (const Frame& f : frames_) {
    if (!f.object)
      p += fmt::format("[{}]", f.index);
    else if (!f.key.empty())
      p += (p.empty() ? "" : ".") + f.key;
  }
  return p;
}

// Adapts nlohmann's SAX interface to a JsonHandler, keeping the reader's frames.
class JsonReader::Sax {
 public:
  Sax(JsonReader& r, JsonHandler& h) : r_(r), h_(h) {}

  bool null() {
    h_.on_null();
    return value_done();
  }
  bool boolean(bool v) {
    h_.on_bool(v);
    return value_done();
  }
  bool number_integer(int64_t v) {
    h_.on_int(v);
    return value_done();
  }
  bool number_unsigned(uint64_t v) {
    h_.on_uint(v);
    return value_done();
  }
  bool number_float(double v, const std::string& text) {
    h_.on_float(v, text);
    return value_done();
  }
  bool string(std::string& s) {
    h_.on_string(s);
    return value_done();
  }
  bool binary(json::binary_t&) {  // JSON text has no binary values
    throw JsonParseError(JsonParseError::Kind::kSyntax, r_.offset(), r_.path(), "",
                         "unexpected binary value");
  }
  bool start_object(size_t) {
    check_depth();
    h_.on_begin_object();
    r_.frames_.push_back({true, {}, {}, 0});
    return true;
  }
  bool key(std::string& k) {
    Frame& f = r_.frames_.back();
    f.key = k;
    if (!f.keys.insert(k).second) h_.on_duplicate_key(k);
    h_.on_key(k);
    return true;
  }
  bool end_object() {
    r_.frames_.pop_back();
    h_.on_end_object();
    return value_done();
  }
  bool start_array(size_t) {
    check_depth();
    h_.on_begin_array();
    r_.frames_.push_back({false, {}, {}, 0});
    return true;
  }
  bool end_array() {
    r_.frames_.pop_back();
    h_.on_end_array();
    return value_done();
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    // 406: "number overflow parsing '1e999'": valid syntax, but no double holds it.
    throw JsonParseError(
        ex.id == 406 ? JsonParseError::Kind::kNumberRange : JsonParseError::Kind::kSyntax, position,
        r_.path(), "", ex.what());
  }

 private:
  // Nesting past kJsonMaxDepth is refused: the DOM's users (dump(), recursive walks) recurse per
  // level, and a few hundred kilobytes of brackets would overflow the stack.
  void check_depth() const {
    if (r_.frames_.size() >= kJsonMaxDepth)
      throw JsonParseError(JsonParseError::Kind::kSyntax, r_.offset(), r_.path(), "",
                           fmt::format("nested deeper than {} levels", kJsonMaxDepth));
  }
  bool value_done() {
    if (!r_.frames_.empty() && !r_.frames_.back().object) ++r_.frames_.back().index;
    return true;
  }

  JsonReader& r_;
  JsonHandler& h_;
};

void JsonReader::read(JsonHandler& handler) {
  frames_.clear();
  read_to_ = text_.data();
  const char* begin = text_.data();
  const char* end = begin + text_.size();
  Sax sax(*this, handler);
  json::sax_parse(TrackingIter(begin, &read_to_), TrackingIter(end, &read_to_), &sax,
                  json::input_format_t::json, /*strict=*/true, /*ignore_comments=*/false);
}

namespace {

// Builds the DOM (the later of two equal keys wins, as in nlohmann) and records duplicates and
// marked strings.
class DomBuilder : public JsonHandler {
 public:
  DomBuilder(const JsonReader& r, const JsonReadOptions& o, JsonDocument& doc)
      : r_(r), o_(o), doc_(doc) {}

  void on_null() override { put(nullptr); }
  void on_bool(bool v) override { put(v); }
  void on_int(int64_t v) override { put(v); }
  void on_uint(uint64_t v) override { put(v); }
  void on_float(double v, const std::string&) override { put(v); }
  void on_string(std::string& s) override {
    check_mark(s);
    put(std::move(s));
  }
  void on_begin_object() override { stack_.push_back(put(json::object())); }
  void on_duplicate_key(const std::string& key) override {
    if (o_.duplicate_throws)
      throw JsonParseError(JsonParseError::Kind::kDuplicateKey, r_.offset(), r_.path(), key, "");
    // The first duplicate that has a path wins; a key "" at the top level has none.
    if (doc_.duplicate && !doc_.duplicate_path.empty()) return;
    doc_.duplicate = true;
    doc_.duplicate_key = key;
    doc_.duplicate_path = r_.path();
  }
  void on_key(std::string& key) override {
    check_mark(key);
    key_ = std::move(key);
  }
  void on_end_object() override { stack_.pop_back(); }
  void on_begin_array() override { stack_.push_back(put(json::array())); }
  void on_end_array() override { stack_.pop_back(); }

 private:
  // Places `v` as the current value; returns where it now lives. Parents only grow while their
  // last child is complete, so the pointers on the stack stay valid.
  json* put(json&& v) {
    if (stack_.empty()) {
      doc_.value = std::move(v);
      return &doc_.value;
    }
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  void check_mark(const std::string& s) {
    if (o_.mark.empty() || doc_.marked || s.find(o_.mark) == std::string::npos) return;
    doc_.marked = true;
    doc_.marked_path = r_.path();
  }

  const JsonReader& r_;
  const JsonReadOptions& o_;
  JsonDocument& doc_;
  std::vector<json*> stack_;
  std::string key_;
};

}  // namespace

JsonDocument read_json(std::string_view text, const JsonReadOptions& options) {
  JsonDocument doc;
  JsonReader reader(text);
  DomBuilder builder(reader, options, doc);
  reader.read(builder);
  return doc;
}

JsonFieldError::JsonFieldError(Kind kind, std::string field, std::string expected,
                               std::string detail)
    : Error(ErrorCategory::kInput, field_error_message(field, detail)),
      kind_(kind),
      field_(std::move(field)),
      expected_(std::move(expected)),
      detail_(std::move(detail)) {}

void throw_json_wrong_type(std::string_view field, std::string_view expected, const json& got) {
  throw JsonFieldError(JsonFieldError::Kind::kWrongType, std::string(field), std::string(expected),
                       fmt::format("expected {}, got {}", expected, got.type_name()));
}

double json_number(const json& v, std::string_view field, std::string_view expected) {
  if (!v.is_number()) throw_json_wrong_type(field, expected, v);
  return v.get<double>();
}

namespace {

// An integer outside [lo, hi] (given as text: the bounds may be beyond int64).
[[noreturn]] void throw_int_out_of_range(std::string_view field, std::string_view expected,
                                         const json& v, const std::string& lo,
                                         const std::string& hi) {
  throw JsonFieldError(
      JsonFieldError::Kind::kOutOfRange, std::string(field), std::string(expected),
      fmt::format("integer out of range ({}): must be in [{}, {}]", v.dump(), lo, hi));
}

// A float that is an integer literal too large for 64 bits (or written with an exponent).
bool integral_float(const json& v) {
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return std::isfinite(d) && std::trunc(d) == d;
}

}  // namespace

int64_t json_int(const json& v, std::string_view field, std::string_view expected, int64_t lo,
                 int64_t hi) {
  const auto out_of_range = [&] {
    throw_int_out_of_range(field, expected, v, std::to_string(lo), std::to_string(hi));
  };
  // An integral float in int64's range stays "expected an integer" (2.0 is not one).
  if (integral_float(v) && !(v.get<double>() >= -0x1p63 && v.get<double>() < 0x1p63))
    out_of_range();
  if (!v.is_number_integer()) throw_json_wrong_type(field, expected, v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) out_of_range();
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) out_of_range();
  return i;
}

uint64_t json_uint(const json& v, std::string_view field, std::string_view expected) {
  const auto out_of_range = [&] {
    throw_int_out_of_range(field, expected, v, "0",
                           std::to_string(std::numeric_limits<uint64_t>::max()));
  };
  if (integral_float(v) && !(v.get<double>() >= 0 && v.get<double>() < 0x1p64)) out_of_range();
  if (!v.is_number_integer()) throw_json_wrong_type(field, expected, v);
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.get<int64_t>() < 0) out_of_range();
  return static_cast<uint64_t>(v.get<int64_t>());
}

const std::string& json_string(const json& v, std::string_view field, std::string_view expected) {
  if (!v.is_string()) throw_json_wrong_type(field, expected, v);
  return v.get_ref<const std::string&>();
}

bool json_bool(const json& v, std::string_view field, std::string_view expected) {
  if (!v.is_boolean()) throw_json_wrong_type(field, expected, v);
  return v.get<bool>();
}

const json& json_object(const json& v, std::string_view field, std::string_view expected) {
  if (!v.is_object()) throw_json_wrong_type(field, expected, v);
  return v;
}

const json& json_array(const json& v, std::string_view field, std::string_view expected) {
  if (!v.is_array()) throw_json_wrong_type(field, expected, v);
  return v;
}

}  // namespace offgen
