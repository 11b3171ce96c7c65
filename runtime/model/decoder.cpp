// Llama-family steps over the Backend.
#include "runtime/model/decoder.h"

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
  // Norm gains and biases are small: a NaN or infinity there (a corrupt file) would make every
  // output NaN, so it is refused here, naming the tensor.
  for (int64_t i = 0; i < n; ++i)
    OFFGEN_CHECK(std::isfinite(v[i]), kInput, "{}: tensor '{}' holds a non-finite value ({}) at "
                 "element {}: the model file is corrupt",
                 src.describe(), name, v[i], i);
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

void DecoderScratch::reserve(Backend& be, const ModelConfig& c, int64_t rows) {
  auto grow = [&be, rows](BackendArray<float>& v, int64_t width) {
    if (v.size() < rows * width) v.reserve(be, rows * width);
  };
  grow(x, c.d_model);
  grow(qkv, c.q_dim() + 2 * c.kv_dim());
  grow(q, c.q_dim());
  grow(attn, c.q_dim());
  grow(proj, c.d_model);
  grow(gate_up, 2 * c.ffn_dim);
  grow(act, c.ffn_dim);
  grow(emb, c.embed_width());
}

DecoderModel::DecoderModel(const WeightSource& src, Backend& backend)
    : src_(src), config_(src.config()), backend_(backend) {
  const ModelConfig& c = config_;
  c.validate();
  const int64_t d = c.d_model, e = c.embed_width();
  TensorRef emb = src.tensor("token_embd.weight");
  expect_matrix(emb, c.vocab_size, e, src.describe());
  tok_embd_ = backend_.prepare_table(emb.dtype, emb.data, c.vocab_size, e);
  if (c.learned_pos) {
    TensorRef pos = src.tensor("position_embd.weight");
    expect_matrix(pos, c.pos_offset + c.context_length, d, src.describe());
    pos_embd_ = backend_.prepare_table(pos.dtype, pos.data, c.pos_offset + c.context_length, d);
  }
  if (e != d) {
    proj_in_ = load_stacked(backend_, src, {"proj_in.weight"}, {d}, e);
    proj_out_ = load_stacked(backend_, src, {"proj_out.weight"}, {e}, d);
  }
  if (c.final_norm) {
    const auto g = load_vector(src, "output_norm.weight", d);
    out_norm_ = backend_.upload(g.data(), d * 4);
    if (c.norm == NormKind::kLayer) {
      const auto b = load_vector(src, "output_norm.bias", d);
      out_norm_b_ = backend_.upload(b.data(), d * 4);
    }
  }
  const bool tied = !src.has_tensor("output.weight");
  config_.tied_embeddings = tied;
  lm_head_ = load_stacked(backend_, src, {tied ? "token_embd.weight" : "output.weight"},
                          {c.vocab_size}, e);
}

DecoderModel::Layout DecoderModel::layout(int64_t unit) const {
  const ModelConfig& c = config_;
  Layout L;
  bool bias0 = false, bias1 = false;
  if (unit_has_cache(unit)) {
    L.w0_rows = c.q_dim() + 2 * c.kv_dim(), L.w0_cols = c.d_model;
    L.w1_rows = c.d_model, L.w1_cols = c.q_dim();
    bias0 = c.qkv_bias, bias1 = c.out_bias;
  } else {
    L.w0_rows = (c.gated_ffn() ? 2 : 1) * c.ffn_dim, L.w0_cols = c.d_model;
    L.w1_rows = c.d_model, L.w1_cols = c.ffn_dim;
    bias0 = bias1 = c.ffn_bias;
  }
  // Small fp32 vectors first (norm gain, norm bias, biases), then the two matrices.
  int64_t at = 0;
  auto take = [&at](int64_t floats) {
    const int64_t off = at;
    at = align_up(at + floats * 4, 64);
    return off;
  };
  L.norm = take(c.d_model);
  if (c.norm == NormKind::kLayer) L.norm_b = take(c.d_model);
  if (bias0) L.b0 = take(L.w0_rows);
  if (bias1) L.b1 = take(L.w1_rows);
  L.w0 = at;
  L.w1 = align_up(L.w0 + backend_.weight_bytes(L.w0_rows, L.w0_cols), 64);
  L.bytes = align_up(L.w1 + backend_.weight_bytes(L.w1_rows, L.w1_cols), kBlobAlign);
  return L;
}

int64_t DecoderModel::unit_bytes(int64_t unit) const { return layout(unit).bytes; }

int64_t DecoderModel::resident_bytes() const {
  return tok_embd_.bytes() + pos_embd_.bytes() + proj_in_.bytes() + proj_out_.bytes() +
         lm_head_.bytes() + out_norm_.bytes() + out_norm_b_.bytes();
}

void DecoderModel::build_unit(int64_t unit, void* dst) const {
  OFFGEN_CHECK(unit >= 0 && unit < num_units(), kInternal, "unit {} out of range", unit);
  const ModelConfig& c = config_;
  const Layout L = layout(unit);
  const int64_t l = unit_layer(unit);
  auto* base = static_cast<uint8_t*>(dst);
  std::memset(base, 0, L.bytes);
  const bool attn = unit_has_cache(unit);
  auto put_vector = [&](int64_t off, const char* what, int64_t n) {
    if (off < 0) return;
    const auto v = load_vector(src_, layer_name(l, what), n);
    std::memcpy(base + off, v.data(), n * 4);
  };
  put_vector(L.norm, attn ? "attn_norm.weight" : "ffn_norm.weight", c.d_model);
  put_vector(L.norm_b, attn ? "attn_norm.bias" : "ffn_norm.bias", c.d_model);
  std::vector<uint8_t> stacked;
  DType dt;
  if (attn) {
    dt = stack_source(src_,
                      {layer_name(l, "attn_q.weight"), layer_name(l, "attn_k.weight"),
                       layer_name(l, "attn_v.weight")},
                      {c.q_dim(), c.kv_dim(), c.kv_dim()}, c.d_model, stacked);
    if (L.b0 >= 0) {
      const auto bq = load_vector(src_, layer_name(l, "attn_q.bias"), c.q_dim());
      const auto bk = load_vector(src_, layer_name(l, "attn_k.bias"), c.kv_dim());
      const auto bv = load_vector(src_, layer_name(l, "attn_v.bias"), c.kv_dim());
      auto* b = reinterpret_cast<float*>(base + L.b0);
      std::memcpy(b, bq.data(), bq.size() * 4);
      std::memcpy(b + c.q_dim(), bk.data(), bk.size() * 4);
      std::memcpy(b + c.q_dim() + c.kv_dim(), bv.data(), bv.size() * 4);
    }
    put_vector(L.b1, "attn_output.bias", c.d_model);
  } else if (c.gated_ffn()) {
    dt = stack_source(src_, {layer_name(l, "ffn_gate.weight"), layer_name(l, "ffn_up.weight")},
                      {c.ffn_dim, c.ffn_dim}, c.d_model, stacked);
  } else {
    dt = stack_source(src_, {layer_name(l, "ffn_up.weight")}, {c.ffn_dim}, c.d_model, stacked);
    put_vector(L.b0, "ffn_up.bias", c.ffn_dim);
    put_vector(L.b1, "ffn_down.bias", c.d_model);
  }
  backend_.prepare_weight_into(dt, stacked.data(), L.w0_rows, L.w0_cols, base + L.w0);
  dt = stack_source(src_, {layer_name(l, attn ? "attn_output.weight" : "ffn_down.weight")},
                    {L.w1_rows}, L.w1_cols, stacked);
  backend_.prepare_weight_into(dt, stacked.data(), L.w1_rows, L.w1_cols, base + L.w1);
}

void DecoderModel::embed(std::span<const int32_t> ids, const int32_t* positions, float* hidden,
                       DecoderScratch& s) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(ids.size());
  s.reserve(backend_, c, n);
  if (c.embed_width() == c.d_model) {
    backend_.embedding(tok_embd_, ids.data(), n, hidden);
  } else {
    backend_.embedding(tok_embd_, ids.data(), n, s.emb.data());
    backend_.matmul(s.emb.data(), n, proj_in_, hidden);
  }
  if (!c.learned_pos) return;
  std::vector<int32_t> rows(n);
  for (int64_t i = 0; i < n; ++i) {
    OFFGEN_CHECK(positions[i] >= 0 && positions[i] < c.context_length, kInput,
                 "position {} is outside the model's learned position table ({} positions)",
                 positions[i], c.context_length);
    rows[i] = static_cast<int32_t>(positions[i] + c.pos_offset);
  }
  backend_.embedding(pos_embd_, rows.data(), n, s.proj.data());
  backend_.add(hidden, s.proj.data(), n * c.d_model);
}

// hidden = norm(hidden) in place (post-norm), or x = norm(hidden) (pre-norm), per the config.
static void apply_norm(Backend& be, const ModelConfig& c, const float* x, const float* gamma,
                       const float* beta, int64_t rows, float* y) {
  if (c.norm == NormKind::kLayer)
    be.layer_norm(x, gamma, beta, rows, c.d_model, c.norm_eps, y);
  else
    be.rms_norm(x, gamma, rows, c.d_model, c.norm_eps, y);
}

void DecoderModel::run_unit(int64_t unit, const void* blob, float* hidden, const UnitBatch& b,
                          DecoderScratch& s) const {
  const ModelConfig& c = config_;
  const Layout L = layout(unit);
  const auto* base = static_cast<const uint8_t*>(blob);
  auto vec = [base](int64_t off) {
    return off < 0 ? nullptr : reinterpret_cast<const float*>(base + off);
  };
  const float* norm = vec(L.norm);
  const float* norm_b = vec(L.norm_b);
  // The view dtype is informational for the CPU backend's packed storage.
  const WeightView w0{L.w0_rows, L.w0_cols, DType::kF32, base + L.w0};
  const WeightView w1{L.w1_rows, L.w1_cols, DType::kF32, base + L.w1};
  const int64_t rows = b.rows;
  s.reserve(backend_, c, rows);
  // Pre-norm: the sublayer reads norm(hidden); post-norm: it reads hidden, normalised after.
  const float* in = hidden;
  if (c.pre_norm) {
    apply_norm(backend_, c, hidden, norm, norm_b, rows, s.x.data());
    in = s.x.data();
  }
  auto finish = [&] {
    if (L.b1 >= 0) backend_.add_bias(s.proj.data(), vec(L.b1), rows, c.d_model);
    backend_.add(hidden, s.proj.data(), rows * c.d_model);
    if (!c.pre_norm) apply_norm(backend_, c, hidden, norm, norm_b, rows, hidden);
  };
  if (!unit_has_cache(unit)) {
    if (c.gated_ffn()) {
      backend_.matmul(in, rows, w0, s.gate_up.data());
      backend_.swiglu(s.gate_up.data(), s.gate_up.data() + c.ffn_dim, rows, c.ffn_dim,
                      2 * c.ffn_dim, s.act.data());
    } else {
      backend_.matmul(in, rows, w0, s.act.data());
      if (L.b0 >= 0) backend_.add_bias(s.act.data(), vec(L.b0), rows, c.ffn_dim);
      if (c.ffn == FfnKind::kRelu)
        backend_.relu(s.act.data(), rows * c.ffn_dim);
      else
        backend_.gelu(s.act.data(), rows * c.ffn_dim);
    }
    backend_.matmul(s.act.data(), rows, w1, s.proj.data());
    finish();
    return;
  }
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, wqkv = qd + 2 * kvd;
  backend_.matmul(in, rows, w0, s.qkv.data());
  if (L.b0 >= 0) backend_.add_bias(s.qkv.data(), vec(L.b0), rows, wqkv);
  // Split Q out (contiguous rows for attention) and rotate Q and K in place.
  backend_.copy_rows(s.q.data(), qd * 4, s.qkv.data(), wqkv * 4, rows, qd * 4);
  if (!c.learned_pos) {
    backend_.rope(s.q.data(), rows, c.n_heads, hd, b.positions, c.rope_theta, c.rope_style);
    backend_.rope(s.qkv.data() + qd, rows, c.n_kv_heads, hd, b.positions, c.rope_theta,
                  c.rope_style, wqkv);
  }
  // New K/V into each sequence's slot table (evicting where a policy says so), then attention.
  KvStep step(backend_, c.n_kv_heads, hd, b.seqs, b.kv, b.policy, s.qkv.data(), wqkv, qd,
              qd + kvd, b.positions, s.overflow);
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
  finish();
}

void DecoderModel::output_step(const float* hidden, std::span<const int64_t> rows, float* logits,
                             DecoderScratch& s) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(rows.size());
  s.reserve(backend_, c, n);
  backend_.gather_rows(s.proj.data(), hidden, rows, c.d_model);
  const float* h = s.proj.data();
  if (c.final_norm) {
    apply_norm(backend_, c, s.proj.data(), out_norm_.as<float>(),
               out_norm_b_.empty() ? nullptr : out_norm_b_.as<float>(), n, s.x.data());
    h = s.x.data();
  }
  if (proj_out_.rows > 0) {
    backend_.matmul(h, n, proj_out_, s.emb.data());
    h = s.emb.data();
  }
  backend_.matmul(h, n, lm_head_, logits);
}

void DecoderModel::forward(std::span<const int32_t> ids, const int32_t* positions,
                         std::span<const SeqSpan> seqs, const KvViewFn& kv, const BlobFn& blob,
                         float* logits, DecoderScratch& s) const {
  const int64_t rows = static_cast<int64_t>(ids.size());
  BackendArray<float> hidden;
  hidden.reserve(backend_, rows * config_.d_model);
  embed(ids, positions, hidden.data(), s);
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

ResidentUnits::ResidentUnits(const DecoderModel& model) {
  Backend& be = model.backend();
  blobs_.resize(model.num_units());
  for (int64_t u = 0; u < model.num_units(); ++u) {
    Buffer host(model.unit_bytes(u), Tier::kHost);  // blobs are built on the host
    model.build_unit(u, host.data());
    blobs_[u] = be.device_is_host() ? std::move(host) : be.upload(host.data(), host.bytes());
  }
}

int64_t ResidentUnits::bytes() const {
  int64_t b = 0;
  for (const auto& x : blobs_) b += x.bytes();
  return b;
}

}  // namespace offgen
