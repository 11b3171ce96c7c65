// Loaders for SentencePiece-style vocabularies: GGUF tokenizer.ggml.model "llama" (keys,
// llama.cpp's defaults, metadata-only reading past tensor types the loader cannot read) and the
// tokenizer.json pipelines (normalizer / pre_tokenizer / decoder) offgen maps, and those it refuses
// by JSON path.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/core/error.h"
#include "runtime/loaders/gguf.h"
#include "runtime/loaders/gguf_vocab.h"
#include "runtime/loaders/hf_tokenizer.h"
#include "runtime/text/tokenizer.h"
#include "tests/runtime/gguf_writer.h"
#include "tests/temp_dir.h"

using namespace offgen;
using nlohmann::json;
using offgen::test::GgufWriter;

namespace {

const std::string kSp = "\xe2\x96\x81";  // "▁"

// A small "llama" vocabulary GGUF: <unk> <s> </s>, the 256 byte tokens, a few pieces.
GgufWriter spm_gguf() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    tokens.push_back(name);
    types.push_back(6);
    scores.push_back(0);
  }
  for (const std::string& p :
       {kSp, std::string("a"), std::string("b"), kSp + "a", std::string("ab")}) {
    tokens.push_back(p);
    types.push_back(1);
    scores.push_back(-static_cast<float>(tokens.size()));
  }
  GgufWriter w;
  w.add_string("general.architecture", "llama")
      .add_string("tokenizer.ggml.model", "llama")
      .add_string_array("tokenizer.ggml.tokens", tokens)
      .add_i32_array("tokenizer.ggml.token_type", types)
      .add_f32_array("tokenizer.ggml.scores", scores)
      .add_u32("tokenizer.ggml.bos_token_id", 1)
      .add_u32("tokenizer.ggml.eos_token_id", 2)
      .add_u32("tokenizer.ggml.unknown_token_id", 0);
  return w;
}

VocabData from_bytes(const std::vector<uint8_t>& bytes) {
  return vocab_from_gguf(GgufFile::parse(bytes, "t.gguf"));
}

// A SentencePiece-style tokenizer.json: <unk> <s> </s> (added, special), byte tokens, pieces,
// merges; Llama 2's pipeline (Prepend + Replace normaliser, Replace/ByteFallback/Fuse/Strip).
json spm_json() {
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  int next = 259;
  for (const std::string& p :
       {kSp, std::string("a"), std::string("b"), kSp + "a", std::string("ab")})
    vocab[p] = next++;
  json t;
  t["version"] = "1.0";
  t["added_tokens"] = json::array();
  for (int id = 0; id < 3; ++id)
    t["added_tokens"].push_back({{"id", id},
                                 {"content", std::vector<std::string>{"<unk>", "<s>", "</s>"}[id]},
                                 {"special", true},
                                 {"normalized", false}});
  t["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Prepend"}, {"prepend", kSp}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}}}};
  t["pre_tokenizer"] = nullptr;
  t["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  t["decoder"] = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  t["model"] = {{"type", "BPE"},         {"unk_token", "<unk>"}, {"fuse_unk", true},
                {"byte_fallback", true}, {"vocab", vocab},       {"merges", {kSp + " a", "a b"}}};
  return t;
}

VocabData load(const json& t, const json& config = nullptr) {
  return vocab_from_hf_tokenizer_text(t.dump(), config.is_null() ? "" : config.dump(), "t.json");
}

void require_input_error(const json& t, std::initializer_list<std::string> parts) {
  try {
    load(t);
    FAIL("no error for " << t.dump().substr(0, 300));
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.category() == ErrorCategory::kInput);
    for (const auto& p : parts) CHECK_THAT(e.what(), Catch::Contains(p));
  }
}

}  // namespace

TEST_CASE("GGUF llama vocabularies: keys and llama.cpp's defaults", "[spm][gguf]") {
  const VocabData d = from_bytes(spm_gguf().build());
  CHECK(d.model == "llama");
  CHECK(d.scores.size() == d.tokens.size());
  CHECK(d.add_bos);  // default for "llama" when the key is absent
  CHECK_FALSE(d.add_eos);
  CHECK(d.space_prefix == SpacePrefix::kEverySegment);
  CHECK(d.strip_leading_space);
  CHECK(d.unk_id == 0);
  const Tokenizer t(d);
  // "▁a▁b": ▁a (262), ▁ (259), b (261) after BOS; "a▁" and "▁b" are not tokens.
  CHECK(t.encode("a b") == std::vector<int32_t>{1, 262, 259, 261});

  GgufWriter w = spm_gguf();
  w.add_bool("tokenizer.ggml.add_bos_token", false)
      .add_bool("tokenizer.ggml.add_eos_token", true)
      .add_bool("tokenizer.ggml.add_space_prefix", false);
  const VocabData e = from_bytes(w.build());
  CHECK_FALSE(e.add_bos);
  CHECK(e.add_eos);
  CHECK(e.space_prefix == SpacePrefix::kNone);
  CHECK_FALSE(e.strip_leading_space);
  const Tokenizer te(e);
  CHECK(te.encode("ab") == std::vector<int32_t>{263, 2});

  GgufWriter short_scores;
  short_scores.add_string("tokenizer.ggml.model", "llama")
      .add_string_array("tokenizer.ggml.tokens", {"a", "b"})
      .add_f32_array("tokenizer.ggml.scores", {0.0f});
  try {
    from_bytes(short_scores.build());
    FAIL("no error");
  } catch (const Error& err) {
    CHECK_THAT(err.what(), Catch::Contains("tokenizer.ggml.scores has 1 entries for 2 tokens"));
  }
}

TEST_CASE("load_gguf_vocab reads the metadata of a file whose tensors it cannot read",
          "[spm][gguf]") {
  GgufWriter w = spm_gguf();
  w.add_tensor("blk.0.attn_k.weight", {256}, /*IQ2_XXS*/ 16, std::vector<uint8_t>(66, 0));
  const auto bytes = w.build();
  const test::TempDir scratch;
  const std::filesystem::path path = scratch.file("vocab.gguf");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  CHECK_THROWS_WITH(GgufFile::open(path.string()), Catch::Contains("unsupported ggml type 16"));
  const VocabData v = load_gguf_vocab(path.string());
  CHECK(v.tokens.size() == 3 + 256 + 5);
  CHECK(GgufFile::open_metadata(path.string()).tensors().empty());
}

TEST_CASE("tokenizer.json SentencePiece pipelines map onto VocabData", "[spm][hf_tokenizer]") {
  json t = spm_json();
  VocabData v = load(t, json{{"add_eos_token", true}, {"eos_token", "</s>"}});
  CHECK(v.model == "llama");
  CHECK(v.space_prefix == SpacePrefix::kEverySegment);
  CHECK(v.escape_spaces);
  CHECK(v.splits.empty());
  CHECK(v.strip_leading_space);
  CHECK(v.byte_fallback);
  CHECK(v.fuse_unk);
  CHECK(v.add_bos);
  CHECK(v.add_eos);
  CHECK(v.bos_id == 1);
  CHECK(v.eos_id == 2);
  CHECK(v.unk_id == 0);
  CHECK(v.token_types[0] == static_cast<int32_t>(TokenType::kControl));
  CHECK(v.token_types[3 + 0x41] == static_cast<int32_t>(TokenType::kByte));
  CHECK(v.merges == std::vector<std::string>{kSp + " a", "a b"});
  const Tokenizer tok(std::move(v));
  // "▁ab▁a": "▁ a" ranks before "a b", so ▁a b ▁a; BOS from the template, EOS from the config.
  CHECK(tok.encode("ab a") == std::vector<int32_t>{1, 262, 261, 262, 2});
  CHECK(tok.decode(tok.encode("ab a"), true) == "ab a");

  SECTION("Metaspace: prepend_scheme, the older add_prefix_space, split") {
    t["normalizer"] = nullptr;
    t["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "first"}, {"split", false}};
    VocabData m = load(t);
    CHECK(m.space_prefix == SpacePrefix::kFirstSegmentUnlessSpace);
    CHECK(m.splits.empty());
    t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kSp}, {"add_prefix_space", true}};
    m = load(t);
    CHECK(m.space_prefix == SpacePrefix::kEverySegmentUnlessSpace);
    REQUIRE(m.splits.size() == 1);  // split defaults to true
    CHECK(m.splits[0].behavior == SplitBehavior::kMergedWithNext);
    t["pre_tokenizer"]["prepend_scheme"] = "never";
    CHECK(load(t).space_prefix == SpacePrefix::kNone);
  }
  SECTION("NFKC, Gemma's Replace + Split, a Metaspace decoder") {
    t["normalizer"] = {{"type", "Sequence"},
                       {"normalizers",
                        {{{"type", "NFKC"}},
                         {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}}}};
    t["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"String", " "}}},
                          {"behavior", "MergedWithPrevious"},
                          {"invert", false}};
    t["decoder"] = {
        {"type", "Sequence"},
        {"decoders",
         {{{"type", "ByteFallback"}},
          {{"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "always"}}}}};
    const VocabData g = load(t);
    CHECK(g.normalize_nfkc);
    CHECK(g.space_prefix == SpacePrefix::kNone);
    CHECK(g.splits.size() == 1);
    CHECK(g.strip_leading_space);
  }
}

TEST_CASE("unsupported SentencePiece pipelines are refused with the JSON path",
          "[spm][hf_tokenizer]") {
  json t = spm_json();
  SECTION("a normaliser offgen does not apply") {
    t["normalizer"]["normalizers"].push_back({{"type", "Lowercase"}});
    require_input_error(t, {"t.json", "normalizer.normalizers[2]", "Lowercase"});
  }
  SECTION("a Regex Replace") {
    t["normalizer"]["normalizers"][1]["pattern"] = {{"Regex", " {2,}"}};
    require_input_error(t, {"normalizer.normalizers[1].pattern", "literal"});
  }
  SECTION("NFKC after Replace") {
    t["normalizer"]["normalizers"].push_back({{"type", "NFKC"}});
    require_input_error(t, {"normalizer.normalizers[2]", "NFKC after Replace"});
  }
  SECTION("two prefixes") {
    t["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "always"}};
    require_input_error(t, {"t.json", "Prepend", "Metaspace"});
  }
  SECTION("Metaspace after a Split") {
    t["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Isolated"}},
          {{"type", "Metaspace"}, {"replacement", kSp}, {"prepend_scheme", "never"}}}}};
    require_input_error(t, {"pre_tokenizer.pretokenizers[1]", "first pre-tokenizer"});
  }
  SECTION("a Regex Split") {
    t["pre_tokenizer"] = {
        {"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Isolated"}};
    require_input_error(t, {"pre_tokenizer.pattern", "literal"});
  }
  SECTION("no decoder") {
    t["decoder"] = nullptr;
    require_input_error(t, {"t.json", "decoder is null"});
  }
  SECTION("Strip before Fuse") {
    t["decoder"]["decoders"] = {t["decoder"]["decoders"][0], t["decoder"]["decoders"][1],
                                t["decoder"]["decoders"][3], t["decoder"]["decoders"][2]};
    require_input_error(t, {"decoder.decoders[2]", "Strip before Fuse"});
  }
  SECTION("byte_fallback without a ByteFallback decoder") {
    t["decoder"]["decoders"].erase(1);
    require_input_error(t, {"t.json", "no ByteFallback"});
  }
  SECTION("a decoder that leaves the marker") {
    t["decoder"]["decoders"].erase(0);
    require_input_error(t, {"t.json", "does not turn"});
  }
  SECTION("ignore_merges") {
    t["model"]["ignore_merges"] = true;
    require_input_error(t, {"t.json", "ignore_merges"});
  }
}
