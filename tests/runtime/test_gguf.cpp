// Unit tests for the GGUF reader: a well-formed file round-trips; every kind of corruption gives an
// offgen::Error naming the field/tensor and the byte offset, never a crash.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/loaders/gguf.h"
#include "runtime/loaders/gguf_vocab.h"
#include "tests/runtime/gguf_writer.h"
#include "tests/temp_dir.h"

using namespace offgen;
using offgen::test::GgufLayout;
using offgen::test::GgufWriter;
namespace T = offgen::test;

namespace {

using Bytes = std::vector<uint8_t>;

Bytes iota_bytes(size_t n, uint8_t start) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i);
  return b;
}

// A small model-like file: every metadata kind the writer has and one tensor of each dtype.
GgufWriter small_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama")
      .add_string("general.name", "tiny test")
      .add_u32("llama.block_count", 2)
      .add_i32("llama.offset", -5)
      .add_f32("llama.rope.freq_base", 10000.0f)
      .add_bool("tokenizer.ggml.add_bos_token", true)
      .add_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "", "\xc4\xa0the"})
      .add_i32_array("tokenizer.ggml.token_type", {3, 3, 1, 1, -2})
      .add_f32_array("tokenizer.ggml.scores", {0.5f, -1.0f});
  w.add_tensor("token_embd.weight", {32, 3}, T::kGgmlQ8_0, iota_bytes(3 * 34, 1))
      .add_tensor("output_norm.weight", {5}, T::kGgmlF32, iota_bytes(20, 100))
      .add_tensor("blk.0.attn_q.weight", {4, 2}, T::kGgmlF16, iota_bytes(16, 7))
      .add_tensor("blk.0.ffn_up.weight", {32, 2}, T::kGgmlQ4_1, iota_bytes(40, 9))
      .add_tensor("blk.0.ffn_down.weight", {32, 1, 1}, T::kGgmlQ4_0, iota_bytes(18, 3))
      .add_tensor("blk.1.attn_k.weight", {3, 1, 1, 1}, T::kGgmlBF16, iota_bytes(6, 200));
  return w;
}

// A minimal valid file (one key, one tensor) for the exhaustive truncation loop.
GgufWriter tiny_writer() {
  GgufWriter w;
  w.add_string("general.architecture", "llama")
      .add_string_array("tokenizer.ggml.tokens", {"a", "bc"})
      .add_u32("llama.block_count", 1);
  w.add_tensor("w", {32, 1}, T::kGgmlQ8_0, iota_bytes(34, 0))
      .add_tensor("n", {3}, T::kGgmlF32, iota_bytes(12, 50));
  return w;
}

// Parses `b` from an exactly-sized heap copy (so sanitizers catch any overread) and returns the
// error message; fails the test when the parse succeeds or throws anything but an input Error.
std::string parse_error(const Bytes& b) {
  const std::unique_ptr<uint8_t[]> copy(new uint8_t[b.size() ? b.size() : 1]);
  std::copy(b.begin(), b.end(), copy.get());
  try {
    GgufFile::parse({copy.get(), b.size()}, "corrupt.gguf");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kInput);
    return e.what();
  }
  FAIL("parse succeeded on a corrupt file");
  return {};
}

void check_message(const std::string& msg, std::initializer_list<std::string> parts) {
  INFO("message: " << msg);
  CHECK_THAT(msg, Catch::Contains("corrupt.gguf"));
  for (const auto& p : parts) CHECK_THAT(msg, Catch::Contains(p));
}

std::string at(size_t offset) { return "offset " + std::to_string(offset); }

void write_file(const std::filesystem::path& p, const Bytes& b) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

TEST_CASE("gguf: a well-formed file round-trips", "[gguf]") {
  GgufLayout L;
  const Bytes file = small_writer().build(&L);
  const GgufFile f = GgufFile::parse(file, "small.gguf");

  CHECK(f.version() == 3);
  CHECK(f.path() == "small.gguf");
  CHECK(f.file_bytes() == file.size());
  CHECK(f.metadata().size() == 9);

  const GgufValue* arch = f.find("general.architecture");
  REQUIRE(arch != nullptr);
  CHECK(arch->type == GgufType::kString);
  CHECK(arch->str == "llama");
  CHECK(f.find("no.such.key") == nullptr);

  const GgufValue& toks = f.metadata().at("tokenizer.ggml.tokens");
  CHECK(toks.type == GgufType::kArray);
  CHECK(toks.elem_type == GgufType::kString);
  CHECK(toks.count == 5);
  CHECK(toks.strs == std::vector<std::string>{"<s>", "</s>", "a", "", "\xc4\xa0the"});

  const GgufValue& types = f.metadata().at("tokenizer.ggml.token_type");
  CHECK(types.elem_type == GgufType::kI32);
  CHECK(types.nums == std::vector<double>{3, 3, 1, 1, -2});
  CHECK(f.metadata().at("tokenizer.ggml.scores").nums == std::vector<double>{0.5, -1.0});
  CHECK(f.metadata().at("llama.block_count").type == GgufType::kU32);
  CHECK(f.metadata().at("tokenizer.ggml.add_bos_token").type == GgufType::kBool);

  REQUIRE(f.tensors().size() == 6);
  struct Want {
    const char* name;
    std::vector<int64_t> dims;
    DType dtype;
    int64_t n_elems, bytes;
  };
  const std::vector<Want> want = {
      {"token_embd.weight", {32, 3}, DType::kQ8_0, 96, 102},
      {"output_norm.weight", {5}, DType::kF32, 5, 20},
      {"blk.0.attn_q.weight", {4, 2}, DType::kF16, 8, 16},
      {"blk.0.ffn_up.weight", {32, 2}, DType::kQ4_1, 64, 40},
      {"blk.0.ffn_down.weight", {32, 1, 1}, DType::kQ4_0, 32, 18},
      {"blk.1.attn_k.weight", {3, 1, 1, 1}, DType::kBF16, 3, 6},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    const GgufTensor& t = f.tensors()[i];
    INFO("tensor " << want[i].name);
    CHECK(t.name == want[i].name);
    CHECK(t.dims == want[i].dims);
    CHECK(t.dtype == want[i].dtype);
    CHECK(t.n_elems == want[i].n_elems);
    CHECK(t.bytes == want[i].bytes);
    CHECK(t.offset == L.tensors[i].offset);
    CHECK(t.offset % 32 == 0);
    CHECK(t.data == file.data() + L.tensors[i].data_at);
    CHECK(t.data == file.data() + L.data_start + t.offset);
    CHECK(&f.tensor(want[i].name) == &t);
    CHECK(f.find_tensor(want[i].name) == &t);
  }
  CHECK(L.data_start % 32 == 0);
  CHECK(f.tensor("token_embd.weight").rows() == 3);
  CHECK(f.tensor("blk.0.ffn_down.weight").rows() == 1);
  // The bytes are where the writer put them.
  const GgufTensor& norm = f.tensor("output_norm.weight");
  CHECK(Bytes(norm.data, norm.data + norm.bytes) == iota_bytes(20, 100));
  const GgufTensor& emb = f.tensor("token_embd.weight");
  CHECK(Bytes(emb.data, emb.data + emb.bytes) == iota_bytes(102, 1));
}

TEST_CASE("gguf: typed getters", "[gguf]") {
  GgufWriter w = small_writer();
  w.add_u64("big.u64", std::numeric_limits<uint64_t>::max());
  const Bytes file = w.build();
  const GgufFile f = GgufFile::parse(file, "small.gguf");

  CHECK(f.get_int("llama.block_count") == 2);
  CHECK(f.get_int("llama.offset") == -5);
  CHECK(f.get_int_opt("llama.block_count") == std::optional<int64_t>(2));
  CHECK_FALSE(f.get_int_opt("llama.missing").has_value());
  CHECK(f.get_float("llama.rope.freq_base") == 10000.0);
  CHECK(f.get_float("llama.block_count") == 2.0);  // integers are numbers too
  CHECK_FALSE(f.get_float_opt("llama.missing").has_value());
  CHECK(f.get_string("general.name") == "tiny test");
  CHECK_FALSE(f.get_string_opt("general.missing").has_value());
  CHECK(f.get_bool_or("tokenizer.ggml.add_bos_token", false) == true);
  CHECK(f.get_bool_or("tokenizer.ggml.add_eos_token", true) == true);
  CHECK(f.get_bool_or("tokenizer.ggml.add_eos_token", false) == false);

  auto expect = [](auto&& fn, const std::string& a, const std::string& b) {
    try {
      fn();
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kInput);
      CHECK_THAT(e.what(), Catch::Contains(a) && Catch::Contains(b));
    }
  };
  expect([&] { f.get_int("llama.missing"); }, "llama.missing", "missing");
  expect([&] { f.get_int("general.name"); }, "general.name", "integer");
  expect([&] { f.get_int("llama.rope.freq_base"); }, "llama.rope.freq_base", "integer");
  expect([&] { f.get_int("big.u64"); }, "big.u64", "64-bit");
  expect([&] { f.get_float("general.name"); }, "general.name", "number");
  expect([&] { f.get_float("llama.missing"); }, "llama.missing", "missing");
  expect([&] { f.get_string("llama.block_count"); }, "llama.block_count", "string");
  expect([&] { f.get_string("general.missing"); }, "general.missing", "missing");
  expect([&] { f.get_bool_or("general.name", false); }, "general.name", "bool");
  expect([&] { f.tensor("no.such.tensor"); }, "no.such.tensor", "missing");
  CHECK(f.find_tensor("no.such.tensor") == nullptr);
}

TEST_CASE("gguf: version 2, no tensors, custom alignment", "[gguf]") {
  SECTION("v2 is accepted") {
    const Bytes file = tiny_writer().version(2).build();
    CHECK(GgufFile::parse(file, "v2.gguf").version() == 2);
  }
  SECTION("metadata only") {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    const Bytes file = w.build();
    const GgufFile f = GgufFile::parse(file, "meta.gguf");
    CHECK(f.tensors().empty());
    CHECK(f.get_string("general.architecture") == "llama");
  }
  SECTION("general.alignment = 64 is honoured") {
    GgufWriter w = tiny_writer();
    w.add_u32("general.alignment", 64);
    GgufLayout L;
    const Bytes file = w.build(&L);
    CHECK(L.data_start % 64 == 0);
    const GgufFile f = GgufFile::parse(file, "a64.gguf");
    REQUIRE(f.tensors().size() == 2);
    CHECK(f.tensors()[1].offset == 64);
    CHECK(f.tensors()[1].data == file.data() + L.data_start + 64);
    CHECK(f.tensors()[1].data[0] == 50);
  }
}

TEST_CASE("gguf: open maps a file; missing and empty files fail cleanly", "[gguf]") {
  GgufLayout L;
  const Bytes bytes = small_writer().build(&L);
  const test::TempDir scratch;
  const std::filesystem::path path = scratch.file("ok.gguf");
  write_file(path, bytes);
  {
    GgufFile f = GgufFile::open(path.string());
    GgufFile moved = std::move(f);  // the mapping moves with the object
    CHECK(moved.path() == path.string());
    CHECK(moved.file_bytes() == bytes.size());
    const GgufTensor& norm = moved.tensor("output_norm.weight");
    CHECK(Bytes(norm.data, norm.data + norm.bytes) == iota_bytes(20, 100));
    CHECK(moved.get_int("llama.block_count") == 2);
  }

  const std::filesystem::path missing = scratch.file("missing.gguf");
  try {
    GgufFile::open(missing.string());
    FAIL("opened a missing file");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kIo);
    CHECK_THAT(e.what(), Catch::Contains(missing.string()));
  }

  const std::filesystem::path empty = scratch.file("empty.gguf");
  write_file(empty, {});
  try {
    GgufFile::open(empty.string());
    FAIL("opened an empty file");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kInput);
    CHECK_THAT(e.what(), Catch::Contains(empty.string()) && Catch::Contains("empty"));
  }

  // A directory is not a model file.
  CHECK_THROWS_AS(GgufFile::open(scratch.path()), Error);
}

TEST_CASE("gguf corrupt: every truncation throws cleanly", "[gguf]") {
  for (GgufWriter w : {tiny_writer(), small_writer()}) {
    const Bytes file = w.build();
    REQUIRE_NOTHROW(GgufFile::parse(file, "full.gguf"));
    for (size_t n = 0; n < file.size(); ++n) {
      INFO("prefix of " << n << " / " << file.size() << " bytes");
      const std::string msg = parse_error(Bytes(file.begin(), file.begin() + n));
      CHECK_THAT(msg, Catch::Contains("offset") || Catch::Contains("outside the file"));
    }
  }
  const std::string msg = parse_error(Bytes{'G', 'G'});
  check_message(msg, {"magic", at(0), "truncated"});
}

TEST_CASE("gguf corrupt: bad magic", "[gguf]") {
  Bytes file = tiny_writer().build();
  std::memcpy(file.data(), "GGML", 4);
  check_message(parse_error(file), {"magic", at(0)});
}

TEST_CASE("gguf corrupt: unsupported version", "[gguf]") {
  for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
    Bytes file = tiny_writer().build();
    GgufWriter::patch(file, 4, v);
    check_message(parse_error(file), {"version " + std::to_string(v), at(4)});
  }
}

TEST_CASE("gguf corrupt: huge counts in the header", "[gguf]") {
  GgufLayout L;
  Bytes file = tiny_writer().build(&L);
  Bytes a = file;
  GgufWriter::patch(a, L.kv_count_at, uint64_t{1} << 40);
  check_message(parse_error(a), {"metadata count", at(L.kv_count_at)});
  Bytes b = file;
  GgufWriter::patch(b, L.tensor_count_at, ~uint64_t{0});
  check_message(parse_error(b), {"tensor count", at(L.tensor_count_at)});
}

TEST_CASE("gguf corrupt: huge string length", "[gguf]") {
  GgufLayout L;
  const Bytes file = tiny_writer().build(&L);
  SECTION("key") {
    Bytes b = file;
    GgufWriter::patch(b, L.kvs[0].begin, uint64_t{1} << 62);
    check_message(parse_error(b), {"metadata key #0", "string length", at(L.kvs[0].begin)});
  }
  SECTION("string value") {
    Bytes b = file;
    GgufWriter::patch(b, L.kvs[0].value_at, ~uint64_t{0});
    check_message(parse_error(b), {"general.architecture", at(L.kvs[0].value_at)});
  }
  SECTION("element of a string array") {
    Bytes b = file;
    const size_t elem1 = L.kvs[1].value_at + 4 + 8 + 8 + 1;  // type, count, "a"
    GgufWriter::patch(b, elem1, uint64_t{1000});
    check_message(parse_error(b), {"tokenizer.ggml.tokens[1]", at(elem1)});
  }
  SECTION("tensor name") {
    Bytes b = file;
    GgufWriter::patch(b, L.tensors[0].begin, uint64_t{1} << 31);
    check_message(parse_error(b), {"tensor #0 name", at(L.tensors[0].begin)});
  }
}

TEST_CASE("gguf corrupt: huge array count", "[gguf]") {
  GgufLayout L;
  const Bytes file = tiny_writer().build(&L);
  for (uint64_t n : {uint64_t{1} << 60, ~uint64_t{0}, uint64_t{1000}}) {
    Bytes b = file;
    GgufWriter::patch(b, L.kvs[1].value_at + 4, n);
    check_message(parse_error(b), {"tokenizer.ggml.tokens", "array of", at(L.kvs[1].value_at)});
  }
  // An i32 array whose count overruns the file.
  GgufWriter w;
  w.add_i32_array("tokenizer.ggml.token_type", {1, 2, 3});
  GgufLayout L2;
  Bytes b = w.build(&L2);
  GgufWriter::patch(b, L2.kvs[0].value_at + 4, uint64_t{64});
  check_message(parse_error(b), {"tokenizer.ggml.token_type", "offset"});
}

TEST_CASE("gguf corrupt: unknown value types", "[gguf]") {
  GgufLayout L;
  const Bytes file = tiny_writer().build(&L);
  Bytes a = file;
  GgufWriter::patch(a, L.kvs[2].type_at, uint32_t{13});
  check_message(parse_error(a), {"llama.block_count", "unknown value type 13", at(L.kvs[2].begin)});
  Bytes b = file;
  GgufWriter::patch(b, L.kvs[1].value_at, uint32_t{0x80000000u});
  check_message(parse_error(b),
                {"tokenizer.ggml.tokens", "unknown array element type", at(L.kvs[1].value_at)});
}

TEST_CASE("gguf corrupt: arrays nested too deeply", "[gguf]") {
  Bytes v;
  for (int i = 0; i < 8; ++i) {
    auto t = GgufWriter::pod(uint32_t{T::kGgufArray});
    auto n = GgufWriter::pod(uint64_t{1});
    v.insert(v.end(), t.begin(), t.end());
    v.insert(v.end(), n.begin(), n.end());
  }
  auto t = GgufWriter::pod(uint32_t{T::kGgufU8});
  auto n = GgufWriter::pod(uint64_t{0});
  v.insert(v.end(), t.begin(), t.end());
  v.insert(v.end(), n.begin(), n.end());
  GgufWriter w;
  w.add_raw("deep", T::kGgufArray, v);
  check_message(parse_error(w.build()), {"deep", "nested too deeply", "offset"});
}

TEST_CASE("gguf corrupt: tensor dimensions", "[gguf]") {
  SECTION("too many dims") {
    GgufWriter w;
    w.add_tensor("t5", {32, 1, 1, 1, 1}, T::kGgmlF32, Bytes(128));
    GgufLayout L;
    const Bytes b = w.build(&L);
    check_message(parse_error(b), {"tensor 't5'", "5 dimensions", at(L.tensors[0].begin)});
  }
  SECTION("zero dims") {
    GgufWriter w;
    w.add_tensor("t0", {}, T::kGgmlF32, Bytes(4));
    check_message(parse_error(w.build()), {"tensor 't0'", "0 dimensions"});
  }
  SECTION("a zero dim") {
    GgufWriter w;
    w.add_tensor("ok", {4}, T::kGgmlF32, Bytes(16)).add_tensor("tz", {4, 0}, T::kGgmlF32, Bytes());
    GgufLayout L;
    const Bytes b = w.build(&L);
    check_message(parse_error(b), {"tensor 'tz'", "dimension 1 = 0", at(L.tensors[1].begin)});
  }
  SECTION("element count overflows") {
    GgufWriter w;
    w.add_tensor("tbig", {uint64_t{1} << 40, uint64_t{1} << 30}, T::kGgmlF32, Bytes(4));
    GgufLayout L;
    const Bytes b = w.build(&L);
    check_message(parse_error(b),
                  {"tensor 'tbig'", "dimension 1", "overflows", at(L.tensors[0].begin)});
  }
  SECTION("a dim beyond 2^40") {
    GgufWriter w;
    w.add_tensor("thuge", {~uint64_t{0}}, T::kGgmlF32, Bytes(4));
    check_message(parse_error(w.build()), {"tensor 'thuge'", "dimension 0"});
  }
  SECTION("byte size overflows") {
    GgufWriter w;
    w.add_tensor("tbytes", {uint64_t{1} << 40, uint64_t{1} << 22}, T::kGgmlF32, Bytes(4));
    GgufLayout L;
    const Bytes b = w.build(&L);
    check_message(parse_error(b),
                  {"tensor 'tbytes'", "byte size overflows", at(L.tensors[0].begin)});
  }
  SECTION("row not a multiple of the block") {
    GgufWriter w;
    w.add_tensor("tq", {33, 2}, T::kGgmlQ8_0, Bytes(68));
    GgufLayout L;
    const Bytes b = w.build(&L);
    check_message(parse_error(b), {"tensor 'tq'", "row length 33", "q8_0", at(L.tensors[0].begin)});
  }
}

TEST_CASE("gguf corrupt: unknown tensor type", "[gguf]") {
  for (uint32_t ty : {99u, 16u /* IQ2_XXS: valid ggml, unsupported here */, 0xffffffffu}) {
    GgufWriter w;
    w.add_tensor("tt", {32}, ty, Bytes(128));
    GgufLayout L;
    const Bytes b = w.build(&L);
    check_message(parse_error(b), {"tensor 'tt'", "unsupported ggml type " + std::to_string(ty),
                                   at(L.tensors[0].begin)});
  }
}

TEST_CASE("gguf corrupt: misaligned tensor offset", "[gguf]") {
  GgufWriter w;
  w.add_tensor("ta", {4}, T::kGgmlF32, Bytes(16), 7);
  GgufLayout L;
  const Bytes b = w.build(&L);
  check_message(parse_error(b),
                {"tensor 'ta'", "data offset 7", "aligned to 32", at(L.tensors[0].begin)});
}

TEST_CASE("gguf corrupt: tensor data past the end of the file", "[gguf]") {
  SECTION("offset far past EOF") {
    GgufWriter w;
    w.add_tensor("tp", {4}, T::kGgmlF32, Bytes(16), int64_t{1} << 20);
    GgufLayout L;
    const Bytes b = w.build(&L);
    check_message(parse_error(b), {"tensor 'tp'", "outside the file",
                                   std::to_string(L.data_start + (size_t{1} << 20))});
  }
  SECTION("offset near 2^64 does not wrap") {
    GgufWriter w;
    w.add_tensor("tw", {4}, T::kGgmlF32, Bytes(16),
                 int64_t{-32} & std::numeric_limits<int64_t>::max());
    check_message(parse_error(w.build()), {"tensor 'tw'", "outside the file"});
  }
  SECTION("last byte missing") {
    GgufLayout L;
    Bytes b = tiny_writer().build(&L);
    b.pop_back();
    check_message(parse_error(b),
                  {"tensor 'n'", "outside the file", std::to_string(L.tensors[1].data_at)});
  }
  SECTION("data section starts past EOF") {
    GgufLayout L;
    Bytes b = tiny_writer().build(&L);
    b.resize(L.tensors.back().offset_at + 8);  // header complete, padding missing
    REQUIRE(b.size() < L.data_start);
    check_message(parse_error(b), {"data section", at(b.size())});
  }
}

TEST_CASE("gguf corrupt: tensors whose data overlap", "[gguf]") {
  // Data ranges relative to the data section; each message names both tensors and their ranges.
  SECTION("one starts inside another") {
    GgufWriter w;
    w.add_tensor("first", {16}, T::kGgmlF32, Bytes(64))          // [0, 64)
        .add_tensor("second", {4}, T::kGgmlF32, Bytes(16), 32);  // [32, 48)
    GgufLayout L;
    const Bytes b = w.build(&L);
    const size_t d = L.data_start;
    check_message(parse_error(b),
                  {"tensors 'first'", "'second'", "overlap", fmt::format("[{}, {})", d, d + 64),
                   fmt::format("[{}, {})", d + 32, d + 48)});
  }
  SECTION("the same offset") {
    for (int64_t offset : {0, 32}) {
      GgufWriter w;
      w.add_tensor("x", {8}, T::kGgmlF32, Bytes(32), offset)
          .add_tensor("y", {8}, T::kGgmlF32, Bytes(32), offset);
      const std::string msg = parse_error(w.build());
      check_message(msg, {"overlap", "'x'", "'y'"});
    }
  }
  SECTION("listed apart, other tensors between them") {
    GgufWriter w;
    w.add_tensor("wide", {32}, T::kGgmlF32, Bytes(128), 0)      // [0, 128)
        .add_tensor("a", {4}, T::kGgmlF32, Bytes(16), 128)      // [128, 144): adjacent, fine
        .add_tensor("b", {4}, T::kGgmlF32, Bytes(16), 160)      // [160, 176): fine
        .add_tensor("inner", {4}, T::kGgmlF32, Bytes(16), 96);  // [96, 112) inside 'wide'
    check_message(parse_error(w.build()), {"tensors 'wide'", "'inner'", "overlap"});
  }
  SECTION("adjacent ranges are fine") {
    GgufWriter w;
    w.add_tensor("p", {8}, T::kGgmlF32, Bytes(32), 32)
        .add_tensor("q", {8}, T::kGgmlF32, Bytes(32), 0);
    const Bytes b = w.build();
    CHECK(GgufFile::parse(b, "ok.gguf").tensors().size() == 2);
  }
}

TEST_CASE("gguf corrupt: duplicate key", "[gguf]") {
  GgufWriter w = tiny_writer();
  w.add_u32("llama.block_count", 7);
  GgufLayout L;
  const Bytes b = w.build(&L);
  check_message(parse_error(b),
                {"duplicate metadata key 'llama.block_count'", at(L.kvs.back().begin)});
}

TEST_CASE("gguf corrupt: duplicate tensor", "[gguf]") {
  GgufWriter w = tiny_writer();
  w.add_tensor("w", {32, 1}, T::kGgmlQ8_0, Bytes(34));
  GgufLayout L;
  const Bytes b = w.build(&L);
  check_message(parse_error(b), {"duplicate tensor 'w'", at(L.tensors.back().begin)});
}

TEST_CASE("gguf corrupt: bad general.alignment", "[gguf]") {
  for (uint32_t a : {0u, 3u, 48u, 1u << 21}) {
    GgufWriter w = tiny_writer();
    w.add_u32("general.alignment", a);
    GgufLayout L;
    const Bytes b = w.build(&L);
    check_message(parse_error(b),
                  {"general.alignment", "= " + std::to_string(a), at(L.kvs.back().begin)});
  }
  GgufWriter w = tiny_writer();
  w.add_string("general.alignment", "32");
  GgufLayout L;
  const Bytes b = w.build(&L);
  check_message(parse_error(b), {"general.alignment", at(L.kvs.back().begin)});
}

TEST_CASE("gguf corrupt: random byte flips never crash", "[gguf]") {
  const Bytes file = small_writer().build();
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  int errors = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = file;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int k = 0; k < flips; ++k) b[next() % b.size()] ^= static_cast<uint8_t>(1 + next() % 255);
    try {
      const GgufFile f = GgufFile::parse(b, "flip.gguf");
      for (const auto& t : f.tensors()) {
        REQUIRE(t.data >= b.data());
        REQUIRE(t.data + t.bytes <= b.data() + b.size());
      }
    } catch (const Error& e) {
      ++errors;
    }
  }
  CHECK(errors > 0);
}

TEST_CASE("gguf: the committed fuzz seed corpus parses as its names say", "[gguf]") {
  const std::filesystem::path dir =
      std::filesystem::path(OFFGEN_SOURCE_DIR) / "tests/fuzz/corpus/gguf";
  REQUIRE(std::filesystem::is_directory(dir));
  int valid = 0, invalid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    INFO("seed " << name);
    if (name.rfind("valid_", 0) == 0) {
      CHECK_NOTHROW(GgufFile::open(entry.path().string()));
      ++valid;
    } else {
      CHECK_THROWS_AS(GgufFile::open(entry.path().string()), Error);
      ++invalid;
    }
  }
  CHECK(valid >= 3);
  CHECK(invalid >= 3);
}

TEST_CASE("gguf: the chat template and its named variants", "[gguf]") {
  GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2")
      .add_string_array("tokenizer.ggml.tokens", {"a", "b"})
      .add_string("tokenizer.chat_template", "D")
      .add_string("tokenizer.chat_template.tool_use", "T")
      .add_string("tokenizer.chat_template.rag", "R")
      .add_string_array("tokenizer.chat_templates", {"tool_use", "rag"});
  const Bytes file = w.build();
  const VocabData v = vocab_from_gguf(GgufFile::parse(file, "t.gguf"));
  CHECK(v.chat_template == "D");
  CHECK(v.chat_templates ==
        std::vector<std::pair<std::string, std::string>>{{"rag", "R"}, {"tool_use", "T"}});
}
