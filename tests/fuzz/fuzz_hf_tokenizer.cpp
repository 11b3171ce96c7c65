// libFuzzer target for the tokenizer.json reader (byte-level and SentencePiece-style): any input
// must load or raise offgen::Error, and a vocabulary that loads must build a Tokenizer (or raise
// offgen::Error) that encodes a fixed text and decodes it back wherever the byte alphabet is
// complete and (SentencePiece-style) nothing rewrites the text. The input is tokenizer.json,
// optionally followed by a NUL byte and tokenizer_config.json.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/loaders/hf_tokenizer.h"
#include "runtime/text/tokenizer.h"

namespace {

// Specials, digits, contractions, whitespace runs, non-ASCII letters and digits, an emoji and a
// byte that is not UTF-8.
constexpr std::string_view kText =
    "<|im_start|>user\nIt's 2024: caf\xc3\xa9 \xd9\xa1\xd9\xa2 \xf0\x9f\x98\x80  x=1;\r\n\t<tool>"
    "\xff<|endoftext|></s>  ";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace offgen;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view config = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  VocabData v;
  try {
    v = vocab_from_hf_tokenizer_text(json, config, "fuzz/tokenizer.json");
  } catch (const Error&) {
    return 0;
  }
  // What the loader promises about a vocabulary it returns.
  const auto n = static_cast<int64_t>(v.tokens.size());
  if (n == 0 || static_cast<int64_t>(v.token_types.size()) != n) __builtin_trap();
  for (int32_t id : {v.bos_id, v.eos_id, v.unk_id, v.pad_id})
    if (id < -1 || id >= n) __builtin_trap();
  if (v.add_bos && v.bos_id < 0) __builtin_trap();
  if (v.add_eos && v.eos_id < 0) __builtin_trap();
  if (v.model != "gpt2" && v.model != "llama") __builtin_trap();
  // SentencePiece-style: decode undoes encode unless a normaliser, a prefix, its strip or a
  // removing split changes the text (kText has no "\xe2\x96\x81", which decodes to a space), or
  // a merge involves "<0xNN>" spellings (a merge result spelled "<0x41>" decodes as its byte,
  // "<0x41><0x42>" literally, in Hugging Face too).
  bool rewrites = false;
  if (v.model == "llama") {
    rewrites = v.normalize_nfc || v.normalize_nfkc || v.space_prefix != SpacePrefix::kNone ||
               v.strip_leading_space;
    for (const SpmSplit& sp : v.splits)
      rewrites = rewrites || sp.behavior == SplitBehavior::kRemoved;
    for (const std::string& m : v.merges) rewrites = rewrites || m.find("<0x") != std::string::npos;
  }
  try {
    const Tokenizer tok(std::move(v));
    for (bool parse_special : {true, false}) {
      const std::vector<int32_t> ids = tok.encode(kText, parse_special);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
      // With every byte representable, decode(encode(s)) is s (between a BOS and an EOS).
      const std::string want =
          (tok.vocab().add_bos ? tok.token_bytes(tok.bos_id()) : std::string()) +
          std::string(kText) +
          (tok.vocab().add_eos ? tok.token_bytes(tok.eos_id()) : std::string());
      if (tok.missing_bytes().empty() && !rewrites && tok.decode(ids) != want) __builtin_trap();
    }
  } catch (const Error&) {
  }
  return 0;
}
