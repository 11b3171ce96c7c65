// KV row compression: per-head q4g64 groups.
#include "runtime/model/kv_codec.h"

#include <cstring>
#include <iterator>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"

namespace offgen {

KvRowCodec::KvRowCodec(int64_t n_kv_heads, int64_t head_dim)
    : heads_(n_kv_heads), head_dim_(head_dim), groups_((head_dim + kQ4G64Block - 1) / kQ4G64Block) {
  OFFGEN_CHECK(n_kv_heads > 0 && head_dim > 0, kInternal, "KV codec: {} heads of {}", n_kv_heads,
               head_dim);
}

int64_t KvRowCodec::row_bytes() const { return heads_ * groups_ * kQ4G64Bytes; }

void KvRowCodec::encode(const float* src, uint8_t* dst, int64_t rows) const {
  if (head_dim_ % kQ4G64Block == 0) {  // heads are whole groups: the row is plain q4g64
    quantize_row(DType::kQ4G64, src, dst, rows * row_floats());
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads_; ++h)
      encode_head(src + r * row_floats(), dst + r * row_bytes(), h);
}

void KvRowCodec::encode_head(const float* row, uint8_t* dst_row, int64_t head) const {
  const float* x = row + head * head_dim_;
  uint8_t* out = dst_row + head * groups_ * kQ4G64Bytes;
  if (head_dim_ % kQ4G64Block == 0) {
    quantize_row(DType::kQ4G64, x, out, head_dim_);
    return;
  }
  const int64_t padded = groups_ * kQ4G64Block;
  float buf[kQ4G64Block * 8];
  std::vector<float> big;
  float* p = buf;
  if (padded > static_cast<int64_t>(std::size(buf))) {
    big.resize(padded);
    p = big.data();
  }
  std::memcpy(p, x, head_dim_ * 4);
  // Pad the last group with its own first value: its min/max, hence its scale, stay unchanged.
  const float fill = x[(groups_ - 1) * kQ4G64Block];
  for (int64_t j = head_dim_; j < padded; ++j) p[j] = fill;
  quantize_row(DType::kQ4G64, p, out, padded);
}

void KvRowCodec::decode(const uint8_t* src, float* dst, int64_t rows) const {
  if (head_dim_ % kQ4G64Block == 0) {
    dequantize_row(DType::kQ4G64, src, dst, rows * row_floats());
    return;
  }
  const int64_t padded = groups_ * kQ4G64Block;
  std::vector<float> head(padded);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t h = 0; h < heads_; ++h) {
      dequantize_row(DType::kQ4G64, src + (r * heads_ + h) * groups_ * kQ4G64Bytes, head.data(),
                     padded);
      std::memcpy(dst + r * row_floats() + h * head_dim_, head.data(), head_dim_ * 4);
    }
}

}  // namespace offgen
