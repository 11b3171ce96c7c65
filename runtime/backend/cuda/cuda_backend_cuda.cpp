// CudaBackend: construction, the factory, element-wise op dispatch, attention (on the device, or
// on the CPU for host-resident KV tables: cpu_cache_compute) and greedy sampling on the device.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_backend_cuda.h"
#include "runtime/backend/cuda/cuda_quant_cuda.h"
#include "runtime/core/formats.h"
#include "runtime/backend/cuda/cuda_common_cuda.h"
#include "runtime/core/error.h"

namespace offgen {

bool cuda_compiled() { return true; }

bool cuda_available(std::string* why, int device) {
  auto fail = [&](const std::string& reason) {
    if (why) *why = reason;
    cudaGetLastError();  // clear the sticky error of the failed query
    return false;
  };
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return fail(fmt::format("no usable CUDA device: {} ({})", cudaGetErrorString(e),
                            cudaGetErrorName(e)));
  if (n == 0) return fail("no CUDA device is present");
  if (device < 0 || device >= n)
    return fail(fmt::format("CUDA device {} does not exist ({} present)", device, n));
  e = cuda::probe_kernels(device);
  if (e != cudaSuccess)
    return fail(fmt::format("this build's kernels do not run on CUDA device {}: {} (rebuild with "
                            "CMAKE_CUDA_ARCHITECTURES for it)",
                            device, cudaGetErrorString(e)));
  return true;
}

std::unique_ptr<Backend> make_cuda_backend(int device, int threads, WeightMode weights) {
  std::string why;
  OFFGEN_CHECK(cuda_available(&why, device), kResource, "--backend cuda: {}", why);
  return std::make_unique<cuda::CudaBackend>(device, threads, weights);
}

namespace cuda {

CudaBackend::CudaBackend(int device, int threads, WeightMode weights)
    : device_(device), weights_(weights) {
  const DType t = weights.storage;
  OFFGEN_CHECK(weights.native || t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 ||
                   t == DType::kQ4G64 || (dequant_supported(t) && format_traits(t).quantize),
               kConfig,
               "cuda backend: --weight-dtype {} is not supported (native, f32, f16, bf16, q4g64 "
               "or a GGML block format with a quantiser)",
               weights.name());
  OFFGEN_CUDA_CHECK(cudaSetDevice(device_));
  compute_ = std::make_unique<CudaStream>(device_);
  cublas_.reset(cublas_create(stream()));
  cpu_ = make_cpu_backend(threads, DType::kF32);
  max_head_dim_ = attention_init(device_);
  host_ready_ = std::make_unique<CudaEvent>(device_);
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (compute_) cudaStreamSynchronize(compute_->get());
}

void* CudaBackend::scratch(Buffer& b, int64_t bytes, Tier tier) {
  if (b.bytes() < bytes) {
    compute_->synchronize();  // queued work may still use the old buffer
    const int64_t grown = std::max<int64_t>({bytes, 2 * b.bytes(), 4096});
    b = Buffer();
    b = alloc(grown, tier);
  }
  return b.data();
}

const int32_t* CudaBackend::device_positions(const int32_t* host, int64_t n) {
  if (static_cast<int64_t>(positions_host_.size()) == n &&
      std::memcmp(positions_host_.data(), host, static_cast<size_t>(n) * 4) == 0)
    return positions_.as<int32_t>();
  // Stream order keeps kernels queued before this copy reading the previous positions.
  positions_host_.clear();  // no stale key if the upload below fails
  auto* dst = static_cast<int32_t*>(scratch(positions_, n * 4));
  const void* staged = ring_.put(host, static_cast<size_t>(n) * 4, stream());
  OFFGEN_CUDA_CHECK(cudaMemcpyAsync(dst, staged, static_cast<size_t>(n) * 4,
                                    cudaMemcpyDeviceToDevice, stream()));
  positions_host_.assign(host, host + n);
  return dst;
}

const float* CudaBackend::device_inv_freq(std::span<const float> inv_freq) {
  for (const InvFreq& e : inv_freq_)
    if (std::equal(e.host.begin(), e.host.end(), inv_freq.begin(), inv_freq.end()))
      return e.device.as<float>();
  // A new table (once per model and attention kind): uploaded, and kept for the backend's life.
  InvFreq e;
  e.host.assign(inv_freq.begin(), inv_freq.end());
  e.device = upload(inv_freq.data(), static_cast<int64_t>(inv_freq.size()) * 4);
  inv_freq_.push_back(std::move(e));
  return inv_freq_.back().device.as<float>();
}

void CudaBackend::rms_norm(const float* x, const float* gamma, int64_t m, int64_t d, float eps,
                           float* y) {
  cuda::rms_norm(x, gamma, m, d, eps, y, stream());
}

void CudaBackend::head_rms_norm(float* x, const float* gamma, int64_t n_tokens, int64_t n_heads,
                                int64_t head_dim, float eps, int64_t token_stride) {
  if (token_stride == 0) token_stride = n_heads * head_dim;
  cuda::head_rms_norm(x, gamma, n_tokens, n_heads, head_dim, eps, token_stride, stream());
}

void CudaBackend::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                       const int32_t* positions, std::span<const float> inv_freq, RopeStyle style,
                       int64_t token_stride, float mscale) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  OFFGEN_CHECK(half >= 1 && 2 * half <= head_dim, kInternal,
               "rope: {} inverse frequencies for head_dim {}", inv_freq.size(), head_dim);
  if (n_tokens == 0) return;
  if (token_stride == 0) token_stride = n_heads * head_dim;
  const float* inv = device_inv_freq(inv_freq);
  cuda::rope(x, n_tokens, n_heads, head_dim, device_positions(positions, n_tokens), inv, half,
             style, token_stride, mscale, stream());
}

void CudaBackend::swiglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
                         float* out) {
  cuda::swiglu(gate, up, m, n, stride, out, stream());
}

void CudaBackend::geglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
                        float* out) {
  cuda::geglu(gate, up, m, n, stride, out, stream());
}

void CudaBackend::layer_norm(const float* x, const float* gamma, const float* beta, int64_t m,
                             int64_t d, float eps, float* y) {
  cuda::layer_norm(x, gamma, beta, m, d, eps, y, stream());
}

void CudaBackend::relu(float* x, int64_t n) { cuda::relu(x, n, stream()); }
void CudaBackend::gelu(float* x, int64_t n) { cuda::gelu(x, n, stream()); }
void CudaBackend::add(float* y, const float* x, int64_t n) { cuda::add(y, x, n, stream()); }
void CudaBackend::scale(float* x, float s, int64_t n) { cuda::scale(x, s, n, stream()); }
void CudaBackend::softcap(float* x, float cap, int64_t n) { cuda::softcap(x, cap, n, stream()); }

void CudaBackend::add_bias(float* y, const float* bias, int64_t m, int64_t n, int64_t stride) {
  cuda::add_bias(y, bias, m, n, stride == 0 ? n : stride, stream());
}

void CudaBackend::embedding(const WeightView& table, const int32_t* ids, int64_t n, float* out) {
  OFFGEN_CHECK(table.dtype == DType::kF32 || table.dtype == DType::kF16 ||
                   table.dtype == DType::kBF16,
               kInternal, "cuda embedding: table dtype {} (tables are f32, f16 or bf16)",
               dtype_name(table.dtype));
  for (int64_t i = 0; i < n; ++i)
    OFFGEN_CHECK(ids[i] >= 0 && ids[i] < table.rows, kInput, "token id {} outside vocabulary of {}",
                 ids[i], table.rows);
  if (n == 0) return;
  const auto* dev_ids = static_cast<const int32_t*>(ring_.put(ids, static_cast<size_t>(n) * 4, stream()));
  cuda::embedding(table.data, table.dtype, table.cols, dev_ids, n, out, stream());
}

bool CudaBackend::can_gather_weight_rows(DType storage) const {
  // Weights are row-major on the GPU: plain floats, or GGML blocks as the file holds them.
  return storage == DType::kF32 || storage == DType::kF16 || storage == DType::kBF16 ||
         (format_traits(storage).ggml_type != kNoGgmlType && dequant_supported(storage));
}

void CudaBackend::gather_weight_rows(const WeightView& w, const int32_t* ids, int64_t n,
                                     float* out) {
  OFFGEN_CHECK(can_gather_weight_rows(w.dtype), kInternal, "cuda backend: cannot gather rows of {}",
               dtype_name(w.dtype));
  if (w.dtype == DType::kF32 || w.dtype == DType::kF16 || w.dtype == DType::kBF16)
    return embedding(w, ids, n, out);
  for (int64_t i = 0; i < n; ++i)
    OFFGEN_CHECK(ids[i] >= 0 && ids[i] < w.rows, kInput, "token id {} outside vocabulary of {}",
                 ids[i], w.rows);
  if (n == 0) return;
  const auto* dev_ids = static_cast<const int32_t*>(ring_.put(ids, static_cast<size_t>(n) * 4, stream()));
  cuda::gather_dequantize_f32(w.dtype, w.data, w.cols, dev_ids, n, out, stream());
}

void CudaBackend::attention(const float* q, const AttentionArgs& a, float* out) {
  OFFGEN_CHECK(a.head_dim >= 1 && a.head_dim <= max_head_dim_, kConfig,
               "cuda attention: head size {} is outside 1..{} (this GPU's shared memory)",
               a.head_dim, max_head_dim_);
  std::vector<size_t> on_device, on_host;
  for (size_t s = 0; s < a.seqs.size(); ++s) {
    OFFGEN_CHECK(a.window == 0 || a.kv[s].prefix == nullptr, kConfig,
                 "cuda attention: a sliding window over a shared context (a multi-query "
                 "context on a model with sliding-window layers) runs on the CPU backend only");
    OFFGEN_CHECK(a.window == 0 || a.kv[s].pos == nullptr || a.positions != nullptr, kInternal,
                 "attention: a window over tables with metadata needs the rows' positions");
    (a.kv[s].host ? on_host : on_device).push_back(s);
  }
  // Host-resident tables: their queries go to the host first, so the CPU attention overlaps the
  // device's.
  if (!on_host.empty()) stage_host_queries(q, a, on_host);
  if (!on_device.empty()) attention_on_device(q, a, on_device, out);
  if (!on_host.empty()) attention_on_host(a, on_host, out);
}

void CudaBackend::attention_on_device(const float* q, const AttentionArgs& a,
                                      std::span<const size_t> idx, float* out) {
  const int64_t group = a.n_heads / a.n_kv_heads;
  // Tiles of at most kAttnPairs (row, head) pairs: the whole group over a few rows, or (groups
  // larger than a tile) one row and part of the group.
  const int64_t ng_max = std::min<int64_t>(group, kAttnPairs);
  const int64_t rows_per = std::max<int64_t>(1, kAttnPairs / group);
  std::vector<AttnSeq> seqs;
  std::vector<PrefixHead> prefix;
  std::vector<AttnTile> tiles;
  std::vector<StatTile> stat_tiles;
  int64_t rows_end = 0;
  for (size_t si = 0; si < idx.size(); ++si) {
    const size_t s = idx[si];
    const SeqSpan& sp = a.seqs[s];
    const KvSeqView& kv = a.kv[s];
    AttnSeq d;
    d.row_begin = sp.row_begin, d.n_new = sp.n_new, d.n_past = sp.n_past;
    d.k = static_cast<const uint8_t*>(kv.k), d.v = static_cast<const uint8_t*>(kv.v);
    d.dtype = kv.dtype;
    OFFGEN_CHECK(kv_head_bytes_dev(kv.dtype, a.head_dim) > 0, kInternal,
                 "cuda attention: a KV table stored as {}", dtype_name(kv.dtype));
    OFFGEN_CHECK(!kv.prefix || kv.prefix->dtype == kv.dtype, kInternal,
                 "cuda attention: a shared context stored apart from its table's KV dtype");
    if (a.window > 0 && kv.pos) d.pos_capacity = kv.capacity;  // key_pos: uploaded below
    if (kv.prefix) {
      d.prefix_at = static_cast<int64_t>(prefix.size());
      for (int64_t h = 0; h < a.n_kv_heads; ++h)
        prefix.push_back({static_cast<const uint8_t*>(kv.prefix->k[h]),
                          static_cast<const uint8_t*>(kv.prefix->v[h]), kv.prefix->len[h]});
    }
    if (!a.stats.empty() && a.stats[s].col_sum) {
      const AttentionStats& st = a.stats[s];
      d.col_sum = st.col_sum, d.col_max = st.col_max;
      d.capacity = st.capacity, d.first_row = st.first_row;
      for (int64_t j0 = 0; j0 < sp.n_past + sp.n_new; j0 += kStatCols)
        stat_tiles.push_back({static_cast<int32_t>(si), static_cast<int32_t>(j0)});
    }
    seqs.push_back(d);
    for (int64_t g0 = 0; g0 < group; g0 += ng_max)
      for (int64_t t0 = 0; t0 < sp.n_new; t0 += rows_per)
        tiles.push_back({static_cast<int32_t>(si), static_cast<int32_t>(t0),
                         static_cast<int32_t>(std::min(rows_per, sp.n_new - t0)),
                         static_cast<int32_t>(g0), static_cast<int32_t>(std::min(ng_max, group - g0))});
    rows_end = std::max(rows_end, sp.row_begin + sp.n_new);
  }
  if (tiles.empty()) return;
  AttnMask mask;
  mask.softcap = a.softcap;
  mask.window = a.window;
  // A window over tables with metadata compares positions: the rows' (all of the batch's, as the
  // model's rope uploaded them: usually no copy) and the keys' (host metadata, some of it in
  // pageable memory: copied through the ring with the descriptors).
  size_t pos_bytes = 0;
  for (const AttnSeq& d : seqs)
    if (d.pos_capacity > 0)
      pos_bytes += UploadRing::rounded(static_cast<size_t>(a.n_kv_heads * d.pos_capacity) * 4);
  if (pos_bytes > 0) {
    int64_t all_rows = 0;
    for (const SeqSpan& sp : a.seqs) all_rows = std::max(all_rows, sp.row_begin + sp.n_new);
    mask.q_pos = device_positions(a.positions, all_rows);
  }
  float* ml = stat_tiles.empty()
                  ? nullptr
                  : static_cast<float*>(scratch(ml_, rows_end * a.n_heads * 2 * 4));
  // All descriptors uploaded together: none of them may move before both kernels ran.
  auto size_of = [](const auto& v) { return UploadRing::rounded(v.size() * sizeof(v[0])); };
  ring_.reserve(size_of(seqs) + size_of(prefix) + size_of(tiles) + size_of(stat_tiles) + pos_bytes,
                stream());
  for (size_t si = 0; si < idx.size(); ++si)
    if (seqs[si].pos_capacity > 0)
      seqs[si].key_pos = static_cast<const int32_t*>(
          ring_.put(a.kv[idx[si]].pos,
                    static_cast<size_t>(a.n_kv_heads * seqs[si].pos_capacity) * 4, stream()));
  const auto* d_seqs = ring_.put(seqs, stream());
  const auto* d_prefix = prefix.empty() ? nullptr : ring_.put(prefix, stream());
  const auto* d_tiles = ring_.put(tiles, stream());
  const auto* d_stat = stat_tiles.empty() ? nullptr : ring_.put(stat_tiles, stream());
  cuda::attention(q, out, ml, d_tiles, static_cast<int64_t>(tiles.size()), d_seqs, d_prefix,
                  a.n_heads, a.n_kv_heads, a.head_dim, a.scale, mask, stream());
  if (d_stat)
    cuda::attention_stats(q, ml, d_stat, static_cast<int64_t>(stat_tiles.size()), d_seqs, a.n_heads,
                          a.n_kv_heads, a.head_dim, a.scale, mask, stream());
}

void CudaBackend::stage_host_queries(const float* q, const AttentionArgs& a,
                                     std::span<const size_t> idx) {
  // FlexGen's cpu_cache_compute: the KV tables live in host memory, so the rows' queries come to
  // the host, the CPU backend attends over the tables in place, and the outputs go back.
  const int64_t row_floats = a.n_heads * a.head_dim;
  int64_t rows = 0;
  for (size_t s : idx) rows += a.seqs[s].n_new;
  auto* hq = static_cast<float*>(scratch(host_q_, rows * row_floats * 4, Tier::kHost));
  scratch(host_out_, rows * row_floats * 4, Tier::kHost);
  int64_t r = 0;
  for (size_t s : idx) {
    const SeqSpan& sp = a.seqs[s];
    OFFGEN_CUDA_CHECK(cudaMemcpyAsync(hq + r * row_floats, q + sp.row_begin * row_floats,
                                      static_cast<size_t>(sp.n_new * row_floats) * 4,
                                      cudaMemcpyDeviceToHost, stream()));
    r += sp.n_new;
  }
  // Also orders the new K/V rows KvStep copied into the host tables before this op.
  compute_->record(*host_ready_);
}

void CudaBackend::attention_on_host(const AttentionArgs& a, std::span<const size_t> idx,
                                    float* out) {
  const int64_t row_floats = a.n_heads * a.head_dim;
  auto* hq = host_q_.as<float>();
  auto* ho = host_out_.as<float>();
  std::vector<SeqSpan> spans;
  std::vector<KvSeqView> views;
  std::vector<AttentionStats> stats;
  std::vector<int32_t> positions;  // the staged rows' positions (the rows are renumbered)
  int64_t r = 0;
  for (size_t s : idx) {
    const SeqSpan& sp = a.seqs[s];
    spans.push_back({r, sp.n_new, sp.n_past});
    views.push_back(a.kv[s]);
    if (!a.stats.empty()) stats.push_back(a.stats[s]);
    if (a.positions)
      positions.insert(positions.end(), a.positions + sp.row_begin,
                       a.positions + sp.row_begin + sp.n_new);
    r += sp.n_new;
  }
  host_ready_->synchronize();
  AttentionArgs h = a;
  h.seqs = spans;
  h.kv = views;
  h.stats = stats;
  h.positions = a.positions ? positions.data() : nullptr;
  cpu_->attention(hq, h, ho);
  r = 0;
  for (size_t s : idx) {
    const SeqSpan& sp = a.seqs[s];
    OFFGEN_CUDA_CHECK(cudaMemcpyAsync(out + sp.row_begin * row_floats, ho + r * row_floats,
                                      static_cast<size_t>(sp.n_new * row_floats) * 4,
                                      cudaMemcpyHostToDevice, stream()));
    r += sp.n_new;
  }
  // The next call writes host_out_ only after its stage's event, which follows these copies.
}

void CudaBackend::argmax_rows(const float* logits, int64_t n, int64_t vocab, int32_t* out) {
  if (n == 0) return;
  auto* dev = static_cast<int32_t*>(scratch(argmax_dev_, n * 4));
  auto* host = static_cast<int32_t*>(scratch(argmax_host_, n * 4, Tier::kHost));
  cuda::argmax_rows(logits, n, vocab, dev, stream());
  OFFGEN_CUDA_CHECK(cudaMemcpyAsync(host, dev, static_cast<size_t>(n) * 4, cudaMemcpyDeviceToHost,
                                    stream()));
  compute_->synchronize();
  std::memcpy(out, host, static_cast<size_t>(n) * 4);
}

}  // namespace cuda
}  // namespace offgen
