// Unit tests for the shared readers in runtime/core: JsonReader (paths, offsets, duplicate keys,
// marked strings, parse errors, the depth limit), the typed getters' messages, and MappedFile (errors, empty
// files, moves that keep the mapping).
#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/json_reader.h"
#include "runtime/core/mapped_file.h"
#include "tests/temp_dir.h"

using namespace offgen;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

// Records "event@path" for every token, and the offset of each key.
class Recorder : public JsonHandler {
 public:
  explicit Recorder(const JsonReader& r) : r_(r) {}
  std::vector<std::string> events;
  std::vector<uint64_t> key_offsets;

  void on_null() override { add("null"); }
  void on_bool(bool v) override { add(v ? "true" : "false"); }
  void on_int(int64_t v) override { add(fmt::format("{}", v)); }
  void on_uint(uint64_t v) override { add(fmt::format("u{}", v)); }
  void on_float(double, const std::string& text) override { add(fmt::format("f{}", text)); }
  void on_string(std::string& s) override { add(fmt::format("'{}'", s)); }
  void on_begin_object() override { add("{"); }
  void on_duplicate_key(const std::string& k) override { add(fmt::format("dup:{}", k)); }
  void on_key(std::string& k) override {
    add(fmt::format("key:{}", k));
    key_offsets.push_back(r_.offset());
  }
  void on_end_object() override { add("}"); }
  void on_begin_array() override { add("["); }
  void on_end_array() override { add("]"); }

 private:
  void add(const std::string& e) { events.push_back(fmt::format("{}@{}", e, r_.path())); }
  const JsonReader& r_;
};

std::vector<std::string> events_of(const std::string& text) {
  JsonReader r(text);
  Recorder rec(r);
  r.read(rec);
  return rec.events;
}

JsonParseError parse_error_of(const std::string& text, const JsonReadOptions& o = {}) {
  try {
    read_json(text, o);
  } catch (const JsonParseError& e) {
    return e;
  }
  FAIL("parsed without error: " << text);
  throw;
}

}  // namespace

TEST_CASE("JsonReader: events carry the JSON path", "[json]") {
  CHECK(events_of(R"({"a": [1, {"b": null}], "c": -2, "d": 2.5, "": true})") ==
        std::vector<std::string>{"{@", "key:a@a", "[@a", "u1@a[0]", "{@a[1]", "key:b@a[1].b",
                                 "null@a[1].b", "}@a[1]", "]@a", "key:c@c", "-2@c", "key:d@d",
                                 "f2.5@d", "key:@", "true@", "}@"});
  CHECK(events_of(R"([["x"], "y"])") ==
        std::vector<std::string>{"[@", "[@[0]", "'x'@[0][0]", "]@[0]", "'y'@[1]", "]@"});
  CHECK(events_of(R"({"a": 1, "a": 2})") ==
        std::vector<std::string>{"{@", "key:a@a", "u1@a", "dup:a@a", "key:a@a", "u2@a", "}@"});
  // Keys are per object: the same key in two objects is no duplicate.
  CHECK(events_of(R"([{"a": 1}, {"a": 2}])").size() == 10);
}

TEST_CASE("JsonReader: offsets point just past the token read", "[json]") {
  const std::string text = R"({"ab": 1, "c": [2]})";
  JsonReader r(text);
  Recorder rec(r);
  r.read(rec);
  // The lexer has read the key's closing quote when the key is reported.
  REQUIRE(rec.key_offsets.size() == 2);
  CHECK(rec.key_offsets[0] == text.find("\"ab\"") + 4);
  CHECK(rec.key_offsets[1] == text.find("\"c\"") + 3);
}

TEST_CASE("read_json: the DOM, duplicate keys and marked strings", "[json]") {
  const JsonDocument doc = read_json(R"({"a": {"b": [1, 2], "b": [3]}, "s": "x", "s": "y"})");
  CHECK(doc.value == json::parse(R"({"a": {"b": [3]}, "s": "y"})"));  // the later value wins
  CHECK(doc.duplicate);
  CHECK(doc.duplicate_key == "b");
  CHECK(doc.duplicate_path == "a.b");
  CHECK_FALSE(doc.marked);

  const JsonDocument none = read_json(R"({"n": 18446744073709551615, "m": -3, "f": 0.5})");
  CHECK_FALSE(none.duplicate);
  CHECK(none.value["n"].is_number_unsigned());
  CHECK(none.value["m"].get<int64_t>() == -3);
  CHECK(none.value["f"].get<double>() == 0.5);

  JsonReadOptions o;
  o.mark = "#!";
  const JsonDocument m = read_json(R"({"a": ["ok", "x#!y"], "k#!": 1})", o);
  CHECK(m.marked);
  CHECK(m.marked_path == "a[1]");
  const JsonDocument k = read_json(R"({"a": 1, "k#!": "#!"})", o);
  CHECK(k.marked_path == "k#!");  // the key comes before its value

  const JsonParseError d =
      parse_error_of(R"({"x": {"y": 1, "y": 2}})", {.duplicate_throws = true, .mark = {}});
  CHECK(d.kind() == JsonParseError::Kind::kDuplicateKey);
  CHECK(d.key() == "y");
  CHECK(d.path() == "x.y");
  CHECK(d.category() == ErrorCategory::kInput);
  CHECK_THAT(d.what(), Contains("duplicate key \"y\""));
}

TEST_CASE("read_json: syntax and range errors", "[json]") {
  const JsonParseError trunc = parse_error_of(R"({"a": )");
  CHECK(trunc.kind() == JsonParseError::Kind::kSyntax);
  CHECK(trunc.byte() == 7);  // one past the text: it ended early
  CHECK_THAT(trunc.detail(), Contains("parse error"));
  CHECK_THAT(trunc.reason(), Contains("unexpected end of input"));
  CHECK_THAT(trunc.reason(), !Contains("column"));

  const JsonParseError trailing = parse_error_of("{} x");
  CHECK(trailing.kind() == JsonParseError::Kind::kSyntax);
  CHECK(trailing.byte() == 4);
  CHECK(parse_error_of("{\"a\": 1} // c").kind() == JsonParseError::Kind::kSyntax);  // no comments

  const JsonParseError big = parse_error_of(R"({"a": [1, 1e999]})");
  CHECK(big.kind() == JsonParseError::Kind::kNumberRange);
  CHECK(big.path() == "a[1]");
  CHECK_THAT(big.what(), Contains("1e999"));

  // Nesting: kJsonMaxDepth levels parse; one more is refused (its DOM's dump() once overflowed
  // the stack at ~200000 levels of a tokenizer.json).
  auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  CHECK_NOTHROW(read_json(nested(kJsonMaxDepth)));
  const JsonParseError deep = parse_error_of(nested(kJsonMaxDepth + 1));
  CHECK(deep.kind() == JsonParseError::Kind::kSyntax);
  CHECK_THAT(deep.reason(), Contains("nested deeper than 512 levels"));
  CHECK(parse_error_of(nested(200000)).kind() == JsonParseError::Kind::kSyntax);
}

TEST_CASE("typed getters name the field and what it should hold", "[json]") {
  const json v = json::parse(R"({"s": "x", "i": 7, "u": 18446744073709551615, "f": 1.5,
                                 "b": true, "o": {}, "a": []})");
  CHECK(json_string(v["s"], "s") == "x");
  CHECK(json_int(v["i"], "i") == 7);
  CHECK(json_number(v["i"], "i") == 7.0);
  CHECK(json_bool(v["b"], "b"));
  CHECK(&json_object(v["o"], "o") == &v["o"]);
  CHECK(&json_array(v["a"], "a") == &v["a"]);

  auto error_of = [](auto&& fn) -> JsonFieldError {
    try {
      fn();
    } catch (const JsonFieldError& e) {
      return e;
    }
    FAIL("no JsonFieldError");
    throw;
  };
  const JsonFieldError s = error_of([&] { json_string(v["i"], "body.prompt"); });
  CHECK(s.kind() == JsonFieldError::Kind::kWrongType);
  CHECK(s.field() == "body.prompt");
  CHECK(s.expected() == "a string");
  CHECK(std::string(s.what()) == "field 'body.prompt': expected a string, got number");
  CHECK(s.category() == ErrorCategory::kInput);

  CHECK(std::string(error_of([&] { json_int(v["f"], "top_k"); }).what()) ==
        "field 'top_k': expected an integer, got number");
  const JsonFieldError u = error_of([&] { json_int(v["u"], "seed"); });
  CHECK(u.kind() == JsonFieldError::Kind::kOutOfRange);
  CHECK(std::string(u.what()) ==
        "field 'seed': integer out of range (18446744073709551615): must be in "
        "[-9223372036854775808, 9223372036854775807]");
  // An integer literal beyond 64 bits (a float to JSON) is out of range too, with the range given.
  const json big = json::parse("[18446744073709551617, -1e30, 2.0]");
  const JsonFieldError b = error_of([&] { json_int(big[0], "max_tokens", "an integer", 0); });
  CHECK(b.kind() == JsonFieldError::Kind::kOutOfRange);
  CHECK(std::string(b.what()) ==
        "field 'max_tokens': integer out of range "
        "(1.8446744073709552e+19): must be in [0, 9223372036854775807]");
  CHECK(error_of([&] { json_uint(big[1], "seed"); }).detail() ==
        "integer out of range (-1e+30): must be in [0, 18446744073709551615]");
  CHECK(error_of([&] { json_int(big[2], "n"); }).kind() == JsonFieldError::Kind::kWrongType);
  CHECK(json_uint(v["u"], "seed") == 18446744073709551615ull);
  CHECK(std::string(error_of([&] { json_bool(v["s"], "chat"); }).what()) ==
        "field 'chat': expected true or false, got string");
  CHECK(std::string(error_of([&] { json_object(v["a"], "", "a JSON object"); }).what()) ==
        "expected a JSON object, got array");
  CHECK(error_of([&] { json_number(v["o"], "t"); }).detail() == "expected a number, got object");
}

TEST_CASE("MappedFile: maps a file read-only and names the path in errors", "[json]") {
  test::TempDir dir;
  const std::string path = dir.file("data.bin");
  std::ofstream(path, std::ios::binary) << "hello";
  MappedFile f = MappedFile::open(path, "test file");
  REQUIRE(f.size() == 5);
  CHECK(std::string(reinterpret_cast<const char*>(f.bytes().data()), 5) == "hello");
  CHECK(f.path() == path);

  // Moves keep the mapping's address (tensor pointers into it stay valid).
  const uint8_t* at = f.bytes().data();
  MappedFile g = std::move(f);
  CHECK(g.bytes().data() == at);
  CHECK(f.bytes().empty());
  MappedFile h;
  h = std::move(g);
  CHECK(h.bytes().data() == at);

  const std::string empty = dir.file("empty.bin");
  std::ofstream(empty, std::ios::binary).flush();
  CHECK(MappedFile::open(empty, "test file").bytes().empty());

  auto io_error = [](const std::string& p) -> std::string {
    try {
      MappedFile::open(p, "test file");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kIo);
      return e.what();
    }
    FAIL("opened " << p);
    return "";
  };
  const std::string missing = dir.file("absent.bin");
  CHECK_THAT(io_error(missing), Contains(missing) && Contains("cannot open test file"));
  CHECK_THAT(io_error(dir.path()), Contains(dir.path()) && Contains("not a regular file"));
}
