// libFuzzer target for the tokenizer.json reader: any input must load or raise offgen::Error, and
// a vocabulary that loads must build a Tokenizer (or raise offgen::Error) that encodes a fixed
// text and decodes it back wherever the byte alphabet is complete. The input is
// tokenizer.json, optionally followed by a NUL byte and tokenizer_config.json.
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
  try {
    const Tokenizer tok(std::move(v));
    for (bool parse_special : {true, false}) {
      const std::vector<int32_t> ids = tok.encode(kText, parse_special);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
      // With every byte representable, decode(encode(s)) is s (after a prepended BOS).
      const std::string want =
          (tok.vocab().add_bos ? tok.token_bytes(tok.bos_id()) : std::string()) +
          std::string(kText);
      if (tok.missing_bytes().empty() && tok.decode(ids) != want) __builtin_trap();
    }
  } catch (const Error&) {
  }
  return 0;
}
