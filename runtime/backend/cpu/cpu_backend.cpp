// CPU backend ops.
#include "runtime/backend/cpu/cpu_backend.h"

#include <algorithm>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/backend/cpu/cpu_kernels.h"
#include "runtime/backend/cpu/gemm.h"
#include "runtime/backend/cpu/qgemm.h"
#include "runtime/backend/cpu/softmax.h"
#include "runtime/core/formats.h"
#include "runtime/core/error.h"
#include "runtime/core/argmax.h"

namespace offgen {

CpuBackend::CpuBackend(int threads, WeightMode weights, bool emulate_device)
    : ctx_(threads), weights_(weights), emulate_device_(emulate_device) {
  if (weights.native) return;
  const cpu::CpuMatmulKernel* k = cpu::cpu_matmul_kernel(weights.storage);
  OFFGEN_CHECK(k != nullptr, kConfig,
               "cpu backend: --weight-dtype {} is not a matmul storage here (native, f32, bf16, "
               "q4g64 or a GGML block format such as q8_0, q4_k)",
               dtype_name(weights.storage));
  OFFGEN_CHECK(weights.storage != DType::kBF16 || cpu::bf16_supported(), kConfig,
               "cpu backend: bf16 weights need a CPU with AVX512-BF16 (use --weight-dtype f32)");
  OFFGEN_CHECK(k->source == DType::kF32 || format_traits(weights.storage).quantize != nullptr,
               kConfig, "cpu backend: weights cannot be converted to {} (a load-only format)",
               dtype_name(weights.storage));
}

std::unique_ptr<Backend> make_cpu_backend(int threads, WeightMode weights) {
  return std::make_unique<CpuBackend>(threads, weights);
}

std::unique_ptr<Backend> make_emulated_device_backend(int threads, WeightMode weights) {
  return std::make_unique<CpuBackend>(threads, weights, true);
}

namespace {

void free_aligned(void* p, void*) { std::free(p); }

// The gated MLPs (SwiGLU, GeGLU) over m rows (gate and up rows `stride` apart, out rows n apart):
// row_op(gate_row, up_row, n, out_row) computes out[i] = act(gate[i]) * up[i] for one row.
template <class RowOp>
void gated(ThreadContext& ctx, const float* gate, const float* up, int64_t m, int64_t n,
           int64_t stride, float* out, RowOp row_op) {
  ctx.parallel_for(m, 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) row_op(gate + r * stride, up + r * stride, n, out + r * n);
  });
}

}  // namespace

DeviceInfo CpuBackend::device_info() const {
  DeviceInfo d;
  d.name = name();
  const long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  d.total_bytes = static_cast<int64_t>(pages) * page;
  d.free_bytes = static_cast<int64_t>(avail) * page;
  return d;
}

Buffer CpuBackend::alloc(int64_t bytes, Tier tier) {
  OFFGEN_CHECK(bytes >= 0, kInternal, "negative allocation {}", bytes);
  if (bytes == 0) return Buffer();
  const size_t rounded = (static_cast<size_t>(bytes) + 4095) / 4096 * 4096;
  void* p = std::aligned_alloc(4096, rounded);
  OFFGEN_CHECK(p != nullptr, kResource, "out of memory allocating {} bytes ({} tier)", bytes,
               tier_name(tier));
  std::memset(p, 0, rounded);
  // Emulated device memory is not for the host to touch: clone() refuses it.
  return Buffer::adopt(p, bytes, tier, free_aligned, nullptr,
                       !(emulate_device_ && tier == Tier::kDevice));
}

void CpuBackend::copy(void* dst, const void* src, int64_t bytes) {
  compute_.copy(dst, src, bytes);
}

void CpuBackend::copy_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                           int64_t rows, int64_t row_bytes) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<std::byte*>(dst) + r * dst_stride,
                static_cast<const std::byte*>(src) + r * src_stride, row_bytes);
}

void CpuBackend::gather_rows(float* dst, const float* src, std::span<const int64_t> rows,
                             int64_t width) {
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dst + static_cast<int64_t>(i) * width, src + rows[i] * width, width * 4);
}

void CpuBackend::copy_heads(float* dst, int64_t dst_stride, const float* src, int64_t src_stride,
                            int64_t head_dim, std::span<const HeadCopy> copies) {
  for (const HeadCopy& c : copies)
    std::memcpy(dst + c.dst_row * dst_stride + c.head * head_dim,
                src + c.src_row * src_stride + c.head * head_dim, head_dim * 4);
}

std::unique_ptr<Stream> CpuBackend::make_stream() {
  if (emulate_device_) return std::make_unique<cpu::WorkerStream>();
  return std::make_unique<cpu::SyncStream>();
}

std::unique_ptr<Event> CpuBackend::make_event() { return std::make_unique<cpu::CpuEvent>(); }

void CpuBackend::argmax_rows(const float* logits, int64_t n, int64_t vocab, int32_t* out) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = argmax_checked({logits + i * vocab, static_cast<size_t>(vocab)});
}

DType CpuBackend::matmul_storage(DType src, int64_t cols) const {
  auto usable = [cols](DType t) {
    const cpu::CpuMatmulKernel* k = cpu::cpu_matmul_kernel(t);
    return k != nullptr && k->available() &&
           (format_traits(t).ggml_type == kNoGgmlType || cols % dtype_block_elems(t) == 0);
  };
  if (weights_.native) {
    // GGML blocks as the file holds them; bf16 stays bf16 where the CPU multiplies it; other
    // plain floats (f16, f32) become f32, exactly.
    if (src != DType::kF16 && usable(src)) return src;
    return DType::kF32;
  }
  if (usable(weights_.storage)) return weights_.storage;
  // A block format whose blocks do not divide the rows: q8_0 if it does, else f32.
  return usable(DType::kQ8_0) && format_traits(weights_.storage).ggml_type != kNoGgmlType
             ? DType::kQ8_0
             : DType::kF32;
}

int64_t CpuBackend::weight_bytes(DType storage, int64_t rows, int64_t cols) const {
  const cpu::CpuMatmulKernel* k = cpu::cpu_matmul_kernel(storage);
  OFFGEN_CHECK(k != nullptr, kInternal, "cpu backend: no matmul storage {}", dtype_name(storage));
  return (k->packed_bytes(storage, rows, cols) + 63) / 64 * 64;
}

WeightView CpuBackend::prepare_weight_into(DType src_type, const void* src, int64_t rows,
                                           int64_t cols, void* dst) {
  const DType storage = matmul_storage(src_type, cols);
  const cpu::CpuMatmulKernel* k = cpu::cpu_matmul_kernel(storage);
  OFFGEN_CHECK(k != nullptr, kInternal, "cpu backend: no matmul storage {}", dtype_name(storage));
  const WeightView view{rows, cols, storage, dst};
  if (k->source == src_type) {  // the rows are already in the format the packer reads
    k->pack(storage, src, rows, cols, dst);
    return view;
  }
  // Converted chunk by chunk (independent, so threads split them): source rows -> fp32 -> the
  // packer's row format (a quantiser when the storage is a block format) -> packed.
  const int64_t row_bytes = dtype_bytes(src_type, cols);
  const int64_t src_row = dtype_bytes(k->source, cols);
  const int64_t cr = k->chunk_rows;
  const int64_t chunk = k->chunk_bytes(storage, cols);
  const auto* s = static_cast<const uint8_t*>(src);
  ctx_.parallel_for((rows + cr - 1) / cr, cr >= 64 ? 1 : 4, [&](int64_t c0, int64_t c1) {
    std::vector<float> tmp(cr * cols);
    std::vector<uint8_t> conv(k->source == DType::kF32 ? 0 : cr * src_row);
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t r0 = c * cr, nr = std::min<int64_t>(cr, rows - r0);
      for (int64_t r = 0; r < nr; ++r)
        dequantize_row(src_type, s + (r0 + r) * row_bytes, tmp.data() + r * cols, cols);
      const void* rows_in = tmp.data();
      if (!conv.empty()) {
        for (int64_t r = 0; r < nr; ++r)
          quantize_row(k->source, tmp.data() + r * cols, conv.data() + r * src_row, cols);
        rows_in = conv.data();
      }
      k->pack(storage, rows_in, nr, cols, static_cast<uint8_t*>(dst) + c * chunk);
    }
  });
  return view;
}

Weight CpuBackend::prepare_table(DType src_type, const void* src, int64_t rows, int64_t cols) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.dtype = src_type;
  const int64_t bytes = dtype_bytes(src_type, cols) * rows;
  w.data = Buffer(bytes, Tier::kDevice);
  std::memcpy(w.data.data(), src, bytes);
  return w;
}

void CpuBackend::matmul(const float* x, int64_t m, const WeightView& w, float* y, int64_t ldy) {
  const cpu::CpuMatmulKernel* k = cpu::cpu_matmul_kernel(w.dtype);
  OFFGEN_CHECK(k != nullptr, kInternal, "cpu backend: no matmul kernel for {}", dtype_name(w.dtype));
  k->gemm(w.dtype, x, m, w.cols, w.data, w.rows, w.cols, y, ldy > 0 ? ldy : w.rows, ctx_);
}

void CpuBackend::rms_norm(const float* x, const float* gamma, int64_t m, int64_t d, float eps,
                          float* y) {
  ctx_.parallel_for(m, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
      for (int64_t i = 0; i < d; ++i) yr[i] = xr[i] * inv * gamma[i];
    }
  });
}

void CpuBackend::head_rms_norm(float* x, const float* gamma, int64_t n_tokens, int64_t n_heads,
                               int64_t head_dim, float eps, int64_t token_stride) {
  if (token_stride == 0) token_stride = n_heads * head_dim;
  // Each head's vector as rms_norm normalises a row: the same arithmetic, in place.
  ctx_.parallel_for(n_tokens * n_heads, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* v = x + (r / n_heads) * token_stride + (r % n_heads) * head_dim;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < head_dim; ++i) ss += v[i] * v[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(head_dim) + eps);
      for (int64_t i = 0; i < head_dim; ++i) v[i] = v[i] * inv * gamma[i];
    }
  });
}

void CpuBackend::rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                      const int32_t* positions, std::span<const float> inv_freq, RopeStyle style,
                      int64_t token_stride) {
  if (token_stride == 0) token_stride = n_heads * head_dim;
  const int64_t half = head_dim / 2;
  OFFGEN_CHECK(static_cast<int64_t>(inv_freq.size()) == half, kInternal,
               "rope: {} inverse frequencies for head_dim {}", inv_freq.size(), head_dim);
  ctx_.parallel_for(n_tokens, 8, [&](int64_t b, int64_t e) {
    std::vector<float> cs(half), sn(half);
    for (int64_t t = b; t < e; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float a = static_cast<float>(positions[t]) * inv_freq[i];
        cs[i] = std::cos(a);
        sn[i] = std::sin(a);
      }
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + t * token_stride + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i0 = style == RopeStyle::kInterleaved ? 2 * i : i;
          const int64_t i1 = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
          const float a = v[i0], c = v[i1];
          v[i0] = a * cs[i] - c * sn[i];
          v[i1] = a * sn[i] + c * cs[i];
        }
      }
    }
  });
}

void CpuBackend::swiglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
                        float* out) {
  gated(ctx_, gate, up, m, n, stride, out, cpu::silu_gate);
}

void CpuBackend::geglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
                       float* out) {
  gated(ctx_, gate, up, m, n, stride, out, cpu::gelu_tanh_gate);
}

void CpuBackend::layer_norm(const float* x, const float* gamma, const float* beta, int64_t m,
                            int64_t d, float eps, float* y) {
  ctx_.parallel_for(m, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < d; ++i) sum += xr[i];
      const float mean = sum / static_cast<float>(d);
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < d; ++i) ss += (xr[i] - mean) * (xr[i] - mean);
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
      for (int64_t i = 0; i < d; ++i) yr[i] = (xr[i] - mean) * inv * gamma[i] + beta[i];
    }
  });
}

void CpuBackend::relu(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void CpuBackend::gelu(float* x, int64_t n) {
  ctx_.parallel_for(n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678f));
  });
}

void CpuBackend::add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuBackend::scale(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void CpuBackend::softcap(float* x, float cap, int64_t n) {
  ctx_.parallel_for(n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = std::tanh(x[i] / cap) * cap;
  });
}

void CpuBackend::add_bias(float* y, const float* bias, int64_t m, int64_t n, int64_t stride) {
  if (stride == 0) stride = n;
  for (int64_t r = 0; r < m; ++r) {
    float* yr = y + r * stride;
    for (int64_t j = 0; j < n; ++j) yr[j] += bias[j];
  }
}

void CpuBackend::embedding(const WeightView& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t row_bytes = dtype_bytes(table.dtype, table.cols);
  const auto* base = static_cast<const uint8_t*>(table.data);
  for (int64_t i = 0; i < n; ++i) {
    OFFGEN_CHECK(ids[i] >= 0 && ids[i] < table.rows, kInput, "token id {} outside vocabulary of {}",
                 ids[i], table.rows);
    dequantize_row(table.dtype, base + ids[i] * row_bytes, out + i * table.cols, table.cols);
  }
}

bool CpuBackend::can_gather_weight_rows(DType storage) const {
  return cpu::quant_gemm_supported(storage);  // GGML blocks: their packing is lossless
}

void CpuBackend::gather_weight_rows(const WeightView& w, const int32_t* ids, int64_t n,
                                    float* out) {
  OFFGEN_CHECK(can_gather_weight_rows(w.dtype), kInternal, "cpu backend: cannot gather rows of {}",
               dtype_name(w.dtype));
  std::vector<uint8_t> row(dtype_bytes(w.dtype, w.cols));
  for (int64_t i = 0; i < n; ++i) {
    OFFGEN_CHECK(ids[i] >= 0 && ids[i] < w.rows, kInput, "token id {} outside vocabulary of {}",
                 ids[i], w.rows);
    cpu::unpack_quant_rows(w.dtype, w.data, w.rows, w.cols, ids[i], 1, row.data());
    dequantize_row(w.dtype, row.data(), out + i * w.cols, w.cols);
  }
}

namespace {

constexpr int64_t kKeyBlock = 16;

// Attention inner loops. Each output element is reduced in a fixed order — scores sequentially
// over the head dimension, outputs sequentially over the keys — with fused multiply-adds; the
// AVX-512 paths keep accumulators in registers and give bitwise the same results as the
// portable ones.

// How far ahead the attention asks for the K and V rows it reads next: a KV head's rows of a
// table are a slot's width apart, a sparse pattern the hardware prefetcher follows poorly
// (measured: decode at batch 64 over 512-token contexts about 1.2x faster with these).
constexpr int64_t kPrefetchKeys = 2 * kKeyBlock;
constexpr int64_t kPrefetchRows = 8;

// Asks for n rows of hd floats, `stride` apart, to be brought into the cache (AVX-512 builds).
void prefetch_rows([[maybe_unused]] const float* p, [[maybe_unused]] int64_t stride,
                   [[maybe_unused]] int64_t n, [[maybe_unused]] int64_t hd) {
#if defined(__AVX512F__)
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < hd; i += 16)
      _mm_prefetch(reinterpret_cast<const char*>(p + j * stride + i), _MM_HINT_T0);
#endif
}

// kt[i][l] = k_l[i] for a block of nk <= 16 keys (rows `stride` floats apart; missing keys are
// zero): [hd][16]. Pure data movement.
void transpose_keys(const float* k, int64_t stride, int64_t nk, int64_t hd, float* kt) {
  int64_t i0 = 0;
#if defined(__AVX512F__)
  for (; i0 + 16 <= hd; i0 += 16) {
    __m512 r[16];
    for (int l = 0; l < 16; ++l)
      r[l] = l < nk ? _mm512_loadu_ps(k + l * stride + i0) : _mm512_setzero_ps();
    // 16x16 transpose: pairs, quads, then 128-bit lanes.
    __m512 t[16];
    for (int l = 0; l < 16; l += 2) {
      t[l] = _mm512_unpacklo_ps(r[l], r[l + 1]);
      t[l + 1] = _mm512_unpackhi_ps(r[l], r[l + 1]);
    }
    for (int l = 0; l < 16; l += 4) {
      r[l] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[l]), _mm512_castps_pd(t[l + 2])));
      r[l + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[l]), _mm512_castps_pd(t[l + 2])));
      r[l + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[l + 1]), _mm512_castps_pd(t[l + 3])));
      r[l + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[l + 1]), _mm512_castps_pd(t[l + 3])));
    }
    // r[4q + c] holds, per 128-bit lane g, rows 4q..4q+3 of column 4g + c.
    for (int q = 0; q < 4; q += 2)
      for (int c = 0; c < 4; ++c) {
        t[4 * q + c] = _mm512_shuffle_f32x4(r[4 * q + c], r[4 * q + 4 + c], 0x88);
        t[4 * q + 4 + c] = _mm512_shuffle_f32x4(r[4 * q + c], r[4 * q + 4 + c], 0xdd);
      }
    for (int c = 0; c < 4; ++c) {
      const __m512 a = t[c], b = t[4 + c], cc = t[8 + c], d = t[12 + c];
      // a: lanes (rows 0-3 | rows 8-11) of columns 4*{0,2}+c ... combine into full columns.
      _mm512_storeu_ps(kt + (i0 + c) * kKeyBlock, _mm512_shuffle_f32x4(a, cc, 0x88));
      _mm512_storeu_ps(kt + (i0 + 8 + c) * kKeyBlock, _mm512_shuffle_f32x4(a, cc, 0xdd));
      _mm512_storeu_ps(kt + (i0 + 4 + c) * kKeyBlock, _mm512_shuffle_f32x4(b, d, 0x88));
      _mm512_storeu_ps(kt + (i0 + 12 + c) * kKeyBlock, _mm512_shuffle_f32x4(b, d, 0xdd));
    }
  }
#endif
  for (int64_t l = 0; l < kKeyBlock; ++l)
    for (int64_t i = i0; i < hd; ++i) kt[i * kKeyBlock + l] = l < nk ? k[l * stride + i] : 0.0f;
}

#if defined(__AVX512F__)
// R rows against B consecutive transposed blocks (kt: [B][hd][16]) at once: one kt load serves
// R rows, one q broadcast B blocks; dst row r gets B x 16 scores.
template <int R, int B>
void score_rows_avx512(const float* q, int64_t q_stride, const float* kt, int64_t hd,
                       __m512 vscale, float* dst, int64_t dst_stride) {
  __m512 acc[B][R];
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r) acc[b][r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < hd; ++i) {
    __m512 k[B];
    for (int b = 0; b < B; ++b) k[b] = _mm512_loadu_ps(kt + (b * hd + i) * kKeyBlock);
    for (int r = 0; r < R; ++r) {
      const __m512 qv = _mm512_set1_ps(q[r * q_stride + i]);
      for (int b = 0; b < B; ++b) acc[b][r] = _mm512_fmadd_ps(qv, k[b], acc[b][r]);
    }
  }
  for (int b = 0; b < B; ++b)
    for (int r = 0; r < R; ++r)
      _mm512_storeu_ps(dst + r * dst_stride + b * kKeyBlock, _mm512_mul_ps(acc[b][r], vscale));
}
#endif

// dst[r][0..16 B) = scale * q_r · kt for `rows` query rows (q rows `q_stride` apart, dst rows
// `dst_stride` apart) against B consecutive blocks of 16 keys, transposed (kt: [B][hd][16]): the
// query rows of a prefill chunk, or a decode row's query heads of one KV head. Each score sums
// over i in order, however many rows and blocks share the pass.
template <int B>
void score_rows(const float* q, int64_t q_stride, int64_t rows, const float* kt, int64_t hd,
                float scale, float* dst, int64_t dst_stride) {
#if defined(__AVX512F__)
  const __m512 vscale = _mm512_set1_ps(scale);
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    score_rows_avx512<4, B>(q + r * q_stride, q_stride, kt, hd, vscale, dst + r * dst_stride,
                            dst_stride);
  q += r * q_stride, dst += r * dst_stride;
  switch (rows - r) {
    case 3:
      return score_rows_avx512<3, B>(q, q_stride, kt, hd, vscale, dst, dst_stride);
    case 2:
      return score_rows_avx512<2, B>(q, q_stride, kt, hd, vscale, dst, dst_stride);
    case 1:
      return score_rows_avx512<1, B>(q, q_stride, kt, hd, vscale, dst, dst_stride);
    default:
      return;
  }
#else
  for (int64_t r = 0; r < rows; ++r)
    for (int b = 0; b < B; ++b) {
      const float* qv = q + r * q_stride;
      const float* kb = kt + b * hd * kKeyBlock;
      float acc[kKeyBlock] = {};
      for (int64_t i = 0; i < hd; ++i)
        for (int64_t l = 0; l < kKeyBlock; ++l)
          acc[l] = __builtin_fmaf(qv[i], kb[i * kKeyBlock + l], acc[l]);
      for (int64_t l = 0; l < kKeyBlock; ++l)
        dst[r * dst_stride + b * kKeyBlock + l] = acc[l] * scale;
    }
#endif
}

// o = sum_j p[j] · v_j over n keys (v rows `v_stride` apart; p: probabilities, already
// normalised), or o += that when `accumulate` (continuing the same sequential reduction over a
// second run of keys).
void weighted_sum(const float* p, int64_t n, const float* v, int64_t v_stride, int64_t hd,
                  float* o, bool accumulate = false) {
#if defined(__AVX512F__)
  if (hd % 16 == 0 && hd <= 256) {
    const int64_t nv = hd / 16;
    __m512 acc[16];
    for (int64_t x = 0; x < nv; ++x)
      acc[x] = accumulate ? _mm512_loadu_ps(o + 16 * x) : _mm512_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      const __m512 pj = _mm512_set1_ps(p[j]);
      const float* vj = v + j * v_stride;
      if (j + kPrefetchRows < n) prefetch_rows(vj + kPrefetchRows * v_stride, 0, 1, hd);
      switch (nv) {  // unrolled register accumulators for the common head sizes
        case 4:
          for (int x = 0; x < 4; ++x) acc[x] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 16 * x), acc[x]);
          break;
        case 8:
          for (int x = 0; x < 8; ++x) acc[x] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 16 * x), acc[x]);
          break;
        default:
          for (int64_t x = 0; x < nv; ++x)
            acc[x] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vj + 16 * x), acc[x]);
      }
    }
    for (int64_t x = 0; x < nv; ++x) _mm512_storeu_ps(o + 16 * x, acc[x]);
    return;
  }
#endif
  if (!accumulate) std::fill(o, o + hd, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float pj = p[j];
    const float* vj = v + j * v_stride;
    for (int64_t i = 0; i < hd; ++i) o[i] = __builtin_fmaf(pj, vj[i], o[i]);
  }
}

// weighted_sum for R query rows at once (p rows p_stride apart, o rows o_stride apart), sharing
// each V row's loads: row r's arithmetic is weighted_sum's, term by term in increasing j, so it
// equals weighted_sum over the same n keys; a row's zero p[j] (keys outside its visible range)
// leave its sums unchanged (+0 stays +0, x + 0 = x).
template <int R, int NV>
void weighted_sum_rows(const float* p, int64_t p_stride, int64_t n, const float* v,
                       int64_t v_stride, float* o, int64_t o_stride, bool accumulate) {
#if defined(__AVX512F__)
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x)
      acc[r][x] = accumulate ? _mm512_loadu_ps(o + r * o_stride + 16 * x) : _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    __m512 vj[NV];
    if (j + kPrefetchRows < n) prefetch_rows(v + (j + kPrefetchRows) * v_stride, 0, 1, 16 * NV);
    for (int x = 0; x < NV; ++x) vj[x] = _mm512_loadu_ps(v + j * v_stride + 16 * x);
    for (int r = 0; r < R; ++r) {
      const __m512 pj = _mm512_set1_ps(p[r * p_stride + j]);
      for (int x = 0; x < NV; ++x) acc[r][x] = _mm512_fmadd_ps(pj, vj[x], acc[r][x]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NV; ++x) _mm512_storeu_ps(o + r * o_stride + 16 * x, acc[r][x]);
#else
  for (int r = 0; r < R; ++r)
    weighted_sum(p + r * p_stride, n, v, v_stride, 16 * NV, o + r * o_stride, accumulate);
#endif
}

// Rows weighted_sum_rows takes at once for a head size (1: weighted_sum's one row at a time).
int64_t rows_at_once(int64_t hd) { return hd == 64 ? 4 : hd == 128 ? 2 : 1; }

// weighted_sum for `rows` rows over the same n keys (p rows p_stride apart, o rows o_stride
// apart), up to rows_at_once(hd) of them sharing each V row's loads: bitwise weighted_sum row by
// row.
void weighted_sums(const float* p, int64_t p_stride, int64_t rows, int64_t n, const float* v,
                   int64_t v_stride, int64_t hd, float* o, int64_t o_stride, bool accumulate) {
  while (rows > 0) {
    const int64_t r = std::min(rows, rows_at_once(hd));
    if (hd == 64 && r == 4)
      weighted_sum_rows<4, 4>(p, p_stride, n, v, v_stride, o, o_stride, accumulate);
    else if (hd == 64 && r == 3)
      weighted_sum_rows<3, 4>(p, p_stride, n, v, v_stride, o, o_stride, accumulate);
    else if (hd == 64 && r == 2)
      weighted_sum_rows<2, 4>(p, p_stride, n, v, v_stride, o, o_stride, accumulate);
    else if (hd == 128 && r == 2)
      weighted_sum_rows<2, 8>(p, p_stride, n, v, v_stride, o, o_stride, accumulate);
    else
      weighted_sum(p, n, v, v_stride, hd, o, accumulate);
    p += r * p_stride, o += r * o_stride, rows -= r;
  }
}

}  // namespace

void CpuBackend::attention(const float* q, const AttentionArgs& a, float* out) {
  const int64_t n_seqs = static_cast<int64_t>(a.seqs.size());
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t hd = a.head_dim;
  const int64_t row_stride = a.n_heads * hd;
  const int64_t slot_stride = a.n_kv_heads * hd;
  const int64_t window = a.window;
  for (int64_t s = 0; s < n_seqs && window > 0; ++s) {
    OFFGEN_CHECK(a.kv[s].prefix == nullptr || (a.kv[s].prefix->pos && a.positions), kInternal,
                 "attention: a window over a shared context needs its keys' and the rows' "
                 "positions");
    OFFGEN_CHECK(a.kv[s].pos == nullptr || a.positions != nullptr, kInternal,
                 "attention: a window over tables with metadata needs the rows' positions");
  }
  // One task per (sequence, KV head): each key block is transposed once for the whole query
  // group. A task's arithmetic does not depend on the batch.
  ctx_.parallel_for(n_seqs * a.n_kv_heads, 1, [&](int64_t b, int64_t e) {
    // Scratch kept per thread across calls (no re-zeroing of a prefill's score rows each time).
    thread_local std::vector<float> scores, kt;
    thread_local std::vector<int64_t> pre_lo;
    kt.resize(2 * hd * kKeyBlock);
    for (int64_t task = b; task < e; ++task) {
      const int64_t s = task / a.n_kv_heads;
      const int64_t kvh = task % a.n_kv_heads;
      const SeqSpan& sp = a.seqs[s];
      const KvSeqView& kv = a.kv[s];
      const float* kbase = kv.k + kvh * hd;
      const float* vbase = kv.v + kvh * hd;
      // A window over a table with metadata masks by the keys' positions; over one without, row t
      // sees slots from first_slot(t) on.
      const int32_t* key_pos = window > 0 && kv.pos ? kv.pos + kvh * kv.capacity : nullptr;
      auto first_slot = [&](int64_t t) {
        return window > 0 && !key_pos ? std::max<int64_t>(0, sp.n_past + t + 1 - window) : 0;
      };
      // A shared context's keys come first, then the sequence's slots. Row t sees the context's
      // keys from pre_lo[t] on: all of them, or under a window those at positions it reaches
      // (ascending positions: a suffix, growing shorter as the rows' positions increase).
      const int64_t n_pre = kv.prefix ? kv.prefix->len[kvh] : 0;
      pre_lo.assign(sp.n_new, 0);
      if (window > 0 && n_pre > 0) {
        const int32_t* pp = kv.prefix->pos[kvh];
        for (int64_t t = 0; t < sp.n_new; ++t) {
          const int64_t oldest = static_cast<int64_t>(a.positions[sp.row_begin + t]) - window;
          int64_t j = t > 0 ? pre_lo[t - 1] : 0;
          while (j < n_pre && pp[j] <= oldest) ++j;
          pre_lo[t] = j;
        }
      }
      const int64_t n_keys = sp.n_past + sp.n_new;
      const int64_t pre_width = (n_pre + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
      const int64_t width = pre_width + (n_keys + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
      const int64_t head_scores = sp.n_new * width;
      scores.resize(group * head_scores);
      // Scores of rows [row0, row0 + n) against the transposed block in kt (and the next one in
      // kt's second half when `pair`), for every query head of the group, at offset `at` of each
      // head's scores: a chunk's rows together per head; a single row (decoding) with the group's
      // heads together.
      auto scores_for_block = [&](int64_t row0, int64_t n, int64_t at, bool pair) {
        const auto score = pair ? score_rows<2> : score_rows<1>;
        const float* q0 = q + row0 * row_stride + kvh * group * hd;
        if (n == 1) {
          score(q0, hd, group, kt.data(), hd, a.scale, scores.data() + at, head_scores);
          return;
        }
        for (int64_t g = 0; g < group; ++g)
          score(q0 + g * hd, row_stride, n, kt.data(), hd, a.scale,
                scores.data() + g * head_scores + at, width);
      };
      for (int64_t j0 = n_pre > 0 ? pre_lo[0] / kKeyBlock * kKeyBlock : 0; j0 < n_pre;
           j0 += kKeyBlock) {
        const int64_t nk = std::min(kKeyBlock, n_pre - j0);
        transpose_keys(kv.prefix->k[kvh] + j0 * hd, hd, nk, hd, kt.data());
        scores_for_block(sp.row_begin, sp.n_new, j0, false);
      }
      // Q·Kᵀ by blocks of 16 keys, two at a time for a chunk's rows; row t (position n_past + t)
      // needs keys [first_slot(t), n_past + t]: rows [t0, t1) need these blocks (a row that
      // needs only the second gets the first's scores too, never read).
      const int64_t k_first = first_slot(0) / kKeyBlock * kKeyBlock;
      prefetch_rows(kbase + k_first * slot_stride, slot_stride,
                    std::min(kPrefetchKeys, n_keys - k_first), hd);
      for (int64_t j0 = k_first; j0 < n_keys;) {
        const bool pair = sp.n_new > 1 && j0 + kKeyBlock < n_keys;
        const int64_t nk = std::min((pair ? 2 : 1) * kKeyBlock, n_keys - j0);
        // The rows this step's successor reads (or the one after, for single blocks).
        const int64_t ahead = j0 + kPrefetchKeys;
        if (ahead < n_keys)
          prefetch_rows(kbase + ahead * slot_stride, slot_stride, std::min(nk, n_keys - ahead), hd);
        const int64_t t0 = std::max<int64_t>(0, j0 - sp.n_past);
        const int64_t t1 = window > 0 && !key_pos
                               ? std::min(sp.n_new, j0 + nk + window - sp.n_past - 1)
                               : sp.n_new;
        if (t1 > t0) {
          transpose_keys(kbase + j0 * slot_stride, slot_stride, std::min(kKeyBlock, nk), hd,
                         kt.data());
          if (pair)
            transpose_keys(kbase + (j0 + kKeyBlock) * slot_stride, slot_stride, nk - kKeyBlock,
                           hd, kt.data() + hd * kKeyBlock);
          scores_for_block(sp.row_begin + t0, t1 - t0, t0 * width + pre_width + j0, pair);
        }
        j0 += pair ? 2 * kKeyBlock : kKeyBlock;
      }
      for (int64_t g = 0; g < group; ++g) {
        for (int64_t t = 0; t < sp.n_new; ++t) {
          float* pre = scores.data() + g * head_scores + t * width;
          float* sc = pre + pre_width;
          const int64_t n_vis = sp.n_past + t + 1;
          const int64_t lo = first_slot(t), plo = pre_lo[t];
          if (a.softcap > 0) {
            for (int64_t j = plo; j < n_pre; ++j) pre[j] = std::tanh(pre[j] / a.softcap) * a.softcap;
            for (int64_t j = lo; j < n_vis; ++j) sc[j] = std::tanh(sc[j] / a.softcap) * a.softcap;
          }
          if (key_pos) {
            const int64_t oldest = static_cast<int64_t>(a.positions[sp.row_begin + t]) - window;
            for (int64_t j = 0; j < n_vis; ++j)
              if (key_pos[j] <= oldest) sc[j] = -INFINITY;
          }
          const float mx =
              std::max(cpu::row_max(pre + plo, n_pre - plo), cpu::row_max(sc + lo, n_vis - lo));
          // The shared context's keys, then the sequence's own, summed as one run of keys.
          float lane[16] = {};
          cpu::exp_shifted_lanes(pre + plo, n_pre - plo, mx, 0, lane);
          cpu::exp_shifted_lanes(sc + lo, n_vis - lo, mx, n_pre - plo, lane);
          const float sum = cpu::sum_lanes(lane);
          // Probabilities in place: each exp times 1 / sum (one rounding, as before the sums).
          const float inv = 1.0f / sum;
          cpu::scale(pre + plo, n_pre - plo, inv);
          cpu::scale(sc + lo, n_vis - lo, inv);
          if (!a.stats.empty() && a.stats[s].col_sum && t >= a.stats[s].first_row) {
            // Policy statistics of the sequence's own slots: this task owns (s, kvh)'s columns.
            const AttentionStats& st = a.stats[s];
            float* cs = st.col_sum + kvh * st.capacity;
            float* cm = st.col_max + kvh * st.capacity;
            for (int64_t j = lo; j < n_vis; ++j) {
              const float p = sc[j];
              cs[j] += p;
              cm[j] = std::max(cm[j], p);
            }
          }
        }
      }
      // Weighted sums of V over the probabilities, one sum per (row, head) over the keys [plo,
      // n_pre) of the context then [lo, hi) of the sequence: a decode row's query heads together
      // (each V row loaded once for the group); a chunk's rows R at once per head over the keys
      // any of them sees (each row's keys outside its own range zeroed first), the rest one by
      // one. Bitwise the same sums every way.
      auto v_sums = [&](float* p0, int64_t p_stride, int64_t rows, int64_t plo, int64_t lo,
                        int64_t hi, float* o, int64_t o_stride) {
        if (n_pre > plo)
          weighted_sums(p0 + plo, p_stride, rows, n_pre - plo, kv.prefix->v[kvh] + plo * hd, hd,
                        hd, o, o_stride, false);
        weighted_sums(p0 + pre_width + lo, p_stride, rows, hi - lo, vbase + lo * slot_stride,
                      slot_stride, hd, o, o_stride, n_pre > plo);
      };
      float* o_group = out + sp.row_begin * row_stride + kvh * group * hd;
      if (sp.n_new == 1) {
        v_sums(scores.data(), head_scores, group, pre_lo[0], first_slot(0), sp.n_past + 1, o_group,
               hd);
        continue;
      }
      const int64_t R = rows_at_once(hd);
      for (int64_t g = 0; g < group; ++g) {
        float* o_head = o_group + g * hd;
        int64_t t = 0;
        for (; R > 1 && t + R <= sp.n_new; t += R) {
          float* row0 = scores.data() + g * head_scores + t * width;
          const int64_t lo = first_slot(t), hi = sp.n_past + t + R;  // [lo, hi): any row's keys
          const int64_t plo = pre_lo[t];  // the context's keys any row sees: [plo, n_pre)
          for (int64_t r = 0; r < R; ++r) {
            float* sc = row0 + r * width + pre_width;
            std::fill(row0 + r * width + plo, row0 + r * width + pre_lo[t + r], 0.0f);
            std::fill(sc + lo, sc + first_slot(t + r), 0.0f);
            std::fill(sc + sp.n_past + t + r + 1, sc + hi, 0.0f);
          }
          v_sums(row0, width, R, plo, lo, hi, o_head + t * row_stride, row_stride);
        }
        for (; t < sp.n_new; ++t)
          v_sums(scores.data() + g * head_scores + t * width, width, 1, pre_lo[t], first_slot(t),
                 sp.n_past + t + 1, o_head + t * row_stride, row_stride);
      }
    }
  });
}

}  // namespace offgen
