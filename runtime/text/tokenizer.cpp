// Tokenizer: vocabulary indexing, special-token split, byte-level BPE merges (SentencePiece-style
// BPE in spm_bpe.cpp), decode.
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

#include <fmt/ranges.h>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/text/chat_template.h"
#include "runtime/text/nfc.h"
#include "runtime/text/pre_tokenizer.h"
#include "runtime/text/special_matcher.h"
#include "runtime/text/spm_bpe.h"
#include "runtime/text/utf8.h"

namespace offgen {
namespace {

// GPT-2 bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the other 68 bytes map
// to U+0100.. in byte order.
constexpr std::array<char32_t, 256> kByteToUnicode = [] {
  std::array<char32_t, 256> t{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    t[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return t;
}();

constexpr size_t kUnicodeToByteSize = 256 + 68;
constexpr std::array<int16_t, kUnicodeToByteSize> kUnicodeToByte = [] {
  std::array<int16_t, kUnicodeToByteSize> t{};
  for (auto& v : t) v = -1;
  for (int b = 0; b < 256; ++b) t[kByteToUnicode[b]] = static_cast<int16_t>(b);
  return t;
}();

std::string to_byte_level(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) utf8::append(out, kByteToUnicode[static_cast<uint8_t>(c)]);
  return out;
}

// Byte-level token text back to raw bytes. Characters outside the byte alphabet (not produced
// by GPT-2 style conversion, but tolerated) pass through as their UTF-8.
std::string from_byte_level(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const utf8::Decoded d = utf8::decode(text, i);
    if (d.valid && d.cp < kUnicodeToByteSize && kUnicodeToByte[d.cp] >= 0) {
      out.push_back(static_cast<char>(kUnicodeToByte[d.cp]));
    } else {
      out.append(text.substr(i, d.len));
    }
    i += d.len;
  }
  return out;
}

// "<0x41>" -> "A" for byte-type tokens; anything else stays literal.
std::string byte_token_bytes(const std::string& text) {
  if (text.size() == 6 && text.starts_with("<0x") && text.back() == '>') {
    unsigned v = 0;
    for (size_t i = 3; i < 5; ++i) {
      const char c = text[i];
      const int d = (c >= '0' && c <= '9')   ? c - '0'
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                             : -1;
      if (d < 0) return text;
      v = v * 16 + d;
    }
    return std::string(1, static_cast<char>(v));
  }
  return text;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

struct MergeInfo {
  int32_t rank;
  int32_t result;
};

// Cache of BPE results for short pieces, sharded so that encode() on many threads rarely
// contends. Bounded: a full shard is cleared.
class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 48;

  bool lookup(std::string_view word, std::vector<int32_t>& out) {
    Shard& s = shard(word);
    std::lock_guard lock(s.mu);
    auto it = s.map.find(std::string(word));
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void insert(std::string_view word, std::span<const int32_t> ids) {
    Shard& s = shard(word);
    std::lock_guard lock(s.mu);
    if (s.map.size() >= kMaxPerShard) s.map.clear();
    s.map.emplace(std::string(word), std::vector<int32_t>(ids.begin(), ids.end()));
  }

 private:
  static constexpr size_t kShards = 32;
  static constexpr size_t kMaxPerShard = 4096;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  Shard& shard(std::string_view word) {
    return shards_[std::hash<std::string_view>{}(word) % kShards];
  }
  std::array<Shard, kShards> shards_;
};

}  // namespace

char32_t byte_to_unicode(uint8_t b) { return kByteToUnicode[b]; }

struct Tokenizer::Impl {
  VocabData vocab;
  std::unique_ptr<PreTokenizer> pre;  // byte-level only
  std::unique_ptr<SpmBpe> spm;        // SentencePiece-style only
  std::vector<TokenType> types;
  std::vector<std::string> bytes;                       // raw bytes per id
  std::unordered_map<std::string, int32_t> text_to_id;  // byte-level text -> id (last wins)
  std::array<int32_t, 256> byte_id{};                   // single-byte symbol ids, -1 if none
  std::vector<uint8_t> missing;
  std::unordered_map<uint64_t, MergeInfo> merges;  // (left, right) -> rank, result
  SpecialMatcher specials;
  mutable WordCache cache;
  // Parsed chat templates by variant name, or the error that parsing gave.
  struct ParsedTemplate {
    std::unique_ptr<ChatTemplate> t;
    std::string error;
  };
  mutable std::mutex templates_mu;
  mutable std::map<std::string, ParsedTemplate> templates;

  explicit Impl(VocabData v) : vocab(std::move(v)) {}

  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view piece, std::vector<int32_t>& out) const;
  // One segment between special tokens; at_start: it begins the text.
  void encode_text(std::string_view text, bool at_start, std::vector<int32_t>& out) const;
  void init_byte_level();
};

namespace {

std::string_view resolve_pre(const VocabData& v) {
  if (v.pre.empty()) {
    log_warn("tokenizer.ggml.pre is missing; using the GPT-2 pre-tokenizer regex");
    return "gpt2";
  }
  return v.pre;
}

}  // namespace

Tokenizer::Tokenizer(VocabData vocab) {
  OFFGEN_CHECK(vocab.model == "gpt2" || vocab.model == "llama", kInput,
               "unsupported tokenizer model '{}' (tokenizer.ggml.model): offgen implements "
               "byte-level BPE 'gpt2' and SentencePiece-style BPE 'llama'",
               vocab.model);
  const bool spm = vocab.model == "llama";
  impl_ = std::make_unique<Impl>(std::move(vocab));
  Impl& m = *impl_;
  if (!spm) m.pre = std::make_unique<PreTokenizer>(resolve_pre(m.vocab));
  const VocabData& v = m.vocab;
  const auto n = static_cast<int64_t>(v.tokens.size());
  OFFGEN_CHECK(n > 0 && n < INT32_MAX, kInput, "tokenizer vocabulary size {} is out of range", n);
  OFFGEN_CHECK(v.token_types.empty() || static_cast<int64_t>(v.token_types.size()) == n, kInput,
               "tokenizer.ggml.token_type has {} entries for {} tokens", v.token_types.size(), n);
  for (auto [name, id] :
       {std::pair{"bos", v.bos_id}, {"eos", v.eos_id}, {"unk", v.unk_id}, {"pad", v.pad_id}}) {
    OFFGEN_CHECK(id >= -1 && id < n, kInput,
                 "tokenizer {} id {} is outside the vocabulary (size {})", name, id, n);
  }
  OFFGEN_CHECK(!v.add_bos || v.bos_id >= 0, kInput, "tokenizer asks to add BOS but has no BOS id");
  OFFGEN_CHECK(!v.add_eos || v.eos_id >= 0, kInput, "tokenizer asks to add EOS but has no EOS id");

  m.types.resize(n, TokenType::kNormal);
  m.bytes.resize(n);
  m.text_to_id.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    const int32_t t = v.token_types.empty() ? 1 : v.token_types[id];
    OFFGEN_CHECK(t >= 0 && t <= 6, kInput, "token {} ('{}') has unknown token type {}", id,
                 v.tokens[id], t);
    m.types[id] = t == 0 ? TokenType::kNormal : static_cast<TokenType>(t);
    // Unknown-type tokens ("<unk>") are matched like control tokens, as llama.cpp does.
    const bool control = m.types[id] == TokenType::kControl || m.types[id] == TokenType::kUnknown;
    if (control || m.types[id] == TokenType::kUserDefined)
      m.specials.add(v.tokens[id], id, control);
    if (spm) {
      m.bytes[id] = SpmBpe::token_bytes(v.tokens[id], m.types[id]);
      continue;
    }
    switch (m.types[id]) {
      case TokenType::kNormal:
        m.bytes[id] = from_byte_level(v.tokens[id]);
        break;
      case TokenType::kByte:
        m.bytes[id] = byte_token_bytes(v.tokens[id]);
        break;
      case TokenType::kUnknown:
      case TokenType::kControl:
      case TokenType::kUserDefined:
      case TokenType::kUnused:
        m.bytes[id] = v.tokens[id];
        break;
    }
    // Keyed by the byte-level spelling of the token's bytes, which is how merges name pieces
    // (HF respells non-alphabet GGUF tokens the same way). Later duplicates win, as in HF.
    m.text_to_id[to_byte_level(m.bytes[id])] = id;
  }
  if (spm) {
    m.spm = std::make_unique<SpmBpe>(v, m.types);
    m.missing = m.spm->missing_bytes();
  } else {
    m.init_byte_level();
  }
}

void Tokenizer::Impl::init_byte_level() {
  Impl& m = *this;
  const VocabData& v = m.vocab;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    utf8::append(s, kByteToUnicode[b]);
    auto it = m.text_to_id.find(s);
    m.byte_id[b] = it == m.text_to_id.end() ? -1 : it->second;
    if (m.byte_id[b] < 0) m.missing.push_back(static_cast<uint8_t>(b));
  }
  if (!m.missing.empty())
    log_debug("tokenizer: {} of 256 bytes have no token; encode drops them", m.missing.size());

  m.merges.reserve(v.merges.size());
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& mg = v.merges[r];
    const size_t sp = mg.find(' ', 1);
    OFFGEN_CHECK(
        sp != std::string::npos && sp + 1 < mg.size() && mg.find(' ', sp + 1) == std::string::npos,
        kInput, "tokenizer merge {} ('{}') is not two pieces separated by one space", r, mg);
    const std::string left = mg.substr(0, sp), right = mg.substr(sp + 1);
    auto find = [&](const std::string& s, const char* what) {
      auto it = m.text_to_id.find(s);
      OFFGEN_CHECK(it != m.text_to_id.end(), kInput,
                   "tokenizer merge {} ('{}'): {} '{}' is not in the vocabulary", r, mg, what, s);
      return it->second;
    };
    const int32_t a = find(left, "left piece"), b = find(right, "right piece");
    const int32_t c = find(left + right, "merged token");
    // A repeated pair takes its later rank, as HF's merge map does.
    m.merges[pair_key(a, b)] = {static_cast<int32_t>(r), c};
  }
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

void Tokenizer::Impl::bpe_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id, prev, next;
    bool alive;
  };
  struct Cand {
    int32_t rank, pos, result;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  constexpr size_t kMaxScratch = 1 << 16;
  thread_local std::vector<Sym> syms;
  thread_local std::vector<Cand> heap;
  syms.clear();
  heap.clear();
  // Bytes with no token are skipped, and their neighbours become adjacent (HF BPE without unk).
  for (char c : piece) {
    const int32_t id = byte_id[static_cast<uint8_t>(c)];
    if (id < 0) continue;
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({id, i - 1, -1, true});
    if (i > 0) syms[i - 1].next = i;
  }
  auto push_pair = [&](int32_t pos) {
    const int32_t nx = syms[pos].next;
    if (nx < 0) return;
    auto it = merges.find(pair_key(syms[pos].id, syms[nx].id));
    if (it == merges.end()) return;
    heap.push_back({it->second.rank, pos, it->second.result});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Cand top = heap.back();
    heap.pop_back();
    Sym& s = syms[top.pos];
    if (!s.alive || s.next < 0) continue;
    // Stale entry: the pair at this position changed since it was queued.
    auto it = merges.find(pair_key(s.id, syms[s.next].id));
    if (it == merges.end() || it->second.result != top.result) continue;
    Sym& right = syms[s.next];
    s.id = top.result;
    right.alive = false;
    s.next = right.next;
    if (s.next >= 0) syms[s.next].prev = top.pos;
    if (s.prev >= 0) push_pair(s.prev);
    push_pair(top.pos);
  }
  for (const Sym& s : syms)
    if (s.alive) out.push_back(s.id);
  // Don't keep a huge piece's scratch alive on this thread.
  if (syms.capacity() > kMaxScratch) std::vector<Sym>().swap(syms);
  if (heap.capacity() > kMaxScratch) std::vector<Cand>().swap(heap);
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (pre->ignore_merges()) {
    auto it = text_to_id.find(to_byte_level(piece));
    if (it != text_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() == 1) {
    const int32_t id = byte_id[static_cast<uint8_t>(piece[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (piece.size() > WordCache::kMaxWordBytes) return bpe_uncached(piece, out);
  if (cache.lookup(piece, out)) return;
  const size_t first = out.size();
  bpe_uncached(piece, out);
  cache.insert(piece, std::span<const int32_t>(out).subspan(first));
}

void Tokenizer::Impl::encode_text(std::string_view text, bool at_start,
                                  std::vector<int32_t>& out) const {
  if (spm) return spm->encode(text, at_start, out);
  std::string normalized;
  if (vocab.normalize_nfkc ? nfkc_normalize(text, normalized)
                           : vocab.normalize_nfc && nfc_normalize(text, normalized))
    text = normalized;
  std::vector<std::string_view> pieces;
  pre->split(text, pieces);
  for (std::string_view p : pieces) bpe(p, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (m.vocab.add_bos) out.push_back(m.vocab.bos_id);
  // Leftmost-longest special-token split (HF's added-vocabulary trie), then each segment.
  size_t pos = 0;
  while (pos < text.size() && !m.specials.empty()) {
    const SpecialMatcher::Match sp = m.specials.find(text, pos, parse_special);
    if (sp.id < 0) break;
    if (sp.at > pos) m.encode_text(text.substr(pos, sp.at - pos), pos == 0, out);
    out.push_back(sp.id);
    pos = sp.at + sp.len;
  }
  if (pos < text.size()) m.encode_text(text.substr(pos), pos == 0, out);
  if (m.vocab.add_eos) out.push_back(m.vocab.eos_id);
  return out;
}

std::vector<int32_t> Tokenizer::encode_marked(const MarkedText& marked) const {
  const Impl& m = *impl_;
  const std::string& text = marked.text();
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  size_t pos = 0;
  while (pos < text.size() && !m.specials.empty()) {
    const SpecialMatcher::Match sp = m.specials.find(text, pos, &marked);
    if (sp.id < 0) break;
    if (sp.at > pos) m.encode_text(std::string_view(text).substr(pos, sp.at - pos), pos == 0, out);
    out.push_back(sp.id);
    pos = sp.at + sp.len;
  }
  if (pos < text.size()) m.encode_text(std::string_view(text).substr(pos), pos == 0, out);
  return out;
}

const ChatTemplate& Tokenizer::chat_template(bool tools) const {
  const VocabData& v = impl_->vocab;
  std::string name = "default";
  const std::string* source = v.chat_template.empty() ? nullptr : &v.chat_template;
  for (const auto& [n, src] : v.chat_templates) {
    if (n == "tool_use" && tools) {
      name = n;
      source = &src;
    }
  }
  if (!source) {
    std::vector<std::string> names;
    for (const auto& kv : v.chat_templates) names.push_back(kv.first);
    OFFGEN_CHECK(!names.empty(), kConfig,
                 "the model has no chat template (tokenizer.chat_template is empty); run "
                 "without --chat or give a raw prompt");
    OFFGEN_THROW(kConfig,
                 "the model has named chat templates ({}) but no default one; offgen uses the "
                 "default (and 'tool_use' for requests with tools)",
                 fmt::join(names, ", "));
  }
  std::lock_guard lock(impl_->templates_mu);
  Impl::ParsedTemplate& p = impl_->templates[name];
  if (!p.t && p.error.empty()) {
    try {
      p.t = std::make_unique<ChatTemplate>(*source);
    } catch (const Error& e) {
      p.error = e.what();
    }
  }
  OFFGEN_CHECK(p.t, kConfig, "{}", p.error);
  return *p.t;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& m = *impl_;
  std::string out;
  for (int32_t id : ids) {
    OFFGEN_CHECK(id >= 0 && id < vocab_size(), kInput,
                 "token id {} is outside the vocabulary (size {})", id, vocab_size());
    const TokenType t = m.types[id];
    if (skip_special && (t == TokenType::kControl || t == TokenType::kUnknown)) continue;
    out += m.bytes[id];
  }
  if (m.spm && m.vocab.strip_leading_space && !out.empty() && out.front() == ' ') out.erase(0, 1);
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  OFFGEN_CHECK(id >= 0 && id < vocab_size(), kInput,
               "token id {} is outside the vocabulary (size {})", id, vocab_size());
  return impl_->bytes[id];
}

std::vector<int32_t> Tokenizer::end_of_generation() const {
  static constexpr std::string_view kEndMarkers[] = {
      "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|eom_id|>",
      "<end_of_turn>", "<|end|>"};
  const VocabData& v = vocab();
  std::vector<int32_t> out(v.eog_ids.begin(), v.eog_ids.end());
  if (v.eos_id >= 0) out.push_back(v.eos_id);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const bool control = i < v.token_types.size() &&
                         v.token_types[i] == static_cast<int32_t>(TokenType::kControl);
    if (!control) continue;
    for (std::string_view m : kEndMarkers)
      if (v.tokens[i] == m) out.push_back(static_cast<int32_t>(i));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->bytes.size()); }
int32_t Tokenizer::bos_id() const { return impl_->vocab.bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->vocab.eos_id; }

TokenType Tokenizer::token_type(int32_t id) const {
  OFFGEN_CHECK(id >= 0 && id < vocab_size(), kInput,
               "token id {} is outside the vocabulary (size {})", id, vocab_size());
  return impl_->types[id];
}

bool Tokenizer::is_special(int32_t id) const {
  if (id < 0 || id >= vocab_size()) return false;
  const TokenType t = impl_->types[id];
  return t == TokenType::kControl || t == TokenType::kUserDefined;
}

const std::vector<uint8_t>& Tokenizer::missing_bytes() const { return impl_->missing; }
const VocabData& Tokenizer::vocab() const { return impl_->vocab; }

}  // namespace offgen
