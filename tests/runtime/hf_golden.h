// Golden-data parity helpers shared by the HF parity and convert tests: the golden file of
// tools/gen_hf_golden.py, a one-sequence runner over a private KV cache, and the check of a
// model (checkpoint directory or GGUF) against a golden entry.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/backend/backend.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/model/decoder.h"
#include "runtime/text/tokenizer.h"

namespace offgen::test {

inline const std::string kDir = std::string(OFFGEN_TEST_DATA) + "/hf_models";

inline nlohmann::json golden() {
  std::ifstream in(kDir + "/golden.json");
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// One sequence run token-chunk by token-chunk over a private KV cache of `capacity` slots.
class Runner {
 public:
  Runner(const DecoderModel& m, const ResidentUnits& units, int64_t capacity)
      : m_(m), units_(units), c_(m.config()), cap_(capacity) {
    kv_.resize(c_.n_layers * 2 * c_.kv_dim() * cap_);
    for (int64_t l = 0; l < c_.n_layers; ++l) {
      float* base = kv_.data() + l * 2 * c_.kv_dim() * cap_;
      views_.push_back(KvSeqView{base, base + c_.kv_dim() * cap_, cap_});
    }
  }
  // Feeds ids; returns the logits of every fed position, [n][vocab].
  std::vector<float> feed(const std::vector<int32_t>& ids) {
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<int32_t> pos(n);
    for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(past_ + i);
    const SeqSpan span{0, n, past_};
    std::vector<float> hidden(n * c_.d_model);
    m_.embed(ids, pos.data(), hidden.data(), scratch_);
    for (int64_t u = 0; u < m_.num_units(); ++u) {
      const UnitBatch b{n, {&span, 1}, pos.data(),
                        DecoderModel::unit_has_cache(u)
                            ? std::span<const KvSeqView>(&views_[DecoderModel::unit_layer(u)], 1)
                            : std::span<const KvSeqView>()};
      m_.run_unit(u, units_.blob(u), hidden.data(), b, scratch_);
    }
    std::vector<int64_t> rows(n);
    for (int64_t i = 0; i < n; ++i) rows[i] = i;
    std::vector<float> logits(n * c_.vocab_size);
    m_.output_step(hidden.data(), rows, logits.data(), scratch_);
    past_ += n;
    return logits;
  }

 private:
  const DecoderModel& m_;
  const ResidentUnits& units_;
  const ModelConfig& c_;
  int64_t cap_, past_ = 0;
  std::vector<float> kv_;
  std::vector<KvSeqView> views_;
  DecoderScratch scratch_;
};

inline int32_t argmax(const float* v, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = static_cast<int32_t>(i);
  return best;
}

// The model at `path` (checkpoint directory or GGUF) against golden entry `gm`: logits at every
// prompt position within 1e-4 (relative to the largest |logit| where that exceeds 1) and the 16
// greedy tokens, decoded one at a time through the KV cache.
inline void check_against_golden(const std::string& path, const nlohmann::json& gm,
                                 Backend& be) {
  OpenedModel om = open_model(path);
  DecoderModel model(*om.source, be);
  ResidentUnits units(model);
  const ModelConfig& c = model.config();
  REQUIRE(c.vocab_size == gm["vocab_size"].get<int64_t>());
  Tokenizer tok(om.vocab);
  double worst = 0;
  for (const auto& cs : gm["cases"]) {
    const auto ids = cs["ids"].get<std::vector<int32_t>>();
    INFO(path << ": " << cs["text"].get<std::string>());
    // The checkpoint's own tokenizer gives transformers' ids (BOS where the template adds it).
    CHECK(tok.encode(cs["text"].get<std::string>()) == ids);
    Runner run(model, units, static_cast<int64_t>(ids.size()) + 16);
    const auto logits = run.feed(ids);
    const auto& want = cs["logits"];
    REQUIRE(want.size() == ids.size());
    double max_diff = 0, max_abs = 0;
    for (size_t p = 0; p < ids.size(); ++p)
      for (int64_t v = 0; v < c.vocab_size; ++v) {
        const double w = want[p][v].get<double>();
        max_diff = std::max(max_diff, std::fabs(logits[p * c.vocab_size + v] - w));
        max_abs = std::max(max_abs, std::fabs(w));
      }
    INFO("max |dlogit| = " << max_diff << " (max |logit| " << max_abs << ")");
    CHECK(max_diff <= 1e-4 * std::max(1.0, max_abs));
    worst = std::max(worst, max_diff);
    // Greedy: one token at a time through the KV cache (the decode path).
    std::vector<int32_t> greedy;
    int32_t next = argmax(&logits[(ids.size() - 1) * c.vocab_size], c.vocab_size);
    for (int i = 0; i < 16; ++i) {
      greedy.push_back(next);
      next = argmax(run.feed({next}).data(), c.vocab_size);
    }
    CHECK(greedy == cs["greedy"].get<std::vector<int32_t>>());
  }
  INFO(path << ": max |dlogit| over all cases " << worst);
  CHECK(worst < 1e-3);  // reported with -s
}


}  // namespace offgen::test
