// Integer GEMM driver: packing (GGML blocks <-> panels), activation quantisation, path choice,
// the thread split, and the scalar reference straight from the GGML blocks.
#include "runtime/backend/cpu/qgemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "runtime/backend/cpu/qgemm_formats.h"
#include "runtime/backend/cpu/qgemm_internal.h"
#include "runtime/core/error.h"
#include "runtime/core/formats.h"

namespace offgen::cpu {
namespace {

using qfmt::kPanel;

// Per-format packing entry (the formats of qgemm_formats.h, by DType).
struct PackEntry {
  bool present = false;
  int code_bytes = 0, scale_bytes = 0;
  void (*pack)(const uint8_t* const* rows, uint8_t* codes, uint8_t* scales) = nullptr;
  void (*unpack)(const uint8_t* codes, const uint8_t* scales, uint8_t* const* rows) = nullptr;
};

PackEntry* pack_table() {
  static PackEntry t[kQDTypeCount];
  return t;
}
template <class F>
struct AddPack {
  void operator()() {
    pack_table()[static_cast<int>(F::kType)] = {true, F::kCodeBytes, F::kScaleBytes, &F::pack,
                                                &F::unpack_rows};
  }
};
const PackEntry& pack_entry(DType t) {
  static const bool built = [] {
    qfmt::for_each_format<AddPack>();
    return true;
  }();
  (void)built;
  const PackEntry& e = pack_table()[static_cast<int>(t)];
  OFFGEN_CHECK(e.present, kInternal, "no integer GEMM for {} weights", dtype_name(t));
  return e;
}

struct Geometry {
  int64_t nb, panels, panel_bytes, row_bytes;
};
Geometry geometry(DType t, int64_t n, int64_t k) {
  const FormatTraits& f = format_traits(t);
  const PackEntry& e = pack_entry(t);
  OFFGEN_CHECK(k > 0 && k % f.block_elems == 0, kInternal,
               "quantised GEMM: k = {} is not a multiple of the {} block size {}", k, f.name,
               f.block_elems);
  Geometry g;
  g.nb = k / f.block_elems;
  g.panels = (n + kPanel - 1) / kPanel;
  g.panel_bytes = (g.nb * (e.code_bytes + e.scale_bytes) + 63) / 64 * 64;
  g.row_bytes = g.nb * f.block_bytes;
  return g;
}

const QRunFn* kernels(QuantPath p) {
  switch (p) {
    case QuantPath::kScalar:
      return qgemm_kernels_scalar();
    case QuantPath::kAvx2:
      return qgemm_kernels_avx2();
    case QuantPath::kAvxVnni:
      return qgemm_kernels_avxvnni();
    case QuantPath::kAvx512Vnni:
      return qgemm_kernels_avx512();
    case QuantPath::kAmx:
      return amx_ready() ? qgemm_kernels_amx() : nullptr;
    case QuantPath::kAuto:
      break;
  }
  return nullptr;
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
// quantize_act_block with AVX-512, bitwise the same: an exact maximum, the same scalar 127 / amax,
// one fp32 product and round-to-nearest-even per element (the tests compare the two).
float quantize_act_block_avx512(const float* x, int n, int8_t* q) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  __m512 mx = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int i = 0; i < n; i += 16) {
    const __m512 a = _mm512_and_ps(_mm512_loadu_ps(x + i), abs_mask);
    bad |= _mm512_cmp_ps_mask(a, _mm512_set1_ps(std::numeric_limits<float>::max()), _CMP_NLE_UQ);
    mx = _mm512_max_ps(mx, a);
  }
  const float amax = _mm512_reduce_max_ps(mx);
  if (bad || !(amax >= kActTiny)) {
    std::memset(q, 0, n);
    return bad ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
  }
  const __m512 id = _mm512_set1_ps(127.0f / amax);
  for (int i = 0; i < n; i += 16) {
    __m512i r = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + i), id));
    r = _mm512_max_epi32(_mm512_min_epi32(r, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i), _mm512_cvtepi32_epi8(r));
  }
  return amax / 127.0f;
}
#endif

float quantize_act(const float* x, int n, int8_t* q) {
#if defined(__AVX512F__) && defined(__AVX512BW__)
  return quantize_act_block_avx512(x, n, q);
#else
  return quantize_act_block(x, n, q);
#endif
}

// Activation rows -> QActs (storage owned by the caller's vectors). simd = false: the scalar
// quantize_act_block (the reference).
struct ActStorage {
  std::vector<int8_t> q, qt;
  std::vector<float> d, dt;
  std::vector<int16_t> s;
};

// The AMX copy of the codes (QActs::qt) for rows [0, m / 16 * 16).
void tile_acts(QActs& a, int64_t m, int64_t k, int ks, ActStorage& st) {
  const int64_t tiles = m / 16, subs = k / ks;
  st.qt.resize(tiles * 16 * k);
  for (int64_t r = 0; r < tiles; ++r)
    for (int64_t j = 0; j < subs; ++j)
      for (int i = 0; i < 16; ++i)
        std::memcpy(st.qt.data() + ((r * subs + j) * 16 + i) * ks,
                    a.q + (16 * r + i) * a.ldq + j * ks, ks);
  a.qt = st.qt.data();
  const int64_t nb = a.ldd;
  st.dt.resize(tiles * nb * 16);
  for (int64_t r = 0; r < tiles; ++r)
    for (int64_t b = 0; b < nb; ++b)
      for (int i = 0; i < 16; ++i) st.dt[(r * nb + b) * 16 + i] = a.d[(16 * r + i) * a.ldd + b];
  a.dt = st.dt.data();
}
QActs quantize_acts(const FormatTraits& f, const float* x, int64_t m, int64_t ldx, int64_t k,
                    ActStorage& st, ThreadContext* ctx, bool simd) {
  const int blk = static_cast<int>(f.block_elems), sub = f.sub_elems;
  const int64_t nb = k / blk, ns = k / sub;
  st.q.resize(m * k);
  st.d.resize(m * nb);
  st.s.resize(m * ns);
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      int8_t* q = st.q.data() + i * k;
      for (int64_t b = 0; b < nb; ++b) {
        const float* xb = x + i * ldx + b * blk;
        st.d[i * nb + b] =
            simd ? quantize_act(xb, blk, q + b * blk) : quantize_act_block(xb, blk, q + b * blk);
      }
      for (int64_t j = 0; j < ns; ++j) {
        int s = 0;
        for (int e = 0; e < sub; ++e) s += q[j * sub + e];
        st.s[i * ns + j] = static_cast<int16_t>(s);
      }
    }
  };
  if (ctx && m * k >= (1 << 16)) {
    ctx->parallel_for(m, std::max<int64_t>(1, (1 << 14) / k), rows);
  } else {
    rows(0, m);
  }
  return QActs{st.q.data(), k, st.d.data(), nb, st.s.data(), ns};
}

}  // namespace

std::string_view quant_path_name(QuantPath p) {
  switch (p) {
    case QuantPath::kAuto:
      return "auto";
    case QuantPath::kScalar:
      return "scalar";
    case QuantPath::kAvx2:
      return "avx2";
    case QuantPath::kAvxVnni:
      return "avx-vnni";
    case QuantPath::kAvx512Vnni:
      return "avx512-vnni";
    case QuantPath::kAmx:
      return "amx-int8";
  }
  return "?";
}

bool quant_path_available(QuantPath p) { return p == QuantPath::kAuto || kernels(p) != nullptr; }

QuantPath quant_path_auto(DType t, int64_t m) {
  // From 32 rows (the folded formats from 48 until their codes were expanded block by block):
  // bench/gemm/RESULTS_gemm.md.
  if (amx_tile_k(t) > 0 && m >= 32 && quant_path_available(QuantPath::kAmx))
    return QuantPath::kAmx;
  for (QuantPath p : {QuantPath::kAvx512Vnni, QuantPath::kAvxVnni, QuantPath::kAvx2})
    if (quant_path_available(p)) return p;
  return QuantPath::kScalar;
}

bool quant_gemm_supported(DType t) {
  static const bool built = [] {
    qfmt::for_each_format<AddPack>();
    return true;
  }();
  (void)built;
  return pack_table()[static_cast<int>(t)].present;
}

int64_t packed_quant_bytes(DType t, int64_t n, int64_t k) {
  const Geometry g = geometry(t, n, k);
  return g.panels * g.panel_bytes;
}

void pack_quant(DType t, const void* rows, int64_t n, int64_t k, void* dst) {
  const Geometry g = geometry(t, n, k);
  const PackEntry& e = pack_entry(t);
  const FormatTraits& f = format_traits(t);
  const auto* src = static_cast<const uint8_t*>(rows);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t p = 0; p < g.panels; ++p) {
    uint8_t* panel = out + p * g.panel_bytes;
    std::memset(panel, 0, g.panel_bytes);
    for (int64_t b = 0; b < g.nb; ++b) {
      const uint8_t* r[kPanel];
      for (int c = 0; c < kPanel; ++c) {
        const int64_t row = p * kPanel + c;
        r[c] = row < n ? src + row * g.row_bytes + b * f.block_bytes : nullptr;
      }
      e.pack(r, panel + b * e.code_bytes, panel + g.nb * e.code_bytes + b * e.scale_bytes);
    }
  }
}

void unpack_quant_rows(DType t, const void* packed, int64_t n, int64_t k, int64_t row0,
                       int64_t count, void* rows) {
  const Geometry g = geometry(t, n, k);
  const PackEntry& e = pack_entry(t);
  const FormatTraits& f = format_traits(t);
  OFFGEN_CHECK(row0 >= 0 && count >= 0 && row0 + count <= n, kInternal,
               "unpack_quant_rows: rows [{}, {}) of {}", row0, row0 + count, n);
  const auto* in = static_cast<const uint8_t*>(packed);
  auto* out = static_cast<uint8_t*>(rows);
  for (int64_t p = row0 / kPanel; p * kPanel < row0 + count; ++p) {
    const uint8_t* panel = in + p * g.panel_bytes;
    for (int64_t b = 0; b < g.nb; ++b) {
      uint8_t* r[kPanel];
      for (int c = 0; c < kPanel; ++c) {
        const int64_t row = p * kPanel + c;
        r[c] = row >= row0 && row < row0 + count
                   ? out + (row - row0) * g.row_bytes + b * f.block_bytes
                   : nullptr;
      }
      e.unpack(panel + b * e.code_bytes, panel + g.nb * e.code_bytes + b * e.scale_bytes, r);
    }
  }
}

void gemm_quant(DType t, const float* x, int64_t m, int64_t ldx, const void* packed, int64_t n,
                int64_t k, float* y, int64_t ldy, ThreadContext& ctx, QuantPath path) {
  if (m <= 0 || n <= 0) return;
  const Geometry g = geometry(t, n, k);
  if (path == QuantPath::kAuto) path = quant_path_auto(t, m);
  const QRunFn* table = kernels(path);
  OFFGEN_CHECK(table != nullptr, kConfig, "quantised GEMM path {} is not available here",
               quant_path_name(path));
  const QRunFn fn = table[static_cast<int>(t)];
  OFFGEN_CHECK(fn != nullptr, kInternal, "no {} kernel for {}", quant_path_name(path),
               dtype_name(t));
  thread_local ActStorage st;
  QActs acts = quantize_acts(format_traits(t), x, m, ldx, k, st, &ctx, true);
  if (path == QuantPath::kAmx && m >= 16) tile_acts(acts, m, k, amx_tile_k(t), st);
  static std::atomic<uint64_t> calls{0};
  const QCall call{&acts, static_cast<const uint8_t*>(packed), n, k, g.nb, g.panel_bytes, y, ldy,
                   ++calls};
  // Work items: chunks of panels x blocks of rows (rows split only when m is large; a thread
  // usually runs one chunk's row blocks one after another, and the AMX path of the formats with
  // float scales then expands the chunk's panels once for them). The folded AMX path expands
  // block by block for each row block, so its row blocks are larger (bench/gemm/RESULTS_gemm.md).
  const int64_t row_cap = path == QuantPath::kAmx && amx_tile_k(t) == kAmxFoldK ? 512 : 256;
  const int64_t mb = std::min(m, row_cap);
  const int64_t row_blocks = (m + mb - 1) / mb;
  const int64_t chunk =
      std::clamp<int64_t>(g.panels * row_blocks / (4 * std::max(1, ctx.threads())), 1,
                          kMaxItemPanels);
  const int64_t chunks = (g.panels + chunk - 1) / chunk;
  ctx.parallel_for(chunks * row_blocks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t pc = i / row_blocks, rb = i % row_blocks;
      fn(call, pc * chunk, std::min(g.panels, (pc + 1) * chunk), rb * mb,
         std::min(m, (rb + 1) * mb));
    }
  });
}

void gemm_quant_reference(DType t, const float* x, int64_t m, int64_t ldx, const void* rows,
                          int64_t n, int64_t k, float* y, int64_t ldy) {
  const FormatTraits& f = format_traits(t);
  const Geometry g = geometry(t, n, k);
  ActStorage st;
  const QActs a = quantize_acts(f, x, m, ldx, k, st, nullptr, false);
  const int subs = static_cast<int>(f.block_elems / f.sub_elems);
  DecodedBlock q;
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* w = static_cast<const uint8_t*>(rows) + j * g.row_bytes;
    for (int64_t i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int64_t b = 0; b < g.nb; ++b) {
        f.decode(w + b * f.block_bytes, q);
        const int8_t* qa = a.q + i * a.ldq + b * f.block_elems;
        const int16_t* sa = a.s + i * a.lds + b * subs;
        const float da = a.d[i * a.ldd + b];
        int64_t i1 = 0, i2 = 0;
        for (int s = 0; s < subs; ++s) {
          int64_t dot = 0;
          for (int e = 0; e < f.sub_elems; ++e)
            dot += q.u[s * f.sub_elems + e] * qa[s * f.sub_elems + e];
          i1 += q.sc[s] * (dot - int64_t{f.code_offset} * sa[s]);
          i2 += q.m[s] * int64_t{sa[s]};
        }
        OFFGEN_CHECK(i1 == static_cast<int32_t>(i1) && i2 == static_cast<int32_t>(i2), kInternal,
                     "integer sum overflow in the {} reference", f.name);
        acc = std::fma(q.d * da, static_cast<float>(static_cast<int32_t>(i1)), acc);
        if (f.min_kind == MinKind::kFloat)
          acc = std::fma(q.dm * da, static_cast<float>(sa[0]), acc);
        if (f.min_kind == MinKind::kInt)
          acc = std::fma(-q.dm * da, static_cast<float>(static_cast<int32_t>(i2)), acc);
      }
      y[i * ldy + j] = acc;
    }
  }
}

}  // namespace offgen::cpu
