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

// Stacks several [rows_i, cols] tensors (rows concatenated) into one source matrix: raw bytes when
// they share a type, fp32 otherwise. Returns the type; `packed` receives the bytes.
DType stack_source(const WeightSource& src, const std::vector<std::string>& names,
                   const std::vector<int64_t>& rows, int64_t cols, std::vector<uint8_t>& packed) {
  std::vector<TensorRef> refs;
  bool same_type = true;
  int64_t total_rows = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    refs.push_back(src.tensor(names[i]));
    expect_matrix(refs.back(), rows[i], cols, src.describe());
    same_type = same_type && refs.back().dtype == refs.front().dtype;
    total_rows += rows[i];
  }
  const DType dt = same_type ? refs.front().dtype : DType::kF32;
  const int64_t row_bytes = dtype_bytes(dt, cols);
  packed.resize(total_rows * row_bytes);
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
  return dt;
}

Weight load_stacked(Backend& be, const WeightSource& src, const std::vector<std::string>& names,
                    const std::vector<int64_t>& rows, int64_t cols) {
  std::vector<uint8_t> packed;
  const DType dt = stack_source(src, names, rows, cols, packed);
  int64_t total = 0;
  for (auto r : rows) total += r;
  return be.prepare_weight(dt, packed.data(), total, cols);
}

constexpr int64_t kBlobAlign = 4096;
int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace

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
    : src_(src), config_(src.config()), backend_(backend) {
  const ModelConfig& c = config_;
  c.validate();
  const int64_t d = c.d_model;
  TensorRef emb = src.tensor("token_embd.weight");
  expect_matrix(emb, c.vocab_size, d, src.describe());
  tok_embd_ = backend_.prepare_table(emb.dtype, emb.data, c.vocab_size, d);
  out_norm_ = load_vector(src, "output_norm.weight", d);
  const bool tied = !src.has_tensor("output.weight");
  config_.tied_embeddings = tied;
  lm_head_ = load_stacked(backend_, src, {tied ? "token_embd.weight" : "output.weight"},
                          {c.vocab_size}, d);
}

LlamaModel::Layout LlamaModel::layout(int64_t unit) const {
  const ModelConfig& c = config_;
  Layout L;
  if (unit_has_cache(unit)) {
    L.w0_rows = c.q_dim() + 2 * c.kv_dim(), L.w0_cols = c.d_model;
    L.w1_rows = c.d_model, L.w1_cols = c.q_dim();
  } else {
    L.w0_rows = 2 * c.ffn_dim, L.w0_cols = c.d_model;
    L.w1_rows = c.d_model, L.w1_cols = c.ffn_dim;
  }
  L.norm = 0;
  L.w0 = align_up(c.d_model * 4, 64);
  L.w1 = align_up(L.w0 + backend_.weight_bytes(L.w0_rows, L.w0_cols), 64);
  L.bytes = align_up(L.w1 + backend_.weight_bytes(L.w1_rows, L.w1_cols), kBlobAlign);
  return L;
}

int64_t LlamaModel::unit_bytes(int64_t unit) const { return layout(unit).bytes; }

int64_t LlamaModel::resident_bytes() const {
  return tok_embd_.bytes() + lm_head_.bytes() + static_cast<int64_t>(out_norm_.size()) * 4;
}

void LlamaModel::build_unit(int64_t unit, void* dst) const {
  OFFGEN_CHECK(unit >= 0 && unit < num_units(), kInternal, "unit {} out of range", unit);
  const ModelConfig& c = config_;
  const Layout L = layout(unit);
  const int64_t l = unit_layer(unit);
  auto* base = static_cast<uint8_t*>(dst);
  std::memset(base, 0, L.bytes);
  const bool attn = unit_has_cache(unit);
  const auto norm = load_vector(src_, layer_name(l, attn ? "attn_norm.weight" : "ffn_norm.weight"),
                                c.d_model);
  std::memcpy(base + L.norm, norm.data(), c.d_model * 4);
  std::vector<uint8_t> stacked;
  DType dt;
  if (attn) {
    dt = stack_source(src_,
                      {layer_name(l, "attn_q.weight"), layer_name(l, "attn_k.weight"),
                       layer_name(l, "attn_v.weight")},
                      {c.q_dim(), c.kv_dim(), c.kv_dim()}, c.d_model, stacked);
  } else {
    dt = stack_source(src_, {layer_name(l, "ffn_gate.weight"), layer_name(l, "ffn_up.weight")},
                      {c.ffn_dim, c.ffn_dim}, c.d_model, stacked);
  }
  backend_.prepare_weight_into(dt, stacked.data(), L.w0_rows, L.w0_cols, base + L.w0);
  dt = stack_source(src_, {layer_name(l, attn ? "attn_output.weight" : "ffn_down.weight")},
                    {L.w1_rows}, L.w1_cols, stacked);
  backend_.prepare_weight_into(dt, stacked.data(), L.w1_rows, L.w1_cols, base + L.w1);
}

void LlamaModel::embed(std::span<const int32_t> ids, float* hidden) const {
  backend_.embedding(tok_embd_, ids.data(), static_cast<int64_t>(ids.size()), hidden);
}

void LlamaModel::run_unit(int64_t unit, const void* blob, float* hidden, const UnitBatch& b,
                          LlamaScratch& s) const {
  const ModelConfig& c = config_;
  const Layout L = layout(unit);
  const auto* base = static_cast<const uint8_t*>(blob);
  const float* norm = reinterpret_cast<const float*>(base + L.norm);
  // The view dtype is informational for the CPU backend's packed fp32 storage.
  const WeightView w0{L.w0_rows, L.w0_cols, DType::kF32, base + L.w0};
  const WeightView w1{L.w1_rows, L.w1_cols, DType::kF32, base + L.w1};
  const int64_t rows = b.rows;
  s.reserve(c, rows);
  backend_.rms_norm(hidden, norm, rows, c.d_model, c.norm_eps, s.x.data());
  if (!unit_has_cache(unit)) {
    backend_.matmul(s.x.data(), rows, w0, s.gate_up.data());
    backend_.swiglu(s.gate_up.data(), s.gate_up.data() + c.ffn_dim, rows, c.ffn_dim,
                    2 * c.ffn_dim, s.act.data());
    backend_.matmul(s.act.data(), rows, w1, s.proj.data());
    backend_.add(hidden, s.proj.data(), rows * c.d_model);
    return;
  }
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, wqkv = qd + 2 * kvd;
  backend_.matmul(s.x.data(), rows, w0, s.qkv.data());
  // Split Q out (contiguous rows for attention) and rotate Q and K in place.
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(s.q.data() + r * qd, s.qkv.data() + r * wqkv, qd * 4);
  backend_.rope(s.q.data(), rows, c.n_heads, hd, b.positions, c.rope_theta, c.rope_style);
  backend_.rope(s.qkv.data() + qd, rows, c.n_kv_heads, hd, b.positions, c.rope_theta,
                c.rope_style, wqkv);
  // New K/V into each sequence's slot table (evicting where a policy says so), then attention.
  KvStep step(c.n_kv_heads, hd, b.seqs, b.kv, b.policy, s.qkv.data(), wqkv, qd, qd + kvd,
              b.positions, s.overflow);
  AttentionArgs args;
  args.n_heads = c.n_heads;
  args.n_kv_heads = c.n_kv_heads;
  args.head_dim = hd;
  args.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  args.seqs = step.spans();
  args.kv = step.views();
  args.stats = step.stats();
  backend_.attention(s.q.data(), args, s.attn.data());
  step.finish();
  backend_.matmul(s.attn.data(), rows, w1, s.proj.data());
  backend_.add(hidden, s.proj.data(), rows * c.d_model);
}

void LlamaModel::output_step(const float* hidden, std::span<const int64_t> rows, float* logits,
                             LlamaScratch& s) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(rows.size());
  s.reserve(c, n);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(s.proj.data() + i * c.d_model, hidden + rows[i] * c.d_model, c.d_model * 4);
  backend_.rms_norm(s.proj.data(), out_norm_.data(), n, c.d_model, c.norm_eps, s.x.data());
  backend_.matmul(s.x.data(), n, lm_head_, logits);
}

void LlamaModel::forward(std::span<const int32_t> ids, const int32_t* positions,
                         std::span<const SeqSpan> seqs, const KvViewFn& kv, const BlobFn& blob,
                         float* logits, LlamaScratch& s) const {
  const int64_t rows = static_cast<int64_t>(ids.size());
  std::vector<float> hidden(rows * config_.d_model);
  embed(ids, hidden.data());
  for (int64_t u = 0; u < num_units(); ++u) {
    UnitBatch b{rows, seqs, positions,
                unit_has_cache(u) ? kv(unit_layer(u)) : std::span<const KvSeqView>()};
    run_unit(u, blob(u), hidden.data(), b, s);
  }
  std::vector<int64_t> last;
  last.reserve(seqs.size());
  for (const auto& sp : seqs) last.push_back(sp.row_begin + sp.n_new - 1);
  output_step(hidden.data(), last, logits, s);
}

ResidentUnits::ResidentUnits(const LlamaModel& model) {
  blobs_.resize(model.num_units());
  for (int64_t u = 0; u < model.num_units(); ++u) {
    blobs_[u] = Buffer(model.unit_bytes(u), Tier::kDevice);
    model.build_unit(u, blobs_[u].data());
  }
}

int64_t ResidentUnits::bytes() const {
  int64_t b = 0;
  for (const auto& x : blobs_) b += x.bytes();
  return b;
}

}  // namespace offgen
