// Teacher-forced perplexity under KV policies.
#include "eval/eval_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/core/error.h"
#include "runtime/text/tokenizer.h"

namespace offgen {
namespace {

// The reference's next-token distribution at one scored position: its kTopK likeliest tokens
// and the log of the rest's mass.
constexpr int kTopK = 64;
struct RefDist {
  int32_t id[kTopK];
  double logp[kTopK];
  double log_tail;
};

// Per text: the negative log-likelihood of each scored token and the top-1 prediction there;
// with `keep` the truncated distributions (a reference), against a reference the KL to it.
struct Scored {
  std::vector<double> nll;
  std::vector<int32_t> top1;
  std::vector<RefDist> dist;
  std::vector<double> kl;
};

// KL(p || q) with p = the reference's truncated distribution and q = softmax(row) (lse its
// log-normaliser, mx its max) grouped the same way: a lower bound of the exact divergence.
double kl_to(const RefDist& p, std::span<const float> row, double mx, double lse) {
  double kl = 0, q_top = 0;
  for (int j = 0; j < kTopK; ++j) {
    const double lq = static_cast<double>(row[p.id[j]]) - lse;
    q_top += std::exp(static_cast<double>(row[p.id[j]]) - mx);
    kl += std::exp(p.logp[j]) * (p.logp[j] - lq);
  }
  const double sum = std::exp(lse - mx);  // the row's sum of exp(x - mx)
  const double lq_tail = std::log(std::max(sum - q_top, sum * 1e-300)) + mx - lse;
  return kl + std::exp(p.log_tail) * (p.log_tail - lq_tail);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OFFGEN_CHECK(in.good(), kInput, "{}: cannot read the text", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Scored> score(Engine& engine, const std::vector<std::vector<int32_t>>& ids,
                          int64_t prefix, bool keep = false,
                          const std::vector<Scored>* ref = nullptr) {
  std::vector<Request> reqs(ids.size());
  std::vector<Scored> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    reqs[i].id = std::to_string(i);
    reqs[i].prompt_ids.assign(ids[i].begin(), ids[i].begin() + prefix);
    reqs[i].forced.assign(ids[i].begin() + prefix, ids[i].end());
    out[i].nll.resize(reqs[i].forced.size());
    out[i].top1.resize(reqs[i].forced.size());
    if (keep) out[i].dist.resize(reqs[i].forced.size());
    if (ref) out[i].kl.resize(reqs[i].forced.size());
  }
  std::vector<int32_t> order;
  GenerateCallbacks cb;
  cb.on_logits = [&](size_t i, int64_t step, std::span<const float> row) {
    size_t best = 0;
    double mx = row[0];
    for (size_t j = 1; j < row.size(); ++j)
      if (row[j] > mx) mx = row[j], best = j;
    double sum = 0;
    for (float x : row) sum += std::exp(static_cast<double>(x) - mx);
    const double lse = mx + std::log(sum);
    out[i].nll[step] = lse - row[reqs[i].forced[step]];
    out[i].top1[step] = static_cast<int32_t>(best);
    if (keep) {
      RefDist& d = out[i].dist[step];
      order.resize(row.size());
      for (size_t j = 0; j < row.size(); ++j) order[j] = static_cast<int32_t>(j);
      const int k = std::min<int>(kTopK, static_cast<int>(row.size()));
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
      double top = 0;
      for (int j = 0; j < kTopK; ++j) {
        d.id[j] = order[std::min(j, k - 1)];
        d.logp[j] = j < k ? static_cast<double>(row[d.id[j]]) - lse : -INFINITY;
        if (j < k) top += std::exp(static_cast<double>(row[d.id[j]]) - mx);
      }
      d.log_tail = std::log(std::max(sum - top, sum * 1e-300)) + mx - lse;
    }
    if (ref) out[i].kl[step] = kl_to((*ref)[i].dist[step], row, mx, lse);
  };
  for (const Result& r : engine.generate(reqs, cb))
    OFFGEN_CHECK(r.error.empty(), kInput, "evaluation request failed: {}", r.error);
  return out;
}

}  // namespace

void EvalPplOptions::validate() const {
  OFFGEN_CHECK(!texts.empty(), kConfig, "eval ppl: give at least one --text FILE");
  OFFGEN_CHECK(tokens >= 2, kConfig, "--tokens {} must be >= 2", tokens);
  OFFGEN_CHECK(prefix >= 1 && prefix < tokens, kConfig,
               "--prefix {} must be in [1, --tokens {}) so that some tokens are scored", prefix,
               tokens);
  for (KvPolicyKind p : policies)
    for (double b : budgets) {
      KvPolicyConfig c;
      c.kind = p, c.budget = b, c.scope = scope;
      c.validate();
    }
}

std::vector<EvalRow> run_eval_ppl(const EngineOptions& base, const EvalPplOptions& o,
                                  const std::function<void(const std::string&)>& log) {
  o.validate();
  EngineOptions eo = base;
  eo.policy.kv = KvPolicyConfig{};
  eo.policy.gpu_batch_size = static_cast<int64_t>(o.texts.size());
  eo.policy.num_gpu_batches = 1;
  eo.policy.fix_batch();
  eo.prefill_chunk = std::max<int64_t>(
      eo.prefill_chunk > 0 ? eo.prefill_chunk : backend_caps(eo.backend).default_prefill_chunk,
      o.prefix);  // the prefix is one chunk

  // The full cache first: the tokeniser for the texts, and the reference for agreement (after
  // the reference KV dtype's full cache, when one is given).
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> names;
  std::vector<Scored> full, reference;
  const std::vector<Scored>* vs_ref = nullptr;
  if (o.reference_kv) {
    EngineOptions ro = eo;
    ro.policy.kv_dtype = *o.reference_kv;
    Engine ref_engine(ro);
    OFFGEN_CHECK(o.tokens <= ref_engine.max_context(), kConfig,
                 "--tokens {} exceeds the model's context window of {}", o.tokens,
                 ref_engine.max_context());
    for (const std::string& path : o.texts) {
      std::vector<int32_t> t = ref_engine.tokenizer().encode(read_file(path), false);
      OFFGEN_CHECK(static_cast<int64_t>(t.size()) >= o.tokens, kInput,
                   "{}: has {} tokens; --tokens {} needs at least that many", path, t.size(),
                   o.tokens);
      t.resize(o.tokens);
      ids.push_back(std::move(t));
    }
    reference = score(ref_engine, ids, o.prefix, true);
    vs_ref = &reference;
    ids.clear();
  }
  {  // released before the next configuration loads its own model
    Engine full_engine(eo);
    OFFGEN_CHECK(o.tokens <= full_engine.max_context(), kConfig,
                 "--tokens {} exceeds the model's context window of {}", o.tokens,
                 full_engine.max_context());
    for (const std::string& path : o.texts) {
      std::vector<int32_t> t = full_engine.tokenizer().encode(read_file(path), false);
      OFFGEN_CHECK(static_cast<int64_t>(t.size()) >= o.tokens, kInput,
                   "{}: has {} tokens; --tokens {} needs at least that many", path, t.size(),
                   o.tokens);
      t.resize(o.tokens);
      ids.push_back(std::move(t));
      names.push_back(std::filesystem::path(path).filename().string());
    }
    full = score(full_engine, ids, o.prefix, false, vs_ref);
  }
  const int64_t scored = o.tokens - o.prefix;
  std::vector<EvalRow> rows;
  auto add_rows = [&](KvPolicyKind policy, double budget, const std::vector<Scored>& s,
                      const std::vector<Scored>& ref) {
    double nll_all = 0;
    int64_t agree_all = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      double nll = 0;
      int64_t agree = 0;
      for (int64_t k = 0; k < scored; ++k) {
        nll += s[i].nll[k];
        agree += s[i].top1[k] == ref[i].top1[k];
      }
      rows.push_back({policy, budget, "ppl", std::exp(nll / scored), scored, names[i]});
      rows.push_back({policy, budget, "top1_agreement", static_cast<double>(agree) / scored, scored,
                      names[i]});
      nll_all += nll, agree_all += agree;
    }
    const int64_t n = scored * static_cast<int64_t>(s.size());
    const double ppl = std::exp(nll_all / n), agree = static_cast<double>(agree_all) / n;
    rows.push_back({policy, budget, "ppl", ppl, n, "all"});
    rows.push_back({policy, budget, "top1_agreement", agree, n, "all"});
    std::string vs;
    if (vs_ref) {  // against the reference KV dtype's full cache, pooled over the texts
      double kl = 0;
      int64_t same = 0;
      for (size_t i = 0; i < s.size(); ++i)
        for (int64_t k = 0; k < scored; ++k) {
          kl += s[i].kl[k];
          same += s[i].top1[k] == reference[i].top1[k];
        }
      kl /= static_cast<double>(n);
      const double same_frac = static_cast<double>(same) / static_cast<double>(n);
      rows.push_back({policy, budget, "kl_to_reference", kl, n, "all"});
      rows.push_back({policy, budget, "reference_top1_agreement", same_frac, n, "all"});
      vs = fmt::format("; against the {} cache: KL {:.3e} nats, top-1 agreement {:.4f}",
                       dtype_name(*o.reference_kv), kl, same_frac);
    }
    if (log)
      log(fmt::format("{}@{:g}: ppl {:.4f}, top-1 agreement {:.4f}{} ({} tokens, {:.1f} s)",
                      kv_policy_name(policy), budget, ppl, agree, vs, n,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  };
  if (vs_ref) {
    double nll = 0;
    for (const Scored& r : reference)
      for (double x : r.nll) nll += x;
    const int64_t n = scored * static_cast<int64_t>(reference.size());
    rows.push_back({KvPolicyKind::kFull, 1.0, "reference_ppl", std::exp(nll / n), n, "all"});
  }
  add_rows(KvPolicyKind::kFull, 1.0, full, full);
  for (KvPolicyKind p : o.policies) {
    if (p == KvPolicyKind::kFull) continue;
    for (double b : o.budgets) {
      t0 = std::chrono::steady_clock::now();
      eo.policy.kv.kind = p;
      eo.policy.kv.budget = b;
      eo.policy.kv.scope = o.scope;
      Engine engine(eo);
      add_rows(p, b, score(engine, ids, o.prefix, false, vs_ref), full);
    }
  }
  return rows;
}

nlohmann::json eval_rows_json(const std::vector<EvalRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const EvalRow& r : rows)
    out.push_back({{"policy", std::string(kv_policy_name(r.policy))},
                   {"budget", r.budget},
                   {"metric", r.metric},
                   {"value", r.value},
                   {"tokens", r.tokens},
                   {"text", r.text}});
  return out;
}

}  // namespace offgen
