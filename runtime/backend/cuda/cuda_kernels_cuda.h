// Launchers of the CUDA backend's kernels (element-wise ops, norms, RoPE, embedding gathers,
// copies by index, casts and 4-bit dequantisation, greedy argmax, attention). Every launcher is
// asynchronous on `stream`; pointers are device memory (or pinned host memory the device maps)
// unless a parameter says host.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/backend/rope_style.h"
#include "runtime/core/dtype.h"

namespace offgen::cuda {

void rms_norm(const float* x, const float* gamma, int64_t m, int64_t d, float eps, float* y,
              cudaStream_t stream);
void layer_norm(const float* x, const float* gamma, const float* beta, int64_t m, int64_t d,
                float eps, float* y, cudaStream_t stream);
// In place over the n_tokens * n_heads head vectors of x (token t at x + t * token_stride).
void head_rms_norm(float* x, const float* gamma, int64_t n_tokens, int64_t n_heads,
                   int64_t head_dim, float eps, int64_t token_stride, cudaStream_t stream);
// positions: device int32 [n_tokens]; inv_freq: device fp32 [half] (half <= head_dim / 2: the
// first 2 * half elements of a head rotate, scaled by mscale).
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const float* inv_freq, int64_t half, RopeStyle style, int64_t token_stride, float mscale,
          cudaStream_t stream);
void swiglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride, float* out,
            cudaStream_t stream);
void geglu(const float* gate, const float* up, int64_t m, int64_t n, int64_t stride, float* out,
           cudaStream_t stream);
void scale(float* x, float s, int64_t n, cudaStream_t stream);
void softcap(float* x, float cap, int64_t n, cudaStream_t stream);
void relu(float* x, int64_t n, cudaStream_t stream);
void gelu(float* x, int64_t n, cudaStream_t stream);
void add(float* y, const float* x, int64_t n, cudaStream_t stream);
void add_bias(float* y, const float* bias, int64_t m, int64_t n, int64_t stride, cudaStream_t stream);
// out[i] = table[ids[i]] as fp32; table rows of `cols` in dtype kF32, kF16, kBF16 or a GGML block
// format (dequantised on the device, cuda_quant_cuda.h); kQ4G64: nothing is launched.
void embedding(const void* table, DType dtype, int64_t cols, const int32_t* ids, int64_t n,
               float* out, cudaStream_t stream);
// dst row i = src row rows[i], rows of `width` floats.
// Row rows[i] of y += scales[i] * row i of x (rows, scales: device memory).
void add_rows_scaled(float* y, const float* x, const int64_t* rows, const float* scales, int64_t n,
                     int64_t width, cudaStream_t stream);
void gather_rows(float* dst, const float* src, const int64_t* rows, int64_t n, int64_t width,
                 cudaStream_t stream);
// kv_format.h's kv_head_bytes for the KV dtypes the kernels read (0 for others).
__host__ __device__ inline int64_t kv_head_bytes_dev(DType t, int64_t hd) {
  switch (t) {
    case DType::kF32: return hd * 4;
    case DType::kBF16:
    case DType::kF16: return hd * 2;
    case DType::kQ8_0: return (hd + 31) / 32 * 34;
    default: return 0;
  }
}
// KV tables (cuda_kv_cuda.cu). copies: device int64 triples (dst_row, src_row, head), n of them.
// Head vectors of slot rows, bytes as stored (strides and head size in bytes).
void copy_kv_heads(void* dst, int64_t dst_stride, const void* src, int64_t src_stride,
                   int64_t head_bytes, const int64_t* copies, int64_t n, cudaStream_t stream);
// Whether kv_encode writes `dtype` (f32, bf16, f16, q8_0).
bool kv_encode_supported(DType dtype);
// fp32 head vectors into a table stored as `dtype` (kv_encode_head's bytes): per copy, head
// `head` of src row src_row (rows src_stride floats apart) into slot dst_row's head; copies null:
// n = rows x n_kv_heads, every head of rows [0, n / n_kv_heads) into the slots of the same index.
void kv_encode(const float* src, int64_t src_stride, DType dtype, int64_t n_kv_heads,
               int64_t head_dim, void* dst, const int64_t* copies, int64_t n, cudaStream_t stream);
// fp32 -> fp16 / bf16 (dtype kF16 or kBF16), n elements; fp16 saturates at +-65504 (no inf).
void cast_f32(const float* x, int64_t n, DType dtype, void* out, cudaStream_t stream);
// kQ4G64 weight [rows][ceil(cols / 64) blocks] -> fp16 [rows][cols] (saturating at +-65504).
void dequantize_q4g64_f16(const void* w, int64_t rows, int64_t cols, void* out,
                          cudaStream_t stream);
// out[i] = lowest index of the largest value of row i (NaN lowest), n rows of `vocab`.
void argmax_rows(const float* logits, int64_t n, int64_t vocab, int32_t* out, cudaStream_t stream);

// Attention over slot tables (see cuda_attention_cuda.cu for the tiling).
struct AttnSeq {
  int64_t row_begin = 0, n_new = 0, n_past = 0;
  const uint8_t* k = nullptr;  // own slots, rows of n_kv_heads head vectors stored as `dtype`
  const uint8_t* v = nullptr;
  DType dtype = DType::kF32;   // of the slots and the prefix (f32, bf16, f16 or q8_0)
  int64_t prefix_at = -1;    // first of its n_kv_heads PrefixHead entries, -1: none
  float* col_sum = nullptr;  // statistics [n_kv_heads][capacity] (null: none)
  float* col_max = nullptr;
  int64_t capacity = 0, first_row = 0;
  // Sliding window over a table with metadata: the keys' positions [n_kv_heads][pos_capacity]
  // (mapped host memory); null: slots hold consecutive positions (the window is a slot range).
  const int32_t* key_pos = nullptr;
  int64_t pos_capacity = 0;
};
// Score shaping shared by the attention kernels: soft-capping (0: none) and the sliding window
// (0: none); q_pos: device int32 per row (the rows' positions; needed for key_pos tables).
struct AttnMask {
  float softcap = 0.0f;
  int64_t window = 0;
  const int32_t* q_pos = nullptr;
};
struct PrefixHead {
  const uint8_t* k = nullptr;  // [len] head vectors in the sequence's dtype
  const uint8_t* v = nullptr;
  int64_t len = 0;
};
// Rows [t0, t0 + nt) of sequence `seq`, query heads g0 .. g0 + ng of each KV head's group.
struct AttnTile {
  int32_t seq = 0, t0 = 0, nt = 0, g0 = 0, ng = 0;
};
// Own-slot columns [j0, j0 + kStatCols) of sequence `seq`.
struct StatTile {
  int32_t seq = 0, j0 = 0;
};
inline constexpr int kAttnWarps = 4;
inline constexpr int kAttnPairsPerWarp = 4;
inline constexpr int kAttnPairs = kAttnWarps * kAttnPairsPerWarp;  // (row, head) pairs per block
inline constexpr int kStatCols = 64;
// Raises the kernels' shared-memory limits on `device` as far as it allows; returns the largest
// head size the attention then takes (256 on sm_90; 128 where only 64 KB can be opted into).
int64_t attention_init(int device);
// ml: device float2 [rows][n_heads] receiving each row's softmax max and sum (null: not kept).
// head_dim must be in 1..256.
void attention(const float* q, float* out, float* ml, const AttnTile* tiles, int64_t n_tiles,
               const AttnSeq* seqs, const PrefixHead* prefix, int64_t n_heads, int64_t n_kv_heads,
               int64_t head_dim, float scale, const AttnMask& mask, cudaStream_t stream);
// Accumulates col_sum (+=) and col_max (max=) of the sequences' own slots from q and ml.
void attention_stats(const float* q, const float* ml, const StatTile* tiles, int64_t n_tiles,
                     const AttnSeq* seqs, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim,
                     float scale, const AttnMask& mask, cudaStream_t stream);

}  // namespace offgen::cuda
