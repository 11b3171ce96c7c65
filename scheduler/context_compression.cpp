// Context compression policies over a prefilled shared context.
#include "scheduler/context_compression.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "policies/kv/kvzip.h"
#include "scheduler/context_prompt.h"
#include "runtime/core/error.h"

namespace offgen {
namespace {

// Per (layer, KV head) kept lists from a per-head slot policy over the evictable slots [P, n),
// on policy_layers() (the others are left empty).
std::vector<std::vector<int32_t>> keep_per_head(const ModelConfig& c, int64_t n, int64_t P,
                                                double ratio, const KvSlotPolicy& policy,
                                                const std::vector<std::vector<float>>& score) {
  const int64_t k = std::llround(ratio * static_cast<double>(n - P));
  std::vector<std::vector<int32_t>> kept(c.n_layers * c.n_kv_heads);
  std::vector<int32_t> pos(n - P);
  for (int64_t i = 0; i < n - P; ++i) pos[i] = static_cast<int32_t>(P + i);
  std::vector<float> zero(n - P, 0.0f);
  for (int64_t l : policy_layers(c))
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      const float* s = score.empty() ? zero.data() : score[l].data() + h * n + P;
      std::vector<int32_t> out;
      const std::span<const float> sv(s, static_cast<size_t>(n - P));
      policy.keep(SlotTable{pos, sv, sv}, k, out);
      auto& dst = kept[l * c.n_kv_heads + h];
      for (int64_t i = 0; i < P; ++i) dst.push_back(static_cast<int32_t>(i));
      for (int32_t j : out) dst.push_back(static_cast<int32_t>(P + j));
      std::sort(dst.begin() + P, dst.end());
    }
  return kept;
}

// KVzip's selection over the policy layers' pairs only (one threshold across them), mapped back
// to every layer's row of the kept lists (the sliding-window layers' left empty).
std::vector<std::vector<int32_t>> kvzip_policy_layers(const ModelConfig& c, int64_t n, int64_t P,
                                                      const std::vector<float>& scores,
                                                      double ratio, KvzipBudget budget) {
  const std::vector<int64_t> layers = policy_layers(c);
  const int64_t H = c.n_kv_heads;
  KvzipScores s{static_cast<int64_t>(layers.size()), H, n, P, {}};
  s.score.reserve(layers.size() * H * n);
  for (int64_t l : layers)
    s.score.insert(s.score.end(), scores.begin() + l * H * n, scores.begin() + (l + 1) * H * n);
  auto sel = kvzip_select(s, ratio, budget);
  std::vector<std::vector<int32_t>> kept(c.n_layers * H);
  for (size_t i = 0; i < layers.size(); ++i)
    for (int64_t h = 0; h < H; ++h) kept[layers[i] * H + h] = std::move(sel[i * H + h]);
  return kept;
}

}  // namespace

std::vector<int64_t> policy_layers(const ModelConfig& c) {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < c.n_layers; ++l)
    if (!c.is_sliding(l)) out.push_back(l);
  if (out.empty())
    for (int64_t l = 0; l < c.n_layers; ++l) out.push_back(l);
  return out;
}

int64_t policy_pairs(const ModelConfig& c, const std::vector<std::vector<int32_t>>& kept) {
  int64_t pairs = 0;
  for (int64_t l : policy_layers(c))
    for (int64_t h = 0; h < c.n_kv_heads; ++h)
      pairs += static_cast<int64_t>(kept[l * c.n_kv_heads + h].size());
  return pairs;
}

std::vector<std::vector<int32_t>> with_windows(const ModelConfig& c, int64_t n,
                                               std::vector<std::vector<int32_t>> kept) {
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (!c.is_sliding(l)) continue;
    const int64_t first = std::max<int64_t>(0, n - c.sliding_window);
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      auto& dst = kept[l * c.n_kv_heads + h];
      if (!dst.empty()) {  // a policy's choice on a model whose layers all slide: its live part
        std::erase_if(dst, [&](int32_t slot) { return slot < first; });
        continue;
      }
      dst.resize(n - first);
      for (int64_t i = first; i < n; ++i) dst[i - first] = static_cast<int32_t>(i);
    }
  }
  return kept;
}

KvzipRepeat KvzipRepeat::from(const Tokenizer& tok) {
  // Texts that continue the context: no BOS in the middle of a sequence.
  return {continuation(tok, "\n\nRepeat the previous context exactly."),
          continuation(tok, "\n\nRepeat the part of the previous context exactly, starting with ")};
}

ContextCompressor::ContextCompressor(ContextRunner& runner, const ContextCache& cache,
                                     const MultiqueryPrompt& p, const KvzipRepeat& repeat,
                                     const KvPolicyConfig& base)
    : runner_(runner), cache_(cache), prompt_(p), repeat_(repeat), base_(base) {}

double ContextCompressor::ratio_of_budget(double budget) const {
  if (budget <= 1.0) return budget;
  const int64_t evictable = cache_.n - prompt_.protected_len;
  return evictable <= 0 ? 1.0 : std::min(1.0, budget / static_cast<double>(evictable));
}

std::vector<std::vector<int32_t>> ContextCompressor::keep(KvPolicyKind policy, double ratio) {
  return with_windows(runner_.config(), cache_.n, keep_global(policy, ratio));
}

std::vector<std::vector<int32_t>> ContextCompressor::keep_global(KvPolicyKind policy,
                                                                 double ratio) {
  const KvPolicyInfo& info = kv_policy_info(policy);
  OFFGEN_CHECK(info.compresses_context(), kConfig,
               "--kv-policy {} cannot compress a shared context (use one of: {})", info.name,
               fmt::join(context_policy_names(), ", "));
  OFFGEN_CHECK(ratio > 0 && ratio <= 1, kConfig,
               "a shared context's retained ratio must be in (0, 1] (got {})", ratio);
  const ModelConfig& c = runner_.config();
  const int64_t n = cache_.n, P = prompt_.protected_len;
  auto all_pairs = [&] {
    std::vector<int32_t> all(n);
    for (int64_t i = 0; i < n; ++i) all[i] = static_cast<int32_t>(i);
    return std::vector<std::vector<int32_t>>(c.n_layers * c.n_kv_heads, all);
  };
  if (ratio >= 1.0) return all_pairs();
  switch (info.context) {
    case ContextSelection::kNone:  // refused above
    case ContextSelection::kKeepAll:
      return all_pairs();
    case ContextSelection::kKvzipGlobal:
    case ContextSelection::kKvzipUniformHead: {
      if (kvzip_.empty())
        kvzip_ = runner_.kvzip_scores(cache_, prompt_, repeat_.first, repeat_.later);
      const bool global = info.context == ContextSelection::kKvzipGlobal;
      return kvzip_policy_layers(c, n, P, kvzip_, ratio,
                                 global ? KvzipBudget::kGlobal : KvzipBudget::kUniformHead);
    }
    case ContextSelection::kSlotPolicy:
      break;
  }
  KvPolicyConfig pc = base_;
  pc.kind = policy;
  pc.budget = 1.0;
  pc.scope = KvScope::kAll;
  const auto pol = make_kv_policy(pc);
  static const std::vector<std::vector<float>> kNone;
  const std::vector<std::vector<float>>* score = &kNone;
  switch (info.context_scores) {
    case ContextScores::kNone:
      break;
    case ContextScores::kPrefillAttention:
      score = &cache_.h2o_score;
      break;
    case ContextScores::kFirstQuestion: {
      auto it = per_head_.find(policy);
      if (it == per_head_.end()) {
        OFFGEN_CHECK(!prompt_.question_ids.empty(), kInternal, "{} needs the first question",
                     info.name);
        it = per_head_
                 .emplace(policy,
                          runner_.question_scores(cache_, prompt_.question_ids.front(), *pol))
                 .first;
      }
      score = &it->second;
      break;
    }
  }
  return keep_per_head(c, n, P, ratio, *pol, *score);
}

}  // namespace offgen
