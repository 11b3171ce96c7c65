// CPU backend ops.
#include "runtime/backend/cpu/cpu_backend.h"

#include <algorithm>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <sys/mman.h>
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
#include "runtime/core/kv_format.h"

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

// Buffers from kCpuBufferMappingBytes (cpu_backend.h) are mapped on their own and unmapped when
// freed, so that their pages go back to the system. From the heap, the buffers of a job's
// requests of different lengths (KV tables, forwards' buffers re-reserved each admission round)
// stayed with the process once freed: glibc raises its mmap threshold to the largest block freed
// (up to 32 MiB) and keeps up to twice that free at the heap's top, so a job mixing 28- and
// 1400-token prompts under --cpu-mem 1G held about 0.9 GB more than it placed.
void unmap(void* p, void* bytes) { ::munmap(p, reinterpret_cast<size_t>(bytes)); }

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
  const bool mapped = rounded >= kCpuBufferMappingBytes;
  void* p = nullptr;
  if (mapped) {
    p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = nullptr;
  } else {
    p = std::aligned_alloc(4096, rounded);
  }
  OFFGEN_CHECK(p != nullptr, kResource, "out of memory allocating {} bytes ({} tier)", bytes,
               tier_name(tier));
  std::memset(p, 0, rounded);  // its pages touched now, not inside a timed forward
  // Emulated device memory is not for the host to touch: clone() refuses it.
  const bool host = !(emulate_device_ && tier == Tier::kDevice);
  if (mapped) return Buffer::adopt(p, bytes, tier, unmap, reinterpret_cast<void*>(rounded), host);
  return Buffer::adopt(p, bytes, tier, free_aligned, nullptr, host);
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

void CpuBackend::copy_kv_heads(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                               int64_t head_bytes, std::span<const HeadCopy> copies) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  for (const HeadCopy& c : copies)
    std::memcpy(d + c.dst_row * dst_stride + c.head * head_bytes,
                s + c.src_row * src_stride + c.head * head_bytes, head_bytes);
}

void CpuBackend::kv_encode_rows(const float* src, int64_t src_stride, int64_t n, DType dtype,
                                int64_t n_kv_heads, int64_t head_dim, void* dst) {
  if (dtype == DType::kF32) {  // a plain copy
    const int64_t row = n_kv_heads * head_dim * 4;
    return copy_rows(dst, row, src, src_stride * 4, n, row);
  }
  // Rows are independent: large prefill chunks encode in parallel (the bytes do not depend on it).
  const int64_t rb = kv_row_bytes(dtype, n_kv_heads, head_dim);
  ctx_.parallel_for(n, 16, [&](int64_t b, int64_t e) {
    offgen::kv_encode_rows(dtype, src + b * src_stride, src_stride, e - b, n_kv_heads, head_dim,
                           static_cast<std::byte*>(dst) + b * rb);
  });
}

void CpuBackend::kv_encode_heads(const float* src, int64_t src_stride, DType dtype,
                                 int64_t n_kv_heads, int64_t head_dim, void* dst,
                                 std::span<const HeadCopy> copies) {
  const int64_t hb = kv_head_bytes(dtype, head_dim), rb = n_kv_heads * hb;
  for (const HeadCopy& c : copies)
    kv_encode_head(dtype, src + c.src_row * src_stride + c.head * head_dim, head_dim,
                   static_cast<std::byte*>(dst) + c.dst_row * rb + c.head * hb);
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

namespace {

// Whether the CPU multiplies by storage t at row length cols.
bool usable_storage(DType t, int64_t cols) {
  const cpu::CpuMatmulKernel* k = cpu::cpu_matmul_kernel(t);
  return k != nullptr && k->available() &&
         (format_traits(t).ggml_type == kNoGgmlType || cols % dtype_block_elems(t) == 0);
}

}  // namespace

DType CpuBackend::matmul_storage_as(DType wanted, int64_t cols) const {
  return usable_storage(wanted, cols) ? wanted : DType::kF32;
}

DType CpuBackend::matmul_storage(DType src, int64_t cols) const {
  auto usable = [cols](DType t) { return usable_storage(t, cols); };
  if (weights_.native) {
    // GGML blocks as the file holds them; bf16 stays bf16 where the CPU multiplies it; other
    // plain floats (f16, f32) become f32, exactly.
    if (src != DType::kF16 && usable(src)) return src;
    return DType::kF32;
  }
  if (usable(weights_.storage)) return weights_.storage;
  // A block format whose blocks do not divide the rows: llama-quantize's fallback type where it
  // divides them (Q4_K -> Q5_0, ...), else f32. (A mode that quantises takes each matrix's type
  // from the rule table instead: matmul_storage_as.)
  const DType fallback = quant_fallback(weights_.storage);
  return usable(fallback) ? fallback : DType::kF32;
}

int64_t CpuBackend::weight_bytes(DType storage, int64_t rows, int64_t cols) const {
  const cpu::CpuMatmulKernel* k = cpu::cpu_matmul_kernel(storage);
  OFFGEN_CHECK(k != nullptr, kInternal, "cpu backend: no matmul storage {}", dtype_name(storage));
  return (k->packed_bytes(storage, rows, cols) + 63) / 64 * 64;
}

WeightView CpuBackend::prepare_weight_into(DType src_type, const void* src, int64_t rows,
                                           int64_t cols, DType storage, void* dst) {
  const cpu::CpuMatmulKernel* k = cpu::cpu_matmul_kernel(storage);
  OFFGEN_CHECK(k != nullptr, kInternal, "cpu backend: no matmul storage {}", dtype_name(storage));
  const WeightView view{rows, cols, storage, dst};
  // Packed chunk by chunk (independent, so threads split them).
  const int64_t row_bytes = dtype_bytes(src_type, cols);
  const int64_t cr = k->chunk_rows;
  const int64_t chunks = (rows + cr - 1) / cr, grain = cr >= 64 ? 1 : 4;
  const int64_t chunk = k->chunk_bytes(storage, cols);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (k->source == src_type) {  // the rows are already in the format the packer reads
    ctx_.parallel_for(chunks, grain, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t r0 = c * cr;
        k->pack(storage, s + r0 * row_bytes, std::min<int64_t>(cr, rows - r0), cols, d + c * chunk);
      }
    });
    return view;
  }
  // Converted: source rows -> fp32 -> the packer's row format (a quantiser when the storage is a
  // block format) -> packed.
  const int64_t src_row = dtype_bytes(k->source, cols);
  ctx_.parallel_for(chunks, grain, [&](int64_t c0, int64_t c1) {
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
      k->pack(storage, rows_in, nr, cols, d + c * chunk);
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
                      int64_t token_stride, float mscale) {
  if (token_stride == 0) token_stride = n_heads * head_dim;
  // The rotated pairs: all of a head's, or the first ones (partial rotary embedding).
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  OFFGEN_CHECK(half >= 1 && 2 * half <= head_dim, kInternal,
               "rope: {} inverse frequencies for head_dim {}", inv_freq.size(), head_dim);
  ctx_.parallel_for(n_tokens, 8, [&](int64_t b, int64_t e) {
    std::vector<float> cs(half), sn(half);
    for (int64_t t = b; t < e; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float a = static_cast<float>(positions[t]) * inv_freq[i];
        cs[i] = std::cos(a) * mscale;
        sn[i] = std::sin(a) * mscale;
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

void CpuBackend::zero(float* x, int64_t n) { std::memset(x, 0, static_cast<size_t>(n) * 4); }

void CpuBackend::add_rows_scaled(float* y, const float* x, std::span<const int64_t> rows,
                                 std::span<const float> scales, int64_t width) {
  for (size_t i = 0; i < rows.size(); ++i) {
    float* dst = y + rows[i] * width;
    const float* src = x + static_cast<int64_t>(i) * width;
    const float s = scales[i];
    for (int64_t j = 0; j < width; ++j) dst[j] += s * src[j];
  }
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

}  // namespace offgen
