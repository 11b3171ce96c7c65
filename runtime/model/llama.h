// Llama-family decoder (RMSNorm, RoPE, GQA, SwiGLU, optional tied embeddings) as schedulable
// steps — embed, per-layer attention and MLP, output — over a Backend, on ragged batches.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/model/config.h"
#include "runtime/model/weight_source.h"

namespace offgen {

struct LlamaLayerWeights {
  std::vector<float> attn_norm;
  std::vector<float> ffn_norm;
  Weight wqkv;       // [q_dim + 2 kv_dim, d_model]: Q rows, then K, then V
  Weight wo;         // [d_model, q_dim]
  Weight w_gate_up;  // [2 ffn, d_model]: gate rows, then up
  Weight w_down;     // [d_model, ffn]
};

struct LlamaWeights {
  Weight tok_embd;  // gather table [vocab, d_model]
  std::vector<float> out_norm;
  Weight lm_head;   // [vocab, d_model]
  std::vector<LlamaLayerWeights> layers;
  int64_t bytes() const;
};

// Scratch activations for one ragged batch; grown on demand. One per concurrently running batch.
struct LlamaScratch {
  std::vector<float> x, qkv, q, attn, proj, gate_up, act;
  void reserve(const ModelConfig& c, int64_t rows);
};

// Per-layer KV views for the sequences of a batch, supplied by the caller (who owns the cache).
using KvViewFn = std::function<std::span<const KvSeqView>(int64_t layer)>;

class LlamaModel {
 public:
  // Builds backend weights from the source (dequantising as the backend prefers).
  LlamaModel(const WeightSource& src, Backend& backend);

  const ModelConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  Backend& backend() { return backend_; }

  // hidden[rows, d_model] = embedding of ids.
  void embed(std::span<const int32_t> ids, float* hidden);
  // hidden += attention(norm(hidden)); writes the new tokens' K/V into kv at slots
  // n_past .. n_past+n_new-1 of each sequence. positions[row] is each token's position.
  void attention_step(int64_t layer, float* hidden, std::span<const SeqSpan> seqs,
                      const int32_t* positions, std::span<const KvSeqView> kv, LlamaScratch& s);
  // hidden += mlp(norm(hidden)).
  void mlp_step(int64_t layer, float* hidden, int64_t rows, LlamaScratch& s);
  // logits[i, vocab] for hidden rows rows[i].
  void output_step(const float* hidden, std::span<const int64_t> rows, float* logits,
                   LlamaScratch& s);

  // All steps in order; logits for the last token of each sequence: [seqs.size(), vocab].
  void forward(std::span<const int32_t> ids, const int32_t* positions,
               std::span<const SeqSpan> seqs, const KvViewFn& kv, float* logits, LlamaScratch& s);

 private:
  ModelConfig config_;
  Backend& backend_;
  LlamaWeights weights_;
};

}  // namespace offgen
