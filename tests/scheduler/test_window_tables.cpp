// Sliding-window layers hold only their window (KvStore's window tables): the bytes of a Gemma 3
// 270M-shaped sequence at 4K context (local layers at the window of 512) as the store allocates
// them, the placement splits them and the planner / `inspect` count them; and through the engine
// on the tiny Gemma 3 checkpoint (window 4), window tables in memory and half on disk give the
// logits of plain full-size tables within rounding and the same greedy tokens.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "offload/kv_store.h"
#include "runtime/core/kv_format.h"
#include "policies/model_facts.h"
#include "runtime/loaders/dummy_source.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/model/decoder.h"
#include "tests/engine_run.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

const std::string kGemma3 = std::string(OFFGEN_TEST_DATA) + "/hf_models/gemma3";

// Logits of every step of one sequence fed through plain full-size tables (no metadata, no
// window tables): the prompt, then each token in `then`; row k is the logits after k of them.
std::vector<std::vector<float>> full_table_logits(const DecoderModel& m,
                                                  const std::vector<int32_t>& prompt,
                                                  const std::vector<int32_t>& then) {
  const ModelConfig& c = m.config();
  const ResidentUnits units(m);
  const int64_t cap = static_cast<int64_t>(prompt.size() + then.size());
  std::vector<float> kv(c.n_layers * 2 * c.kv_dim() * cap);
  std::vector<KvSeqView> views;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    float* base = kv.data() + l * 2 * c.kv_dim() * cap;
    views.push_back(KvSeqView{base, base + c.kv_dim() * cap, cap});
  }
  DecoderScratch scratch;
  std::vector<std::vector<float>> out;
  int64_t past = 0;
  auto feed = [&](const std::vector<int32_t>& ids) {
    const auto n = static_cast<int64_t>(ids.size());
    std::vector<int32_t> pos(ids.size());
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(past + i);
    const SeqSpan span{0, n, past};
    std::vector<float> hidden(n * c.d_model), logits(c.vocab_size);
    m.embed(ids, pos.data(), hidden.data(), scratch);
    for (int64_t u = 0; u < m.num_units(); ++u) {
      const UnitBatch b{n,
                        {&span, 1},
                        pos.data(),
                        DecoderModel::unit_has_cache(u)
                            ? std::span<const KvSeqView>(&views[DecoderModel::unit_layer(u)], 1)
                            : std::span<const KvSeqView>()};
      m.run_unit(u, units.blob(u), hidden.data(), b, scratch);
    }
    const std::vector<int64_t> last{n - 1};
    m.output_step(hidden.data(), last, logits.data(), scratch);
    out.push_back(logits);
    past += n;
  };
  feed(prompt);
  for (size_t k = 0; k + 1 < then.size(); ++k) feed({then[k]});
  return out;
}

}  // namespace

TEST_CASE("window tables: Gemma 3 270M at 4K context holds its local layers at the window",
          "[kv]") {
  const ModelConfig c = dummy_config("gemma3-270m");
  REQUIRE(c.sliding_window == 512);
  const int64_t local = c.n_sliding_layers(), global = c.n_layers - local;
  REQUIRE(local == 15);
  const int64_t row = c.kv_dim() * 4;  // one layer's K (or V) for one token, fp32
  const int64_t tokens = 4096;
  // Global layers at 4096 slots, local ones at 512 with their keys' positions (and the
  // statistics slots the policies share) per KV head.
  const int64_t rows = 2 * global * tokens * row + 2 * local * 512 * row;
  const int64_t meta = local * 3 * c.n_kv_heads * 512 * 4;
  KvStore store(c, Placement{}, nullptr);
  const int64_t h = store.add(tokens);
  CHECK(store.stats().ram_bytes == rows + meta);
  CHECK(store.stats().ram_bytes < 2 * c.n_layers * tokens * row / 3);  // a full cache: 144 MiB
  for (int64_t l = 0; l < c.n_layers; ++l) {
    INFO("layer " << l);
    CHECK(store.capacity(h, l) == (c.is_sliding(l) ? 512 : tokens));
    CHECK(store.window_table(h, l) == c.is_sliding(l));
    CHECK(store.slots_used(h, l, 700, 700) == (c.is_sliding(l) ? 512 : 700));
  }
  // The placement's split (what the planner and `inspect` read) says the same.
  const KvTableSplit split = Placement{}.kv_table(store.layout(), tokens);
  CHECK(split.tiers.memory() == store.stats().ram_bytes);
  CHECK(split.window_capacity == 512);
  // Under the window, every layer holds the whole sequence and nothing needs metadata.
  KvStore small(c, Placement{}, nullptr);
  small.add(512);
  CHECK(small.stats().ram_bytes == 2 * c.n_layers * 512 * row);
}

TEST_CASE("window tables: the engine's figure and the store's agree on a loaded model",
          "[kv][hf]") {
  OpenedModel om = open_model(kGemma3);
  auto be = make_cpu_backend(1);
  DecoderModel m(*om.source, *be);
  const ModelConfig& c = m.config();
  REQUIRE(c.n_sliding_layers() > 0);
  const ModelFacts facts = model_facts(m, "f32");
  for (DType t : kv_dtypes())
    for (bool evict : {false, true}) {
      Policy p;
      p.kv_dtype = t;
      if (evict) p.kv.kind = KvPolicyKind::kH2o, p.kv.budget = 32;
      KvStore store(c, Placement{}, nullptr, evict, t);
      store.add(64);
      INFO(dtype_name(t) << ", evicting " << evict);
      CHECK(kv_need(facts, p, 64).memory() == store.stats().ram_bytes);
      CHECK(kv_need(facts, p, 64).memory() <
            2 * c.n_layers * 64 * kv_row_bytes(t, c.n_kv_heads, c.head_dim) +
                facts.kv_layout(p).meta_bytes(64));
    }
}

TEST_CASE("window tables: exact attention through the engine, in memory and on disk", "[kv][hf]") {
  OpenedModel om = open_model(kGemma3);
  auto be = make_cpu_backend(1);
  DecoderModel m(*om.source, *be);
  const int64_t window = m.config().sliding_window;
  const std::vector<int32_t> prompt{2, 17, 35, 9, 80, 44, 12, 61, 5, 23, 70, 31, 18};
  REQUIRE(static_cast<int64_t>(prompt.size()) > 2 * window);
  for (double cache_memory : {100.0, 50.0}) {
    INFO("cache memory share " << cache_memory);
    const test::TempDir dir;
    EngineOptions eo;
    eo.model = kGemma3;
    eo.threads = 1;
    eo.policy.cache_gpu_percent = cache_memory;
    eo.policy.offload_dir = dir.path();
    eo.policy.kv_dtype = DType::kF32;  // exact, against the fp32 full tables
    eo.prefill_chunk = 5;  // chunks that overflow the window tables, and decode steps
    Request r;
    r.prompt_ids = prompt;
    r.sampling.max_tokens = 12;
    r.sampling.ignore_eos = true;
    const test::EngineRun run = test::run_engine(eo, {r});
    const std::vector<int32_t>& tokens = run.results.at(0).tokens;
    REQUIRE(tokens.size() == 12);
    const auto ref = full_table_logits(m, prompt, tokens);
    double worst = 0;
    for (size_t k = 0; k < ref.size(); ++k) {
      const std::vector<float>& got = run.logits.at({0, static_cast<int64_t>(k)});
      REQUIRE(got.size() == ref[k].size());
      int32_t best = 0;
      for (size_t v = 0; v < got.size(); ++v) {
        worst = std::max(worst, double(std::fabs(got[v] - ref[k][v])));
        if (ref[k][v] > ref[k][best]) best = static_cast<int32_t>(v);
      }
      CHECK(tokens[k] == best);  // greedy from the full tables' logits
    }
    CHECK(worst < 1e-4);
  }
}
