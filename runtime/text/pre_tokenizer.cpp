// PCRE2 pre-tokenizer stages per tokenizer.ggml.pre (the regexes llama.cpp and HF use).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/text/pre_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <array>

#include "runtime/core/error.h"

namespace offgen {
namespace {

// HF `tokenizers` runs these regexes with Oniguruma (Unicode 16 in tokenizers 0.23). Two gaps to
// PCRE2 10.42 (Unicode 14) are closed by spelling the classes out:
//  - white space: Oniguruma's \s is TAB..CR, U+0085 and \p{Z}; PCRE2's UCP \s also takes U+180E;
//  - letters and numbers assigned after Unicode 14 (CJK Ext. H/I, Kawi, Garay...) are listed, so
//    \p{L} / \p{N} mean what they mean to HF. On a newer PCRE2 the lists overlap harmlessly.
// Patterns use @S@, @L@, @N@, @D@ for the class bodies; expand_classes() substitutes them.
constexpr const char* kSpaceClass = "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}";
constexpr const char* kLetterClass =
    "\\p{L}"
    "\\x{1C89}-\\x{1C8A}\\x{A7CB}-\\x{A7CD}\\x{A7DA}-\\x{A7DC}\\x{105C0}-\\x{105F3}"
    "\\x{10D4A}-\\x{10D65}\\x{10D6F}-\\x{10D85}\\x{10EC2}-\\x{10EC4}\\x{1123F}-\\x{11240}"
    "\\x{11380}-\\x{11389}\\x{1138B}\\x{1138E}\\x{11390}-\\x{113B5}\\x{113B7}\\x{113D1}"
    "\\x{113D3}\\x{11BC0}-\\x{11BE0}\\x{11F02}\\x{11F04}-\\x{11F10}\\x{11F12}-\\x{11F33}"
    "\\x{1342F}\\x{13441}-\\x{13446}\\x{13460}-\\x{143FA}\\x{16100}-\\x{1611D}"
    "\\x{16D40}-\\x{16D6C}\\x{18CFF}\\x{1B132}\\x{1B155}\\x{1DF25}-\\x{1DF2A}"
    "\\x{1E030}-\\x{1E06D}\\x{1E4D0}-\\x{1E4EB}\\x{1E5D0}-\\x{1E5ED}\\x{1E5F0}\\x{2B739}"
    "\\x{2EBF0}-\\x{2EE5D}\\x{31350}-\\x{323AF}";
constexpr const char* kNumberClass =
    "\\p{N}"
    "\\x{10D40}-\\x{10D49}\\x{116D0}-\\x{116E3}\\x{11BF0}-\\x{11BF9}\\x{11F50}-\\x{11F59}"
    "\\x{16130}-\\x{16139}\\x{16D70}-\\x{16D79}\\x{1CCF0}-\\x{1CCF9}\\x{1D2C0}-\\x{1D2D3}"
    "\\x{1E4F0}-\\x{1E4F9}\\x{1E5F1}-\\x{1E5FA}";
// HF's Digits pre-tokenizer uses Rust's char::is_numeric, whose tables are newer still.
constexpr const char* kDigitExtra = "\\x{11DE0}-\\x{11DE9}\\x{16FF4}-\\x{16FF6}";

// GPT-2 (HF ByteLevel use_regex=true). The trailing \s+ covers what \s+(?!\S) leaves.
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?[@L@]+| ?[@N@]+| ?[^@S@@L@@N@]+|[@S@]+(?![^@S@])|[@S@]+";

// HF Digits(individual_digits=true): every numeric character is its own piece.
constexpr const char* kDigitRegex = "[@N@@D@]";

constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n@L@@N@]?[@L@]+|[@N@]{1,3}| ?[^@S@@L@@N@]+[\\r\\n]*|"
    "[@S@]*[\\r\\n]+|[@S@]+(?![^@S@])|[@S@]+";

constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n@L@@N@]?[@L@]+|[@N@]| ?[^@S@@L@@N@]+[\\r\\n]*|"
    "[@S@]*[\\r\\n]+|[@S@]+(?![^@S@])|[@S@]+";

std::string expand_classes(std::string_view pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '@' && i + 2 < pattern.size() && pattern[i + 2] == '@') {
      switch (pattern[i + 1]) {
        case 'S':
          out += kSpaceClass;
          break;
        case 'L':
          out += kLetterClass;
          break;
        case 'N':
          out += kNumberClass;
          break;
        case 'D':
          out += kDigitExtra;
          break;
        default:
          OFFGEN_THROW(kInternal, "bad class placeholder in '{}'", pattern);
      }
      i += 2;
    } else {
      out.push_back(pattern[i]);
    }
  }
  return out;
}

struct PreSpec {
  const char* name;
  std::array<const char*, 2> regexes;  // applied in order; nullptr ends the list
  bool ignore_merges;
};

// Names as llama.cpp writes tokenizer.ggml.pre. "smollm" and the StarCoder family split digits
// first (SmolLM2's tokenizer.json: Sequence[Digits(individual_digits), ByteLevel]).
constexpr PreSpec kPreSpecs[] = {
    {"gpt2", {kGpt2Regex, nullptr}, false},
    {"default", {kGpt2Regex, nullptr}, false},
    {"mpt", {kGpt2Regex, nullptr}, false},
    {"olmo", {kGpt2Regex, nullptr}, false},
    {"smollm", {kDigitRegex, kGpt2Regex}, false},
    {"starcoder", {kDigitRegex, kGpt2Regex}, false},
    {"refact", {kDigitRegex, kGpt2Regex}, false},
    {"codeshell", {kDigitRegex, kGpt2Regex}, false},
    {"llama-bpe", {kLlama3Regex, nullptr}, true},
    {"llama3", {kLlama3Regex, nullptr}, true},
    {"llama-v3", {kLlama3Regex, nullptr}, true},
    {"falcon3", {kLlama3Regex, nullptr}, true},
    {"smaug-bpe", {kLlama3Regex, nullptr}, false},
    {"dbrx", {kLlama3Regex, nullptr}, false},
    {"qwen2", {kQwen2Regex, nullptr}, false},
    {"deepseek-r1-qwen", {kQwen2Regex, nullptr}, false},
    {"stablelm2", {kQwen2Regex, nullptr}, false},
    {"megrez", {kQwen2Regex, nullptr}, false},
};

// Per-thread match state, shared by every pattern: one ovector pair is all the splitter reads,
// and a JIT stack that grows to 8 MiB for long runs of one character class.
struct ThreadMatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  ThreadMatchState() {
    OFFGEN_CHECK(data && context && jit_stack, kResource, "PCRE2: out of memory for match state");
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

std::string pcre2_message(int code) {
  std::array<PCRE2_UCHAR, 256> buf{};
  pcre2_get_error_message(code, buf.data(), buf.size());
  return reinterpret_cast<const char*>(buf.data());
}

}  // namespace

struct PreTokenizer::Stage {
  pcre2_code* code = nullptr;
  explicit Stage(const char* pattern_template) {
    const std::string pattern = expand_classes(pattern_template);
    int err = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &offset, nullptr);
    OFFGEN_CHECK(code, kInternal, "PCRE2 cannot compile pre-tokenizer regex at offset {}: {}",
                 offset, pcre2_message(err));
    // JIT is an optimisation only: without it (unsupported CPU) the interpreter gives the same
    // matches.
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  }
  ~Stage() { pcre2_code_free(code); }
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;
};

PreTokenizer::PreTokenizer(std::string_view pre) {
  const PreSpec* spec = nullptr;
  for (const auto& s : kPreSpecs)
    if (pre == s.name) spec = &s;
  if (!spec) {
    std::string names;
    for (const auto& s : kPreSpecs) names += (names.empty() ? "" : ", ") + std::string(s.name);
    OFFGEN_THROW(kInput,
                 "unsupported tokenizer pre-tokenizer '{}' (tokenizer.ggml.pre); supported: {}",
                 pre, names);
  }
  name_ = spec->name;
  ignore_merges_ = spec->ignore_merges;
  for (const char* r : spec->regexes)
    if (r) stages_.push_back(std::make_unique<Stage>(r));
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

std::vector<std::string> PreTokenizer::supported() {
  std::vector<std::string> out;
  for (const auto& s : kPreSpecs) out.emplace_back(s.name);
  return out;
}

std::string PreTokenizer::hf_split_regex(std::string_view pre) {
  for (const auto& s : kPreSpecs) {
    if (pre != s.name || !s.regexes[0] || s.regexes[1]) continue;
    // The patterns are written so that each bracketed class placeholder is one HF escape.
    std::string out = s.regexes[0];
    for (auto [from, to] : {std::pair<std::string_view, std::string_view>{"[^@S@]", "\\S"},
                            {"[@S@]", "\\s"},
                            {"[@L@]", "\\p{L}"},
                            {"[@N@]", "\\p{N}"},
                            {"@S@", "\\s"},
                            {"@L@", "\\p{L}"},
                            {"@N@", "\\p{N}"}}) {
      for (size_t at = out.find(from); at != std::string::npos; at = out.find(from, at + to.size()))
        out.replace(at, from.size(), to);
    }
    return out;
  }
  return {};
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  split_stage(0, text, out);
}

void PreTokenizer::split_stage(size_t stage, std::string_view text,
                               std::vector<std::string_view>& out) const {
  if (stage == stages_.size()) {
    out.push_back(text);
    return;
  }
  ThreadMatchState& st = thread_match_state();
  const pcre2_code* code = stages_[stage]->code;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
  size_t last = 0;  // end of the previous match
  size_t pos = 0;   // where the next search starts
  while (pos < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, 0, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    OFFGEN_CHECK(rc >= 0, kInput, "pre-tokenizer '{}': PCRE2 match failed at byte {} of {}: {}",
                 name_, pos, text.size(), pcre2_message(rc));
    const size_t start = ov[0], end = ov[1];
    // None of the patterns can match the empty string; an empty match would loop forever.
    OFFGEN_CHECK(end > start, kInternal, "pre-tokenizer '{}' matched an empty piece at byte {}",
                 name_, start);
    if (start > last) split_stage(stage + 1, text.substr(last, start - last), out);
    split_stage(stage + 1, text.substr(start, end - start), out);
    last = pos = end;
  }
  if (last < text.size()) split_stage(stage + 1, text.substr(last), out);
}

}  // namespace offgen
