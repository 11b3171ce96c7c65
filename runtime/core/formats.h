// The format traits table: one row per element/block format (plain floats, GGML block formats,
// offgen's q4g64) with its sizes, names, GGML type id, scalar (de)quantisers and integer layout.
// Adding a format is one row here plus its decoder/kernels (the CPU kernel table, keyed by DType,
// lives in runtime/backend/cpu/cpu_kernels.h since core may not depend on the backend).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runtime/core/dtype.h"
#include "runtime/core/quant_blocks.h"

namespace offgen {

// The activation blocks a format's integer dot product multiplies with (each activation row is
// quantised once by quantize_act_block): kQ8_0 = 32 int8 values with an fp32 scale (and their sum),
// kQ8_K = 256 int8 values with an fp32 scale and sums per 16 (GGML's block_q8_K).
enum class ActFormat { kNone, kQ8_0, kQ8_K };

constexpr int32_t kNoGgmlType = -1;
// Number of DType values (the last one is kIQ4_XS; formats.cpp checks the table has them all).
constexpr int kDTypeCount = static_cast<int>(DType::kIQ4_XS) + 1;

struct FormatTraits {
  DType type;
  std::string_view name;  // lower case, as in --weight-dtype and reports
  int32_t ggml_type;      // GGML/GGUF tensor type id, kNoGgmlType for offgen's own formats
  int64_t block_elems;
  int64_t block_bytes;
  // Dequantise `blocks` consecutive blocks into block_elems * blocks floats.
  void (*dequantize)(const uint8_t* src, float* out, int64_t blocks);
  // Quantise block_elems * blocks floats; nullptr when the format is load-only.
  void (*quantize)(const float* src, uint8_t* dst, int64_t blocks);
  ActFormat act;       // kNone: no integer dot product (plain floats, q4g64)
  bool matmul_weight;  // a weight the CPU backend multiplies by directly (has a kernel entry)
  // Integer layout of GGML block formats (nullptr / 0 otherwise): see DecodedBlock.
  void (*decode)(const uint8_t* blk, DecodedBlock& out);
  int32_t sub_elems;    // elements per sub-block sharing sc[j] (= block_elems without sub-blocks)
  int32_t code_offset;  // the code of value zero in the kNone form (4-bit: 8, q8/IQ4: 128, ...)
  MinKind min_kind;
};

// Row of t (every DType has one).
const FormatTraits& format_traits(DType t);
// Every row, in DType order.
std::span<const FormatTraits> all_formats();
// The row for a GGML type id, or nullptr when offgen does not read that type.
const FormatTraits* format_from_ggml_type(uint32_t ggml_type);
// Upper-case names of the GGML types offgen reads, comma-separated (for error messages).
std::string supported_ggml_types();
// The type llama-quantize stores a tensor in when its rows are not a multiple of t's blocks:
// Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K / IQ4_XS -> IQ4_NL; F16 for other block
// formats (and for the fallback's own misfit: the caller checks the result's block as well);
// plain types are their own.
DType quant_fallback(DType t);

}  // namespace offgen
