// 4-bit group compression of KV-cache slot rows (--compress-cache, FlexGen's KV compression): a
// row of n_kv_heads x head_dim fp32 values stored as DType::kQ4G64 groups along each head.
#pragma once

#include <cstdint>

namespace offgen {

// Groups never straddle heads: each head is ceil(head_dim / 64) groups of 64. When head_dim is
// not a multiple of 64 the head's last group is padded by repeating that group's first value (its
// min/max, hence its scale, are unchanged) and decode drops the padding; head_dim <= 64 is
// one group per head. Round-trip error per element: the q4g64 bound of runtime/core/dtype.h for
// its group. Deterministic: encode of the same row gives the same bytes. Thread-safe (stateless).
class KvRowCodec {
 public:
  KvRowCodec(int64_t n_kv_heads, int64_t head_dim);
  int64_t row_floats() const { return heads_ * head_dim_; }
  int64_t groups_per_head() const { return groups_; }
  int64_t row_bytes() const;  // compressed bytes of one row
  // `rows` contiguous rows of row_floats() floats <-> rows of row_bytes() bytes.
  void encode(const float* src, uint8_t* dst, int64_t rows) const;
  void decode(const uint8_t* src, float* dst, int64_t rows) const;
  // Encodes head `head` of one row into its groups of the compressed row; the other heads' bytes
  // are not touched (a per-head eviction write leaves the other heads' slots bitwise as stored).
  void encode_head(const float* row, uint8_t* dst_row, int64_t head) const;

 private:
  int64_t heads_, head_dim_, groups_;
};

}  // namespace offgen
