// KV-cache storage formats (--kv-dtype): the element formats a K/V cache may be stored in, the
// bytes of one head's vector and one slot row in each (the one byte count every KV store,
// Placement, the planner, admission and the reports use), and the scalar reference encoders and
// decoders of one head's vector that every backend's kernels match.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runtime/core/dtype.h"

namespace offgen {

// The KV dtypes, in --kv-dtype's order: f32 (exact), bf16 and f16 (16-bit floats, as every peer
// stores by default), q8_0 (GGML's block: 32 int8 codes and an fp16 scale, symmetric; 34 bytes per
// 32 values) and q4g64 (FlexGen's 4-bit groups of 64 with an fp16 min and scale; 36 bytes per 64
// values). Blocks run along the head dimension and never straddle heads: a head of head_dim
// values is ceil(head_dim / block) blocks, its last block padded (q8_0: zeros, which leave the
// block's scale unchanged; q4g64: the group's first value repeated, which leaves its min and
// scale unchanged) and the padding dropped when decoded.
std::span<const DType> kv_dtypes();
bool is_kv_dtype(DType t);
// "f32|bf16|f16|q8_0|q4g64"
std::string kv_dtype_names();
// One of kv_dtypes() by name; throws Error(kConfig) "--kv-dtype X: expected f32, bf16, f16, q8_0
// or q4g64" for anything else.
DType parse_kv_dtype(std::string_view name);

// Elements per block along the head dimension (1 for the plain floats).
int64_t kv_block_elems(DType t);
// Bytes of one head's vector of head_dim values stored as t.
int64_t kv_head_bytes(DType t, int64_t head_dim);
// Bytes of one slot row (K or V of one token of one layer): n_kv_heads head vectors.
int64_t kv_row_bytes(DType t, int64_t n_kv_heads, int64_t head_dim);

// The quality bound of a stored value (per element, against its fp32 input x within a block
// whose largest magnitude is amax): bf16 |x - y| <= 2^-8 |x|; f16 2^-11 |x| for |x| in fp16's
// normal range; q8_0 <= amax / 254 (1 + 2^-9); q4g64 the bound of runtime/core/dtype.h. f32 exact.
// Encodes head_dim fp32 values into kv_head_bytes(t, head_dim) bytes at dst; decodes them back.
// Deterministic (the same input gives the same bytes on every path); thread-safe.
void kv_encode_head(DType t, const float* x, int64_t head_dim, void* dst);
void kv_decode_head(DType t, const void* src, int64_t head_dim, float* out);
// Element e of one head's stored vector, as fp32 (exactly kv_decode_head's value).
float kv_head_value(DType t, const void* head, int64_t e);
// `rows` rows of n_kv_heads x head_dim values (row r at src + r * src_stride floats) into
// consecutive slot rows at dst (kv_row_bytes apart).
void kv_encode_rows(DType t, const float* src, int64_t src_stride, int64_t rows,
                    int64_t n_kv_heads, int64_t head_dim, void* dst);

}  // namespace offgen
