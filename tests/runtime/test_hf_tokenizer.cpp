// Hugging Face tokenizer.json -> VocabData: every supported shape and rejection on hand-written
// files, and id parity with the `tokenizers` library on three tiny trained tokenizers
// (tests/data/hf_tokenizers, from tools/gen_hf_tokenizer_golden.py).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/core/error.h"
#include "runtime/loaders/hf_tokenizer.h"
#include "runtime/text/pre_tokenizer.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/utf8.h"
#include "tests/temp_dir.h"

using namespace offgen;
using nlohmann::json;

namespace {

// Regexes exactly as Qwen2's and Llama-3's tokenizer.json files spell them.
const char* const kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

json split(const std::string& regex) {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"},
             {"pattern", {{"Regex", regex}}},
             {"behavior", "Isolated"},
             {"invert", false}},
            byte_level(false)}}};
}

// A small complete byte-level BPE: the 256 byte symbols (ids 0..255), four merges (256..259)
// and "<|endoftext|>" (260) both in model.vocab and added_tokens.
json base_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append(s, byte_to_unicode(static_cast<uint8_t>(b)));
    vocab[s] = b;
  }
  const std::string g = "\xc4\xa0";  // "Ġ", the byte-level space
  vocab["he"] = 256, vocab["ll"] = 257, vocab["hell"] = 258, vocab[g + "w"] = 259;
  vocab["<|endoftext|>"] = 260;
  json t;
  t["version"] = "1.0";
  t["added_tokens"] = {{{"id", 260},
                        {"content", "<|endoftext|>"},
                        {"single_word", false},
                        {"lstrip", false},
                        {"rstrip", false},
                        {"normalized", false},
                        {"special", true}}};
  t["normalizer"] = nullptr;
  t["pre_tokenizer"] = byte_level(true);
  t["post_processor"] = byte_level(true);
  t["decoder"] = byte_level(true);
  t["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", json::array({json::array({"h", "e"}), json::array({"l", "l"}),
                                        json::array({"he", "ll"}), json::array({g, "w"})})}};
  return t;
}

VocabData load(const json& t, const json& config = nullptr) {
  return vocab_from_hf_tokenizer_text(t.dump(), config.is_null() ? "" : config.dump(), "t.json");
}

// Loading fails with Error(kInput) whose message holds every one of `parts`.
void require_input_error(const json& t, const json& config,
                         std::initializer_list<std::string> parts) {
  try {
    load(t, config);
    FAIL("no error for " << t.dump().substr(0, 300));
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.category() == ErrorCategory::kInput);
    for (const auto& p : parts) CHECK_THAT(e.what(), Catch::Contains(p));
  }
}

void add_token(json& t, int id, const std::string& content, bool special) {
  t["added_tokens"].push_back({{"id", id}, {"content", content}, {"special", special}});
}

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  REQUIRE(in.good());
  return json::parse(in);
}

}  // namespace

TEST_CASE("hf_split_regex spells the patterns as tokenizer.json does", "[hf_tokenizer]") {
  CHECK(PreTokenizer::hf_split_regex("qwen2") == kQwen2Split);
  CHECK(PreTokenizer::hf_split_regex("llama3") == kLlama3Split);
  CHECK(PreTokenizer::hf_split_regex("gpt2") ==
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+");
  CHECK(PreTokenizer::hf_split_regex("smollm").empty());  // two stages
  CHECK(PreTokenizer::hf_split_regex("nope").empty());
}

TEST_CASE("a ByteLevel tokenizer.json becomes a working gpt2 vocabulary", "[hf_tokenizer]") {
  const VocabData v = load(base_tokenizer());
  CHECK(v.model == "gpt2");
  CHECK(v.pre == "gpt2");
  REQUIRE(v.tokens.size() == 261);
  CHECK(v.tokens[260] == "<|endoftext|>");
  CHECK(v.token_types[260] == static_cast<int32_t>(TokenType::kControl));
  CHECK(v.token_types[259] == static_cast<int32_t>(TokenType::kNormal));
  CHECK(v.merges == std::vector<std::string>{"h e", "l l", "he ll", "\xc4\xa0 w"});
  CHECK(v.eos_id == 260);  // no config: "<|endoftext|>" is the fallback EOS
  CHECK(v.bos_id == -1);
  CHECK_FALSE(v.add_bos);
  CHECK(v.chat_template.empty());
  const Tokenizer tok(v);
  CHECK(tok.encode("hello world<|endoftext|>") ==
        std::vector<int32_t>{258, 'o', 259, 'o', 'r', 'l', 'd', 260});
  CHECK(tok.missing_bytes().empty());
}

TEST_CASE("tokenizer.json pre-tokenizer shapes map to offgen pre names", "[hf_tokenizer]") {
  json t = base_tokenizer();
  SECTION("Digits(individual_digits) + ByteLevel is smollm") {
    t["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}}};
    CHECK(load(t).pre == "smollm");
  }
  SECTION("Split(Qwen2 regex) + ByteLevel(use_regex=false) is qwen2") {
    t["pre_tokenizer"] = split(kQwen2Split);
    CHECK(load(t).pre == "qwen2");
  }
  SECTION("the Llama-3 regex is llama3 with ignore_merges, smaug-bpe without") {
    t["pre_tokenizer"] = split(kLlama3Split);
    t["model"]["ignore_merges"] = true;
    CHECK(load(t).pre == "llama3");
    t["model"]["ignore_merges"] = false;
    CHECK(load(t).pre == "smaug-bpe");
  }
  SECTION("Split with the GPT-2 regex is gpt2") {
    t["pre_tokenizer"] = split(PreTokenizer::hf_split_regex("gpt2"));
    CHECK(load(t).pre == "gpt2");
  }
  SECTION("a one-stage Sequence[ByteLevel] is gpt2") {
    t["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {byte_level(true)}}};
    CHECK(load(t).pre == "gpt2");
  }
}

TEST_CASE("an NFC normalizer (Qwen2's) normalises text outside special tokens", "[hf_tokenizer]") {
  json t = base_tokenizer();
  CHECK_FALSE(load(t).normalize_nfc);
  t["normalizer"] = {{"type", "NFC"}};
  Tokenizer tok(load(t));
  CHECK(tok.vocab().normalize_nfc);
  const std::string composed = "caf\xc3\xa9", decomposed = "cafe\xcc\x81";  // é, e + U+0301
  CHECK(tok.encode(decomposed) == tok.encode(composed));
  CHECK(tok.decode(tok.encode(decomposed)) == composed);
  CHECK(tok.encode(decomposed + "<|endoftext|>" + decomposed) ==
        tok.encode(composed + "<|endoftext|>" + composed));
  // Invalid UTF-8 is tokenised raw (byte tokens), not replaced.
  const std::string bad = "e\xcc\x81\xff";
  CHECK(tok.decode(tok.encode(bad)) == bad);
  // Without the normalizer the two spellings stay distinct.
  Tokenizer raw(load(base_tokenizer()));
  CHECK(raw.encode(decomposed) != raw.encode(composed));
}

TEST_CASE("merges as strings and as pairs, added tokens past the model vocab", "[hf_tokenizer]") {
  json t = base_tokenizer();
  const VocabData pairs = load(t);
  t["model"]["merges"] = {"h e", "l l", "he ll", "\xc4\xa0 w"};
  CHECK(load(t).merges == pairs.merges);
  add_token(t, 262, "<tool>", false);
  add_token(t, 261, "<|im_start|>", true);
  const VocabData v = load(t);
  REQUIRE(v.tokens.size() == 263);
  CHECK(v.tokens[262] == "<tool>");
  CHECK(v.token_types[262] == static_cast<int32_t>(TokenType::kUserDefined));
  CHECK(v.token_types[261] == static_cast<int32_t>(TokenType::kControl));
  const Tokenizer tok(v);
  CHECK(tok.encode("<tool>he", false) == std::vector<int32_t>{262, 256});
}

TEST_CASE("BOS from the post-processor template and tokenizer_config", "[hf_tokenizer]") {
  json t = base_tokenizer();
  add_token(t, 261, "<s>", true);
  add_token(t, 262, "</s>", true);
  const json tmpl = {{"type", "TemplateProcessing"},
                     {"single",
                      {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                       {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                     {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {261}}}}}}};
  t["post_processor"] = {{"type", "Sequence"}, {"processors", {byte_level(true), tmpl}}};
  VocabData v = load(t);
  CHECK(v.add_bos);
  CHECK(v.bos_id == 261);
  CHECK(v.eos_id == 260);  // "<|endoftext|>" is preferred to "</s>"
  CHECK(Tokenizer(v).encode("he") == std::vector<int32_t>{261, 256});

  SECTION("add_bos_token overrides the template; token entries as strings or objects") {
    const json cfg = {
        {"add_bos_token", false}, {"bos_token", {{"content", "<s>"}, {"special", true}}},
        {"eos_token", "</s>"},    {"pad_token", "<|endoftext|>"},
        {"unk_token", nullptr},   {"chat_template", "{{ messages }}"}};
    v = load(t, cfg);
    CHECK_FALSE(v.add_bos);
    CHECK(v.bos_id == 261);
    CHECK(v.eos_id == 262);
    CHECK(v.pad_id == 260);
    CHECK(v.unk_id == -1);
    CHECK(v.chat_template == "{{ messages }}");
  }
  SECTION("add_bos_token true without a template uses bos_token") {
    t["post_processor"] = nullptr;
    v = load(t, {{"add_bos_token", true}, {"bos_token", "</s>"}});
    CHECK(v.add_bos);
    CHECK(v.bos_id == 262);
  }
  SECTION("chat_template as a list takes \"default\"") {
    v = load(
        t,
        {{"chat_template",
          {{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", "D"}}}}});
    CHECK(v.chat_template == "D");
    CHECK(v.chat_templates == std::vector<std::pair<std::string, std::string>>{{"tool_use", "T"}});
  }
  SECTION("a list without \"default\" keeps the named templates") {
    v = load(t, {{"chat_template", {{{"name", "tool_use"}, {"template", "T"}}}}});
    CHECK(v.chat_template.empty());
    CHECK(v.chat_templates == std::vector<std::pair<std::string, std::string>>{{"tool_use", "T"}});
  }
}

TEST_CASE("EOS fallback without a config prefers </s> to <|im_end|>", "[hf_tokenizer]") {
  json t = base_tokenizer();
  t["model"]["vocab"].erase("<|endoftext|>");
  t["added_tokens"] = json::array();
  add_token(t, 260, "<|im_end|>", true);
  add_token(t, 261, "</s>", true);
  CHECK(load(t).eos_id == 261);
  t["added_tokens"].erase(1);
  CHECK(load(t).eos_id == 260);
}

TEST_CASE("unsupported tokenizer.json files are rejected with the file and JSON path",
          "[hf_tokenizer]") {
  json t = base_tokenizer();
  const json no_config = nullptr;
  SECTION("model types other than BPE") {
    t["model"]["type"] = "WordPiece";
    require_input_error(t, no_config, {"t.json", "model.type", "WordPiece", "byte-level BPE"});
  }
  // SentencePiece-style markers make it a SentencePiece-style tokenizer, whose pipeline cannot
  // hold byte-level stages (the SentencePiece shapes are in test_spm_tokenizer.cpp).
  SECTION("SentencePiece-style markers in a byte-level pipeline") {
    SECTION("byte_fallback") {
      t["model"]["byte_fallback"] = true;
      require_input_error(t, no_config, {"t.json", "pre_tokenizer", "ByteLevel", "SentencePiece"});
    }
    SECTION("Metaspace") {
      t["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xe2\x96\x81"}};
      require_input_error(t, no_config, {"t.json", "decoder", "ByteLevel", "SentencePiece"});
    }
    SECTION("a Metaspace decoder") {
      t["decoder"] = {{"type", "Metaspace"}};
      require_input_error(t, no_config, {"t.json", "pre_tokenizer", "ByteLevel", "SentencePiece"});
    }
  }
  SECTION("tokens with the SentencePiece space in a byte-level tokenizer") {
    t["model"]["vocab"].erase("he");
    t["model"]["vocab"]["\xe2\x96\x81he"] = 256;
    t["model"]["merges"] = json::array();
    require_input_error(t, no_config, {"t.json", "model.vocab[256]", "otherwise byte-level"});
  }
  SECTION("a merge whose piece is only an added token") {
    add_token(t, 261, "QQ", false);
    t["model"]["merges"].push_back(json::array({"QQ", "h"}));
    require_input_error(t, no_config, {"t.json", "model.merges[4]", "QQ", "model.vocab"});
  }
  SECTION("a normalizer other than NFC") {
    t["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
    require_input_error(t, no_config, {"t.json", "normalizer", "Lowercase"});
  }
  SECTION("an unknown pre-tokenizer is quoted, truncated") {
    t["pre_tokenizer"] = {{"type", "Whitespace"}, {"zz", std::string(500, 'x')}};
    require_input_error(t, no_config, {"t.json", "pre_tokenizer", "Whitespace", "xxx..."});
  }
  SECTION("an unknown Split regex") {
    t["pre_tokenizer"] = split("\\w+|\\s+");
    require_input_error(t, no_config, {"pre_tokenizer", "\\\\w+"});
  }
  SECTION("Split that is not Isolated") {
    t["pre_tokenizer"] = split(kQwen2Split);
    t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
    require_input_error(t, no_config, {"pre_tokenizer.pretokenizers[0]", "Isolated"});
  }
  SECTION("ignore_merges with a pre-tokenizer that does not take it") {
    t["pre_tokenizer"] = split(kQwen2Split);
    t["model"]["ignore_merges"] = true;
    require_input_error(t, no_config, {"ignore_merges"});
  }
  SECTION("ByteLevel add_prefix_space") {
    t["pre_tokenizer"]["add_prefix_space"] = true;
    require_input_error(t, no_config, {"pre_tokenizer.add_prefix_space"});
  }
  SECTION("Digits without individual_digits") {
    t["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", false}}, byte_level(true)}}};
    require_input_error(t, no_config, {"pre_tokenizer.pretokenizers[0].individual_digits"});
  }
  SECTION("an id gap") {
    t["model"]["vocab"].erase("ll");
    t["model"]["merges"] = json::array();
    require_input_error(t, no_config, {"t.json", "no token has id 257"});
  }
  SECTION("an id far past the vocabulary") {
    t["added_tokens"][0]["id"] = 2000000000;
    require_input_error(t, no_config, {"t.json", "2000000000", "gaps"});
  }
  SECTION("two tokens with one id") {
    t["model"]["vocab"]["hello"] = 256;
    require_input_error(t, no_config, {"model.vocab", "both have id 256"});
  }
  SECTION("an added token that contradicts model.vocab") {
    t["added_tokens"][0]["content"] = "<|eot|>";
    require_input_error(t, no_config, {"added_tokens[0]", "<|eot|>", "<|endoftext|>"});
  }
  SECTION("added tokens with lstrip") {
    t["added_tokens"][0]["lstrip"] = true;
    require_input_error(t, no_config, {"added_tokens[0].lstrip"});
  }
  SECTION("malformed merges") {
    SECTION("three pieces") { t["model"]["merges"][2] = "h e l"; }
    SECTION("a triple") { t["model"]["merges"][2] = {"h", "e", "l"}; }
    SECTION("an unknown piece") { t["model"]["merges"][2] = {"he", "lo"}; }
    SECTION("an unknown result") { t["model"]["merges"][2] = {"ll", "he"}; }
    require_input_error(t, no_config, {"t.json", "model.merges[2]"});
  }
  SECTION("a template that appends EOS") {
    t["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single",
                            {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                             {{"SpecialToken", {{"id", "<|endoftext|>"}, {"type_id", 0}}}}}}};
    require_input_error(t, no_config, {"post_processor", "after the text"});
  }
  SECTION("a template BOS id outside the vocabulary") {
    t["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single",
                            {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                           {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {261}}}}}}};
    require_input_error(t, no_config,
                        {"post_processor.special_tokens[\"<s>\"].ids[0]", "id 261 is outside"});
  }
  SECTION("other post-processors") {
    t["post_processor"] = {{"type", "RobertaProcessing"}};
    require_input_error(t, no_config, {"post_processor", "RobertaProcessing"});
  }
  SECTION("BPE dropout") {
    t["model"]["dropout"] = 0.1;
    require_input_error(t, no_config, {"model.dropout"});
  }
  SECTION("unk_token with bytes that have no token") {
    t["model"]["unk_token"] = "<|endoftext|>";
    t["model"]["vocab"].erase("!");
    t["model"]["vocab"]["hello"] = '!';
    require_input_error(t, no_config, {"model.unk_token", "0x21"});
  }
  SECTION("invalid JSON names the byte offset") {
    try {
      vocab_from_hf_tokenizer_text("{\"model\": [1, 2", "", "t.json");
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kInput);
      CHECK_THAT(e.what(), Catch::Contains("t.json: not valid JSON at byte 16"));
    }
  }
  SECTION("nesting past the reader's limit is refused, naming the file") {
    // 200000 levels once crashed the reader (a recursive dump() of the decoder overflowed the
    // stack).
    std::string text = t.dump();
    text.insert(text.rfind('}'), ", \"decoder\": " + std::string(200000, '[') +
                                     std::string(200000, ']'));
    try {
      vocab_from_hf_tokenizer_text(text, "", "t.json");
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.category() == ErrorCategory::kInput);
      CHECK_THAT(e.what(), Catch::Contains("t.json: not valid JSON at byte") &&
                               Catch::Contains("nested deeper than 512 levels"));
    }
  }
}

TEST_CASE("tokenizer_config.json errors name the config", "[hf_tokenizer]") {
  const json t = base_tokenizer();
  require_input_error(t, {{"eos_token", "<nope>"}},
                      {"t.json (tokenizer_config)", "eos_token", "<nope>"});
  require_input_error(t, {{"bos_token", 7}}, {"(tokenizer_config)", "bos_token"});
  require_input_error(t, {{"add_bos_token", true}}, {"(tokenizer_config)", "bos_token"});
  require_input_error(t, {{"add_bos_token", "yes"}}, {"(tokenizer_config)", "add_bos_token"});
  require_input_error(t, {{"chat_template", {{{"name", "tool_use"}}}}},
                      {"(tokenizer_config)", "chat_template[0]", "template"});
  require_input_error(t, json::array(), {"(tokenizer_config)", "object"});
}

TEST_CASE("files: chat_template.jinja beside tokenizer.json, missing files", "[hf_tokenizer]") {
  namespace fs = std::filesystem;
  const test::TempDir scratch;
  const fs::path dir = scratch.path();
  std::ofstream(dir / "tokenizer.json") << base_tokenizer().dump();
  std::ofstream(dir / "chat_template.jinja") << "{{ bos_token }}";
  const VocabData v = vocab_from_hf_tokenizer((dir / "tokenizer.json").string(), "");
  CHECK(v.chat_template == "{{ bos_token }}");
  CHECK(v.tokens.size() == 261);
  fs::create_directory(dir / "additional_chat_templates");
  std::ofstream(dir / "additional_chat_templates" / "tool_use.jinja") << "{{ tools }}";
  CHECK(vocab_from_hf_tokenizer((dir / "tokenizer.json").string(), "").chat_templates ==
        std::vector<std::pair<std::string, std::string>>{{"tool_use", "{{ tools }}"}});
  try {
    vocab_from_hf_tokenizer((dir / "absent.json").string(), "");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kIo);
    CHECK_THAT(e.what(), Catch::Contains("absent.json"));
  }
  fs::create_directory(dir / "tokenizer_config.json");
  try {
    vocab_from_hf_tokenizer((dir / "tokenizer.json").string(),
                            (dir / "tokenizer_config.json").string());
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kIo);
    CHECK_THAT(e.what(), Catch::Contains("tokenizer_config.json: is a directory"));
  }
}

TEST_CASE("trained tokenizers encode exactly as Hugging Face tokenizers", "[hf_tokenizer]") {
  const std::filesystem::path dir = std::filesystem::path(OFFGEN_TEST_DATA) / "hf_tokenizers";
  const json golden = read_json(dir / "golden.json");
  const auto texts = golden.at("texts").get<std::vector<std::string>>();
  REQUIRE(texts.size() >= 40);
  const std::map<std::string, std::string> chat_template = {
      {"gpt2", ""},
      {"smollm", "{% for message in messages %}"},  // from chat_template.jinja
      {"qwen2", "{% for message in messages %}"}};  // from the config's list, "default"
  for (const std::string style : {"gpt2", "smollm", "qwen2"}) {
    INFO("style " << style);
    VocabData v = vocab_from_hf_tokenizer((dir / style / "tokenizer.json").string(),
                                          (dir / style / "tokenizer_config.json").string());
    const json& expect = golden.at("expect").at(style);
    CHECK(v.pre == style);
    CHECK(static_cast<int64_t>(v.tokens.size()) == expect.at("vocab_size").get<int64_t>());
    CHECK(v.bos_id == expect.at("bos_id").get<int32_t>());
    CHECK(v.eos_id == expect.at("eos_id").get<int32_t>());
    CHECK(v.add_bos == (style == "gpt2"));
    CHECK(v.token_types.at(expect.at("user_token_id").get<size_t>()) ==
          static_cast<int32_t>(TokenType::kUserDefined));
    CHECK(v.token_types.at(0) == static_cast<int32_t>(TokenType::kControl));
    CHECK(v.chat_template.starts_with(chat_template.at(style)));
    CHECK(v.chat_template.empty() == (style == "gpt2"));

    const bool with_bos = v.add_bos;
    v.add_bos = false;
    const Tokenizer plain(v);
    CHECK(plain.missing_bytes().empty());
    const auto& ids = golden.at("ids").at(style);
    REQUIRE(ids.size() == texts.size());
    size_t mismatched = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      INFO("text " << i << ": " << json(texts[i]).dump());
      const auto got = plain.encode(texts[i]);
      CHECK(got == ids[i].get<std::vector<int32_t>>());
      mismatched += got != ids[i].get<std::vector<int32_t>>();
      // HF's decode of its ids: the text itself, NFC-normalised where the normalizer says so.
      CHECK(plain.decode(got) == golden.at("decoded").at(style)[i].get<std::string>());
    }
    CHECK(mismatched == 0);
    if (with_bos) {
      v.add_bos = true;
      const Tokenizer bos(std::move(v));
      const auto& special = golden.at("ids_with_special").at(style);
      REQUIRE(special.size() == texts.size());
      for (size_t i = 0; i < texts.size(); ++i) {
        INFO("text " << i << " with special tokens: " << json(texts[i]).dump());
        CHECK(bos.encode(texts[i]) == special[i].get<std::vector<int32_t>>());
      }
    }
  }
}
