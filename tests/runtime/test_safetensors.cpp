// Unit tests for the safetensors reader: well-formed files (in memory and one written by the Python
// `safetensors` package) parse exactly; every kind of corruption is a kInput offgen::Error naming
// the tensor/field; checkpoint directories resolve names across shards and report inconsistencies.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/loaders/safetensors.h"
#include "tests/temp_dir.h"

using namespace offgen;
namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

using Bytes = std::vector<uint8_t>;

// u64 little-endian header length, the header text, then the data section.
Bytes raw_file(const std::string& header, const Bytes& data) {
  Bytes out;
  out.reserve(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i)));
  for (char c : header) out.push_back(static_cast<uint8_t>(c));
  for (uint8_t b : data) out.push_back(b);
  return out;
}
Bytes raw_file(const std::string& header, size_t data_bytes) {
  return raw_file(header, Bytes(data_bytes, 0xab));
}

struct Spec {
  std::string name, dtype;
  std::vector<int64_t> shape;
  Bytes data;
};

// Serialises tensors back to back (header order = argument order) with optional metadata.
Bytes build(const std::vector<Spec>& specs, const std::map<std::string, std::string>& meta = {}) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!meta.empty()) h["__metadata__"] = meta;
  Bytes data;
  for (const Spec& s : specs) {
    h[s.name] = {{"dtype", s.dtype},
                 {"shape", s.shape},
                 {"data_offsets", {data.size(), data.size() + s.data.size()}}};
    data.insert(data.end(), s.data.begin(), s.data.end());
  }
  return raw_file(h.dump(), data);
}

Bytes f32_bytes(std::initializer_list<float> v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), std::data(v), b.size());
  return b;
}

// Parsing `file` must throw a kInput error whose message names the file and contains `parts`.
void require_input_error(const Bytes& file, std::initializer_list<std::string> parts) {
  try {
    SafetensorsFile::parse(file, "t.safetensors");
    FAIL("parsed without error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.category() == ErrorCategory::kInput);
    CHECK_THAT(e.what(), Contains("t.safetensors"));
    for (const auto& p : parts) CHECK_THAT(e.what(), Contains(p));
  }
}
// Same for a file made of the header text `header` and a data section of `data_bytes` bytes.
void require_input_error(const std::string& header, size_t data_bytes,
                         std::initializer_list<std::string> parts) {
  INFO(header);
  require_input_error(raw_file(header, data_bytes), parts);
}

std::string entry(const std::string& name, const std::string& body) {
  return fmt::format("\"{}\":{{{}}}", name, body);
}
// A JSON object from "key":value members.
std::string obj(const std::vector<std::string>& members) {
  return fmt::format("{{{}}}", fmt::join(members, ","));
}

}  // namespace

TEST_CASE("safetensors: a well-formed file parses", "[safetensors]") {
  const Bytes f16 = {0x00, 0x3c, 0x00, 0xc0};               // 1.0, -2.0
  const Bytes bf16 = {0x80, 0x3f, 0x00, 0x3f, 0, 0, 0, 0};  // 1.0, 0.5, 0, 0
  const Bytes i64 = {7, 0, 0, 0, 0, 0, 0, 0};
  const Bytes file = build({{"w.f32", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
                            {"w.f16", "F16", {2}, f16},
                            {"w.bf16", "BF16", {2, 2}, bf16},
                            {"empty", "F32", {0, 5}, {}},
                            {"step", "I64", {}, i64}},
                           {{"format", "pt"}, {"k", "v"}});
  const SafetensorsFile st = SafetensorsFile::parse(file, "mem.safetensors");
  REQUIRE(st.tensors().size() == 5);
  const char* order[] = {"w.f32", "w.f16", "w.bf16", "empty", "step"};
  for (size_t i = 0; i < 5; ++i) CHECK(st.tensors()[i].name == order[i]);
  CHECK(st.metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"k", "v"}});
  CHECK(st.path() == "mem.safetensors");
  const uint64_t data0 = st.data_offset();
  CHECK(data0 == file.size() - (24 + 4 + 8 + 0 + 8));

  const SafetensorsTensor* a = st.find("w.f32");
  REQUIRE(a);
  CHECK(a->dtype == DType::kF32);
  CHECK(a->dtype_name == "F32");
  CHECK(a->shape == std::vector<int64_t>{2, 3});
  CHECK(a->n_elems() == 6);
  CHECK(a->bytes == 24);
  CHECK(a->data == file.data() + data0);
  CHECK(a->file_offset == static_cast<int64_t>(data0));
  float v[6];
  std::memcpy(v, a->data, 24);
  CHECK(v[0] == 1.0f);
  CHECK(v[5] == 6.0f);

  const SafetensorsTensor* h = st.find("w.f16");
  REQUIRE(h);
  CHECK(h->dtype == DType::kF16);
  CHECK(h->data == file.data() + data0 + 24);
  CHECK(fp16_to_f32_portable(static_cast<uint16_t>(h->data[2] | h->data[3] << 8)) == -2.0f);
  const SafetensorsTensor* b = st.find("w.bf16");
  REQUIRE(b);
  CHECK(b->dtype == DType::kBF16);
  CHECK(b->n_elems() == 4);
  CHECK(bf16_to_f32(static_cast<uint16_t>(b->data[2] | b->data[3] << 8)) == 0.5f);

  const SafetensorsTensor* e = st.find("empty");
  REQUIRE(e);
  CHECK(e->n_elems() == 0);
  CHECK(e->bytes == 0);
  const SafetensorsTensor* s = st.find("step");
  REQUIRE(s);
  CHECK(s->shape.empty());
  CHECK(s->n_elems() == 1);
  CHECK_FALSE(s->dtype.has_value());
  CHECK(s->dtype_name == "I64");
  CHECK(s->data[0] == 7);
  CHECK(st.find("nope") == nullptr);
}

TEST_CASE("safetensors: accepted edge cases", "[safetensors]") {
  SECTION("no tensors, no data") {
    CHECK(SafetensorsFile::parse(raw_file("{}", 0), "e").tensors().empty());
  }
  SECTION("header padded with spaces, as the reference writer does") {
    const auto st = SafetensorsFile::parse(
        raw_file(obj({entry("t", R"("dtype":"U8","shape":[3],"data_offsets":[0,3])")}) + "   ", 3),
        "p");
    REQUIRE(st.tensors().size() == 1);
    CHECK(st.tensors()[0].bytes == 3);
  }
  SECTION("every known dtype; only float types map to a DType") {
    std::vector<Spec> specs;
    for (const char* d : {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U64", "U32",
                          "U16", "U8", "BOOL", "F8_E4M3", "F8_E5M2"})
      specs.push_back({std::string("t.") + d,
                       d,
                       {3},
                       Bytes(static_cast<size_t>(3 * safetensors_dtype_size(d)), 1)});
    const Bytes file = build(specs);
    const auto st = SafetensorsFile::parse(file, "all");
    REQUIRE(st.tensors().size() == specs.size());
    CHECK(st.find("t.F32")->dtype == DType::kF32);
    CHECK(st.find("t.F16")->dtype == DType::kF16);
    CHECK(st.find("t.BF16")->dtype == DType::kBF16);
    CHECK(st.find("t.F64")->bytes == 24);
    CHECK_FALSE(st.find("t.F64")->dtype.has_value());
    CHECK_FALSE(st.find("t.I32")->dtype.has_value());
    CHECK_FALSE(st.find("t.F8_E4M3")->dtype.has_value());
    CHECK(safetensors_dtype_size("F4") == 0);
  }
  SECTION("zero-size tensors may share an offset with their neighbours") {
    const Bytes file = build({{"a", "F32", {1}, f32_bytes({1})},
                              {"z", "F16", {4, 0}, {}},
                              {"b", "F32", {1}, f32_bytes({2})}});
    CHECK(SafetensorsFile::parse(file, "z").find("z")->data == file.data() + file.size() - 4);
  }
}

TEST_CASE("safetensors: framing errors", "[safetensors]") {
  require_input_error(Bytes{1, 2, 3}, {"shorter than the 8-byte"});
  require_input_error(raw_file("", 4), {"header length is 0"});
  Bytes too_long = raw_file("{}", 0);
  too_long[0] = 3;
  require_input_error(too_long, {"header length 3", "exceeds"});
  Bytes huge((100u << 20) + 16, ' ');
  const uint64_t n = (100u << 20) + 1;
  for (int i = 0; i < 8; ++i) huge[i] = static_cast<uint8_t>(n >> (8 * i));
  huge[8] = '{';
  require_input_error(huge, {"limit"});
  require_input_error(" {}", 0, {"must start with '{'"});
  require_input_error("[]", 0, {"must start with '{'"});
  require_input_error(R"({"a": )", 0, {"not valid JSON", "offset"});
  require_input_error("{}x", 0, {"not valid JSON"});
  require_input_error("{\"\xff\": 1}", 0, {"not valid JSON"});
  require_input_error("{}", 4, {"not covered by any tensor", "[10, 14)"});
}

TEST_CASE("safetensors: tensor entry errors name the tensor and field", "[safetensors]") {
  const std::string ok_dtype = R"("dtype":"F32")", ok_shape = R"("shape":[2])";
  const std::string ok_off = R"("data_offsets":[0,8])";
  auto one = [](const std::string& body) { return obj({entry("w", body)}); };
  require_input_error(R"({"w": 5})", 8, {"tensor 'w'", "must be an object"});
  require_input_error(R"({"w": [1]})", 8, {"tensor 'w'", "must be an object"});
  require_input_error(one(ok_dtype + "," + ok_shape), 8,
                      {"tensor 'w'", "missing key \"data_offsets\""});
  require_input_error(one(ok_shape + "," + ok_off), 8, {"tensor 'w'", "missing key \"dtype\""});
  require_input_error(one(ok_dtype + "," + ok_off), 8, {"tensor 'w'", "missing key \"shape\""});
  require_input_error(one(ok_dtype + "," + ok_shape + "," + ok_off + R"(,"extra":1)"), 8,
                      {"tensor 'w'", "unexpected key \"extra\""});
  require_input_error(one(ok_dtype + "," + ok_dtype + "," + ok_shape + "," + ok_off), 8,
                      {"tensor 'w'", "duplicate key \"dtype\""});
  require_input_error(one(R"("dtype":4,)" + ok_shape + "," + ok_off), 8,
                      {"tensor 'w'", "\"dtype\" must be a string"});
  require_input_error(one(R"("dtype":"F33",)" + ok_shape + "," + ok_off), 8,
                      {"tensor 'w'", "unknown dtype \"F33\"", "near offset"});
  require_input_error(one(ok_dtype + R"(,"shape":2,)" + ok_off), 8,
                      {"tensor 'w'", "\"shape\" must be"});
  require_input_error(one(ok_dtype + R"(,"shape":[-2],)" + ok_off), 8,
                      {"tensor 'w'", "shape", "negative"});
  require_input_error(one(ok_dtype + R"(,"shape":[2.0],)" + ok_off), 8,
                      {"tensor 'w'", "non-integer"});
  require_input_error(one(ok_dtype + R"(,"shape":[[2]],)" + ok_off), 8, {"tensor 'w'", "an array"});
  require_input_error(one(ok_dtype + R"(,"shape":["2"],)" + ok_off), 8, {"tensor 'w'", "string"});
  require_input_error(one(ok_dtype + R"(,"shape":[2147483648,2147483648,4],)" + ok_off), 8,
                      {"tensor 'w'", "overflows"});
  require_input_error(one(ok_dtype + R"(,"shape":[4611686018427387905,0],)" + ok_off), 8,
                      {"tensor 'w'", "overflows"});
  require_input_error(one(ok_dtype + R"(,"shape":[99999999999999999999],)" + ok_off), 8,
                      {"tensor 'w'", "non-integer"});
  // data_offsets
  const std::string dt = ok_dtype + "," + ok_shape + ",";
  require_input_error(one(dt + R"("data_offsets":[8])"), 8,
                      {"tensor 'w'", "data_offsets", "2 entries"});
  require_input_error(one(dt + R"("data_offsets":[0,8,8])"), 8, {"tensor 'w'", "more than 2"});
  require_input_error(one(dt + R"("data_offsets":[-1,8])"), 8, {"tensor 'w'", "negative"});
  require_input_error(one(dt + R"("data_offsets":{"a":1})"), 8,
                      {"tensor 'w'", "\"data_offsets\" must be"});
  require_input_error(one(dt + R"("data_offsets":[8,0])"), 8, {"tensor 'w'", "begin <= end"});
  require_input_error(one(dt + R"("data_offsets":[0,16])"), 8,
                      {"tensor 'w'", "[0, 16]", "end <= 8"});
  require_input_error(one(dt + R"("data_offsets":[0,4])"), 8,
                      {"tensor 'w'", "span 4 bytes", "need 8"});
  // Duplicates of whole entries (nlohmann alone would keep the last silently).
  const std::string w = entry("w", dt + ok_off);
  require_input_error(obj({w, w}), 8, {"duplicate key \"w\""});
}

TEST_CASE("safetensors: layout and metadata errors", "[safetensors]") {
  auto t = [](const std::string& name, const std::string& dtype, int n, int b, int e) {
    return entry(
        name, fmt::format(R"("dtype":"{}","shape":[{}],"data_offsets":[{},{}])", dtype, n, b, e));
  };
  require_input_error(obj({t("a", "F32", 2, 0, 8), t("b", "F16", 2, 4, 8)}), 8,
                      {"tensor 'b'", "overlaps tensor 'a'"});
  require_input_error(obj({t("a", "F32", 1, 0, 4), t("b", "F32", 1, 8, 12)}), 12,
                      {"not covered", "before tensor 'b'"});
  require_input_error(obj({t("a", "F32", 1, 4, 8)}), 8, {"not covered", "before tensor 'a'"});
  require_input_error(obj({t("a", "F32", 1, 0, 4)}), 8, {"not covered", "after the last"});
  require_input_error(obj({t("z", "F32", 0, 2, 2), t("a", "F32", 1, 0, 4)}), 4, {"overlaps"});
  const std::string a = t("a", "U8", 1, 0, 1);
  require_input_error(obj({R"("__metadata__": [])", a}), 1, {"'__metadata__' must be an object"});
  require_input_error(obj({R"("__metadata__": "x")", a}), 1, {"'__metadata__' must be an object"});
  require_input_error(obj({R"("__metadata__": {"k": 1})", a}), 1,
                      {"'__metadata__'", "\"k\"", "string"});
  require_input_error(obj({R"("__metadata__": {"k": {}})", a}), 1, {"'__metadata__'", "\"k\""});
  require_input_error(obj({R"("__metadata__": {"k": "1", "k": "2"})", a}), 1,
                      {"'__metadata__'", "duplicate key \"k\""});
  require_input_error(obj({R"("__metadata__": {}, "__metadata__": {})", a}), 1,
                      {"duplicate key \"__metadata__\""});
}

// The Python reference writer's output. Regenerate (from the repository root) with:
//   /opt/offgen-dev/bin/python -c "import numpy as np; from safetensors.numpy import save_file;
//   save_file({'embed.weight': np.arange(12, dtype=np.float32).reshape(3, 4),
//   'norm.weight': np.array([1.5, -2.0, 0.25], dtype=np.float16), 'step': np.array(7,
//   dtype=np.int64), 'mask': np.array([True, False, True]), 'empty': np.zeros((0, 3),
//   dtype=np.float32)}, 'tests/data/safetensors/small.safetensors', metadata={'format': 'np',
//   'note': 'offgen test'})"
TEST_CASE("safetensors: a file written by the Python safetensors package", "[safetensors]") {
  const SafetensorsFile st =
      SafetensorsFile::open(std::string(OFFGEN_TEST_DATA) + "/safetensors/small.safetensors");
  CHECK(st.metadata() ==
        std::map<std::string, std::string>{{"format", "np"}, {"note", "offgen test"}});
  REQUIRE(st.tensors().size() == 5);
  const SafetensorsTensor& e = *st.find("embed.weight");
  CHECK(e.dtype == DType::kF32);
  CHECK(e.shape == std::vector<int64_t>{3, 4});
  for (int i = 0; i < 12; ++i) {
    float x;
    std::memcpy(&x, e.data + 4 * i, 4);
    CHECK(x == static_cast<float>(i));
  }
  const SafetensorsTensor& n = *st.find("norm.weight");
  CHECK(n.dtype == DType::kF16);
  CHECK(n.shape == std::vector<int64_t>{3});
  const float want[] = {1.5f, -2.0f, 0.25f};
  for (int i = 0; i < 3; ++i)
    CHECK(fp16_to_f32_portable(static_cast<uint16_t>(n.data[2 * i] | n.data[2 * i + 1] << 8)) ==
          want[i]);
  const SafetensorsTensor& s = *st.find("step");
  CHECK(s.dtype_name == "I64");
  CHECK(s.shape.empty());
  int64_t step;
  std::memcpy(&step, s.data, 8);
  CHECK(step == 7);
  const SafetensorsTensor& m = *st.find("mask");
  CHECK(m.dtype_name == "BOOL");
  CHECK((m.bytes == 3 && m.data[0] == 1 && m.data[1] == 0 && m.data[2] == 1));
  CHECK(st.find("empty")->shape == std::vector<int64_t>{0, 3});
  CHECK(st.find("empty")->bytes == 0);
  // Header order as written by the reference, and the last tensor ends the file.
  const char* order[] = {"step", "embed.weight", "empty", "norm.weight", "mask"};
  for (size_t i = 0; i < 5; ++i) CHECK(st.tensors()[i].name == order[i]);
  CHECK(static_cast<uint64_t>(m.file_offset + m.bytes) == st.file_bytes());
}

TEST_CASE("safetensors: open() distinguishes I/O from malformed input", "[safetensors]") {
  try {
    SafetensorsFile::open("/nonexistent/dir/x.safetensors");
    FAIL("opened");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kIo);
    CHECK_THAT(e.what(), Contains("/nonexistent/dir/x.safetensors"));
  }
}

namespace {

// A scratch checkpoint directory (unique, removed with everything in it) and its file writers.
class CheckpointDir : public test::TempDir {
 public:
  std::string str() const { return path(); }
  void write(const std::string& name, const Bytes& b) const {
    std::ofstream(file(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(file(name), std::ios::binary) << text;
  }
};

const char* kShard1 = "model-00001-of-00002.safetensors";
const char* kShard2 = "model-00002-of-00002.safetensors";
const char* kIndex = "model.safetensors.index.json";

// Two shards: a, b (4 + 8 bytes) in shard 1; c (2 bytes) in shard 2.
void write_shards(const CheckpointDir& d) {
  d.write(kShard1,
          build({{"a", "F32", {1}, f32_bytes({1})}, {"b", "F32", {2}, f32_bytes({2, 3})}}));
  d.write(kShard2, build({{"c", "BF16", {1}, Bytes{0x80, 0x3f}}}));
}
std::string index_json(const std::string& weight_map) {
  return R"({"metadata": {"total_size": 14}, "weight_map": {)" + weight_map + "}}";
}

void require_dir_error(const std::string& dir, ErrorCategory cat,
                       std::initializer_list<std::string> parts) {
  try {
    SafetensorsCheckpoint::open_dir(dir);
    FAIL("opened without error");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.category() == cat);
    for (const auto& p : parts) CHECK_THAT(e.what(), Contains(p));
  }
}

}  // namespace

TEST_CASE("safetensors checkpoint: index + two shards", "[safetensors]") {
  CheckpointDir d;
  write_shards(d);
  d.write(kIndex,
          index_json(fmt::format(R"("a": "{0}", "b": "{0}", "c": "{1}")", kShard1, kShard2)));
  SafetensorsCheckpoint c = SafetensorsCheckpoint::open_dir(d.str());
  CHECK(c.dir() == d.str());
  CHECK(c.names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(c.total_bytes() == 14);
  REQUIRE(c.files().size() == 2);
  CHECK(c.tensor("c").dtype == DType::kBF16);
  CHECK(c.tensor("b").shape == std::vector<int64_t>{2});
  float b1;
  std::memcpy(&b1, c.tensor("b").data + 4, 4);
  CHECK(b1 == 3.0f);
  CHECK_THAT(c.file_of("c").path(), Contains(kShard2));
  CHECK(c.find("zzz") == nullptr);
  try {
    c.tensor("zzz");
    FAIL("found");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kInput);
    CHECK_THAT(e.what(), Contains("'zzz'"));
    CHECK_THAT(e.what(), Contains(d.str()));
  }
  // Moving the checkpoint keeps tensor pointers valid (they point into the shards' tables).
  const SafetensorsTensor* a = c.find("a");
  SafetensorsCheckpoint moved = std::move(c);
  CHECK(moved.find("a") == a);
  CHECK(moved.tensor("a").data[3] == 0x3f);
}

TEST_CASE("safetensors checkpoint: index inconsistencies are reported", "[safetensors]") {
  CheckpointDir d;
  write_shards(d);
  const std::string index = d.str() + "/" + kIndex;
  SECTION("missing shard") {
    d.write(kIndex,
            index_json(fmt::format(R"("a": "{0}", "b": "{0}", "c": "{1}", "d": "x.safetensors")",
                                   kShard1, kShard2)));
    require_dir_error(d.str(), ErrorCategory::kInput,
                      {index, "\"x.safetensors\"", "'d'", "does not exist"});
  }
  SECTION("entry names the wrong shard") {
    d.write(kIndex,
            index_json(fmt::format(R"("a": "{0}", "b": "{1}", "c": "{1}")", kShard1, kShard2)));
    require_dir_error(d.str(), ErrorCategory::kInput, {index, "'b'", kShard2, "it is in", kShard1});
  }
  SECTION("entry names a tensor that no shard has") {
    d.write(kIndex, index_json(fmt::format(R"("a": "{0}", "b": "{0}", "c": "{1}", "q": "{1}")",
                                           kShard1, kShard2)));
    require_dir_error(d.str(), ErrorCategory::kInput, {index, "'q'", kShard2, "no such tensor"});
  }
  SECTION("shard tensor missing from the index") {
    d.write(kIndex, index_json(fmt::format(R"("a": "{0}", "c": "{1}")", kShard1, kShard2)));
    require_dir_error(d.str(), ErrorCategory::kInput, {index, "'b'", kShard1, "not listed"});
  }
  SECTION("duplicate tensor across shards") {
    d.write(kShard2, build({{"c", "BF16", {1}, Bytes{0x80, 0x3f}}, {"a", "U8", {1}, Bytes{1}}}));
    d.write(kIndex,
            index_json(fmt::format(R"("a": "{0}", "b": "{0}", "c": "{1}")", kShard1, kShard2)));
    require_dir_error(d.str(), ErrorCategory::kInput, {"'a'", kShard1, kShard2});
  }
  SECTION("duplicate weight_map key") {
    d.write(kIndex, index_json(fmt::format(R"("a": "{0}", "b": "{0}", "c": "{1}", "a": "{1}")",
                                           kShard1, kShard2)));
    require_dir_error(d.str(), ErrorCategory::kInput, {index, "duplicate key \"a\""});
  }
  SECTION("shard path escaping the directory") {
    d.write(kIndex, index_json(R"("a": "../model.safetensors")"));
    require_dir_error(d.str(), ErrorCategory::kInput,
                      {index, "weight_map[\"a\"]", "relative path inside"});
  }
  SECTION("malformed index") {
    d.write(kIndex, std::string(R"({"weight_map": [1]})"));
    require_dir_error(d.str(), ErrorCategory::kInput, {index, "weight_map"});
    d.write(kIndex, std::string(R"({"weight_map": {"a": 1}})"));
    require_dir_error(d.str(), ErrorCategory::kInput, {index, "weight_map[\"a\"]"});
    d.write(kIndex, std::string(R"({"weight_map": )"));
    require_dir_error(d.str(), ErrorCategory::kInput, {index, "not valid JSON"});
  }
  SECTION("malformed shard: the error names the shard file") {
    d.write(kShard2, raw_file("{}", 3));
    d.write(kIndex,
            index_json(fmt::format(R"("a": "{0}", "b": "{0}", "c": "{1}")", kShard1, kShard2)));
    require_dir_error(d.str(), ErrorCategory::kInput, {kShard2, "not covered"});
  }
}

TEST_CASE("safetensors checkpoint: single file and directory fallback", "[safetensors]") {
  CheckpointDir d;
  SECTION("empty directory") {
    require_dir_error(d.str(), ErrorCategory::kInput, {d.str(), "no model.safetensors"});
  }
  SECTION("not a directory") {
    require_dir_error(d.str() + "/absent", ErrorCategory::kIo, {"absent", "not a directory"});
  }
  SECTION("every *.safetensors file without an index") {
    write_shards(d);
    d.write("notes.txt", std::string("ignored"));
    const auto c = SafetensorsCheckpoint::open_dir(d.str());
    CHECK(c.names() == std::vector<std::string>{"a", "b", "c"});
    CHECK(c.files().size() == 2);
  }
  SECTION("duplicates without an index name both files") {
    write_shards(d);
    d.write("extra.safetensors", build({{"b", "U8", {1}, Bytes{1}}}));
    require_dir_error(d.str(), ErrorCategory::kInput, {"'b'", "extra.safetensors", kShard1});
  }
  SECTION("model.safetensors is used on its own") {
    write_shards(d);
    d.write("model.safetensors", build({{"only", "F16", {2}, Bytes{0, 0x3c, 0, 0x3c}}}));
    const auto c = SafetensorsCheckpoint::open_dir(d.str());
    CHECK(c.names() == std::vector<std::string>{"only"});
    CHECK(c.total_bytes() == 4);
  }
}
