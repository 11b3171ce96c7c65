// The CPU kernel table: f32, bf16 and q4g64 (gemm.h) and every GGML block format (qgemm.h).
#include "runtime/backend/cpu/cpu_kernels.h"

#include "runtime/backend/cpu/gemm.h"
#include "runtime/backend/cpu/qgemm.h"
#include "runtime/core/formats.h"

namespace offgen::cpu {
namespace {

bool always() { return true; }

int64_t f32_bytes(DType, int64_t n, int64_t k) { return packed_f32_bytes(n, k); }
void f32_pack(DType, const void* w, int64_t n, int64_t k, void* dst) {
  pack_f32(static_cast<const float*>(w), n, k, static_cast<float*>(dst));
}
void f32_gemm(DType, const float* x, int64_t m, int64_t ldx, const void* p, int64_t n, int64_t k,
              float* y, int64_t ldy, ThreadContext& ctx) {
  gemm_f32(x, m, ldx, static_cast<const float*>(p), n, k, y, ldy, ctx);
}

int64_t f32_chunk(DType, int64_t k) { return packed_f32_bytes(16, k); }

int64_t bf16_bytes(DType, int64_t n, int64_t k) { return packed_bf16_bytes(n, k); }
int64_t bf16_chunk(DType, int64_t k) { return packed_bf16_bytes(16, k); }
void bf16_pack(DType, const void* w, int64_t n, int64_t k, void* dst) {
  pack_bf16(static_cast<const float*>(w), n, k, static_cast<uint16_t*>(dst));
}
void bf16_gemm(DType, const float* x, int64_t m, int64_t ldx, const void* p, int64_t n, int64_t k,
               float* y, int64_t ldy, ThreadContext& ctx) {
  gemm_bf16(x, m, ldx, static_cast<const uint16_t*>(p), n, k, y, ldy, ctx);
}

int64_t q4g64_bytes(DType, int64_t n, int64_t k) { return packed_q4g64_bytes(n, k); }
// A 64-row chunk is k blocks; only the whole weight's size is rounded up to 64 bytes.
int64_t q4g64_chunk(DType, int64_t k) { return k * kQ4G64Bytes; }
void q4g64_pack(DType, const void* w, int64_t n, int64_t k, void* dst) {
  pack_q4g64(static_cast<const float*>(w), n, k, static_cast<uint8_t*>(dst));
}
void q4g64_gemm(DType, const float* x, int64_t m, int64_t ldx, const void* p, int64_t n, int64_t k,
                float* y, int64_t ldy, ThreadContext& ctx) {
  gemm_q4g64(x, m, ldx, static_cast<const uint8_t*>(p), n, k, y, ldy, ctx);
}

int64_t quant_chunk(DType t, int64_t k) { return packed_quant_bytes(t, 16, k); }

void quant_gemm(DType t, const float* x, int64_t m, int64_t ldx, const void* p, int64_t n,
                int64_t k, float* y, int64_t ldy, ThreadContext& ctx) {
  gemm_quant(t, x, m, ldx, p, n, k, y, ldy, ctx);
}

struct Table {
  CpuMatmulKernel rows[kDTypeCount] = {};
  bool present[kDTypeCount] = {};
  Table() {
    add({DType::kF32, DType::kF32, always, f32_bytes, f32_pack, 16, f32_chunk, f32_gemm});
    add({DType::kBF16, DType::kF32, bf16_supported, bf16_bytes, bf16_pack, 16, bf16_chunk,
         bf16_gemm});
    add({DType::kQ4G64, DType::kF32, always, q4g64_bytes, q4g64_pack, 64, q4g64_chunk,
         q4g64_gemm});
    for (const FormatTraits& f : all_formats())
      if (quant_gemm_supported(f.type))
        add({f.type, f.type, always, packed_quant_bytes, pack_quant, 16, quant_chunk, quant_gemm});
  }
  void add(const CpuMatmulKernel& k) {
    rows[static_cast<int>(k.type)] = k;
    present[static_cast<int>(k.type)] = true;
  }
};

}  // namespace

const CpuMatmulKernel* cpu_matmul_kernel(DType t) {
  static const Table table;
  const int i = static_cast<int>(t);
  return table.present[i] ? &table.rows[i] : nullptr;
}

}  // namespace offgen::cpu
