// Builds the tokenizer's VocabData from a Hugging Face tokenizer.json (+ tokenizer_config.json,
// chat_template.jinja): byte-level BPE with the GPT-2, SmolLM, Qwen2 or Llama-3 pre-tokenizer, or
// SentencePiece-style BPE (Llama 2, Mistral, Gemma: "▁" for spaces, byte_fallback).
#pragma once

#include <string>
#include <string_view>

#include "runtime/text/tokenizer.h"

namespace offgen {

// tokenizer_json: path of tokenizer.json; tokenizer_config: path of tokenizer_config.json or ""
// when absent. The chat template comes from chat_template.jinja beside tokenizer_config.json
// (beside tokenizer.json when there is no config) when that file exists — transformers 5.x
// saves it there and prefers it — else from tokenizer_config.json's "chat_template" (a string,
// or a list of {name, template}: "default" is the template, the others are named variants, as are
// additional_chat_templates/NAME.jinja files beside the config).
//
// Mapping (see hf_tokenizer.cpp for the details):
//  - model: type "BPE"; model.vocab + added_tokens give ids 0..n-1 without gaps; added tokens are
//    kControl when "special", else kUserDefined; merges "a b" or [a, b].
//  - SentencePiece-style (model "llama") when model.byte_fallback is set or "Metaspace" / "▁"
//    appears in normalizer, pre_tokenizer or decoder (hf_tokenizer_spm.cpp): "<0xNN>" tokens are
//    kByte under byte_fallback; fuse_unk; unk is model.unk_token (the BPE model's, none = drop);
//    normalizer: null / NFC / NFKC / Replace(" ", "▁") / Prepend("▁") / Sequence of them;
//    pre_tokenizer: null / Metaspace (prepend_scheme always|first|never, split) / Split(literal) /
//    Sequence; decoder: Replace("▁", " ") / ByteFallback / Fuse / Strip(" ", 1, 0) / Metaspace.
//  - byte-level otherwise; pre: ByteLevel(use_regex) -> "gpt2"; Sequence[Digits(individual),
//    ByteLevel] -> "smollm"; Split(<regex>, Isolated) + ByteLevel(use_regex=false) -> the pre
//    whose regex it is ("qwen2", "llama3" when model.ignore_merges, "smaug-bpe" otherwise,
//    "gpt2"). normalizer null or NFC.
//  - add_bos/bos_id: a TemplateProcessing single template that starts with a special token;
//    tokenizer_config's "add_bos_token" overrides; add_eos from its "add_eos_token".
//    bos/eos/unk/pad ids from tokenizer_config's *_token entries. Without a config (or an
//    eos_token there), eos is the first of "<|endoftext|>", "</s>", "<|im_end|>" that exists;
//    unk falls back to model.unk_token.
// Throws Error(kIo) when a file cannot be read and Error(kInput) naming the file and JSON path
// ("tokenizer.json: model.merges[12]: ...") for anything malformed or unsupported.
VocabData vocab_from_hf_tokenizer(const std::string& tokenizer_json,
                                  const std::string& tokenizer_config);

// Same from in-memory texts (tests, fuzzing); tokenizer_config "" = absent, and no
// chat_template.jinja is looked for. `name` stands for the tokenizer.json file in messages
// ("<name> (tokenizer_config)" for the config).
VocabData vocab_from_hf_tokenizer_text(std::string_view tokenizer_json,
                                       std::string_view tokenizer_config, const std::string& name);

}  // namespace offgen
