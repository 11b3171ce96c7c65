// A multi-query context prefilled once, compressed once and shared read-only by every question:
// per layer and KV head the kept pairs only (head-major, per-head lengths — evicted pairs are
// gone), in the backend's device memory, exposed as the attention op's KvSharedPrefix. Questions
// keep their own KV after it and continue positions from the uncompressed context length. Also:
// the context's full prefill and the scores each compression policy needs (KVzip reconstruction,
// H2O, SnapKV, sinks).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "policies/kv/kv_policy.h"
#include "runtime/model/decoder.h"

namespace offgen {

// A prefilled context: the full cache (device memory, slot rows in `dtype`) with H2O statistics
// (summed attention of all prompt rows, host memory).
struct ContextCache {
  int64_t n = 0;
  DType dtype = DType::kF32;                  // the KV dtype of its rows
  std::vector<BackendArray<std::byte>> k, v;  // [layer] -> [n] slot rows (kv_row_bytes)
  std::vector<std::vector<float>> h2o_score;  // [layer] -> [n_kv_heads][n]
};

class SharedContext {
 public:
  // From a full cache and, per (layer, head) in row-major order, the slots to keep (ascending),
  // gathered on `backend` (which must outlive the context). context_length: the uncompressed
  // length. Slot i of the cache is position i (the views carry the kept rows' positions, which
  // sliding-window layers attend by).
  SharedContext(Backend& backend, const ModelConfig& c, const ContextCache& cache,
                const std::vector<std::vector<int32_t>>& kept, int64_t context_length);
  SharedContext(SharedContext&&) = default;

  const KvSharedPrefix* layer(int64_t l) const { return &views_[l]; }
  int64_t context_length() const { return context_length_; }
  int64_t kept_pairs() const;  // over all layers and heads
  int64_t bytes() const;       // K + V bytes held (stored once for all questions), in its dtype
  DType dtype() const { return dtype_; }  // the cache's KV dtype, which it keeps
  // Host copies of a head's kept K / V rows, decoded ([len][head_dim]); for tests and inspection.
  std::vector<float> k_rows(int64_t layer, int64_t head) const;
  std::vector<float> v_rows(int64_t layer, int64_t head) const;

 private:
  std::vector<float> rows(const BackendArray<std::byte>& b, int64_t layer, int64_t head) const;
  Backend* backend_;
  int64_t heads_ = 0, head_dim_ = 0, context_length_ = 0;
  DType dtype_ = DType::kF32;
  // Per layer, every head's kept head vectors back to back ([sum of lengths] in dtype_).
  std::vector<BackendArray<std::byte>> k_, v_;
  std::vector<int64_t> len_, start_;  // [layer * heads + head]: length, first row in its layer
  std::vector<const void*> kp_, vp_;
  std::vector<std::vector<int32_t>> pos_;  // [layer * heads + head]: the kept rows' positions
  std::vector<const int32_t*> pp_;
  std::vector<KvSharedPrefix> views_;
};

// The context tokens of a chat-formatted multi-query prompt: `protected_len` leading tokens (the
// template's system prompt and user header) are always kept; question i is question_ids[i]
// (question text + the template's assistant postfix), answered after the context.
struct MultiqueryPrompt {
  std::vector<int32_t> context_ids;
  int64_t protected_len = 0;
  std::vector<std::vector<int32_t>> question_ids;
  std::vector<int32_t> postfix_ids;  // the template's turn end + assistant header
};

// One forward over caller-owned tables: the rows of every sequence (`seqs` index `ids`), the
// views per layer ([layer][seq]), the policy that collects statistics into tables with metadata
// (null: none); writes the logits of each sequence's last row ([seqs][vocab]).
using ContextForward = std::function<void(
    const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
    const std::vector<SeqSpan>& seqs, const std::vector<std::vector<KvSeqView>>& views,
    const KvSlotPolicy* policy, std::vector<float>& logits)>;
// The forward over every weight resident on the model's backend (units), on the calling thread;
// owns its scratch.
ContextForward resident_forward(const DecoderModel& model, const ResidentUnits& units);

// The forwards of shared contexts: the context's prefill, the scoring forwards of the compression
// policies and batched greedy answers, over any ContextForward (all weights in RAM for the
// evaluation, the engine's block executor with its placement for generate jobs).
// Thread-compatible (one per thread).
class ContextRunner {
 public:
  // Tables live in `backend`'s memory (the one `forward` computes on), K/V stored as kv_dtype
  // (the engine's --kv-dtype, so a context kept whole attends exactly as the prompt sent whole).
  ContextRunner(const ModelConfig& config, Backend& backend, ContextForward forward,
                DType kv_dtype);
  ContextRunner(const DecoderModel& model, const ResidentUnits& units, DType kv_dtype);
  const ModelConfig& config() const { return config_; }
  // Prefills `ids` at positions 0.. into a full cache, collecting H2O scores.
  ContextCache prefill(const std::vector<int32_t>& ids);
  // KVzip scores of every context pair ([layer][head][slot], row-major): teacher-forced
  // reconstruction of the context in chunks of `chunk` tokens — "Repeat the previous context
  // exactly." (later chunks: "Repeat the part of the previous context exactly, starting with " +
  // the previous chunk's last 8 tokens) + the chat postfix + the chunk's own tokens — attending
  // to the protected prefix and that chunk only (KVzip's local normalisation); a pair's score is
  // the maximum softmax weight any query head of its group gives it at any repeat position.
  // repeat_first / repeat_later: the two request texts' tokens.
  std::vector<float> kvzip_scores(const ContextCache& cache, const MultiqueryPrompt& p,
                                  const std::vector<int32_t>& repeat_first,
                                  const std::vector<int32_t>& repeat_later, int64_t chunk = 2048);
  // SnapKV scores: the attention of question 0's rows (the policy's observation window) over
  // the full context, [layer] -> [n_kv_heads][n].
  std::vector<std::vector<float>> question_scores(const ContextCache& cache,
                                                  const std::vector<int32_t>& question,
                                                  const KvSlotPolicy& snapkv);
  // Greedy answers to every question over the shared context, batched: each question its own
  // KV after the shared prefix, positions from the context length. Stops at `stop` ids or after
  // max_tokens. Returns the generated ids per question (without the stop token).
  std::vector<std::vector<int32_t>> answer(const SharedContext& ctx,
                                           const std::vector<std::vector<int32_t>>& questions,
                                           int64_t max_tokens, std::span<const int32_t> stop,
                                           std::vector<std::vector<float>>* first_logits = nullptr);
  // Bytes of the questions' own KV tables in the last answer() (the shared context not included).
  int64_t last_own_bytes() const { return last_own_bytes_; }

 private:
  ModelConfig config_;
  Backend& backend_;
  ContextForward forward_;
  DType kv_dtype_;
  int64_t last_own_bytes_ = 0;
};

}  // namespace offgen
