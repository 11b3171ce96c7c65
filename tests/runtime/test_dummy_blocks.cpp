// Benchmark models in block formats: random_blocks (values, spread, every code used),
// dummy:PRESET:FORMAT tensors, and write_gguf's round trip through offgen's GGUF reader (the same
// tensors and logits).
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/quant_blocks.h"
#include "runtime/loaders/dummy_source.h"
#include "runtime/loaders/gguf.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/gguf_vocab.h"
#include "runtime/loaders/gguf_write.h"
#include "runtime/model/decoder.h"
#include "runtime/text/tokenizer.h"
#include "tests/temp_dir.h"

using namespace offgen;

TEST_CASE("random_blocks span [-amax, amax] uniformly with every code", "[dummy_blocks]") {
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    INFO(dtype_name(t));
    REQUIRE(has_random_blocks(t));
    const int64_t blocks = 4096 / dtype_block_elems(t) * 16, n = blocks * dtype_block_elems(t);
    std::vector<uint8_t> raw(dtype_bytes(t, n));
    uint64_t state = 0x9e3779b97f4a7c15ull;
    const float amax = 0.05f;
    random_blocks(t, state, amax, raw.data(), blocks);
    std::vector<float> v(n);
    dequantize_blocks(t, raw.data(), v.data(), blocks);
    double sum = 0, sq = 0;
    std::set<float> distinct;
    for (float x : v) {
      REQUIRE(std::isfinite(x));
      REQUIRE(std::fabs(x) <= amax * 1.01f);
      sum += x, sq += double(x) * x;
      distinct.insert(x);
    }
    const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    CHECK(std::fabs(mean) < 0.07 * amax);  // Q4_0's grid -8..7 has mean -amax/16
    CHECK(sd > 0.55 * amax);               // a uniform spread has sd = amax / sqrt(3) = 0.577 amax
    CHECK(sd < 0.62 * amax);
    // One scale for all blocks: the distinct values are the format's codes, all of them used.
    const size_t levels = t == DType::kQ8_0   ? 256
                          : t == DType::kQ5_K ? 32
                          : t == DType::kQ6_K ? 64
                                              : 16;
    CHECK(distinct.size() == levels);
  }
  CHECK_FALSE(has_random_blocks(DType::kQ3_K));
  CHECK_FALSE(has_random_blocks(DType::kF32));
}

TEST_CASE("dummy:PRESET:FORMAT generates matrices in the format, norms in fp32", "[dummy_blocks]") {
  const DummyWeightSource src("llama-1b:q4_k");
  CHECK(src.describe() == "dummy:llama-1b:q4_k");
  for (const char* name :
       {"token_embd.weight", "output.weight", "blk.3.attn_q.weight", "blk.3.ffn_down.weight"}) {
    INFO(name);
    const TensorRef t = src.tensor(name);
    CHECK(t.dtype == DType::kQ4_K);
    CHECK(src.tensor_dtype(name) == DType::kQ4_K);
    std::vector<float> row(t.dims[0]);
    dequantize_row(t.dtype, t.data, row.data(), t.dims[0]);
    const float amax = std::sqrt(3.0f / static_cast<float>(t.dims[0]));
    for (float x : row) REQUIRE(std::fabs(x) <= amax * 1.01f);
  }
  CHECK(src.tensor("blk.3.attn_norm.weight").dtype == DType::kF32);
  // Deterministic: the same bytes again.
  const TensorRef a = src.tensor("blk.0.attn_k.weight"), b = src.tensor("blk.0.attn_k.weight");
  CHECK(std::memcmp(a.data, b.data, dtype_bytes(a.dtype, a.n_elems())) == 0);
  // Rows the format's blocks do not divide (576 = 2.25 x 256) fall back to q8_0.
  CHECK(DummyWeightSource("smollm2-135m:q4_k").tensor_dtype("blk.0.attn_q.weight") == DType::kQ8_0);
  CHECK(DummyWeightSource("smollm2-135m").tensor_dtype("blk.0.attn_q.weight") == DType::kF32);
  CHECK_THROWS_WITH(DummyWeightSource("llama-1b:q3_k"),
                    Catch::Contains("unknown weight format 'q3_k'"));
  CHECK_THROWS_WITH(DummyWeightSource("llama-1b:nonsense"),
                    Catch::Contains("dummy:llama-1b:nonsense"));
}

TEST_CASE("write_gguf: the file holds the source's config, tensors and a vocabulary",
          "[dummy_blocks]") {
  const test::TempDir dir;
  const std::string path = dir.path() + "/m.gguf";
  const DummyWeightSource src("smollm2-135m:q4_k");
  const uint64_t bytes = write_gguf(path, src, placeholder_spm_vocab(src.config().vocab_size));
  CHECK(bytes == std::filesystem::file_size(path));
  CHECK_FALSE(std::filesystem::exists(path + ".partial"));
  const GgufWeightSource back(GgufFile::open(path));
  const ModelConfig &a = src.config(), &b = back.config();
  CHECK(b.arch == "llama");
  CHECK(b.n_layers == a.n_layers);
  CHECK(b.d_model == a.d_model);
  CHECK(b.n_heads == a.n_heads);
  CHECK(b.n_kv_heads == a.n_kv_heads);
  CHECK(b.head_dim == a.head_dim);
  CHECK(b.ffn_dim == a.ffn_dim);
  CHECK(b.vocab_size == a.vocab_size);
  CHECK(b.context_length == a.context_length);
  CHECK(b.norm_eps == a.norm_eps);
  CHECK(b.rope_theta == a.rope_theta);
  CHECK(b.tied_embeddings == a.tied_embeddings);
  for (const char* name :
       {"token_embd.weight", "output.weight", "output_norm.weight", "blk.0.attn_q.weight",
        "blk.29.ffn_down.weight", "blk.7.ffn_norm.weight"}) {
    INFO(name);
    const TensorRef x = src.tensor(name), y = back.tensor(name);
    REQUIRE(y.dtype == x.dtype);
    REQUIRE(y.dims == x.dims);
    CHECK(std::memcmp(x.data, y.data, dtype_bytes(x.dtype, x.n_elems())) == 0);
  }
  CHECK(back.tensor("blk.29.ffn_down.weight").dtype == DType::kQ4_K);  // 1536 = 6 x 256
  // The same model: the preset's Q/K rows are in GGUF Llama's pair order, every tensor's bytes
  // are the file's, and the logits are bitwise the preset's.
  {
    auto be = make_cpu_backend(2, WeightMode::native_mode());
    const std::vector<int32_t> ids = {1, 300, 4000, 17};
    std::vector<std::vector<float>> logits;
    for (const WeightSource* s : {static_cast<const WeightSource*>(&src),
                                  static_cast<const WeightSource*>(&back)}) {
      const DecoderModel m(*s, *be);
      const ResidentUnits units(m);
      const int64_t n = static_cast<int64_t>(ids.size());
      std::vector<float> kv(a.n_layers * 2 * a.kv_dim() * n);
      std::vector<KvSeqView> views;
      for (int64_t l = 0; l < a.n_layers; ++l)
        views.push_back({kv.data() + l * 2 * a.kv_dim() * n,
                         kv.data() + l * 2 * a.kv_dim() * n + a.kv_dim() * n, n});
      std::vector<int32_t> pos = {0, 1, 2, 3};
      const SeqSpan span{0, n, 0};
      DecoderScratch scratch;
      logits.emplace_back(a.vocab_size);
      m.forward(ids, pos.data(), {&span, 1},
                [&](int64_t l) { return std::span<const KvSeqView>(&views[l], 1); },
                units.fn(), logits.back().data(), scratch);
    }
    CHECK(logits[0] == logits[1]);
  }
  const Tokenizer tok(load_gguf_vocab(path));
  const std::vector<int32_t> ids = tok.encode("hi");
  // BOS, then byte tokens: the space prefix's "▁" (3 UTF-8 bytes), 'h', 'i'.
  CHECK(ids == std::vector<int32_t>{1, 3 + 0xE2, 3 + 0x96, 3 + 0x81, 3 + 'h', 3 + 'i'});

  CHECK_THROWS_WITH(write_gguf(dir.path() + "/opt.gguf", DummyWeightSource("opt-125m"),
                               placeholder_spm_vocab(50272)),
                    Catch::Contains("architecture 'opt' has no GGUF form"));
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/opt.gguf"));
  CHECK_THROWS_WITH(write_gguf(dir.path() + "/nope/m.gguf", src, placeholder_spm_vocab(49152)),
                    Catch::Contains("cannot create"));
}
