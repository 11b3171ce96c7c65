// libFuzzer target for the GGML block formats: arbitrary bytes taken as blocks of any format must
// dequantise without faults, pack into GEMM panels and unpack back bitwise, and give bitwise the
// same integer GEMM on every compiled ISA path as the scalar reference from the blocks (NaN for
// NaN: fuzzed scales reach inf and NaN). Input: [format][m][n][blocks per row][bytes...], the
// bytes repeated as needed; activations come from the bytes too (with zeros, huge and non-finite
// values mixed in).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/backend/cpu/qgemm.h"
#include "runtime/core/dtype.h"
#include "runtime/core/formats.h"

namespace {

using namespace offgen;

bool same(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ThreadContext ctx(2);
  static const std::vector<DType> types = [] {
    std::vector<DType> v;
    for (const FormatTraits& f : all_formats())
      if (cpu::quant_gemm_supported(f.type)) v.push_back(f.type);
    return v;
  }();
  if (size < 5) return 0;
  const DType t = types[data[0] % types.size()];
  const FormatTraits& f = format_traits(t);
  const int64_t m = 1 + data[1] % 20, n = 1 + data[2] % 40, k = (1 + data[3] % 3) * f.block_elems;
  const uint8_t* src = data + 4;
  const size_t len = size - 4;
  const int64_t row_bytes = dtype_bytes(t, k);
  std::vector<uint8_t> rows(n * row_bytes);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = src[i % len];

  std::vector<float> w(n * k);
  dequantize_row(t, rows.data(), w.data(), n * k);

  std::vector<uint8_t> packed(cpu::packed_quant_bytes(t, n, k)), back(rows.size());
  cpu::pack_quant(t, rows.data(), n, k, packed.data());
  cpu::unpack_quant_rows(t, packed.data(), n, k, 0, n, back.data());
  if (back != rows) __builtin_trap();

  std::vector<float> x(m * k);
  for (int64_t i = 0; i < m * k; ++i) {
    const uint8_t b = src[(i * 7 + 3) % len];
    x[i] = static_cast<float>(static_cast<int8_t>(b)) * 0.125f;
    if (b == 0xff) x[i] = std::numeric_limits<float>::quiet_NaN();
    if (b == 0xfe) x[i] = std::numeric_limits<float>::infinity();
    if (b == 0xfd) x[i] = 3e38f;
    if (b == 0xfc) x[i] = 1e-35f;
  }
  std::vector<float> want(m * n), got(m * n);
  cpu::gemm_quant_reference(t, x.data(), m, k, rows.data(), n, k, want.data(), n);
  for (cpu::QuantPath p : {cpu::QuantPath::kScalar, cpu::QuantPath::kAvx2, cpu::QuantPath::kAvxVnni,
                           cpu::QuantPath::kAvx512Vnni, cpu::QuantPath::kAmx}) {
    if (!cpu::quant_path_available(p)) continue;
    cpu::gemm_quant(t, x.data(), m, k, packed.data(), n, k, got.data(), n, ctx, p);
    for (int64_t i = 0; i < m * n; ++i)
      if (!same(got[i], want[i])) __builtin_trap();
  }
  return 0;
}
