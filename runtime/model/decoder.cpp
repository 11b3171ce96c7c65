// Decoder steps over the Backend.
#include "runtime/model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "runtime/core/error.h"
#include "runtime/model/quant_rules.h"
#include "runtime/model/tensor_table.h"

namespace offgen {
namespace {

// An expert order (DecoderModel's constructor) is empty or a permutation of each layer's experts.
void check_expert_order(const ExpertOrder& order, const ModelConfig& c) {
  if (order.empty()) return;
  OFFGEN_CHECK(c.moe() && static_cast<int64_t>(order.size()) == c.n_layers, kConfig,
               "an expert order of {} layers for a model of {} layers{}", order.size(),
               c.n_layers, c.moe() ? "" : " without experts");
  for (size_t l = 0; l < order.size(); ++l) {
    std::vector<uint8_t> seen(static_cast<size_t>(c.n_experts), 0);
    bool ok = static_cast<int64_t>(order[l].size()) == c.n_experts;
    for (int64_t e : order[l]) {
      ok = ok && e >= 0 && e < c.n_experts && seen[static_cast<size_t>(e)] == 0;
      if (ok) seen[static_cast<size_t>(e)] = 1;
    }
    OFFGEN_CHECK(ok, kConfig, "the expert order of layer {} is not a permutation of its {} experts",
                 l, c.n_experts);
  }
}

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
      src.read_data(refs[i], rows[i] * row_bytes, dst);
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

// A norm gain: as stored, plus the config's shift for RMSNorm gains (HF Gemma stores w, meaning
// 1 + w; the sum is formed in fp32, as Hugging Face does).
std::vector<float> load_gain(const WeightSource& src, const std::string& name, int64_t n) {
  std::vector<float> v = load_vector(src, name, n);
  const ModelConfig& c = src.config();
  if (c.norm == NormKind::kRms && c.norm_shift != 0.0f)
    for (float& x : v) x += c.norm_shift;
  return v;
}

// A resident [rows, cols] matrix prepared straight from its tensor (no staging copy).
Weight load_matrix(Backend& be, const TensorRef& t, int64_t rows, int64_t cols, DType storage,
                   const std::string& where) {
  expect_matrix(t, rows, cols, where);
  return be.prepare_weight(t.dtype, t.data, rows, cols, storage);
}

constexpr int64_t kBlobAlign = 4096;
int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace

int64_t DecoderScratch::row_floats(const ModelConfig& c) {
  const int64_t moe = c.moe() ? c.n_experts + 1 + 2 * c.d_model : 0;
  return c.d_model + (c.q_dim() + 2 * c.kv_dim()) + c.q_dim() + c.q_dim() + c.d_model +
         2 * c.ffn_width() + c.ffn_width() + c.embed_width() + moe;
}

int64_t DecoderScratch::bytes() const {
  int64_t b = 0;
  for (const BackendArray<float>* a :
       {&x, &qkv, &q, &attn, &proj, &gate_up, &act, &emb, &route, &moe_x, &moe_y})
    b += (a->capacity() * 4 + 4095) / 4096 * 4096;
  return b;
}

void DecoderScratch::reserve(Backend& be, const ModelConfig& c, int64_t rows) {
  auto grow = [&be, rows](BackendArray<float>& v, int64_t width) {
    if (v.size() < rows * width) v.reserve(be, rows * width);
  };
  grow(x, c.d_model);
  grow(qkv, c.q_dim() + 2 * c.kv_dim());
  grow(q, c.q_dim());
  grow(attn, c.q_dim());
  grow(proj, c.d_model);
  grow(gate_up, 2 * c.ffn_width());
  grow(act, c.ffn_width());
  grow(emb, c.embed_width());
  if (c.moe()) {
    grow(route, c.n_experts + 1);
    grow(moe_x, c.d_model);
    grow(moe_y, c.d_model);
  }
}

DecoderModel::DecoderModel(const WeightSource& src, Backend& backend, int64_t context,
                           const ExpertOrder& expert_order)
    : src_(src), config_(src.config()), backend_(backend), expert_order_(expert_order) {
  const ModelConfig& c = config_;
  c.validate();
  check_expert_order(expert_order_, c);
  const int64_t d = c.d_model, e = c.embed_width();
  TensorRef emb = src.tensor("token_embd.weight");
  expect_matrix(emb, c.vocab_size, e, src.describe());
  if (c.learned_pos) {
    TensorRef pos = src.tensor("position_embd.weight");
    expect_matrix(pos, c.pos_offset + c.context_length, d, src.describe());
    pos_embd_ = backend_.prepare_table(pos.dtype, pos.data, c.pos_offset + c.context_length, d);
  }
  if (e != d) {
    const TensorRef in = src.tensor("proj_in.weight"), out = src.tensor("proj_out.weight");
    proj_in_ = load_matrix(backend_, in, d, e, storage_of(in.name, in.dtype, e), src.describe());
    proj_out_ =
        load_matrix(backend_, out, e, d, storage_of(out.name, out.dtype, d), src.describe());
  }
  if (c.final_norm) {
    const auto g = load_gain(src, "output_norm.weight", d);
    out_norm_ = backend_.upload(g.data(), d * 4);
    if (c.norm == NormKind::kLayer) {
      const auto b = load_vector(src, "output_norm.bias", d);
      out_norm_b_ = backend_.upload(b.data(), d * 4);
    }
  }
  const bool tied = !src.has_tensor("output.weight");
  config_.tied_embeddings = tied;
  // A tied head is the embedding table already read above (the rule table sees it as the output).
  const TensorRef head = tied ? emb : src.tensor("output.weight");
  lm_head_ = load_matrix(backend_, head, c.vocab_size, e, storage_of(head.name, head.dtype, e),
                         src.describe());
  // A tied head kept in the table's own format, or quantised as a file quantised so would hold
  // both, holds the embeddings' values: gather them from it rather than holding the table twice.
  const bool quantising = backend_.weight_mode().quantises();
  embed_from_head_ = tied && (lm_head_.dtype == emb.dtype || quantising) &&
                     backend_.can_gather_weight_rows(lm_head_.dtype);
  if (!embed_from_head_) {
    // Quantising: the table in the rule table's type (no fp32 copy beside the quantised weights),
    // gathered row by row from its matmul storage; else the table as its source holds it.
    const DType t = quantising ? storage_of(emb.name, emb.dtype, e) : emb.dtype;
    embed_gather_ = t != emb.dtype && backend_.can_gather_weight_rows(t);
    tok_embd_ = embed_gather_ ? backend_.prepare_weight(emb.dtype, emb.data, c.vocab_size, e, t)
                              : backend_.prepare_table(emb.dtype, emb.data, c.vocab_size, e);
  }
  for (int64_t u = 0; u < num_units(); ++u) layouts_.push_back(make_layout(u));
  copy_routers();
  if (!c.learned_pos) {
    inv_freq_ = c.rope_inv_freq(false, context);
    if (c.n_sliding_layers() > 0) inv_freq_local_ = c.rope_inv_freq(true);
  }
}

void DecoderModel::copy_routers() {
  const ModelConfig& c = config_;
  if (!c.moe() || !backend_.device_is_host()) return;
  routers_.resize(static_cast<size_t>(num_units()));
  for (int64_t u = 0; u < num_units(); ++u) {
    const Layout& L = layout(u);
    if (L.experts.empty()) continue;
    RouterCopy& r = routers_[static_cast<size_t>(u)];
    r.layout.layer = L.layer;
    r.layout.norm = 0;  // then the router, as the blob stores it
    std::vector<std::string> names;
    std::vector<int64_t> rows;
    for (const Part& p : L.router.parts) {
      names.insert(names.end(), p.names.begin(), p.names.end());
      rows.insert(rows.end(), p.tensor_rows.begin(), p.tensor_rows.end());
    }
    const int64_t end = place_matrix(names, rows, c.d_model, align_up(c.d_model * 4, 64),
                                     r.layout.router);
    r.bytes = backend_.alloc(align_up(end, 4096), Tier::kDevice);
    auto* base = static_cast<uint8_t*>(r.bytes.data());
    const auto gain = load_gain(src_, layer_name(L.layer, "ffn_norm.weight"), c.d_model);
    std::memcpy(base, gain.data(), gain.size() * 4);
    std::vector<uint8_t> stacked;
    build_matrix(r.layout.router, base, stacked);
  }
}

DType DecoderModel::storage_of(const std::string& name, DType src, int64_t cols) const {
  // Routers stay unquantised (as llama-quantize leaves them): a flipped choice of expert costs
  // more than the bytes saved.
  if (router_tensor(name)) return backend_.matmul_storage_as(DType::kF32, cols);
  const WeightMode m = backend_.weight_mode();
  if (!m.quantises()) return backend_.matmul_storage(src, cols);
  return backend_.matmul_storage_as(quant_type(m, config_, quant_rule_name(config_, name), cols),
                                    cols);
}

int64_t DecoderModel::place_matrix(const std::vector<std::string>& names,
                                   const std::vector<int64_t>& rows, int64_t cols, int64_t at,
                                   Matrix& m) const {
  m.cols = cols;
  for (size_t i = 0; i < names.size(); ++i) {
    const DType storage = storage_of(names[i], src_.tensor_dtype(names[i]), cols);
    if (m.parts.empty() || m.parts.back().storage != storage) {
      Part p;
      p.storage = storage;
      m.parts.push_back(std::move(p));
    }
    Part& p = m.parts.back();
    p.names.push_back(names[i]);
    p.tensor_rows.push_back(rows[i]);
    p.rows += rows[i];
    m.rows += rows[i];
  }
  for (Part& p : m.parts) {
    p.offset = at;
    at = align_up(at + backend_.weight_bytes(p.storage, p.rows, cols), 64);
  }
  return at;
}

DecoderModel::Layout DecoderModel::make_layout(int64_t unit) const {
  const ModelConfig& c = config_;
  const int64_t l = unit_layer(unit);
  Layout L;
  L.layer = l;
  std::vector<std::string> n0, n1;
  std::vector<int64_t> r0, r1;
  int64_t cols0 = c.d_model, cols1 = 0;
  bool bias0 = false, bias1 = false;
  if (unit_has_cache(unit)) {
    n0 = {layer_name(l, "attn_q.weight"), layer_name(l, "attn_k.weight"),
          layer_name(l, "attn_v.weight")};
    r0 = {c.q_dim(), c.kv_dim(), c.kv_dim()};
    n1 = {layer_name(l, "attn_output.weight")};
    r1 = {c.d_model};
    cols1 = c.q_dim();
    bias0 = c.qkv_bias, bias1 = c.out_bias;
  } else if (c.moe()) {  // the shared expert in w0/w1 (none: empty)
    if (c.shared_ffn_dim > 0) {
      n0 = {layer_name(l, "ffn_gate_shexp.weight"), layer_name(l, "ffn_up_shexp.weight")};
      r0 = {c.shared_ffn_dim, c.shared_ffn_dim};
      n1 = {layer_name(l, "ffn_down_shexp.weight")};
      r1 = {c.d_model};
      cols1 = c.shared_ffn_dim;
    }
  } else {
    if (c.gated_ffn()) {
      n0 = {layer_name(l, "ffn_gate.weight"), layer_name(l, "ffn_up.weight")};
      r0 = {c.ffn_dim, c.ffn_dim};
    } else {
      n0 = {layer_name(l, "ffn_up.weight")};
      r0 = {c.ffn_dim};
    }
    n1 = {layer_name(l, "ffn_down.weight")};
    r1 = {c.d_model};
    cols1 = c.ffn_dim;
    bias0 = bias1 = c.ffn_bias;
  }
  // Small fp32 vectors first (norm gain, norm bias, post-norm gain, Q/K norm gains, biases), then
  // the two matrices.
  int64_t at = 0;
  auto take = [&at](int64_t floats) {
    const int64_t off = at;
    at = align_up(at + floats * 4, 64);
    return off;
  };
  int64_t rows0 = 0;
  for (int64_t r : r0) rows0 += r;
  L.norm = take(c.d_model);
  if (c.norm == NormKind::kLayer) L.norm_b = take(c.d_model);
  if (c.post_norms) L.post_norm = take(c.d_model);
  if (c.qk_norm && unit_has_cache(unit)) {
    L.q_norm = take(c.head_dim);
    L.k_norm = take(c.head_dim);
  }
  if (bias0) L.b0 = take(rows0);
  if (bias1) L.b1 = take(c.d_model);
  at = place_matrix(n0, r0, cols0, at, L.w0);
  at = place_matrix(n1, r1, cols1, at, L.w1);
  if (c.moe() && !unit_has_cache(unit)) {
    at = place_matrix({layer_name(l, "ffn_gate_inp.weight")}, {c.n_experts}, c.d_model, at,
                      L.router);
    if (c.shared_ffn_dim > 0)
      at = place_matrix({layer_name(l, "ffn_gate_inp_shexp.weight")}, {1}, c.d_model, at,
                        L.shared_gate);
    L.experts.resize(static_cast<size_t>(c.n_experts));
    for (int64_t i = 0; i < c.n_experts; ++i) {
      const int64_t e = expert_order_.empty() ? i : expert_order_[static_cast<size_t>(l)][i];
      Expert& x = L.experts[static_cast<size_t>(e)];
      x.at = at = align_up(at, kBlobAlign);
      at = place_matrix({expert_tensor(l, "ffn_gate", e), expert_tensor(l, "ffn_up", e)},
                        {c.ffn_dim, c.ffn_dim}, c.d_model, at, x.w0);
      at = place_matrix({expert_tensor(l, "ffn_down", e)}, {c.d_model}, c.ffn_dim, at, x.w1);
      x.bytes = align_up(at, kBlobAlign) - x.at;
    }
  }
  L.bytes = align_up(at, kBlobAlign);
  return L;
}

void DecoderModel::build_matrix(const Matrix& m, uint8_t* base,
                                std::vector<uint8_t>& stacked) const {
  for (const Part& p : m.parts) {
    const DType dt = stack_source(src_, p.names, p.tensor_rows, m.cols, stacked);
    backend_.prepare_weight_into(dt, stacked.data(), p.rows, m.cols, p.storage, base + p.offset);
  }
}

void DecoderModel::matmul(const float* x, int64_t rows, const Matrix& m, const uint8_t* base,
                          float* y) const {
  int64_t col = 0;
  for (const Part& p : m.parts) {
    backend_.matmul(x, rows, WeightView{p.rows, m.cols, p.storage, base + p.offset}, y + col,
                    m.rows);
    col += p.rows;
  }
}

int64_t DecoderModel::unit_bytes(int64_t unit) const { return layout(unit).bytes; }

void DecoderModel::count_routing(RoutingCounts* counts) {
  routing_counts_ = counts;
  if (counts) counts->reset(config_.n_layers, config_.moe() ? config_.n_experts : 0);
}

int64_t DecoderModel::unit_expert_bytes(int64_t unit) const {
  int64_t b = 0;
  for (const Expert& x : layout(unit).experts) b += x.bytes;
  return b;
}

int64_t DecoderModel::unit_head_bytes(int64_t unit) const {
  const Layout& L = layout(unit);
  int64_t head = L.bytes;  // the first expert slice in the blob (whatever its index)
  for (const Expert& x : L.experts) head = std::min(head, x.at);
  return head;
}

int64_t DecoderModel::resident_bytes() const {
  int64_t routers = 0;
  for (const RouterCopy& r : routers_) routers += r.bytes.bytes();
  return tok_embd_.bytes() + pos_embd_.bytes() + proj_in_.bytes() + proj_out_.bytes() +
         lm_head_.bytes() + out_norm_.bytes() + out_norm_b_.bytes() + routers;
}

ForwardLayout DecoderModel::forward_layout() const {
  const ModelConfig& c = config_;
  ForwardLayout f;
  f.hidden_row_bytes = c.d_model * 4;
  f.scratch_row_bytes = DecoderScratch::row_floats(c) * 4;
  f.scratch_buffers = DecoderScratch::kBuffers;
  // The CPU kernels' activations of the widest matmul input: 8-bit codes, their tile copy and
  // block scales (bf16 weights: 2 bytes per element) — at most 3 bytes per element.
  f.work_row_bytes = 3 * std::max({c.d_model, c.q_dim(), c.ffn_width(), c.embed_width()});
  f.logits_row_bytes = c.vocab_size * 4;
  f.sample_row_bytes = c.vocab_size * 8;  // Sampler: a (logit, id) pair per token
  // Each compute thread keeps fp32 scores of its largest (sequence, KV head) task: the query
  // group's rows against every key, keys in blocks of 16.
  f.score_bytes = (c.n_heads / c.n_kv_heads) * 4;
  f.key_block = 16;
  f.threads = backend_.threads().threads();
  return f;
}

std::map<DType, int64_t> DecoderModel::bytes_by_format() const {
  std::map<DType, int64_t> out;
  for (const Weight* w : {&tok_embd_, &pos_embd_, &proj_in_, &proj_out_, &lm_head_})
    if (w->bytes() > 0) out[w->dtype] += w->bytes();
  out[DType::kF32] += out_norm_.bytes() + out_norm_b_.bytes();
  for (const Layout& L : layouts_) {
    int64_t matrices = 0;
    std::vector<const Matrix*> all = {&L.w0, &L.w1, &L.router, &L.shared_gate};
    for (const Expert& x : L.experts) all.insert(all.end(), {&x.w0, &x.w1});
    for (const Matrix* m : all)
      for (const Part& p : m->parts) {
        const int64_t b = backend_.weight_bytes(p.storage, p.rows, m->cols);
        out[p.storage] += b;
        matrices += b;
      }
    out[DType::kF32] += L.bytes - matrices;  // vectors and alignment
  }
  return out;
}

void DecoderModel::build_unit(int64_t unit, void* dst, std::vector<uint8_t>* scratch) const {
  OFFGEN_CHECK(unit >= 0 && unit < num_units(), kInternal, "unit {} out of range", unit);
  const ModelConfig& c = config_;
  const Layout& L = layout(unit);
  const int64_t l = unit_layer(unit);
  auto* base = static_cast<uint8_t*>(dst);
  std::memset(base, 0, L.bytes);
  const bool attn = unit_has_cache(unit);
  auto put_vector = [&](int64_t off, const char* what, int64_t n, bool gain = false) {
    if (off < 0) return;
    const auto v =
        gain ? load_gain(src_, layer_name(l, what), n) : load_vector(src_, layer_name(l, what), n);
    std::memcpy(base + off, v.data(), n * 4);
  };
  put_vector(L.norm, attn ? "attn_norm.weight" : "ffn_norm.weight", c.d_model, true);
  put_vector(L.norm_b, attn ? "attn_norm.bias" : "ffn_norm.bias", c.d_model);
  put_vector(L.post_norm, attn ? "post_attention_norm.weight" : "post_ffw_norm.weight", c.d_model,
             true);
  put_vector(L.q_norm, "attn_q_norm.weight", c.head_dim, true);
  put_vector(L.k_norm, "attn_k_norm.weight", c.head_dim, true);
  if (attn) {
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
  } else if (!c.gated_ffn()) {
    put_vector(L.b0, "ffn_up.bias", c.ffn_dim);
    put_vector(L.b1, "ffn_down.bias", c.d_model);
  }
  std::vector<uint8_t> own;
  std::vector<uint8_t>& stacked = scratch ? *scratch : own;  // grown once, not per matrix
  for (const Matrix* m : {&L.w0, &L.w1, &L.router, &L.shared_gate}) build_matrix(*m, base, stacked);
  for (const Expert& x : L.experts) {
    build_matrix(x.w0, base, stacked);
    build_matrix(x.w1, base, stacked);
  }
}

void DecoderModel::embed(std::span<const int32_t> ids, const int32_t* positions, float* hidden,
                       DecoderScratch& s) const {
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(ids.size());
  s.reserve(backend_, c, n);
  float* dst = c.embed_width() == c.d_model ? hidden : s.emb.data();
  if (embed_from_head_)
    backend_.gather_weight_rows(lm_head_, ids.data(), n, dst);
  else if (embed_gather_)
    backend_.gather_weight_rows(tok_embd_, ids.data(), n, dst);
  else
    backend_.embedding(tok_embd_, ids.data(), n, dst);
  if (c.embed_scale != 1.0f) backend_.scale(dst, c.embed_scale, n * c.embed_width());
  if (dst != hidden) backend_.matmul(s.emb.data(), n, proj_in_, hidden);
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
  const Layout& L = layout(unit);
  const auto* base = static_cast<const uint8_t*>(blob);
  auto vec = [base](int64_t off) {
    return off < 0 ? nullptr : reinterpret_cast<const float*>(base + off);
  };
  const float* norm = vec(L.norm);
  const float* norm_b = vec(L.norm_b);
  const int64_t layer = unit_layer(unit);
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
    if (L.post_norm >= 0)
      backend_.rms_norm(s.proj.data(), vec(L.post_norm), rows, c.d_model, c.norm_eps,
                        s.proj.data());
    backend_.add(hidden, s.proj.data(), rows * c.d_model);
    if (!c.pre_norm) apply_norm(backend_, c, hidden, norm, norm_b, rows, hidden);
  };
  if (!unit_has_cache(unit) && c.moe()) {
    moe_mlp(L, base, in, rows, s);
    finish();
    return;
  }
  if (!unit_has_cache(unit)) {
    if (c.gated_ffn()) {
      matmul(in, rows, L.w0, base, s.gate_up.data());
      if (c.ffn == FfnKind::kGeGlu)
        backend_.geglu(s.gate_up.data(), s.gate_up.data() + c.ffn_dim, rows, c.ffn_dim,
                       2 * c.ffn_dim, s.act.data());
      else
        backend_.swiglu(s.gate_up.data(), s.gate_up.data() + c.ffn_dim, rows, c.ffn_dim,
                        2 * c.ffn_dim, s.act.data());
    } else {
      matmul(in, rows, L.w0, base, s.act.data());
      if (L.b0 >= 0) backend_.add_bias(s.act.data(), vec(L.b0), rows, c.ffn_dim);
      if (c.ffn == FfnKind::kRelu)
        backend_.relu(s.act.data(), rows * c.ffn_dim);
      else
        backend_.gelu(s.act.data(), rows * c.ffn_dim);
    }
    matmul(s.act.data(), rows, L.w1, base, s.proj.data());
    finish();
    return;
  }
  const int64_t qd = c.q_dim(), kvd = c.kv_dim(), hd = c.head_dim, wqkv = qd + 2 * kvd;
  matmul(in, rows, L.w0, base, s.qkv.data());
  if (L.b0 >= 0) backend_.add_bias(s.qkv.data(), vec(L.b0), rows, wqkv);
  // Split Q out (contiguous rows for attention), normalise Q and K per head (QK-norm) and
  // rotate them in place.
  backend_.copy_rows(s.q.data(), qd * 4, s.qkv.data(), wqkv * 4, rows, qd * 4);
  if (L.q_norm >= 0) {
    backend_.head_rms_norm(s.q.data(), vec(L.q_norm), rows, c.n_heads, hd, c.norm_eps);
    backend_.head_rms_norm(s.qkv.data() + qd, vec(L.k_norm), rows, c.n_kv_heads, hd, c.norm_eps,
                           wqkv);
  }
  const bool sliding = c.is_sliding(layer);
  if (!c.learned_pos) {
    const std::span<const float> inv_freq = sliding ? inv_freq_local_ : inv_freq_;
    const float mscale = sliding ? 1.0f : c.rope_attn_factor;
    backend_.rope(s.q.data(), rows, c.n_heads, hd, b.positions, inv_freq, c.rope_style, 0, mscale);
    backend_.rope(s.qkv.data() + qd, rows, c.n_kv_heads, hd, b.positions, inv_freq, c.rope_style,
                  wqkv, mscale);
  }
  // New K/V into each sequence's slot table (evicting where a policy says so; on sliding-window
  // layers the keys behind the window first), then attention.
  std::optional<SlidingWindowPolicy> window_policy;
  const KvSlotPolicy* policy = b.policy;
  // Without a KV policy, tables with metadata on such layers are window tables (KvStore).
  if (sliding)
    policy = policy ? &window_policy.emplace(*policy, c.sliding_window)
                    : &window_policy.emplace(c.sliding_window);
  KvStep step(backend_, c.n_kv_heads, hd, b.seqs, b.kv, policy, s.qkv.data(), wqkv, qd, qd + kvd,
              b.positions, s.overflow);
  AttentionArgs args;
  args.n_heads = c.n_heads;
  args.n_kv_heads = c.n_kv_heads;
  args.head_dim = hd;
  args.scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  args.softcap = c.attn_softcap;
  args.window = sliding ? c.sliding_window : 0;
  args.positions = b.positions;
  args.seqs = step.spans();
  args.kv = step.views();
  args.stats = step.stats();
  backend_.attention(s.q.data(), args, s.attn.data());
  step.finish();
  matmul(s.attn.data(), rows, L.w1, base, s.proj.data());
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
  if (c.final_softcap > 0) backend_.softcap(logits, c.final_softcap, n * c.vocab_size);
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
