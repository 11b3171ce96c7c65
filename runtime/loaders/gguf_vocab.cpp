// GGUF tokenizer metadata -> VocabData: byte-level BPE ("gpt2") and SentencePiece-style BPE
// ("llama", with llama.cpp's defaults: BOS added and a space prefix unless the file says not).
#include "runtime/loaders/gguf_vocab.h"

#include <string_view>
#include <utility>

#include "runtime/core/error.h"

namespace offgen {

namespace {
// offgen's name -> tokenizer.ggml.pre's, where they differ.
constexpr std::pair<std::string_view, std::string_view> kPreNames[] = {{"gpt2", "gpt-2"}};
}  // namespace

std::string gguf_pre_name(const std::string& offgen_pre) {
  for (const auto& [ours, theirs] : kPreNames)
    if (offgen_pre == ours) return std::string(theirs);
  return offgen_pre;
}

std::string offgen_pre_name(const std::string& gguf_pre) {
  for (const auto& [ours, theirs] : kPreNames)
    if (gguf_pre == theirs) return std::string(ours);
  return gguf_pre;
}

VocabData vocab_from_gguf(const GgufFile& f) {
  VocabData v;
  v.model = f.get_string("tokenizer.ggml.model");
  v.pre = f.get_string_opt("tokenizer.ggml.pre").value_or("default");
  v.pre = offgen_pre_name(v.pre);
  const auto* tokens = f.find("tokenizer.ggml.tokens");
  OFFGEN_CHECK(tokens && tokens->type == GgufType::kArray && tokens->elem_type == GgufType::kString,
               kInput, "{}: tokenizer.ggml.tokens missing or not a string array", f.path());
  v.tokens = tokens->strs;
  if (const auto* tt = f.find("tokenizer.ggml.token_type")) {
    OFFGEN_CHECK(tt->type == GgufType::kArray && tt->nums.size() == v.tokens.size(), kInput,
                 "{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(),
                 tt->nums.size(), v.tokens.size());
    v.token_types.reserve(tt->nums.size());
    for (double d : tt->nums) v.token_types.push_back(static_cast<int32_t>(d));
  } else {
    v.token_types.assign(v.tokens.size(), 1);
  }
  if (const auto* m = f.find("tokenizer.ggml.merges")) {
    OFFGEN_CHECK(m->type == GgufType::kArray && m->elem_type == GgufType::kString, kInput,
                 "{}: tokenizer.ggml.merges is not a string array", f.path());
    v.merges = m->strs;
  }
  const auto id = [&](const char* key) {
    auto x = f.get_int_opt(key);
    if (!x) return int32_t{-1};
    OFFGEN_CHECK(*x >= 0 && *x < static_cast<int64_t>(v.tokens.size()), kInput,
                 "{}: {} = {} is outside the vocabulary of {}", f.path(), key, *x, v.tokens.size());
    return static_cast<int32_t>(*x);
  };
  v.bos_id = id("tokenizer.ggml.bos_token_id");
  v.eos_id = id("tokenizer.ggml.eos_token_id");
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (const int32_t e = id(key); e >= 0) v.eog_ids.push_back(e);
  v.unk_id = id("tokenizer.ggml.unknown_token_id");
  v.pad_id = id("tokenizer.ggml.padding_token_id");
  const bool spm = v.model == "llama";
  if (spm) {
    if (const auto* sc = f.find("tokenizer.ggml.scores")) {
      OFFGEN_CHECK(sc->type == GgufType::kArray && sc->nums.size() == v.tokens.size(), kInput,
                   "{}: tokenizer.ggml.scores has {} entries for {} tokens", f.path(),
                   sc->nums.size(), v.tokens.size());
      v.scores.assign(sc->nums.begin(), sc->nums.end());
    } else {
      v.scores.assign(v.tokens.size(), 0.0f);  // llama.cpp's default score
    }
    const bool prefix = f.get_bool_or("tokenizer.ggml.add_space_prefix", true);
    v.space_prefix = prefix ? SpacePrefix::kEverySegment : SpacePrefix::kNone;
    v.strip_leading_space = prefix;
    v.byte_fallback = true;
  }
  v.add_bos = f.get_bool_or("tokenizer.ggml.add_bos_token", spm);
  v.add_eos = f.get_bool_or("tokenizer.ggml.add_eos_token", false);
  v.chat_template = f.get_string_opt("tokenizer.chat_template").value_or("");
  // Named variants (llama.cpp writes tokenizer.chat_template.NAME and lists the names in
  // tokenizer.chat_templates): every string key with that prefix, in name order.
  const std::string prefix = "tokenizer.chat_template.";
  for (auto it = f.metadata().lower_bound(prefix);
       it != f.metadata().end() && it->first.starts_with(prefix); ++it) {
    OFFGEN_CHECK(it->second.type == GgufType::kString, kInput, "{}: {} is not a string", f.path(),
                 it->first);
    v.chat_templates.emplace_back(it->first.substr(prefix.size()), it->second.str);
  }
  return v;
}

VocabData load_gguf_vocab(const std::string& path) {
  return vocab_from_gguf(GgufFile::open_metadata(path));
}

}  // namespace offgen
