// eval ppl against a reference KV dtype (--kv-reference) on the tiny Llama checkpoint: the same
// dtype as the reference gives zero KL and full agreement; a coarser one a small positive KL; the
// rows name the metrics.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <string>

#include "eval/eval_runner.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

double metric(const std::vector<EvalRow>& rows, const std::string& name, KvPolicyKind p) {
  for (const EvalRow& r : rows)
    if (r.text == "all" && r.metric == name && r.policy == p) return r.value;
  FAIL("no row " << name);
  return 0;
}

}  // namespace

TEST_CASE("eval ppl: next-token KL and agreement against a reference KV dtype", "[eval][kv_dtype]") {
  const test::TempDir dir;
  const std::string text = dir.path() + "/t.txt";
  {
    std::ofstream out(text);
    for (int i = 0; i < 40; ++i) out << "The quick brown fox " << i << " jumps over the lazy dog. ";
  }
  EngineOptions eo;
  eo.model = std::string(OFFGEN_TEST_DATA) + "/hf_models/llama";
  eo.threads = 2;
  EvalPplOptions o;
  o.texts = {text};
  o.tokens = 96;
  o.prefix = 48;
  o.policies = {KvPolicyKind::kH2o};
  o.budgets = {0.5};
  o.reference_kv = DType::kF32;
  for (DType t : {DType::kF32, DType::kQ4G64}) {
    INFO(dtype_name(t));
    eo.policy.kv_dtype = t;
    const std::vector<EvalRow> rows = run_eval_ppl(eo, o);
    const double kl = metric(rows, "kl_to_reference", KvPolicyKind::kFull);
    const double agree = metric(rows, "reference_top1_agreement", KvPolicyKind::kFull);
    const double ref_ppl = metric(rows, "reference_ppl", KvPolicyKind::kFull);
    const double ppl = metric(rows, "ppl", KvPolicyKind::kFull);
    if (t == DType::kF32) {  // the reference itself: identical logits
      CHECK(std::abs(kl) < 1e-12);  // zero up to the rounding of the normalisers
      CHECK(agree == 1.0);
      CHECK(ppl == ref_ppl);
    } else {  // 4-bit keys and values move the distribution a little
      CHECK(kl > 0.0);
      CHECK(kl < 0.5);
      CHECK(ppl != ref_ppl);
    }
    // Eviction on top of the dtype: further from the reference than the full cache.
    CHECK(metric(rows, "kl_to_reference", KvPolicyKind::kH2o) > kl);
  }
}
