// SentencePiece-style BPE: normalisation, pre-tokeniser splits, priority-queue merges, byte
// fallback. Tie-breaking: equal priority merges the leftmost pair first (llama.cpp's SPM bigram
// queue and Hugging Face's BPE merge heap both do).
#include "runtime/text/spm_bpe.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "runtime/core/error.h"
#include "runtime/text/nfc.h"
#include "runtime/text/utf8.h"

namespace offgen {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // "▁"

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// "<0x0A>" -> 0x0A; -1 when `t` is not a byte token's spelling.
int parse_byte_token(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t.back() != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    const int d = (c >= '0' && c <= '9')   ? c - '0'
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                                           : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size())
    out.append(s, pos, hit - pos).append(to);
  out.append(s, pos, std::string::npos);
  s.swap(out);
}

}  // namespace

struct SpmBpe::Symbol {
  uint32_t start, len;  // bytes of the piece this symbol covers
  int32_t id;
  int32_t prev, next;  // neighbours (-1: none)
  bool mergeable;      // a vocabulary character or merge result (not byte fallback / unk)
};

SpmBpe::SpmBpe(const VocabData& v, std::span<const TokenType> types)
    : v_(v), types_(types.begin(), types.end()) {
  const auto n = static_cast<int64_t>(v.tokens.size());
  OFFGEN_CHECK(v.scores.empty() || static_cast<int64_t>(v.scores.size()) == n, kInput,
               "tokenizer scores have {} entries for {} tokens", v.scores.size(), n);
  scores_ = v.scores;
  piece_id_.reserve(n);
  for (int32_t id = 0; id < n; ++id) piece_id_[v.tokens[id]] = id;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = piece_id_.find(std::string_view(name));
    byte_id_[b] = v.byte_fallback && it != piece_id_.end() ? it->second : -1;
    if (byte_id_[b] < 0) missing_.push_back(static_cast<uint8_t>(b));
  }
  ranked_ = v.scores.empty();
  if (ranked_) merges_.reserve(v.merges.size());
  for (size_t r = 0; ranked_ && r < v.merges.size(); ++r) {
    const std::string& mg = v.merges[r];
    const size_t sp = mg.find(' ', 1);
    OFFGEN_CHECK(
        sp != std::string::npos && sp + 1 < mg.size() && mg.find(' ', sp + 1) == std::string::npos,
        kInput, "tokenizer merge {} ('{}') is not two pieces separated by one space", r, mg);
    const std::string_view left(mg.data(), sp), right(mg.data() + sp + 1, mg.size() - sp - 1);
    auto find = [&](std::string_view s, const char* what) {
      auto it = piece_id_.find(s);
      OFFGEN_CHECK(it != piece_id_.end(), kInput,
                   "tokenizer merge {} ('{}'): {} '{}' is not in the vocabulary", r, mg, what, s);
      return it->second;
    };
    const int32_t a = find(left, "left piece"), b = find(right, "right piece");
    const int32_t c = find(std::string(left) + std::string(right), "merged token");
    // A repeated pair takes its later rank, as HF's merge map does.
    merges_[pair_key(a, b)] = {static_cast<int32_t>(r), c};
  }
}

std::string SpmBpe::token_bytes(const std::string& token, TokenType type) {
  if (type == TokenType::kByte) {
    const int b = parse_byte_token(token);
    if (b >= 0) return std::string(1, static_cast<char>(b));
  }
  std::string s = token;
  if (s.find(kSpace) != std::string::npos) replace_all(s, kSpace, " ");
  return s;
}

void SpmBpe::normalize(std::string_view segment, bool at_text_start, std::string& out) const {
  out.assign(segment);
  std::string tmp;
  if (v_.normalize_nfkc ? nfkc_normalize(out, tmp) : v_.normalize_nfc && nfc_normalize(out, tmp))
    out.swap(tmp);
  if (v_.escape_spaces && out.find(' ') != std::string::npos) replace_all(out, " ", kSpace);
  if (out.empty()) return;
  bool prefix = false;
  switch (v_.space_prefix) {
    case SpacePrefix::kNone:
      break;
    case SpacePrefix::kEverySegment:
      prefix = true;
      break;
    case SpacePrefix::kEverySegmentUnlessSpace:
      prefix = !out.starts_with(kSpace);
      break;
    case SpacePrefix::kFirstSegmentUnlessSpace:
      prefix = at_text_start && !out.starts_with(kSpace);
      break;
  }
  if (prefix) out.insert(0, kSpace);
}

void SpmBpe::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  pieces.assign({text});
  std::vector<std::string_view> next;
  for (const SpmSplit& s : v_.splits) {
    if (s.delimiter.empty()) continue;
    next.clear();
    const size_t d = s.delimiter.size();
    for (std::string_view p : pieces) {
      // Delimiter occurrences (non-overlapping, left to right) and the gaps between them.
      size_t pos = 0, pending = 0;  // pending: start of text not yet emitted
      auto emit = [&](size_t from, size_t to) {
        if (to > from) next.push_back(p.substr(from, to - from));
      };
      for (size_t hit; (hit = p.find(s.delimiter, pos)) != std::string_view::npos; pos = hit + d) {
        switch (s.behavior) {
          case SplitBehavior::kRemoved:
            emit(pending, hit);
            pending = hit + d;
            break;
          case SplitBehavior::kIsolated:
            emit(pending, hit);
            emit(hit, hit + d);
            pending = hit + d;
            break;
          case SplitBehavior::kMergedWithPrevious:
            emit(pending, hit + d);
            pending = hit + d;
            break;
          case SplitBehavior::kMergedWithNext:
            emit(pending, hit);
            pending = hit;
            break;
          case SplitBehavior::kContiguous: {
            emit(pending, hit);
            size_t end = hit + d;
            while (p.substr(end, d) == s.delimiter) end += d;
            emit(hit, end);
            pending = end;
            hit = end - d;
            break;
          }
        }
      }
      emit(pending, p.size());
    }
    pieces.swap(next);
  }
}

void SpmBpe::initial_symbols(std::string_view piece, std::vector<Symbol>& syms) const {
  // Unknown characters wait in `unk` (start, len) and are flushed before the next vocabulary
  // character or at the end, fused when fuse_unk. Byte-fallback characters do not flush it:
  // Hugging Face's BPE orders them so ("a中é中b" -> a, <0xC3>, <0xA9>, <unk>, b with fuse_unk).
  int64_t unk_start = -1;
  uint32_t unk_len = 0;
  auto push = [&](uint32_t start, uint32_t len, int32_t id, bool mergeable) {
    const auto i = static_cast<int32_t>(syms.size());
    syms.push_back({start, len, id, i - 1, -1, mergeable});
    if (i > 0) syms[i - 1].next = i;
  };
  auto flush_unk = [&] {
    if (unk_start >= 0) push(static_cast<uint32_t>(unk_start), unk_len, v_.unk_id, false);
    unk_start = -1;
  };
  for (size_t i = 0; i < piece.size();) {
    const auto len = static_cast<uint32_t>(utf8::decode(piece, i).len);
    const auto start = static_cast<uint32_t>(i);
    i += len;
    auto it = piece_id_.find(piece.substr(start, len));
    if (it != piece_id_.end()) {
      flush_unk();
      push(start, len, it->second, true);
      continue;
    }
    bool bytes_ok = v_.byte_fallback;
    for (uint32_t k = 0; k < len && bytes_ok; ++k)
      bytes_ok = byte_id_[static_cast<uint8_t>(piece[start + k])] >= 0;
    if (bytes_ok) {
      for (uint32_t k = 0; k < len; ++k)
        push(start + k, 1, byte_id_[static_cast<uint8_t>(piece[start + k])], false);
      continue;
    }
    if (v_.unk_id < 0) continue;  // no representation: dropped (missing_bytes())
    if (unk_start >= 0 && v_.fuse_unk) {
      unk_len = start + len - static_cast<uint32_t>(unk_start);
    } else {
      flush_unk();
      unk_start = start;
      unk_len = len;
    }
  }
  flush_unk();
}

bool SpmBpe::merge_cost(std::string_view piece, const Symbol& l, const Symbol& r, double& cost,
                        int32_t& result) const {
  if (ranked_) {
    auto it = merges_.find(pair_key(l.id, r.id));
    if (it == merges_.end()) return false;
    cost = it->second.rank;
    result = it->second.result;
    return true;
  }
  // Scores (GGUF): any adjacent vocabulary pieces whose concatenation is a normal token.
  if (!l.mergeable || !r.mergeable || r.start != l.start + l.len) return false;
  auto it = piece_id_.find(piece.substr(l.start, l.len + r.len));
  if (it == piece_id_.end() || types_[it->second] != TokenType::kNormal) return false;
  result = it->second;
  cost = -static_cast<double>(scores_[result]);
  return true;
}

void SpmBpe::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  struct Cand {
    double cost;
    int32_t left, right;
    uint32_t left_len, right_len;  // the pair is stale once either side has grown
    int32_t result;
    bool operator>(const Cand& o) const { return cost != o.cost ? cost > o.cost : left > o.left; }
  };
  constexpr size_t kMaxScratch = 1 << 16;
  thread_local std::vector<Symbol> syms;
  thread_local std::vector<Cand> heap;
  syms.clear();
  heap.clear();
  initial_symbols(piece, syms);
  auto push_pair = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = syms[left].next;
    if (right < 0) return;
    double cost;
    int32_t result;
    if (!merge_cost(piece, syms[left], syms[right], cost, result)) return;
    heap.push_back({cost, left, right, syms[left].len, syms[right].len, result});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Cand top = heap.back();
    heap.pop_back();
    Symbol& l = syms[top.left];
    if (l.len == 0 || l.next != top.right || l.len != top.left_len) continue;
    Symbol& r = syms[top.right];
    if (r.len != top.right_len) continue;
    l.id = top.result;
    l.len += r.len;
    l.mergeable = true;
    r.len = 0;  // dead
    l.next = r.next;
    if (l.next >= 0) syms[l.next].prev = top.left;
    push_pair(l.prev);
    push_pair(top.left);
  }
  for (const Symbol& s : syms)
    if (s.len > 0) out.push_back(s.id);
  if (syms.capacity() > kMaxScratch) std::vector<Symbol>().swap(syms);
  if (heap.capacity() > kMaxScratch) std::vector<Cand>().swap(heap);
}

void SpmBpe::encode(std::string_view segment, bool at_text_start, std::vector<int32_t>& out) const {
  thread_local std::string norm;
  thread_local std::vector<std::string_view> pieces;
  normalize(segment, at_text_start, norm);
  if (norm.empty()) return;
  split(norm, pieces);
  for (std::string_view p : pieces) bpe(p, out);
}

}  // namespace offgen
