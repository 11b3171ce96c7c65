// Golden values from llama.cpp's own dequantisers (tests/data/golden/quant_golden.json, written by
// tools/gen_quant_golden.py from SmolLM2 requantised with llama-quantize): offgen's dequantisation
// of the same blocks is bitwise equal, and the integer GEMM on those blocks is close to an fp64
// product over llama.cpp's values.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend/cpu/qgemm.h"
#include "runtime/core/buffer.h"
#include "runtime/core/dtype.h"
#include "runtime/core/formats.h"
#include "runtime/core/quant_blocks.h"

using namespace offgen;

namespace {

std::vector<uint8_t> base64(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::vector<uint8_t> out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(acc >> bits));
    }
  }
  return out;
}

nlohmann::json load_golden() {
  std::ifstream f(std::string(OFFGEN_TEST_DATA) + "/golden/quant_golden.json");
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

struct Golden {
  DType type;
  std::vector<uint8_t> bytes;  // the blocks, one after another
  std::vector<float> values;   // llama.cpp's dequantisation
  int64_t blocks = 0;
};

std::vector<Golden> golden_formats() {
  const nlohmann::json j = load_golden();
  std::vector<Golden> v;
  for (const auto& [name, f] : j.at("formats").items()) {
    Golden g;
    g.type = dtype_from_name(name);
    const FormatTraits& t = format_traits(g.type);
    REQUIRE(f.at("ggml_type").get<int>() == t.ggml_type);
    REQUIRE(f.at("block_bytes").get<int64_t>() == t.block_bytes);
    REQUIRE(f.at("block_elems").get<int64_t>() == t.block_elems);
    for (const auto& b : f.at("blocks")) {
      const auto raw = base64(b.at("bytes").get<std::string>());
      const auto val = base64(b.at("values").get<std::string>());
      REQUIRE(static_cast<int64_t>(raw.size()) == t.block_bytes);
      REQUIRE(static_cast<int64_t>(val.size()) == 4 * t.block_elems);
      g.bytes.insert(g.bytes.end(), raw.begin(), raw.end());
      const size_t at = g.values.size();
      g.values.resize(at + t.block_elems);
      std::memcpy(g.values.data() + at, val.data(), val.size());
      ++g.blocks;
    }
    v.push_back(std::move(g));
  }
  return v;
}

}  // namespace

TEST_CASE("golden: dequantisation equals llama.cpp's", "[golden][formats]") {
  const auto formats = golden_formats();
  CHECK(formats.size() == 12);
  for (const Golden& g : formats) {
    const FormatTraits& f = format_traits(g.type);
    INFO(f.name << ": " << g.blocks << " blocks");
    CHECK(g.blocks >= 4);
    std::vector<float> y(g.values.size());
    dequantize_row(g.type, g.bytes.data(), y.data(), static_cast<int64_t>(y.size()));
    int bad = 0;
    for (size_t i = 0; i < y.size(); ++i) bad += std::memcmp(&y[i], &g.values[i], 4) != 0;
    CHECK(bad == 0);
  }
}

TEST_CASE("golden: integer GEMM on llama.cpp's blocks is close to fp64 over its values",
          "[golden][qgemm]") {
  ThreadContext ctx(2);
  std::mt19937 rng(8);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (const Golden& g : golden_formats()) {
    if (!cpu::quant_gemm_supported(g.type)) continue;
    const FormatTraits& f = format_traits(g.type);
    INFO(f.name);
    const int64_t n = 3, k = 2 * f.block_elems, m = 4;  // rows of two blocks each
    Buffer packed(cpu::packed_quant_bytes(g.type, n, k));
    cpu::pack_quant(g.type, g.bytes.data(), n, k, packed.data());
    std::vector<float> x(m * k), y(m * n);
    for (auto& v : x) v = gauss(rng);
    cpu::gemm_quant(g.type, x.data(), m, k, packed.data(), n, k, y.data(), n, ctx);
    int bad = 0;
    for (int64_t i = 0; i < m; ++i) {
      std::vector<float> xq(k);
      for (int64_t b = 0; b < k / f.block_elems; ++b) {
        int8_t q[256];
        const float d = quantize_act_block(x.data() + i * k + b * f.block_elems,
                                           static_cast<int>(f.block_elems), q);
        for (int64_t e = 0; e < f.block_elems; ++e) xq[b * f.block_elems + e] = d * q[e];
      }
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t e = 0; e < k; ++e) {
          ref += double(xq[e]) * g.values[j * k + e];
          mag += std::fabs(double(xq[e]) * g.values[j * k + e]);
        }
        bad += std::fabs(y[i * n + j] - ref) > 1e-5 * mag;
      }
    }
    CHECK(bad == 0);
  }
}
