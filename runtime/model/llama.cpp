// Llama-family steps over the Backend.
#include "runtime/model/llama.h"

#include <cmath>
#include <cstring>

#include "runtime/core/error.h"

namespace offgen {
namespace {

std::string layer_name(int64_t l, const char* what) { return fmt::format("blk.{}.{}", l, what); }

// Checks that `t` is a matrix [rows, cols] (GGML dims {cols, rows}).
void expect_matrix(const TensorRef& t, int64_t rows, int64_t cols, const std::string& where) {
  OFFGEN_CHECK(t.dims.size() == 2 && t.dims[0] == cols && t.dims[1] == rows, kInput,
               "{}: tensor '{}' has shape [{}], expected [{}, {}]", where, t.name,
               fmt::join(t.dims, ", "), cols, rows);
}

std::vector<float> load_vector(const WeightSource& src, const std::string& name, int64_t n) {
  TensorRef t = src.tensor(name);
  OFFGEN_CHECK(t.n_elems() == n, kInput, "{}: tensor '{}' has {} elements, expected {}",
               src.describe(), name, t.n_elems(), n);
  std::vector<float> v(n);
  dequantize_row(t.dtype, t.data, v.data(), n);
  return v;
}

// Stacks several [rows_i, cols] tensors into one backend weight (rows concatenated).
Weight load_stacked(Backend& be, const WeightSource& src, const std::vector<std::string>& names,
                    const std::vector<int64_t>& rows, int64_t cols) {
  std::vector<TensorRef> refs;
  bool same_type = true;
  int64_t total_rows = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    refs.push_back(src.tensor(names[i]));
    expect_matrix(refs.back(), rows[i], cols, src.describe());
    same_type = same_type && refs.back().dtype == refs.front().dtype;
    total_rows += rows[i];
  }
  if (refs.size() == 1) return be.prepare_weight(refs[0].dtype, refs[0].data, rows[0], cols);
  const DType dt = same_type ? refs.front().dtype : DType::kF32;
  const int64_t row_bytes = dtype_bytes(dt, cols);
  std::vector<uint8_t> packed(total_rows * row_bytes);
  int64_t r0 = 0;
  for (size_t i = 0; i < refs.size(); ++i) {
    uint8_t* dst = packed.data() + r0 * row_bytes;
    if (same_type) {
      std::memcpy(dst, refs[i].data, rows[i] * row_bytes);
    } else {
      const int64_t src_row = dtype_bytes(refs[i].dtype, cols);
      for (int64_t r = 0; r < rows[i]; ++r)
        dequantize_row(refs[i].dtype, static_cast<const uint8_t*>(refs[i].data) + r * src_row,
                       reinterpret_cast<float*>(dst) + r * cols, cols);
    }
    r0 += rows[i];
  }
  return be.prepare_weight(dt, packed.data(), total_rows, cols);
}

}  // namespace

int64_t LlamaWeights::bytes() const {
  int64_t b = tok_embd.bytes() + lm_head.bytes() + static_cast<int64_t>(out_norm.size()) * 4;
  for (const auto& l : layers)
    b += l.wqkv.bytes() + l.wo.bytes() + l.w_gate_up.bytes() + l.w_down.bytes() +
         static_cast<int64_t>(l.attn_norm.size() + l.ffn_norm.size()) * 4;
  return b;
}

void LlamaScratch::reserve(const ModelConfig& c, int64_t rows) {
  auto grow = [rows](std::vector<float>& v, int64_t width) {
    if (static_cast<int64_t>(v.size()) < rows * width) v.resize(rows * width);
  };
  grow(x, c.d_model);
  grow(qkv, c.q_dim() + 2 * c.kv_dim());
  grow(q, c.q_dim());
  grow(attn, c.q_dim());
  grow(proj, c.d_model);
  grow(gate_up, 2 * c.ffn_dim);
  grow(act, c.ffn_dim);
}

LlamaModel::LlamaModel(const WeightSource& src, Backend& backend)
    : config_(src.config()), backend_(backend) {
  const ModelConfig& c = config_;
  c.validate();
  const int64_t d = c.d_model;
  TensorRef emb = src.tensor("token_embd.weight");
  expect_matrix(emb, c.vocab_size, d, src.describe());
  weights_.tok_embd = backend_.prepare_table(emb.dtype, emb.data, c.vocab_size, d);
  weights_.out_norm = load_vector(src, "output_norm.weight", d);
  const bool tied = !src.has_tensor("output.weight");
  config_.tied_embeddings = tied;
  weights_.lm_head =
      load_stacked(backend_, src, {tied ? "token_embd.weight" : "output.weight"}, {c.vocab_size}, d);
  weights_.layers.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto& L = weights_.layers[l];
    L.attn_norm = load_vector(src, layer_name(l, "attn_norm.weight"), d);
    L.ffn_norm = load_vector(src, layer_name(l, "ffn_norm.weight"), d);
    L.wqkv = load_stacked(backend_, src,
                          {layer_name(l, "attn_q.weight"), layer_name(l, "attn_k.weight"),
                           layer_name(l, "attn_v.weight")},
                          {c.q_dim(), c.kv_dim(), c.kv_dim()}, d);
    L.wo = load_stacked(backend_, src, {layer_name(l, "attn_output.weight")}, {d}, c.q_dim());
    L.w_gate_up = load_stacked(backend_, src,
                               {layer_name(l, "ffn_gate.weight"), layer_name(l, "ffn_up.weight")},
                               {c.ffn_dim, c.ffn_dim}, d);
    L.w_down = load_stacked(backend_, src, {layer_name(l, "ffn_down.weight")}, {d}, c.ffn_dim);
  }
}

void LlamaModel::embed(std::span<const int32_t> ids, float* hidden) {
  backend_.embedding(weights_.tok_embd, ids.data(), static_cast<int64_t>(ids.size()), hidden);
}

void LlamaModel::attention_step(int64_t layer, float* hidden, std::span<const SeqSpan> seqs,
                                const int32_t* positions, std::span<const KvSeqView> kv,
                                LlamaScratch& s) {
  const ModelConfig& c = config_;
  const auto& L = weights_.layers[layer];
  int64_t rows = 0;
  for (const auto& sp : seqs) rows = std::max(rows, sp.row_begin + sp.n_new);
  s.reserve(c, rows);
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, wqkv = qd + 2 * kvd;
  backend_.rms_norm(hidden, L.attn_norm.data(), rows, c.d_model, c.norm_eps, s.x.data());
  backend_.matmul(s.x.data(), rows, L.wqkv, s.qkv.data());
  // Split Q out (contiguous rows for attention) and rotate Q and K in place.
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(s.q.data() + r * qd, s.qkv.data() + r * wqkv, qd * 4);
  backend_.rope(s.q.data(), rows, c.n_heads, hd, positions, c.rope_theta, c.rope_style);
  // K rows are strided inside qkv: rotate them per row.
  for (int64_t r = 0; r < rows; ++r)
    backend_.rope(s.qkv.data() + r * wqkv + qd, 1, c.n_kv_heads, hd, positions + r, c.rope_theta,
                  c.rope_style);
  // Scatter new K/V into each sequence's slots.
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqSpan& sp = seqs[i];
    OFFGEN_CHECK(sp.n_past + sp.n_new <= kv[i].capacity, kInternal,
                 "KV capacity {} exceeded ({} + {})", kv[i].capacity, sp.n_past, sp.n_new);
    for (int64_t t = 0; t < sp.n_new; ++t) {
      const float* row = s.qkv.data() + (sp.row_begin + t) * wqkv;
      for (int64_t h = 0; h < c.n_kv_heads; ++h) {
        const int64_t slot = (h * kv[i].capacity + sp.n_past + t) * hd;
        std::memcpy(kv[i].k + slot, row + qd + h * hd, hd * 4);
        std::memcpy(kv[i].v + slot, row + qd + kvd + h * hd, hd * 4);
      }
    }
  }
  AttentionArgs args;
  args.n_heads = c.n_heads;
  args.n_kv_heads = c.n_kv_heads;
  args.head_dim = hd;
  args.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  args.seqs = seqs;
  args.kv = kv;
  backend_.attention(s.q.data(), args, s.attn.data());
  backend_.matmul(s.attn.data(), rows, L.wo, s.proj.data());
  backend_.add(hidden, s.proj.data(), rows * c.d_model);
}

void LlamaModel::mlp_step(int64_t layer, float* hidden, int64_t rows, LlamaScratch& s) {
  const ModelConfig& c = config_;
  const auto& L = weights_.layers[layer];
  s.reserve(c, rows);
  backend_.rms_norm(hidden, L.ffn_norm.data(), rows, c.d_model, c.norm_eps, s.x.data());
  backend_.matmul(s.x.data(), rows, L.w_gate_up, s.gate_up.data());
  backend_.swiglu(s.gate_up.data(), s.gate_up.data() + c.ffn_dim, rows, c.ffn_dim, 2 * c.ffn_dim,
                  s.act.data());
  backend_.matmul(s.act.data(), rows, L.w_down, s.proj.data());
  backend_.add(hidden, s.proj.data(), rows * c.d_model);
}

void LlamaModel::output_step(const float* hidden, std::span<const int64_t> rows, float* logits,
                             LlamaScratch& s) {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(rows.size());
  s.reserve(c, n);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(s.proj.data() + i * c.d_model, hidden + rows[i] * c.d_model, c.d_model * 4);
  backend_.rms_norm(s.proj.data(), weights_.out_norm.data(), n, c.d_model, c.norm_eps, s.x.data());
  backend_.matmul(s.x.data(), n, weights_.lm_head, logits);
}

void LlamaModel::forward(std::span<const int32_t> ids, const int32_t* positions,
                         std::span<const SeqSpan> seqs, const KvViewFn& kv, float* logits,
                         LlamaScratch& s) {
  const int64_t rows = static_cast<int64_t>(ids.size());
  std::vector<float> hidden(rows * config_.d_model);
  embed(ids, hidden.data());
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    attention_step(l, hidden.data(), seqs, positions, kv(l), s);
    mlp_step(l, hidden.data(), rows, s);
  }
  std::vector<int64_t> last;
  last.reserve(seqs.size());
  for (const auto& sp : seqs) last.push_back(sp.row_begin + sp.n_new - 1);
  output_step(hidden.data(), last, logits, s);
}

}  // namespace offgen
