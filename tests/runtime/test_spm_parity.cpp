// SentencePiece-style BPE parity with Hugging Face `tokenizers` on a Llama-2-style vocabulary
// trained at dev time (tests/data/spm, tools/gen_spm_golden.py): the tokenizer.json in six
// pipeline variants (Llama 2's Prepend/Replace normaliser, Metaspace first/always/split, Gemma's
// Replace + Split, NFKC) and the same vocabulary as a GGUF file give HF's ids for every string of
// tests/data/tokenizer_corpus.jsonl plus extras, and decode as HF decodes.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "runtime/loaders/gguf_vocab.h"
#include "runtime/loaders/hf_tokenizer.h"
#include "runtime/text/tokenizer.h"

using namespace offgen;
using nlohmann::json;

namespace {

std::string data_path(const std::string& name) {
  return std::string(OFFGEN_TEST_DATA) + "/" + name;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  std::vector<json> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  REQUIRE(rows.size() > 1);
  return rows;
}

const std::vector<json>& golden() {
  static const std::vector<json> rows = read_jsonl(data_path("spm/llama2_golden.jsonl"));
  return rows;
}

struct Counts {
  size_t strings = 0, corpus = 0, mismatched = 0, corpus_mismatched = 0, decode_mismatched = 0;
};

// Every golden string through `t`: ids (after the BOS that add_bos_token puts first) and decode.
Counts check_rows(const Tokenizer& t, const std::string& variant) {
  Counts c;
  const auto& rows = golden();
  for (size_t i = 1; i < rows.size(); ++i) {
    const json& row = rows[i];
    const std::string text = row.at("text").get<std::string>();
    const json& ids = row.at("ids");
    const auto expect = ids.value(variant, ids.at("legacy")).get<std::vector<int32_t>>();
    std::vector<int32_t> got = t.encode(text);
    INFO(variant << " line " << i + 1 << ": " << json(text).dump());
    REQUIRE(!got.empty());
    CHECK(got.front() == t.bos_id());
    got.erase(got.begin());
    CHECK(got == expect);
    const bool corpus = row.at("corpus").get<bool>();
    ++c.strings;
    c.corpus += corpus;
    c.mismatched += got != expect;
    c.corpus_mismatched += corpus && got != expect;
    const json decoded = row.value("decoded", json::object());
    const std::string want = decoded.value(variant, text);
    CHECK(t.decode(expect) == want);
    c.decode_mismatched += t.decode(expect) != want;
  }
  std::printf(
      "%s: %zu/%zu corpus strings and %zu/%zu strings in all give Hugging Face's ids; "
      "%zu decode differently\n",
      variant.c_str(), c.corpus - c.corpus_mismatched, c.corpus, c.strings - c.mismatched,
      c.strings, c.decode_mismatched);
  return c;
}

}  // namespace

TEST_CASE("Llama-2-style tokenizer.json variants match Hugging Face on the corpus", "[spm]") {
  const json meta = golden().front().at("meta");
  const json base = json::parse(read_file(data_path("spm/llama2/tokenizer.json")));
  const std::string config = read_file(data_path("spm/llama2/tokenizer_config.json"));
  REQUIRE(meta.at("variants").size() >= 6);
  for (const auto& [variant, edits] : meta.at("variants").items()) {
    json j = base;
    for (const auto& [key, value] : edits.items()) j[key] = value;
    VocabData v = vocab_from_hf_tokenizer_text(j.dump(), config, "llama2/tokenizer.json");
    CHECK(v.model == "llama");
    CHECK(v.add_bos);
    CHECK(v.bos_id == 1);
    CHECK(v.eos_id == 2);
    CHECK(v.unk_id == 0);
    CHECK(v.byte_fallback);
    CHECK(v.fuse_unk);
    const Tokenizer t(std::move(v));
    CHECK(t.vocab_size() == meta.at("vocab_size").get<int32_t>());
    CHECK(t.token_type(3) == TokenType::kByte);  // "<0x00>"
    CHECK(t.missing_bytes().empty());
    const Counts c = check_rows(t, variant);
    CHECK(c.corpus == meta.at("corpus_strings").get<size_t>());
    CHECK(c.mismatched == 0);
    CHECK(c.decode_mismatched == 0);
  }
}

TEST_CASE("the Llama-2-style GGUF vocabulary tokenises as llama.cpp / HF legacy", "[spm][gguf]") {
  VocabData v = load_gguf_vocab(data_path("spm/llama2.gguf"));
  CHECK(v.model == "llama");
  CHECK(v.merges.empty());
  CHECK(v.scores.size() == v.tokens.size());
  CHECK(v.space_prefix == SpacePrefix::kEverySegment);
  CHECK(v.strip_leading_space);
  CHECK(v.add_bos);
  CHECK_FALSE(v.add_eos);
  const Tokenizer t(std::move(v));
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK(t.token_type(0) == TokenType::kUnknown);
  CHECK(t.token_type(1) == TokenType::kControl);
  CHECK(t.token_type(3 + 0x41) == TokenType::kByte);
  CHECK(t.token_bytes(3 + 0x41) == "A");
  const Counts c = check_rows(t, "legacy");
  CHECK(c.mismatched == 0);
  CHECK(c.decode_mismatched == 0);
  // With add_special_tokens, HF's template puts BOS first, as encode() does.
  size_t with_bos = 0;
  for (size_t i = 1; i < golden().size(); ++i) {
    const json& row = golden()[i];
    if (!row.contains("ids_bos")) continue;
    INFO(row.at("text").dump());
    CHECK(t.encode(row.at("text").get<std::string>()) ==
          row.at("ids_bos").get<std::vector<int32_t>>());
    ++with_bos;
  }
  CHECK(with_bos > 10);
}
