// Mixtures of experts beyond the golden logits: the router's top-k (ties, renormalisation, NaN),
// routing counts and the hot-first expert order, configs that are refused with the field named,
// the GGUF experts' row slices, and a Q8_0 file from llama-quantize.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/loaders/model_loader.h"
#include "tests/runtime/hf_golden.h"
#include "runtime/model/moe_routing.h"
#include "runtime/model/tensor_table.h"
#include "tests/temp_dir.h"

using namespace offgen;

TEST_CASE("MoE routing: softmax over all experts, top k, lower index on ties, renormalised or not",
          "[moe]") {
  // Row 0: experts 2 and 0 lead; row 1: a tie between 1 and 3 (1 wins), then 0.
  const float logits[] = {1.0f, -2.0f, 3.0f, 0.5f, /**/ 0.0f, 2.0f, -1.0f, 2.0f};
  MoeRouting r;
  route_top_k(logits, 2, 4, 4, 2, false, r);
  CHECK(r.rows[0] == std::vector<int64_t>{0});
  CHECK(r.rows[1] == std::vector<int64_t>{1});
  CHECK(r.rows[2] == std::vector<int64_t>{0});
  CHECK(r.rows[3] == std::vector<int64_t>{1});
  CHECK(r.active() == 4);
  const double z0 = std::exp(1.0) + std::exp(-2.0) + std::exp(3.0) + std::exp(0.5);
  CHECK(r.weights[2][0] == Approx(std::exp(3.0) / z0).epsilon(1e-6));
  CHECK(r.weights[0][0] == Approx(std::exp(1.0) / z0).epsilon(1e-6));
  route_top_k(logits, 2, 4, 4, 2, true, r);
  CHECK(r.weights[2][0] + r.weights[0][0] == Approx(1.0).epsilon(1e-6));
  CHECK(r.weights[1][0] == Approx(0.5).epsilon(1e-6));  // the tie: equal halves
  CHECK(r.weights[3][0] == Approx(0.5).epsilon(1e-6));
  // A row's choice depends on that row alone; strides skip padding.
  const float padded[] = {0.0f, 2.0f, -1.0f, 2.0f, 99.0f};
  route_top_k(padded, 1, 4, 5, 2, true, r);
  CHECK(r.rows[1] == std::vector<int64_t>{0});
  CHECK(r.rows[3] == std::vector<int64_t>{0});
  // NaN logits (a broken model) rank last instead of breaking the sort.
  const float nan[] = {NAN, 1.0f, NAN, 0.0f};
  route_top_k(nan, 1, 4, 4, 4, false, r);
  CHECK(r.active() == 4);
}

TEST_CASE("MoE ranked choice probability: in-sample, or held out by halves", "[moe]") {
  // One choice per row of 4 experts. Two halves of 10 rows that agree: held out = in-sample.
  RoutingCounts all, half;
  all.reset(2, 4);
  half.reset(2, 4);
  all.rows = {20, 0};
  all.counts[0] = {12, 4, 2, 2};
  half.rows = {10, 0};
  half.counts[0] = {6, 2, 1, 1};
  const std::vector<double> in_sample = ranked_choice_probability(all, {}, 4);
  REQUIRE(in_sample.size() == 4);
  CHECK(in_sample[0] == Approx(0.6));
  CHECK(in_sample[3] == Approx(0.1));
  const std::vector<double> agree = ranked_choice_probability(all, half, 4);
  for (size_t i = 0; i < 4; ++i) CHECK(agree[i] == Approx(in_sample[i]));
  // Halves that disagree on the hottest: the first half chose expert 0 only, the second expert 1
  // only. In the sample the two look equally hot (0.5 each); held out, the expert one half ranks
  // first is the one the other never chose.
  all.counts[0] = {10, 10, 0, 0};
  half.counts[0] = {10, 0, 0, 0};
  const std::vector<double> noisy = ranked_choice_probability(all, {}, 4);
  CHECK(noisy[0] == Approx(0.5));
  const std::vector<double> held = ranked_choice_probability(all, half, 4);
  CHECK(held[0] == Approx(0.0));
  CHECK(held[1] == Approx(1.0));
  CHECK(held[0] + held[1] + held[2] + held[3] == Approx(1.0));  // still one choice per row
  // A half with every row (or none) of a layer is no split: in-sample.
  half.rows = {20, 0};
  CHECK(ranked_choice_probability(all, half, 4)[0] == Approx(0.5));
  CHECK(ranked_choice_probability(all, half, 8).empty());  // another model's expert count
}

TEST_CASE("MoE routing counts: per layer and expert, hottest first, choice probabilities", "[moe]") {
  RoutingCounts c;
  CHECK(c.empty());
  CHECK(hot_first_order(c).empty());
  c.reset(2, 4);
  CHECK(c.empty());
  // Layer 0: row 0 picks 2 and 0, row 1 picks 1 and 3 (as in the test above); then row 0 again.
  const float logits[] = {1.0f, -2.0f, 3.0f, 0.5f, /**/ 0.0f, 2.0f, -1.0f, 2.0f};
  MoeRouting r;
  route_top_k(logits, 2, 4, 4, 2, true, r);
  c.add(0, r, 2);
  route_top_k(logits, 1, 4, 4, 2, true, r);
  c.add(0, r, 1);
  CHECK_FALSE(c.empty());
  CHECK(c.rows == std::vector<int64_t>{3, 0});
  CHECK(c.counts[0] == std::vector<int64_t>{2, 1, 2, 1});
  // Equal counts keep the lower index first.
  CHECK(c.hot_first(0) == std::vector<int64_t>{0, 2, 1, 3});
  CHECK(c.hot_first(1) == std::vector<int64_t>{0, 1, 2, 3});
  const std::vector<double> p = c.choice_probability(0);
  CHECK(p[0] == Approx(2.0 / 3));
  CHECK(p[0] + p[1] + p[2] + p[3] == Approx(2.0));  // k = 2 choices per row
  CHECK(hot_first_order(c).size() == 2);
  // Under uniform probabilities the expected experts are the uniform share's.
  const std::vector<double> uniform(128, 8.0 / 128);
  for (int64_t rows : {1, 8, 64})
    CHECK(expected_experts(uniform, rows) ==
          Approx(128 * expected_expert_share(128, 8, rows)).epsilon(1e-12));
  // A skew concentrates the same choices on fewer experts.
  std::vector<double> skewed(128, 4.0 / 96);
  for (int e = 0; e < 32; ++e) skewed[e] = 4.0 / 32;
  CHECK(expected_experts(skewed, 8) < expected_experts(uniform, 8));
}

TEST_CASE("MoE: experts move on demand up to half of them, beyond that when it is faster",
          "[moe]") {
  // By the share alone: 1 row of 1 in 4, 2 rows of 1 in 4 (44%); 4 rows expect 68%.
  CHECK(experts_on_demand(4, 1, 1));
  CHECK(experts_on_demand(4, 1, 2));
  CHECK_FALSE(experts_on_demand(4, 1, 4));
  // Beyond half and short of all of them, the cost decides.
  CHECK(experts_by_cost(4, 1, 4));
  CHECK_FALSE(experts_by_cost(4, 1, 2));
  CHECK_FALSE(experts_by_cost(4, 4, 1));  // every expert
  CHECK_FALSE(experts_by_cost(0, 0, 64));  // no experts
  CHECK(move_experts_on_demand(0.5, 1.0, 0.9, 100.0, true));  // whatever the times
  // A load-bound forward (10 s of loads, 9 of them experts, 1 s of compute): reading 64% of the
  // experts on the compute lane, 1 + 5.76 s, beats the 10 s of whole units.
  CHECK(move_experts_on_demand(0.64, 10.0, 9.0, 1.0, true));
  // A compute-bound one hides its loads: whole units (10 s) against 10 + 0.64 x 1.8 s.
  CHECK_FALSE(move_experts_on_demand(0.64, 2.0, 1.8, 10.0, true));
  // Without overlap fewer bytes are always faster; all of them, or no expert bytes, never are.
  CHECK(move_experts_on_demand(0.99, 2.0, 1.8, 10.0, false));
  CHECK_FALSE(move_experts_on_demand(1.0, 10.0, 9.0, 1.0, true));
  CHECK_FALSE(move_experts_on_demand(0.64, 10.0, 0.0, 1.0, true));
}

TEST_CASE("MoE: MLP units run consecutive batches together within the scratch's rows", "[moe]") {
  using V = std::vector<int64_t>;
  CHECK(expert_batch_groups({64, 64, 64, 64}, 2048) == V{4});
  CHECK(expert_batch_groups({64, 64, 64, 64}, 128) == V{2, 2});
  CHECK(expert_batch_groups({64, 64, 64, 1}, 128) == V{2, 2});
  CHECK(expert_batch_groups({2048, 2048, 2048}, 2048) == V{1, 1, 1});
  CHECK(expert_batch_groups({3000, 64, 64}, 2048) == V{1, 2});  // one beyond the cap runs alone
  CHECK(expert_batch_groups({}, 2048).empty());
  // The cap: the scratch's rows, and no more than 256 rows per expert on average.
  CHECK(expert_group_cap(8192, 8, 2) == 1024);     // Mixtral: 4 batches of 64 together, not of 2048
  CHECK(expert_group_cap(8192, 128, 8) == 4096);   // Qwen3-30B-A3B
  CHECK(expert_group_cap(512, 128, 8) == 512);     // the scratch's rows
  CHECK(expert_group_cap(8192, 60, 4) == 3840);    // Qwen2-MoE
}

TEST_CASE("MoE: expert tensors are row slices of GGUF's stacked ffn_*_exps", "[moe]") {
  ModelConfig c = architecture_config("qwen3moe");
  c.n_layers = 2, c.d_model = 64, c.ffn_dim = 24, c.n_experts = 8, c.n_experts_used = 2;
  const auto s = expert_slice(c, "blk.1.ffn_down.5.weight");
  REQUIRE(s.has_value());
  CHECK(s->merged == "blk.1.ffn_down_exps.weight");
  CHECK(s->rows == 64);
  CHECK(s->row0 == 5 * 64);
  CHECK(s->total_rows == 8 * 64);
  CHECK(model_tensor_dims(c, "blk.1.ffn_gate.7.weight") == std::vector<int64_t>{64, 24});
  CHECK_FALSE(expert_slice(c, "blk.1.ffn_down.8.weight"));  // no expert 8
  CHECK_FALSE(expert_slice(c, "blk.2.ffn_up.0.weight"));    // no layer 2
  CHECK_FALSE(expert_slice(c, "blk.1.ffn_up.0.weightx"));
  CHECK(model_tensor_dims(c, "blk.0.ffn_gate.weight").empty());  // no dense MLP
}

TEST_CASE("MoE: refused configs name the field", "[moe][hf]") {
  namespace fs = std::filesystem;
  const test::TempDir scratch;
  const fs::path tmp = scratch.file("qwen3_moe");
  fs::copy(std::string(OFFGEN_TEST_DATA) + "/hf_models/qwen3_moe", tmp,
           fs::copy_options::recursive);
  const nlohmann::json orig = nlohmann::json::parse(std::ifstream(tmp / "config.json"));
  auto refused = [&](const char* key, nlohmann::json value, const char* says) {
    nlohmann::json j = orig;
    j[key] = std::move(value);
    std::ofstream(tmp / "config.json") << j.dump();
    INFO(key);
    CHECK_THROWS_WITH(open_model(tmp.string()), Catch::Contains(says));
  };
  refused("mlp_only_layers", {0}, "mlp_only_layers");
  refused("decoder_sparse_step", 2, "decoder_sparse_step");
  refused("num_experts_per_tok", 9, "num_experts_per_tok");
  refused("moe_intermediate_size", 0, "moe_intermediate_size");
  refused("moe_intermediate_size", 32, "ffn_gate.0.weight");  // the weights disagree
}

TEST_CASE("MoE: llama-quantize's Q8_0 Qwen2-MoE (its shared-expert gate a vector) stays close to "
          "the golden",
          "[moe][gguf]") {
  // The block-format file llama.cpp writes: Q8_0 blocks kept native, ffn_gate_inp_shexp stored
  // as {n_embd}. Its logits are transformers' up to Q8_0's rounding; the same text where the
  // golden's top two are clearly apart.
  const auto g = test::golden();
  const nlohmann::json* gm = nullptr;
  for (const auto& m : g["models"])
    if (m["name"] == "qwen2_moe") gm = &m;
  REQUIRE(gm != nullptr);
  OpenedModel om = open_model(test::kDir + "/" + (*gm)["gguf_q8_0"].get<std::string>());
  CHECK(om.source->config().shared_ffn_dim == 48);
  CHECK(om.source->tensor("blk.0.ffn_gate_inp_shexp.weight").dims ==
        std::vector<int64_t>{32, 1});
  auto be = make_cpu_backend(2, WeightMode::native_mode());
  DecoderModel model(*om.source, *be);
  ResidentUnits units(model);
  const int64_t V = model.config().vocab_size;
  int positions = 0, agree = 0;
  double worst = 0;
  for (const auto& cs : (*gm)["cases"]) {
    const auto ids = cs["ids"].get<std::vector<int32_t>>();
    test::Runner run(model, units, static_cast<int64_t>(ids.size()));
    const auto logits = run.feed(ids);
    for (size_t p = 0; p < ids.size(); ++p) {
      std::vector<double> want(static_cast<size_t>(V));
      for (int64_t v = 0; v < V; ++v) {
        want[v] = cs["logits"][p][v].get<double>();
        worst = std::max(worst, std::fabs(logits[p * V + v] - want[v]));
      }
      std::vector<double> sorted = want;
      std::sort(sorted.rbegin(), sorted.rend());
      if (sorted[0] - sorted[1] < 0.1) continue;
      ++positions;
      const int32_t top = test::argmax(&logits[p * V], V);
      agree += want[top] == sorted[0];
    }
  }
  INFO("max |dlogit| " << worst);
  CHECK(worst < 0.15);
  CHECK(positions > 20);
  CHECK(agree == positions);
}
