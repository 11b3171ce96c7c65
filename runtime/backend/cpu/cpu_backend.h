// CPU backend: TBB-parallel elementwise/attention kernels and the batch-invariant fp32 GEMM of
// gemm.h (measured fastest here). Device and host memory are the same RAM.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/backend/backend.h"
#include "runtime/backend/cpu/cpu_streams.h"

namespace offgen {

// CpuBackend::alloc maps buffers of this many bytes and more on their own, unmapped when freed
// (their pages go back to the system); smaller ones come from the heap. ASan builds keep every
// buffer on the heap, where ASan checks its bounds.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr size_t kCpuBufferMappingBytes = SIZE_MAX;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr size_t kCpuBufferMappingBytes = SIZE_MAX;
#else
inline constexpr size_t kCpuBufferMappingBytes = size_t{1} << 20;
#endif
#else
inline constexpr size_t kCpuBufferMappingBytes = size_t{1} << 20;
#endif

class CpuBackend final : public Backend {
 public:
  // weights: f32 (exact, default), bf16 (half the bytes, ~2x GEMM; needs AVX512-BF16), q4g64
  // (FlexGen 4-bit groups; dequantised to fp32 inside matmul, see gemm.h), a GGML block format to
  // quantise to (q8_0, q4_k, ...: the integer GEMM of qgemm.h), or native (GGML blocks as the file
  // holds them, bf16 as bf16, other floats as f32). emulate_device: see
  // make_emulated_device_backend (backend.h).
  explicit CpuBackend(int threads, WeightMode weights = DType::kF32, bool emulate_device = false);
  BackendKind kind() const override {
    return emulate_device_ ? BackendKind::kCpuEmulatedDevice : BackendKind::kCpu;
  }
  ThreadContext& threads() override { return ctx_; }

  DeviceInfo device_info() const override;
  Buffer alloc(int64_t bytes, Tier tier) override;
  void copy(void* dst, const void* src, int64_t bytes) override;
  void copy_rows(void* dst, int64_t dst_stride, const void* src, int64_t src_stride, int64_t rows,
                 int64_t row_bytes) override;
  void gather_rows(float* dst, const float* src, std::span<const int64_t> rows,
                   int64_t width) override;
  void copy_kv_heads(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                     int64_t head_bytes, std::span<const HeadCopy> copies) override;
  void kv_encode_rows(const float* src, int64_t src_stride, int64_t n, DType dtype,
                      int64_t n_kv_heads, int64_t head_dim, void* dst) override;
  void kv_encode_heads(const float* src, int64_t src_stride, DType dtype, int64_t n_kv_heads,
                       int64_t head_dim, void* dst, std::span<const HeadCopy> copies) override;
  Stream& compute_stream() override { return compute_; }
  std::unique_ptr<Stream> make_stream() override;
  std::unique_ptr<Event> make_event() override;
  void argmax_rows(const float* logits, int64_t n, int64_t vocab, int32_t* out) override;

  WeightMode weight_mode() const override { return weights_; }
  DType matmul_storage(DType src, int64_t cols) const override;
  DType matmul_storage_as(DType wanted, int64_t cols) const override;
  int64_t weight_bytes(DType storage, int64_t rows, int64_t cols) const override;
  WeightView prepare_weight_into(DType src_type, const void* src, int64_t rows, int64_t cols,
                                 DType storage, void* dst) override;
  Weight prepare_table(DType src_type, const void* src, int64_t rows, int64_t cols) override;
  void matmul(const float* x, int64_t m, const WeightView& w, float* y, int64_t ldy = 0) override;
  void rms_norm(const float* x, const float* gamma, int64_t m, int64_t d, float eps,
                float* y) override;
  void head_rms_norm(float* x, const float* gamma, int64_t n_tokens, int64_t n_heads,
                     int64_t head_dim, float eps, int64_t token_stride = 0) override;
  void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
            std::span<const float> inv_freq, RopeStyle style, int64_t token_stride = 0,
            float mscale = 1.0f) override;
  void swiglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
              float* out) override;
  void geglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride,
             float* out) override;
  void layer_norm(const float* x, const float* gamma, const float* beta, int64_t m, int64_t d,
                  float eps, float* y) override;
  void relu(float* x, int64_t n) override;
  void gelu(float* x, int64_t n) override;
  void add(float* y, const float* x, int64_t n) override;
  void zero(float* x, int64_t n) override;
  void add_rows_scaled(float* y, const float* x, std::span<const int64_t> rows,
                       std::span<const float> scales, int64_t width) override;
  void scale(float* x, float s, int64_t n) override;
  void softcap(float* x, float cap, int64_t n) override;
  void add_bias(float* y, const float* bias, int64_t m, int64_t n, int64_t stride = 0) override;
  void embedding(const WeightView& table, const int32_t* ids, int64_t n, float* out) override;
  bool can_gather_weight_rows(DType storage) const override;
  void gather_weight_rows(const WeightView& w, const int32_t* ids, int64_t n, float* out) override;
  void attention(const float* q, const AttentionArgs& args, float* out) override;

 private:
  ThreadContext ctx_;
  WeightMode weights_;
  bool emulate_device_;
  cpu::SyncStream compute_;
};

}  // namespace offgen
