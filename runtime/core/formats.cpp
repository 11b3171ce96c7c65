// The format traits table and the lookups over it (dtype.h's size/name/(de)quantise functions
// are lookups into this table too).
#include "runtime/core/formats.h"

#include <cctype>
#include <cstring>

#include "runtime/core/error.h"

namespace offgen {
namespace {

void put16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }
uint16_t get16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

void deq_f32(const uint8_t* s, float* o, int64_t n) { std::memcpy(o, s, n * 4); }
void deq_f16(const uint8_t* s, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = fp16_to_f32(get16(s + 2 * i));
}
void deq_bf16(const uint8_t* s, float* o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(get16(s + 2 * i));
}
void deq_q4g64(const uint8_t* s, float* o, int64_t n) { dequantize_q4g64(s, n, o, 64, 16); }
template <DType T>
void deq_ggml(const uint8_t* s, float* o, int64_t n) {
  dequantize_blocks(T, s, o, n);
}

void q_f32(const float* s, uint8_t* d, int64_t n) { std::memcpy(d, s, n * 4); }
void q_f16(const float* s, uint8_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) put16(d + 2 * i, f32_to_fp16(s[i]));
}
void q_bf16(const float* s, uint8_t* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) put16(d + 2 * i, f32_to_bf16(s[i]));
}
template <void (*Block)(const float*, uint8_t*), int64_t Elems, int64_t Bytes>
void q_blocks(const float* s, uint8_t* d, int64_t n) {
  for (int64_t b = 0; b < n; ++b) Block(s + b * Elems, d + b * Bytes);
}
void q4g64_block(const float* x, uint8_t* blk) { quantize_q4g64_block(x, blk); }

using A = ActFormat;
using M = MinKind;
using D = DType;

// In DType order (checked by format_traits). Sizes: fp16 fields count 2 bytes, Q8_K's d 4.
constexpr FormatTraits kTable[] = {
    {D::kF32, "f32", 0, 1, 4, deq_f32, q_f32, A::kNone, true, nullptr, 0, 0, M::kNone},
    {D::kF16, "f16", 1, 1, 2, deq_f16, q_f16, A::kNone, false, nullptr, 0, 0, M::kNone},
    {D::kBF16, "bf16", 30, 1, 2, deq_bf16, q_bf16, A::kNone, true, nullptr, 0, 0, M::kNone},
    {D::kQ8_0, "q8_0", 8, 32, 34, deq_ggml<D::kQ8_0>, q_blocks<quantize_q8_0, 32, 34>, A::kQ8_0,
     true, decode_q8_0, 32, 128, M::kNone},
    {D::kQ4_0, "q4_0", 2, 32, 18, deq_ggml<D::kQ4_0>, q_blocks<quantize_q4_0, 32, 18>, A::kQ8_0,
     true, decode_q4_0, 32, 8, M::kNone},
    {D::kQ4_1, "q4_1", 3, 32, 20, deq_ggml<D::kQ4_1>, nullptr, A::kQ8_0, true, decode_q4_1, 32, 0,
     M::kFloat},
    {D::kQ4G64, "q4g64", kNoGgmlType, kQ4G64Block, kQ4G64Bytes, deq_q4g64,
     q_blocks<q4g64_block, kQ4G64Block, kQ4G64Bytes>, A::kNone, true, nullptr, 0, 0, M::kNone},
    {D::kQ5_0, "q5_0", 6, 32, 22, deq_ggml<D::kQ5_0>, q_blocks<quantize_q5_0, 32, 22>, A::kQ8_0, true, decode_q5_0, 32, 16,
     M::kNone},
    {D::kQ5_1, "q5_1", 7, 32, 24, deq_ggml<D::kQ5_1>, q_blocks<quantize_q5_1, 32, 24>, A::kQ8_0, true, decode_q5_1, 32, 0,
     M::kFloat},
    {D::kQ2_K, "q2_k", 10, kQK, 84, deq_ggml<D::kQ2_K>, nullptr, A::kQ8_K, true, decode_q2_k, 16, 0,
     M::kInt},
    {D::kQ3_K, "q3_k", 11, kQK, 110, deq_ggml<D::kQ3_K>, nullptr, A::kQ8_K, true, decode_q3_k, 16,
     4, M::kNone},
    {D::kQ4_K, "q4_k", 12, kQK, 144, deq_ggml<D::kQ4_K>, q_blocks<quantize_q4_k, kQK, 144>,
     A::kQ8_K, true, decode_q4_k, 32, 0, M::kInt},
    {D::kQ5_K, "q5_k", 13, kQK, 176, deq_ggml<D::kQ5_K>, q_blocks<quantize_q5_k, kQK, 176>,
     A::kQ8_K, true, decode_q5_k, 32, 0, M::kInt},
    {D::kQ6_K, "q6_k", 14, kQK, 210, deq_ggml<D::kQ6_K>, q_blocks<quantize_q6_k, kQK, 210>,
     A::kQ8_K, true, decode_q6_k, 16, 32, M::kNone},
    {D::kQ8_K, "q8_k", 15, kQK, 292, deq_ggml<D::kQ8_K>, q_blocks<quantize_q8_k, kQK, 292>,
     A::kNone, false, decode_q8_k, kQK, 128, M::kNone},
    {D::kIQ4_NL, "iq4_nl", 20, 32, 18, deq_ggml<D::kIQ4_NL>, nullptr, A::kQ8_0, true, decode_iq4_nl,
     32, 128, M::kNone},
    {D::kIQ4_XS, "iq4_xs", 23, kQK, 136, deq_ggml<D::kIQ4_XS>, nullptr, A::kQ8_K, true,
     decode_iq4_xs, 32, 128, M::kNone},
};

constexpr bool table_in_dtype_order() {
  for (size_t i = 0; i < std::size(kTable); ++i)
    if (static_cast<size_t>(kTable[i].type) != i) return false;
  return true;
}
static_assert(table_in_dtype_order(), "kTable rows must follow the DType order");
static_assert(std::size(kTable) == kDTypeCount, "every DType needs a row in kTable");

}  // namespace

const FormatTraits& format_traits(DType t) { return kTable[static_cast<size_t>(t)]; }

std::span<const FormatTraits> all_formats() { return kTable; }

const FormatTraits* format_from_ggml_type(uint32_t ggml_type) {
  for (const FormatTraits& f : kTable)
    if (f.ggml_type >= 0 && static_cast<uint32_t>(f.ggml_type) == ggml_type) return &f;
  return nullptr;
}

DType quant_fallback(DType t) {
  if (t == DType::kQ4_K) return DType::kQ5_0;
  if (t == DType::kQ5_K) return DType::kQ5_1;
  if (t == DType::kQ6_K) return DType::kQ8_0;
  if (t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kIQ4_XS) return DType::kIQ4_NL;
  return dtype_block_elems(t) > 1 ? DType::kF16 : t;
}

std::string supported_ggml_types() {
  std::string s;
  for (const FormatTraits& f : kTable) {
    if (f.ggml_type < 0) continue;
    if (!s.empty()) s += ", ";
    for (char c : f.name) s += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return s;
}

int64_t dtype_block_elems(DType t) { return format_traits(t).block_elems; }
int64_t dtype_block_bytes(DType t) { return format_traits(t).block_bytes; }
std::string_view dtype_name(DType t) { return format_traits(t).name; }

DType dtype_from_name(std::string_view name) {
  for (const FormatTraits& f : kTable)
    if (f.name == name) return f.type;
  OFFGEN_THROW(kConfig, "unknown element type '{}'", name);
}

void dequantize_row(DType t, const void* src, float* out, int64_t n) {
  const FormatTraits& f = format_traits(t);
  OFFGEN_CHECK(n % f.block_elems == 0, kInternal, "dequantize_row: {} elements of {}", n, f.name);
  f.dequantize(static_cast<const uint8_t*>(src), out, n / f.block_elems);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  const FormatTraits& f = format_traits(t);
  OFFGEN_CHECK(n % f.block_elems == 0, kInternal, "quantize_row: {} elements of {}", n, f.name);
  OFFGEN_CHECK(f.quantize != nullptr, kInternal, "quantize_row: {} is a load-only type", f.name);
  f.quantize(src, static_cast<uint8_t*>(dst), n / f.block_elems);
}

}  // namespace offgen
