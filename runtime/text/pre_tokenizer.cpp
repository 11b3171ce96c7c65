// PCRE2 pre-tokenizer stages per tokenizer.ggml.pre (the regexes llama.cpp and HF use).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/text/pre_tokenizer.h"

#include <pcre2.h>

#include <algorithm>
#include <array>

#include "runtime/core/error.h"

namespace offgen {
namespace {

// HF `tokenizers` runs these regexes with Oniguruma, whose \s also matches U+0085 (NEL); PCRE2's
// \s under UCP does not, so the patterns spell white space as [\s\x{85}].
#define OFFGEN_WS "[\\s\\x{85}]"
#define OFFGEN_NOT_WS "[^\\s\\x{85}]"

// GPT-2 (HF ByteLevel use_regex=true). The trailing \s+ covers what \s+(?!\S) leaves.
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\x{85}\\p{L}\\p{N}]+|" OFFGEN_WS
    "+(?!" OFFGEN_NOT_WS ")|" OFFGEN_WS "+";

// HF Digits(individual_digits=true): every numeric character (Nd, Nl, No) is its own piece.
constexpr const char* kDigitRegex = "\\p{N}";

constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\x{85}\\p{L}\\p{N}]+[\\r\\n]*|" OFFGEN_WS "*[\\r\\n]+|" OFFGEN_WS "+(?!" OFFGEN_NOT_WS
    ")|" OFFGEN_WS "+";

constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\x{85}\\p{L}\\p{N}]+[\\r\\n]*|" OFFGEN_WS "*[\\r\\n]+|" OFFGEN_WS "+(?!" OFFGEN_NOT_WS
    ")|" OFFGEN_WS "+";

#undef OFFGEN_WS
#undef OFFGEN_NOT_WS

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
  explicit Stage(const char* pattern) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
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
    OFFGEN_THROW(kInput, "unsupported tokenizer pre-tokenizer '{}' (tokenizer.ggml.pre); supported: {}",
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
