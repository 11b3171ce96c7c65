// KV storage formats: sizes, names and the scalar reference (de)coding of one head's vector.
#include "runtime/core/kv_format.h"

#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "runtime/core/error.h"

namespace offgen {
namespace {

constexpr std::array<DType, 5> kKvDTypes = {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0,
                                            DType::kQ4G64};

void check_kv_dtype(DType t) {
  OFFGEN_CHECK(is_kv_dtype(t), kInternal, "{} is not a KV dtype", dtype_name(t));
}

// A head's values padded to whole blocks (see kv_dtypes()): into `buf` when padding is needed.
const float* padded_head(DType t, const float* x, int64_t head_dim, std::vector<float>& buf) {
  const int64_t blk = kv_block_elems(t);
  if (head_dim % blk == 0) return x;
  const int64_t n = (head_dim + blk - 1) / blk * blk;
  buf.assign(x, x + head_dim);
  // q8_0: zeros leave the block's largest magnitude, hence its scale, as they are; q4g64: the
  // group's own first value leaves its min and max as they are.
  const float fill = t == DType::kQ4G64 ? x[(n - blk)] : 0.0f;
  buf.resize(static_cast<size_t>(n), fill);
  return buf.data();
}

}  // namespace

std::span<const DType> kv_dtypes() { return kKvDTypes; }

bool is_kv_dtype(DType t) {
  for (DType k : kKvDTypes)
    if (k == t) return true;
  return false;
}

std::string kv_dtype_names() {
  std::string out;
  for (DType t : kKvDTypes) {
    if (!out.empty()) out += '|';
    out += dtype_name(t);
  }
  return out;
}

DType parse_kv_dtype(std::string_view name) {
  for (DType t : kKvDTypes)
    if (dtype_name(t) == name) return t;
  OFFGEN_THROW(kConfig, "--kv-dtype {}: expected f32, bf16, f16, q8_0 or q4g64", name);
}

int64_t kv_block_elems(DType t) {
  check_kv_dtype(t);
  return dtype_block_elems(t);
}

int64_t kv_head_bytes(DType t, int64_t head_dim) {
  const int64_t blk = kv_block_elems(t);
  return (head_dim + blk - 1) / blk * dtype_block_bytes(t);
}

int64_t kv_row_bytes(DType t, int64_t n_kv_heads, int64_t head_dim) {
  return n_kv_heads * kv_head_bytes(t, head_dim);
}

void kv_encode_head(DType t, const float* x, int64_t head_dim, void* dst) {
  const int64_t blk = kv_block_elems(t);
  if (t == DType::kF32) {
    std::memcpy(dst, x, head_dim * 4);
    return;
  }
  thread_local std::vector<float> buf;
  const float* p = padded_head(t, x, head_dim, buf);
  quantize_row(t, p, dst, (head_dim + blk - 1) / blk * blk);
}

void kv_decode_head(DType t, const void* src, int64_t head_dim, float* out) {
  const int64_t blk = kv_block_elems(t);
  if (head_dim % blk == 0) return dequantize_row(t, src, out, head_dim);
  thread_local std::vector<float> buf;
  buf.resize(static_cast<size_t>((head_dim + blk - 1) / blk * blk));
  dequantize_row(t, src, buf.data(), static_cast<int64_t>(buf.size()));
  std::memcpy(out, buf.data(), head_dim * 4);
}

float kv_head_value(DType t, const void* head, int64_t e) {
  const auto* p = static_cast<const uint8_t*>(head);
  uint16_t h;
  switch (t) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p + 4 * e, 4);
      return f;
    }
    case DType::kBF16:
      std::memcpy(&h, p + 2 * e, 2);
      return bf16_to_f32(h);
    case DType::kF16:
      std::memcpy(&h, p + 2 * e, 2);
      return fp16_to_f32(h);
    case DType::kQ8_0: {
      const uint8_t* b = p + e / 32 * 34;
      std::memcpy(&h, b, 2);
      return static_cast<float>(static_cast<int8_t>(b[2 + e % 32])) * fp16_to_f32(h);
    }
    case DType::kQ4G64: {
      const uint8_t* b = p + e / 64 * kQ4G64Bytes;
      uint16_t hm, hs;
      std::memcpy(&hm, b, 2);
      std::memcpy(&hs, b + 2, 2);
      const int64_t j = e % 64;
      const int code = j < 32 ? (b[4 + j] & 0x0f) : (b[4 + j - 32] >> 4);
      return std::fma(fp16_to_f32(hs), static_cast<float>(code), fp16_to_f32(hm));
    }
    default:
      break;
  }
  OFFGEN_THROW(kInternal, "{} is not a KV dtype", dtype_name(t));
}

void kv_encode_rows(DType t, const float* src, int64_t src_stride, int64_t rows,
                    int64_t n_kv_heads, int64_t head_dim, void* dst) {
  const int64_t hb = kv_head_bytes(t, head_dim);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < n_kv_heads; ++h)
      kv_encode_head(t, src + r * src_stride + h * head_dim, head_dim,
                     d + (r * n_kv_heads + h) * hb);
}

}  // namespace offgen
