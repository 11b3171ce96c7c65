// Block sizes and dequantisation of GGML-compatible group-quantised rows.
#include "runtime/core/dtype.h"

#include "runtime/core/error.h"

namespace offgen {

int64_t dtype_block_elems(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return 1;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1: return 32;
  }
  return 1;
}

int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kQ8_0: return 2 + 32;      // fp16 scale, 32 x int8
    case DType::kQ4_0: return 2 + 16;      // fp16 scale, 32 x 4-bit
    case DType::kQ4_1: return 2 + 2 + 16;  // fp16 scale, fp16 min, 32 x 4-bit
  }
  return 1;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ4_1: return "q4_1";
  }
  return "?";
}

void dequantize_row(DType t, const void* src, float* out, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  OFFGEN_CHECK(n % dtype_block_elems(t) == 0, kInternal, "dequantize_row: {} elements of {}", n,
               dtype_name(t));
  auto half_at = [](const uint8_t* q) {
    uint16_t h;
    std::memcpy(&h, q, 2);
    return fp16_to_f32(h);
  };
  switch (t) {
    case DType::kF32: std::memcpy(out, p, n * 4); return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = half_at(p + 2 * i);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = bf16_to_f32(b);
      }
      return;
    case DType::kQ8_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 34) {
        const float d = half_at(p);
        const auto* q = reinterpret_cast<const int8_t*>(p + 2);
        for (int j = 0; j < 32; ++j) out[b * 32 + j] = d * q[j];
      }
      return;
    case DType::kQ4_0:
      for (int64_t b = 0; b < n / 32; ++b, p += 18) {
        const float d = half_at(p);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * ((p[2 + j] & 0x0f) - 8);
          out[b * 32 + j + 16] = d * ((p[2 + j] >> 4) - 8);
        }
      }
      return;
    case DType::kQ4_1:
      for (int64_t b = 0; b < n / 32; ++b, p += 20) {
        const float d = half_at(p);
        const float m = half_at(p + 2);
        for (int j = 0; j < 16; ++j) {
          out[b * 32 + j] = d * (p[4 + j] & 0x0f) + m;
          out[b * 32 + j + 16] = d * (p[4 + j] >> 4) + m;
        }
      }
      return;
  }
}

}  // namespace offgen
