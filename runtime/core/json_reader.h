// One JSON reader for input files and request lines: a single pass that knows the JSON path and
// byte offset of every token and reports keys given twice (nlohmann alone keeps the last value
// silently), a DOM built on it, and typed field getters whose errors name the field.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "runtime/core/error.h"

namespace offgen {

// Text that is not JSON (kSyntax), a number beyond a double (kNumberRange), or, when a reader is
// told to stop there, a key given twice in one object (kDuplicateKey). Category kInput.
class JsonParseError : public Error {
 public:
  enum class Kind { kSyntax, kNumberRange, kDuplicateKey };
  JsonParseError(Kind kind, uint64_t byte, std::string path, std::string key, std::string detail);
  Kind kind() const { return kind_; }
  // Bytes the lexer had read when it failed (nlohmann's count: the failing byte is the last one;
  // past the text's size when the text ends early). For kDuplicateKey, the offset just past the
  // key.
  uint64_t byte() const { return byte_; }
  const std::string& path() const { return path_; }  // JSON path where it happened; "" at the top
  const std::string& key() const { return key_; }    // kDuplicateKey: the key given twice
  // nlohmann's message ("[json.exception.parse_error.101] parse error at line 1, column 9: ...").
  const std::string& detail() const { return detail_; }
  // detail() without nlohmann's "[json.exception...] parse error at line L, column C: " prefix.
  std::string reason() const;

 private:
  Kind kind_;
  uint64_t byte_;
  std::string path_, key_, detail_;
};

// Receives a JSON text's tokens in order (nlohmann's SAX vocabulary). Throw to reject the text: the
// exception leaves JsonReader::read as it is. JsonReader's offset() and path() say where a call is.
class JsonHandler {
 public:
  virtual ~JsonHandler() = default;
  virtual void on_null() = 0;
  virtual void on_bool(bool v) = 0;
  virtual void on_int(int64_t v) = 0;    // negative integers
  virtual void on_uint(uint64_t v) = 0;  // non-negative integers
  virtual void on_float(double v, const std::string& text) = 0;
  virtual void on_string(std::string& s) = 0;
  virtual void on_begin_object() = 0;
  // `key` is already in the object now open; called before on_key(key).
  virtual void on_duplicate_key(const std::string& key) = 0;
  virtual void on_key(std::string& key) = 0;
  virtual void on_end_object() = 0;
  virtual void on_begin_array() = 0;
  virtual void on_end_array() = 0;
};

// The deepest nesting of objects and arrays a JsonReader accepts (kSyntax past it).
inline constexpr size_t kJsonMaxDepth = 512;

// One pass over `text` (which must outlive the reader). Not thread-safe; read() runs once.
class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : text_(text) {}

  // Parses the whole text (only whitespace may follow the value; no comments), calling `handler`
  // for each token. Throws JsonParseError (kSyntax, kNumberRange) when the text is not JSON or
  // nests deeper than kJsonMaxDepth;
  // whatever the handler throws passes through.
  void read(JsonHandler& handler);

  // Valid during read(), in the handler's calls:
  // bytes of the text the lexer has read (just past the current token, or one byte beyond it);
  uint64_t offset() const { return static_cast<uint64_t>(read_to_ - text_.data()); }
  // the JSON path of the current value or key, e.g. "body.messages[0].role" ("" at the top);
  std::string path() const;
  // how many objects and arrays are open.
  size_t depth() const { return frames_.size(); }

 private:
  class Sax;
  struct Frame {
    bool object = false;
    std::unordered_set<std::string> keys;  // keys given so far (objects)
    std::string key;                       // the current member's key (objects)
    size_t index = 0;                      // the current element (arrays)
  };

  std::string_view text_;
  const char* read_to_ = nullptr;
  std::vector<Frame> frames_;
};

struct JsonReadOptions {
  // Throw JsonParseError(kDuplicateKey) at the first key given twice in one object; otherwise
  // the later value wins (as in nlohmann) and the first duplicate is recorded.
  bool duplicate_throws = false;
  // When not empty, the path of the first key or string value containing it is recorded.
  std::string_view mark;
};

struct JsonDocument {
  nlohmann::json value;
  bool duplicate = false;      // some object gave a key twice
  std::string duplicate_key;   // the first such key that has a path (else the first one)
  std::string duplicate_path;  // its JSON path ("" only for a key named "" at the top)
  bool marked = false;         // some key or string value holds JsonReadOptions::mark
  std::string marked_path;     // the JSON path of the first one ("" at the top level)
};

// Parses `text` into a DOM with JsonReader. Throws JsonParseError.
JsonDocument read_json(std::string_view text, const JsonReadOptions& options = {});

// A field of the wrong type or out of range. Category kInput; what() is
// "field 'F': expected E, got T" ("expected E, got T" when the field is ""), or for kOutOfRange
// "field 'F': V is out of range".
class JsonFieldError : public Error {
 public:
  enum class Kind { kWrongType, kOutOfRange };
  JsonFieldError(Kind kind, std::string field, std::string expected, std::string detail);
  Kind kind() const { return kind_; }
  const std::string& field() const { return field_; }
  const std::string& expected() const { return expected_; }  // e.g. "a string"
  const std::string& detail() const { return detail_; }      // what() without the field
 private:
  Kind kind_;
  std::string field_, expected_, detail_;
};

// Throws JsonFieldError(kWrongType): `field` holds `got` where `expected` ("a string") belongs.
[[noreturn]] void throw_json_wrong_type(std::string_view field, std::string_view expected,
                                        const nlohmann::json& got);

// Typed getters: `v` is the value of `field` (a path or a display name for messages); `expected`
// overrides the description in the message. They throw JsonFieldError.
double json_number(const nlohmann::json& v, std::string_view field,
                   std::string_view expected = "a number");
// Integers only (no 2.0) in [lo, hi]. A value outside is kOutOfRange, "integer out of range (V):
// must be in [lo, hi]": also an integer literal beyond 64 bits, which JSON holds as a float.
int64_t json_int(const nlohmann::json& v, std::string_view field,
                 std::string_view expected = "an integer",
                 int64_t lo = std::numeric_limits<int64_t>::min(),
                 int64_t hi = std::numeric_limits<int64_t>::max());
// json_int over [0, 2^64 - 1] (seeds).
uint64_t json_uint(const nlohmann::json& v, std::string_view field,
                   std::string_view expected = "an integer");
const std::string& json_string(const nlohmann::json& v, std::string_view field,
                               std::string_view expected = "a string");
bool json_bool(const nlohmann::json& v, std::string_view field,
               std::string_view expected = "true or false");
const nlohmann::json& json_object(const nlohmann::json& v, std::string_view field,
                                  std::string_view expected = "an object");
const nlohmann::json& json_array(const nlohmann::json& v, std::string_view field,
                                 std::string_view expected = "an array");

}  // namespace offgen
