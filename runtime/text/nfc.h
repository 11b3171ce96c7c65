// Unicode NFC / NFKC normalisation (ICU) for tokenizers whose tokenizer.json declares such a
// normalizer (Qwen2's NFC): text is normalised before pre-tokenisation, as HF `tokenizers` does.
#pragma once

#include <string>
#include <string_view>

namespace offgen {

// Writes NFC(text) to `out` and returns true when that differs from `text`. Returns false and
// leaves `out` alone when text is already in NFC or is not valid UTF-8 (such bytes are tokenised
// raw: Hugging Face cannot represent them at all). Thread-safe.
bool nfc_normalize(std::string_view text, std::string& out);
// The same for NFKC.
bool nfkc_normalize(std::string_view text, std::string& out);

}  // namespace offgen
