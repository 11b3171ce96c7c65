// Internal interface between the integer GEMM driver (qgemm.cpp) and its per-ISA kernel files:
// the quantised activation rows, one call's arguments, and each ISA's table of kernels by DType.
#pragma once

#include <cstdint>

#include "runtime/core/formats.h"

namespace offgen::cpu {

constexpr int kQDTypeCount = kDTypeCount;

// Activation rows quantised once per call (quantize_act_block per block of the format's
// activation block size): codes, one fp32 scale per block, int16 sums of the codes per sub-block
// of the weight format (16 or 32 elements).
// qt, dt (AMX only, else nullptr): the codes and scales of each full 16-row tile again, one
// contiguous 16 x Ks tile per Ks elements (Ks = amx_tile_k): tile (R, j) at
// qt + (R * k / Ks + j) * 16 * Ks, row i at + i * Ks; the 16 scales of block b at
// dt + (R * nb + b) * 16.
struct QActs {
  const int8_t* q;
  int64_t ldq;
  const float* d;
  int64_t ldd;
  const int16_t* s;
  int64_t lds;
  const int8_t* qt = nullptr;
  const float* dt = nullptr;
};

struct QCall {
  const QActs* act;
  const uint8_t* packed;
  int64_t n, k, nb;     // output columns, reduction length, blocks per row
  int64_t panel_bytes;  // bytes per 16-row panel
  float* y;
  int64_t ldy;
  // Distinct for each gemm_quant call (0: unknown): a kernel may keep what it derives from
  // `packed` (the AMX path's expanded panels) for the same call's later work items.
  uint64_t id = 0;
};

// The most 16-row panels one work item of qgemm.cpp's driver covers (a kernel may size its
// per-thread scratch by it).
inline constexpr int64_t kMaxItemPanels = 4;

// Output rows [r0, r1) x 16-row panels [p0, p1) (at most kMaxItemPanels panels).
using QRunFn = void (*)(const QCall& c, int64_t p0, int64_t p1, int64_t r0, int64_t r1);

// Kernel tables indexed by DType (nullptr: no kernel); nullptr when the ISA is not compiled in.
const QRunFn* qgemm_kernels_scalar();
const QRunFn* qgemm_kernels_avx2();
const QRunFn* qgemm_kernels_avxvnni();
const QRunFn* qgemm_kernels_avx512();
const QRunFn* qgemm_kernels_amx();
// AMX needs the kernel's permission for the tile state once per process (Linux arch_prctl);
// false when it is refused or the CPU/build has no AMX-INT8.
bool amx_ready();
// The width of the activation tiles (QActs::qt) of the AMX kernel for t: its 32-element block, or
// kAmxFoldK where the integer sub-block scales are folded into the codes (the K-quants, IQ4_XS);
// 0 without AMX.
inline constexpr int kAmxFoldK = 64;
int amx_tile_k(DType t);

}  // namespace offgen::cpu
