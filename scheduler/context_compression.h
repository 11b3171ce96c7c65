// Compressing a prefilled shared context once, as the KV-policy registry says: the scores a policy
// reads (KVzip's reconstruction, H2O's prefill attention, SnapKV's first question, none for sinks)
// and the pairs kept per (layer, KV head) at a retained ratio, protected prefix always kept.
// Query/answer KV is never compressed (it is not part of the context).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "policies/kv/kv_policy.h"
#include "runtime/text/tokenizer.h"
#include "scheduler/shared_context.h"

namespace offgen {

// KVzip's two reconstruction requests, tokenised: the first chunk's and the later chunks'.
struct KvzipRepeat {
  std::vector<int32_t> first, later;
  static KvzipRepeat from(const Tokenizer& tok);
};

// The layers a context policy compresses: the global ones (a sliding-window layer keeps its
// window), or every layer of a model whose layers all slide (the window then bounds what the
// policy keeps there).
std::vector<int64_t> policy_layers(const ModelConfig& c);
// The pairs `kept` (per (layer, KV head), row-major) holds on those layers: what a context's
// retained ratio counts, against policy_layers(c).size() x c.n_kv_heads x its tokens.
int64_t policy_pairs(const ModelConfig& c, const std::vector<std::vector<int32_t>>& kept);

// `kept` (per (layer, KV head), row-major) with every sliding-window layer's empty lists set to
// the last c.sliding_window slots of an n-slot context (all of them when n is shorter) and its
// other lists cut to those slots.
std::vector<std::vector<int32_t>> with_windows(const ModelConfig& c, int64_t n,
                                               std::vector<std::vector<int32_t>> kept);

class ContextCompressor {
 public:
  // cache: the context's prefill (runner.prefill(p.context_ids)); p: its tokens — protected
  // prefix, chat postfix and, for snapkv, the first question in p.question_ids.front(). `base`
  // supplies the policies' settings (h2o's recent share, sinks, snapkv's window). All referenced
  // objects must outlive the compressor.
  ContextCompressor(ContextRunner& runner, const ContextCache& cache, const MultiqueryPrompt& p,
                    const KvzipRepeat& repeat, const KvPolicyConfig& base = {});
  // Kept slots per (layer, KV head) in row-major order, ascending: all protected slots plus
  // round(ratio x the others), selected as the registry says (KvPolicyInfo::context): globally
  // for kvzip, per head otherwise. On a model with sliding-window layers the policy acts on the
  // global layers (kvzip's threshold runs over their pairs only) and each sliding-window layer
  // keeps the context's last window of slots (with_windows): a question after the context sees
  // no earlier key there. Where every layer slides, the policy acts on all, within the window.
  // A policy's scores are computed on its first use and reused for every ratio. Throws kConfig
  // for a policy that cannot compress a context (the registry's context_policy_names() lists
  // those that can) or a ratio outside (0, 1].
  std::vector<std::vector<int32_t>> keep(KvPolicyKind policy, double ratio);
  // The retained ratio a KV budget gives this context: a fraction (0, 1] as it is, a token
  // count B > 1 as B / (evictable context tokens), at most 1.
  double ratio_of_budget(double budget) const;

 private:
  std::vector<std::vector<int32_t>> keep_global(KvPolicyKind policy, double ratio);
  ContextRunner& runner_;
  const ContextCache& cache_;
  const MultiqueryPrompt& prompt_;
  const KvzipRepeat& repeat_;
  KvPolicyConfig base_;
  std::vector<float> kvzip_;                           // [layer][head][slot]
  std::map<KvPolicyKind, std::vector<std::vector<float>>> per_head_;  // -> [layer][head*n]
};

}  // namespace offgen
