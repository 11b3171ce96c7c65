// Hugging Face tokenizer.json (+ tokenizer_config.json, chat_template.jinja) -> VocabData.
#include "runtime/loaders/hf_tokenizer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "runtime/core/error.h"
#include "runtime/loaders/hf_json.h"
#include "runtime/text/pre_tokenizer.h"
#include "runtime/text/utf8.h"

namespace offgen {
namespace {

using hf::Doc;
using hf::parse_json;
using hf::quote;
using nlohmann::json;

constexpr char32_t kSpmSpace = 0x2581;  // "▁", SentencePiece's word-boundary marker

// Whether `s` is spelled in GPT-2's byte-to-unicode alphabet; the first offending code point
// (or -1 for invalid UTF-8) lands in *bad.
bool is_byte_level(std::string_view s, int64_t* bad) {
  static const auto alphabet = [] {
    std::array<char32_t, 256> a{};
    for (int b = 0; b < 256; ++b) a[b] = byte_to_unicode(static_cast<uint8_t>(b));
    std::sort(a.begin(), a.end());
    return a;
  }();
  for (size_t i = 0; i < s.size();) {
    const utf8::Decoded d = utf8::decode(s, i);
    if (!d.valid || !std::binary_search(alphabet.begin(), alphabet.end(), d.cp)) {
      *bad = d.valid ? static_cast<int64_t>(d.cp) : -1;
      return false;
    }
    i += d.len;
  }
  return true;
}

// model.vocab + added_tokens -> tokens/types indexed by id. Returns content -> id for lookups.
// spm: SentencePiece-style (any spelling; "<0xNN>" tokens are byte tokens when byte_fallback),
// else every model token must be byte-level text.
std::unordered_map<std::string, int32_t> read_tokens(const Doc& doc, const json& root,
                                                     const json& model, bool spm, VocabData& v) {
  const json* vocab = doc.find(model, "vocab");
  OFFGEN_CHECK(vocab && vocab->is_object() && !vocab->empty(), kInput,
               "{}: model.vocab: expected a non-empty object of token -> id", doc.file);
  const json* added = doc.find(root, "added_tokens");
  OFFGEN_CHECK(!added || added->is_array(), kInput, "{}: added_tokens: expected an array, got {}",
               doc.file, quote(*added));
  const size_t entries = vocab->size() + (added ? added->size() : 0);

  std::vector<std::pair<int32_t, std::string>> model_ids;
  model_ids.reserve(vocab->size());
  int64_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    model_ids.emplace_back(doc.id(it.value(), fmt::format("model.vocab[{}]", quote(it.key()))),
                           it.key());
    max_id = std::max<int64_t>(max_id, model_ids.back().first);
  }
  struct Added {
    int32_t id;
    std::string content;
    bool special;
  };
  std::vector<Added> added_tokens;
  for (size_t i = 0; added && i < added->size(); ++i) {
    const json& a = (*added)[i];
    const std::string path = fmt::format("added_tokens[{}]", i);
    OFFGEN_CHECK(a.is_object() && a.contains("id"), kInput, "{}: {}: expected {{id, content, ...}}",
                 doc.file, path);
    Added t{doc.id(a.at("id"), path + ".id"), doc.str(a, "content", path), false};
    OFFGEN_CHECK(!t.content.empty(), kInput, "{}: {}.content is empty", doc.file, path);
    t.special = doc.flag(a, "special", false, path);
    for (const char* opt : {"lstrip", "rstrip", "single_word"}) {
      OFFGEN_CHECK(!doc.flag(a, opt, false, path), kInput,
                   "{}: {}.{} is true ('{}'); offgen matches added tokens literally only", doc.file,
                   path, opt, t.content);
    }
    max_id = std::max<int64_t>(max_id, t.id);
    added_tokens.push_back(std::move(t));
  }
  OFFGEN_CHECK(max_id < static_cast<int64_t>(entries), kInput,
               "{}: token id {} leaves gaps: model.vocab and added_tokens hold only {} entries",
               doc.file, max_id, entries);

  const auto n = static_cast<size_t>(max_id + 1);
  std::vector<bool> filled(n, false);
  v.tokens.assign(n, {});
  v.token_types.assign(n, static_cast<int32_t>(TokenType::kNormal));
  std::unordered_map<std::string, int32_t> ids;
  for (const auto& [id, text] : model_ids) {
    OFFGEN_CHECK(!filled[id], kInput, "{}: model.vocab: '{}' and '{}' both have id {}", doc.file,
                 v.tokens[id], text, id);
    filled[id] = true;
    v.tokens[id] = text;
    ids[text] = id;
  }
  std::vector<bool> is_added(n, false);
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const Added& t = added_tokens[i];
    OFFGEN_CHECK(!filled[t.id] || v.tokens[t.id] == t.content, kInput,
                 "{}: added_tokens[{}]: id {} is '{}' here but '{}' elsewhere", doc.file, i, t.id,
                 t.content, v.tokens[t.id]);
    filled[t.id] = is_added[t.id] = true;
    v.tokens[t.id] = t.content;
    v.token_types[t.id] =
        static_cast<int32_t>(t.special ? TokenType::kControl : TokenType::kUserDefined);
    ids[t.content] = t.id;  // added tokens take precedence, as in HF's token_to_id
  }
  for (size_t id = 0; id < n; ++id) {
    OFFGEN_CHECK(filled[id], kInput,
                 "{}: no token has id {} (model.vocab and added_tokens must cover 0..{})", doc.file,
                 id, n - 1);
    int64_t bad = 0;
    if (spm) {
      const std::string& t = v.tokens[id];
      const bool byte_token = t.size() == 6 && t.starts_with("<0x") && t.back() == '>' &&
                              std::isxdigit(static_cast<unsigned char>(t[3])) &&
                              std::isxdigit(static_cast<unsigned char>(t[4]));
      if (!is_added[id] && v.byte_fallback && byte_token)
        v.token_types[id] = static_cast<int32_t>(TokenType::kByte);
      continue;
    }
    if (is_added[id] || is_byte_level(v.tokens[id], &bad)) continue;
    OFFGEN_CHECK(bad != kSpmSpace, kInput,
                 "{}: model.vocab[{}] ('{}') has SentencePiece's '\xe2\x96\x81' but the "
                 "tokenizer is otherwise byte-level (no byte_fallback, Metaspace or '\xe2\x96\x81' "
                 "in normalizer / pre_tokenizer / decoder)",
                 doc.file, id, v.tokens[id]);
    OFFGEN_THROW(kInput,
                 "{}: model.vocab[{}] ('{}') is not byte-level BPE text ({} is outside GPT-2's "
                 "byte-to-unicode alphabet)",
                 doc.file, id, v.tokens[id],
                 bad < 0 ? std::string("invalid UTF-8") : fmt::format("U+{:04X}", bad));
  }
  return ids;
}

// model.merges: "a b" strings or [a, b] pairs, each naming model tokens.
void read_merges(const Doc& doc, const json& model, VocabData& v) {
  const json* merges = doc.find(model, "merges");
  if (!merges) return;
  OFFGEN_CHECK(merges->is_array(), kInput, "{}: model.merges: expected an array, got {}", doc.file,
               quote(*merges));
  v.merges.reserve(merges->size());
  const json* vocab = doc.find(model, "vocab");
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& m = (*merges)[i];
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      OFFGEN_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, kInput,
                   "{}: model.merges[{}]: '{}' is not two pieces separated by one space", doc.file,
                   i, s);
      left = s.substr(0, sp), right = s.substr(sp + 1);
    } else {
      OFFGEN_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), kInput,
                   "{}: model.merges[{}]: expected \"a b\" or [\"a\", \"b\"], got {}", doc.file, i,
                   quote(m));
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
      OFFGEN_CHECK(left.find(' ') == std::string::npos && right.find(' ') == std::string::npos,
                   kInput, "{}: model.merges[{}]: {} has a piece with a space (not byte-level)",
                   doc.file, i, quote(m));
    }
    OFFGEN_CHECK(!left.empty() && !right.empty(), kInput, "{}: model.merges[{}]: empty piece in {}",
                 doc.file, i, quote(m));
    for (const std::string* piece : {&left, &right}) {
      // Against model.vocab itself, as HF's BPE builder checks: added tokens are not pieces.
      OFFGEN_CHECK(vocab != nullptr && vocab->is_object() && vocab->contains(*piece), kInput,
                   "{}: model.merges[{}]: piece '{}' is not in model.vocab", doc.file, i, *piece);
    }
    OFFGEN_CHECK(vocab->contains(left + right), kInput,
                 "{}: model.merges[{}]: merged token '{}' is not in model.vocab", doc.file, i,
                 left + right);
    v.merges.push_back(left + " " + right);
  }
}

// SentencePiece-style: byte_fallback, or Metaspace / "▁" anywhere in the text pipeline.
bool is_sentencepiece(const Doc& doc, const json& root, const json& model) {
  if (doc.flag(model, "byte_fallback", false, "model")) return true;
  for (const char* key : {"normalizer", "pre_tokenizer", "decoder"}) {
    const json* part = doc.find(root, key);
    if (!part) continue;
    const std::string s = part->dump(-1, ' ', false, json::error_handler_t::replace);
    if (s.find("Metaspace") != std::string::npos || s.find("\xe2\x96\x81") != std::string::npos)
      return true;
  }
  return false;
}

// What a normalizer does, if it is one offgen applies: null or (nested) Sequences of nothing
// (false) or with NFC stages (true). Anything else: nullopt.
std::optional<bool> normalizer_nfc(const json& n, int depth) {
  if (n.is_null()) return false;
  if (depth > 8 || !n.is_object()) return std::nullopt;
  const json type = n.value("type", json());
  if (type == "NFC") return true;
  if (type != "Sequence") return std::nullopt;
  auto it = n.find("normalizers");
  if (it == n.end() || !it->is_array()) return std::nullopt;
  bool nfc = false;
  for (const json& c : *it) {
    const auto sub = normalizer_nfc(c, depth + 1);
    if (!sub) return std::nullopt;
    nfc = nfc || *sub;
  }
  return nfc;
}

// Checks a ByteLevel pre-tokenizer stage and returns its use_regex.
bool byte_level_stage(const Doc& doc, const json& stage, const std::string& path) {
  OFFGEN_CHECK(!doc.flag(stage, "add_prefix_space", true, path), kInput,
               "{}: {}.add_prefix_space must be false (offgen never prepends a space), got {}",
               doc.file, path, quote(stage));
  return doc.flag(stage, "use_regex", true, path);
}

// pre_tokenizer (+ model.ignore_merges) -> the PreTokenizer name (kPreSpecs).
std::string read_pre(const Doc& doc, const json& root, bool ignore_merges) {
  const json* pt = doc.find(root, "pre_tokenizer");
  OFFGEN_CHECK(pt, kInput, "{}: pre_tokenizer is null; offgen needs a byte-level pre-tokenizer",
               doc.file);
  const json* top = pt;
  std::string path = "pre_tokenizer";
  std::vector<std::pair<const json*, std::string>> stages;
  if (doc.type(*pt, path) == "Sequence") {
    const json* list = doc.find(*pt, "pretokenizers");
    OFFGEN_CHECK(list && list->is_array(), kInput, "{}: {}.pretokenizers: expected an array",
                 doc.file, path);
    for (size_t i = 0; i < list->size(); ++i)
      stages.emplace_back(&(*list)[i], fmt::format("{}.pretokenizers[{}]", path, i));
  } else {
    stages.emplace_back(pt, path);
  }
  std::vector<std::string> types;
  for (const auto& [st, p] : stages) types.push_back(doc.type(*st, p));

  std::string pre, split_regex;
  const auto unsupported = [&]() {
    return Error(ErrorCategory::kInput,
                 fmt::format("{}: pre_tokenizer {} is not supported; offgen knows ByteLevel "
                             "(GPT-2), Sequence[Digits(individual_digits), ByteLevel] (SmolLM) "
                             "and Sequence[Split(<Qwen2/Llama-3/GPT-2 regex>), "
                             "ByteLevel(use_regex=false)]",
                             doc.file, quote(*top)));
  };
  if (types.empty() || types.back() != "ByteLevel") throw unsupported();
  const bool use_regex = byte_level_stage(doc, *stages.back().first, stages.back().second);
  if (types.size() == 1 && use_regex) {
    pre = "gpt2";
  } else if (types.size() == 2 && types[0] == "Digits" && use_regex) {
    OFFGEN_CHECK(doc.flag(*stages[0].first, "individual_digits", false, stages[0].second), kInput,
                 "{}: {}.individual_digits must be true (SmolLM style)", doc.file,
                 stages[0].second);
    pre = "smollm";
  } else if (types.size() == 2 && types[0] == "Split" && !use_regex) {
    const auto& [split, sp] = stages[0];
    const json* pattern = doc.find(*split, "pattern");
    OFFGEN_CHECK(pattern && pattern->is_object() && pattern->contains("Regex") &&
                     (*pattern)["Regex"].is_string(),
                 kInput, "{}: {}.pattern: expected {{\"Regex\": ...}}, got {}", doc.file, sp,
                 pattern ? quote(*pattern) : "nothing");
    OFFGEN_CHECK(
        doc.str(*split, "behavior", sp) == "Isolated" && !doc.flag(*split, "invert", false, sp),
        kInput, "{}: {}: only behavior \"Isolated\" without invert is supported, got {}", doc.file,
        sp, quote(*split));
    split_regex = (*pattern)["Regex"].get<std::string>();
    // llama3 and smaug-bpe share the Llama-3 regex and differ in ignore_merges.
    // (A regex match with the other ignore_merges is reported below.)
    for (const char* name : {"gpt2", "qwen2", "llama3", "smaug-bpe"}) {
      if (PreTokenizer::hf_split_regex(name) != split_regex) continue;
      if (pre.empty()) pre = name;
      if (PreTokenizer(name).ignore_merges() == ignore_merges) {
        pre = name;
        break;
      }
    }
    if (pre.empty()) throw unsupported();
  } else {
    throw unsupported();
  }
  OFFGEN_CHECK(PreTokenizer(pre).ignore_merges() == ignore_merges, kInput,
               "{}: model.ignore_merges = {} is not supported with pre_tokenizer {}", doc.file,
               ignore_merges, quote(*top));
  return pre;
}

// post_processor: the id of a BOS that the single template puts first, if any.
std::optional<int32_t> read_post(const Doc& doc, const json& pp, const std::string& path,
                                 const std::unordered_map<std::string, int32_t>& ids, size_t n) {
  const std::string type = doc.type(pp, path);
  if (type == "ByteLevel") return std::nullopt;
  if (type == "Sequence") {
    const json* list = doc.find(pp, "processors");
    OFFGEN_CHECK(list && list->is_array(), kInput, "{}: {}.processors: expected an array", doc.file,
                 path);
    std::optional<int32_t> bos;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string item = fmt::format("{}.processors[{}]", path, i);
      OFFGEN_CHECK(doc.type((*list)[i], item) != "Sequence", kInput,
                   "{}: {}: nested Sequence is not supported", doc.file, item);
      if (auto b = read_post(doc, (*list)[i], item, ids, n)) bos = b;
    }
    return bos;
  }
  OFFGEN_CHECK(type == "TemplateProcessing", kInput,
               "{}: {} {} is not supported (TemplateProcessing, ByteLevel or null)", doc.file, path,
               quote(pp));
  const json* single = doc.find(pp, "single");
  OFFGEN_CHECK(single && single->is_array(), kInput, "{}: {}.single: expected an array, got {}",
               doc.file, path, single ? quote(*single) : "nothing");
  std::optional<int32_t> bos;
  bool seen_text = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& piece = (*single)[i];
    const std::string pp_path = fmt::format("{}.single[{}]", path, i);
    if (doc.find(piece, "Sequence")) {
      seen_text = true;
      continue;
    }
    const json* sp = doc.find(piece, "SpecialToken");
    OFFGEN_CHECK(sp, kInput, "{}: {}: expected SpecialToken or Sequence, got {}", doc.file, pp_path,
                 quote(piece));
    OFFGEN_CHECK(!seen_text && i == 0, kInput,
                 "{}: {}: the template adds special tokens after the text or several before it "
                 "({}); offgen only prepends one BOS",
                 doc.file, path, quote(*single));
    const std::string name = doc.str(*sp, "id", pp_path + ".SpecialToken");
    const json* table = doc.find(pp, "special_tokens");
    const json* entry = table ? doc.find(*table, name) : nullptr;
    const json* list = entry ? doc.find(*entry, "ids") : nullptr;
    if (list) {
      OFFGEN_CHECK(list->is_array() && list->size() == 1, kInput,
                   "{}: {}.special_tokens[{}].ids: expected one id, got {}", doc.file, path,
                   quote(name), quote(*list));
      const std::string id_path = fmt::format("{}.special_tokens[{}].ids[0]", path, quote(name));
      bos = doc.id((*list)[0], id_path);
      OFFGEN_CHECK(static_cast<size_t>(*bos) < n, kInput,
                   "{}: {}: id {} is outside the vocabulary of {} tokens", doc.file, id_path, *bos,
                   n);
    } else {
      auto it = ids.find(name);
      OFFGEN_CHECK(it != ids.end(), kInput, "{}: {}: special token '{}' is not a token", doc.file,
                   pp_path, name);
      bos = it->second;
    }
  }
  return bos;
}

// A *_token entry of tokenizer_config.json: a string or {"content": ...}; absent/null -> none.
std::optional<int32_t> config_token(const Doc& doc, const json& cfg, const char* key,
                                    const std::unordered_map<std::string, int32_t>& ids) {
  const json* v = doc.find(cfg, key);
  if (!v) return std::nullopt;
  const json* content = v->is_object() ? doc.find(*v, "content") : v;
  OFFGEN_CHECK(content && content->is_string(), kInput,
               "{}: {}: expected a string or {{\"content\": ...}}, got {}", doc.file, key,
               quote(*v));
  auto it = ids.find(content->get<std::string>());
  OFFGEN_CHECK(it != ids.end(), kInput, "{}: {}: '{}' is not a token of the tokenizer", doc.file,
               key, content->get<std::string>());
  return it->second;
}

// tokenizer_config.json's chat_template: a string (the default), or a list of {name, template}
// ("default" is the default; the others are named variants, "tool_use" for requests with tools).
void config_chat_template(const Doc& doc, const json& cfg, VocabData& v) {
  const json* t = doc.find(cfg, "chat_template");
  if (!t) return;
  if (t->is_string()) {
    v.chat_template = t->get<std::string>();
    return;
  }
  OFFGEN_CHECK(t->is_array(), kInput,
               "{}: chat_template: expected a string or a list of {{name, template}}, got {}",
               doc.file, quote(*t));
  for (size_t i = 0; i < t->size(); ++i) {
    const json& e = (*t)[i];
    const std::string path = fmt::format("chat_template[{}]", i);
    OFFGEN_CHECK(e.is_object(), kInput, "{}: {}: expected {{name, template}}", doc.file, path);
    std::string name = doc.str(e, "name", path);
    std::string source = doc.str(e, "template", path);
    if (name == "default") {
      v.chat_template = std::move(source);
    } else {
      v.chat_templates.emplace_back(std::move(name), std::move(source));
    }
  }
}

VocabData build(std::string_view json_text, std::string_view config_text,
                const std::string& json_file, const std::string& config_file,
                const std::optional<std::string>& jinja) {
  const Doc doc{json_file};
  const json root = parse_json(json_text, json_file, false);
  const json* model = doc.find(root, "model");
  OFFGEN_CHECK(model && model->is_object(), kInput, "{}: model: missing or not an object",
               json_file);
  const std::string type = doc.type(*model, "model");
  OFFGEN_CHECK(type == "BPE", kInput,
               "{}: model.type is '{}'; only BPE tokenizers are supported (byte-level BPE or "
               "SentencePiece-style BPE)",
               json_file, type);
  const bool spm = is_sentencepiece(doc, root, *model);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json* x = doc.find(*model, key);
    OFFGEN_CHECK(!x || *x == "", kInput, "{}: model.{} = {} is not supported", json_file, key,
                 x ? quote(*x) : "");
  }
  const json* dropout = doc.find(*model, "dropout");
  OFFGEN_CHECK(!dropout || *dropout == 0.0, kInput,
               "{}: model.dropout = {} (BPE dropout) is not supported", json_file,
               dropout ? quote(*dropout) : "");
  VocabData v;
  if (spm) {
    v.model = "llama";
    v.byte_fallback = doc.flag(*model, "byte_fallback", false, "model");
    v.fuse_unk = doc.flag(*model, "fuse_unk", false, "model");
    OFFGEN_CHECK(!doc.flag(*model, "ignore_merges", false, "model"), kInput,
                 "{}: model.ignore_merges = true is not supported for SentencePiece-style BPE",
                 json_file);
    read_spm_pipeline(doc, root, v);
  } else {
    const json* norm = doc.find(root, "normalizer");
    const std::optional<bool> nfc = norm ? normalizer_nfc(*norm, 0) : std::optional<bool>(false);
    OFFGEN_CHECK(nfc.has_value(), kInput,
                 "{}: normalizer {} is not supported (null or NFC, which offgen applies with ICU)",
                 json_file, norm ? quote(*norm) : "");
    const json* decoder = doc.find(root, "decoder");
    OFFGEN_CHECK(!decoder || doc.type(*decoder, "decoder") == "ByteLevel", kInput,
                 "{}: decoder {} is not supported (ByteLevel or null)", json_file,
                 decoder ? quote(*decoder) : "");
    v.model = "gpt2";
    v.normalize_nfc = *nfc;
  }
  const auto ids = read_tokens(doc, root, *model, spm, v);
  read_merges(doc, *model, v);
  if (!spm) v.pre = read_pre(doc, root, doc.flag(*model, "ignore_merges", false, "model"));

  std::optional<int32_t> template_bos;
  if (const json* pp = doc.find(root, "post_processor"))
    template_bos = read_post(doc, *pp, "post_processor", ids, v.tokens.size());

  std::optional<int32_t> cfg_bos, cfg_eos, cfg_unk, cfg_pad;
  std::optional<bool> cfg_add_bos;
  bool cfg_add_eos = false;
  if (!config_text.empty()) {
    const Doc cdoc{config_file};
    const json cfg = parse_json(config_text, config_file, false);
    cfg_bos = config_token(cdoc, cfg, "bos_token", ids);
    cfg_eos = config_token(cdoc, cfg, "eos_token", ids);
    cfg_unk = config_token(cdoc, cfg, "unk_token", ids);
    cfg_pad = config_token(cdoc, cfg, "pad_token", ids);
    if (cdoc.find(cfg, "add_bos_token")) cfg_add_bos = cdoc.flag(cfg, "add_bos_token", false, "");
    cfg_add_eos = cdoc.flag(cfg, "add_eos_token", false, "");
    config_chat_template(cdoc, cfg, v);
  }
  if (jinja) v.chat_template = *jinja;

  // The template's BOS is what HF prepends unless add_bos_token overrides the template.
  v.add_bos = cfg_add_bos.value_or(template_bos.has_value());
  v.bos_id =
      template_bos && !cfg_add_bos ? *template_bos : cfg_bos.value_or(template_bos.value_or(-1));
  OFFGEN_CHECK(!v.add_bos || v.bos_id >= 0, kInput,
               "{}: add_bos_token is true but there is no bos_token", config_file);
  if (cfg_eos) {
    v.eos_id = *cfg_eos;
  } else {
    for (const char* name : {"<|endoftext|>", "</s>", "<|im_end|>"}) {
      if (auto it = ids.find(name); it != ids.end()) {
        v.eos_id = it->second;
        break;
      }
    }
  }
  v.add_eos = cfg_add_eos;
  OFFGEN_CHECK(!v.add_eos || v.eos_id >= 0, kInput,
               "{}: add_eos_token is true but there is no eos_token", config_file);
  v.pad_id = cfg_pad.value_or(-1);
  v.unk_id = cfg_unk.value_or(-1);
  const json* unk = doc.find(*model, "unk_token");
  if (unk) {
    OFFGEN_CHECK(unk->is_string() && ids.contains(unk->get<std::string>()), kInput,
                 "{}: model.unk_token {} is not a token", json_file, quote(*unk));
  }
  if (spm) {
    // The BPE model emits model.unk_token for a character it cannot represent, and drops the
    // character when there is none, whatever tokenizer_config.json names.
    v.unk_id = unk ? ids.at(unk->get<std::string>()) : -1;
  } else if (unk) {
    // HF emits unk for a byte without a token where offgen drops it (Tokenizer::encode).
    std::string sym;
    for (int b = 0; b < 256; ++b) {
      sym.clear();
      utf8::append(sym, byte_to_unicode(static_cast<uint8_t>(b)));
      OFFGEN_CHECK(ids.contains(sym), kInput,
                   "{}: model.unk_token is set but byte 0x{:02X} ('{}') has no token; offgen "
                   "drops such bytes where Hugging Face would emit unk",
                   json_file, b, sym);
    }
    if (!cfg_unk) v.unk_id = ids.at(unk->get<std::string>());
  }
  return v;
}

}  // namespace

VocabData vocab_from_hf_tokenizer(const std::string& tokenizer_json,
                                  const std::string& tokenizer_config) {
  namespace fs = std::filesystem;
  const std::string json_text = hf::read_text_file(tokenizer_json);
  std::string config_text;
  if (!tokenizer_config.empty()) {
    config_text = hf::read_text_file(tokenizer_config);
    OFFGEN_CHECK(!config_text.empty(), kInput, "{}: the file is empty", tokenizer_config);
  }
  const fs::path dir =
      fs::path(tokenizer_config.empty() ? tokenizer_json : tokenizer_config).parent_path();
  std::optional<std::string> jinja;
  const fs::path jinja_path = dir / "chat_template.jinja";
  std::error_code ec;
  if (fs::is_regular_file(jinja_path, ec))
    jinja = hf::read_text_file(jinja_path.string());
  VocabData v = build(json_text, config_text, tokenizer_json, tokenizer_config, jinja);
  // transformers saves named variants as additional_chat_templates/NAME.jinja.
  const fs::path extra = dir / "additional_chat_templates";
  if (fs::is_directory(extra, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(extra, ec))
      if (e.path().extension() == ".jinja" && e.is_regular_file(ec)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      std::erase_if(v.chat_templates, [&](const auto& kv) { return kv.first == f.stem().string(); });
      v.chat_templates.emplace_back(f.stem().string(), hf::read_text_file(f.string()));
    }
  }
  return v;
}

VocabData vocab_from_hf_tokenizer_text(std::string_view tokenizer_json,
                                       std::string_view tokenizer_config, const std::string& name) {
  return build(tokenizer_json, tokenizer_config, name, name + " (tokenizer_config)", std::nullopt);
}

}  // namespace offgen
