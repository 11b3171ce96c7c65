// Shared-context throughput and decode attention time against separate prefills.
#include "scheduler/shared_bench.h"

#include <chrono>
#include <random>

#include <fmt/format.h>

#include "policies/kv/kvzip.h"
#include "runtime/core/error.h"
#include "runtime/loaders/model_loader.h"
#include "scheduler/shared_context.h"

namespace offgen {
namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::vector<int32_t> random_ids(const Tokenizer& tok, int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> d(0, tok.vocab_size() - 1);
  std::vector<int32_t> ids;
  while (static_cast<int64_t>(ids.size()) < n) {
    const int32_t id = d(rng);
    if (!tok.is_special(id)) ids.push_back(id);
  }
  return ids;
}

// One decode row per question over the shared context (and question_len own slots), every
// layer, `reps` times: the attention op's time alone.
double time_attention(Backend& be, const ModelConfig& c, const SharedContext& ctx, int64_t q_len,
                      int64_t questions, int reps) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int64_t own = q_len + 1;
  std::vector<float> k(questions * own * c.kv_dim()), v(k.size());
  for (auto& x : k) x = n01(rng);
  for (auto& x : v) x = n01(rng);
  std::vector<float> q(questions * c.q_dim()), out(q.size());
  for (auto& x : q) x = n01(rng);
  std::vector<SeqSpan> seqs(questions);
  for (int64_t i = 0; i < questions; ++i) seqs[i] = SeqSpan{i, 1, q_len};
  double seconds = 0;
  for (int rep = 0; rep < reps; ++rep)
    for (int64_t l = 0; l < c.n_layers; ++l) {
      std::vector<KvSeqView> views(questions);
      for (int64_t i = 0; i < questions; ++i) {
        views[i] = KvSeqView{k.data() + i * own * c.kv_dim(), v.data() + i * own * c.kv_dim(), own};
        views[i].prefix = ctx.layer(l);
      }
      AttentionArgs a;
      a.n_heads = c.n_heads, a.n_kv_heads = c.n_kv_heads, a.head_dim = c.head_dim;
      a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      a.seqs = seqs;
      a.kv = views;
      const auto t = std::chrono::steady_clock::now();
      be.attention(q.data(), a, out.data());
      seconds += since(t);
    }
  return seconds / reps;
}

}  // namespace

void SharedBenchOptions::validate() const {
  OFFGEN_CHECK(context_len >= 1 && question_len >= 1 && gen_len >= 1 && questions >= 1, kConfig,
               "--shared-context, --prompt-len, --gen-len and --num-prompts must be positive");
  OFFGEN_CHECK(policy == "kvzip" || policy == "full", kConfig,
               "bench --shared-context: --kv-policy must be kvzip or full (got '{}')", policy);
  OFFGEN_CHECK(ratio > 0 && ratio <= 1, kConfig, "--kv-budget {} must be in (0, 1]", ratio);
}

SharedBenchReport run_shared_bench(const EngineOptions& base, const SharedBenchOptions& o) {
  o.validate();
  SharedBenchReport r;
  r.options = o;
  OpenedModel om = open_model(base.model);
  const Tokenizer tok(om.vocab);
  auto backend = make_cpu_backend(base.threads, dtype_from_name(base.weight_dtype));
  const LlamaModel model(*om.source, *backend);
  const ModelConfig& c = model.config();
  OFFGEN_CHECK(o.context_len + o.question_len + o.gen_len <= c.context_length, kConfig,
               "context {} + question {} + generation {} exceed the model's window of {}",
               o.context_len, o.question_len, o.gen_len, c.context_length);
  const ResidentUnits units(model);
  ContextRunner runner(model, units);
  std::mt19937_64 rng(o.seed);
  MultiqueryPrompt p;
  p.context_ids = random_ids(tok, o.context_len, rng);
  for (int64_t i = 0; i < o.questions; ++i)
    p.question_ids.push_back(random_ids(tok, o.question_len, rng));

  // Shared: the context once, compressed once, all questions over it.
  auto t = std::chrono::steady_clock::now();
  const ContextCache cache = runner.prefill(p.context_ids);
  r.shared_prefill_seconds = since(t);
  const int64_t n = cache.n;
  std::vector<int32_t> all(n);
  for (int64_t i = 0; i < n; ++i) all[i] = static_cast<int32_t>(i);
  const std::vector<std::vector<int32_t>> keep_all(c.n_layers * c.n_kv_heads, all);
  t = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> kept = keep_all;
  if (o.policy == "kvzip") {
    const auto scores = runner.kvzip_scores(
        cache, p, tok.encode("\n\nRepeat the previous context exactly.", true),
        tok.encode("\n\nRepeat the part of the previous context exactly, starting with ", true));
    kept = kvzip_select(KvzipScores{c.n_layers, c.n_kv_heads, n, 0, scores}, o.ratio,
                        KvzipBudget::kGlobal);
  }
  r.shared_score_seconds = since(t);
  const SharedContext shared(c, cache.k, cache.v, n, kept, n);
  t = std::chrono::steady_clock::now();
  runner.answer(shared, p.question_ids, o.gen_len, {});
  r.shared_answer_seconds = since(t);
  r.shared_throughput = static_cast<double>(o.questions * o.gen_len) /
                        (r.shared_prefill_seconds + r.shared_score_seconds + r.shared_answer_seconds);
  r.context_bytes = shared.bytes();
  r.retained = static_cast<double>(shared.kept_pairs()) / (c.n_layers * c.n_kv_heads * n);
  {
    const SharedContext whole(c, cache.k, cache.v, n, keep_all, n);
    r.context_bytes_full = whole.bytes();
    r.attention_full_seconds = time_attention(*backend, c, whole, o.question_len, o.questions, 3);
    r.attention_seconds = time_attention(*backend, c, shared, o.question_len, o.questions, 3);
  }
  if (!o.separate) return r;

  // Separate: the engine prefills context + question for every prompt.
  EngineOptions eo = base;
  eo.policy.gpu_batch_size = o.questions;
  eo.policy.num_gpu_batches = 1;
  eo.policy.batch_given = true;
  eo.max_context = o.context_len + o.question_len + o.gen_len;
  Engine engine(eo);
  std::vector<Request> reqs(o.questions);
  for (int64_t i = 0; i < o.questions; ++i) {
    reqs[i].id = std::to_string(i);
    reqs[i].prompt_ids = p.context_ids;
    reqs[i].prompt_ids.insert(reqs[i].prompt_ids.end(), p.question_ids[i].begin(),
                              p.question_ids[i].end());
    reqs[i].sampling.max_tokens = o.gen_len;
    reqs[i].sampling.ignore_eos = true;
  }
  t = std::chrono::steady_clock::now();
  for (const Result& res : engine.generate(reqs))
    OFFGEN_CHECK(res.error.empty(), kResource, "bench: a separate prompt failed: {}", res.error);
  r.separate_seconds = since(t);
  r.separate_throughput = static_cast<double>(o.questions * o.gen_len) / r.separate_seconds;
  r.separate_kv_bytes = o.questions * o.context_len * c.kv_bytes_per_token();
  return r;
}

nlohmann::json SharedBenchReport::to_json() const {
  return {{"shared_context", options.context_len},
          {"questions", options.questions},
          {"question_len", options.question_len},
          {"gen_len", options.gen_len},
          {"kv_policy", options.policy == "kvzip" ? fmt::format("kvzip@{:g}", options.ratio)
                                                   : std::string("full")},
          {"retained", retained},
          {"shared_prefill_seconds", shared_prefill_seconds},
          {"shared_score_seconds", shared_score_seconds},
          {"shared_answer_seconds", shared_answer_seconds},
          {"shared_total_throughput", shared_throughput},
          {"context_bytes", context_bytes},
          {"context_bytes_full", context_bytes_full},
          {"separate_seconds", separate_seconds},
          {"separate_total_throughput", separate_throughput},
          {"separate_context_kv_bytes", separate_kv_bytes},
          {"decode_attention_seconds", attention_seconds},
          {"decode_attention_seconds_full", attention_full_seconds}};
}

std::string SharedBenchReport::summary() const {
  std::string s = fmt::format(
      "{} questions x (question {} + gen {}) over one shared context of {} tokens, {} (retained "
      "{:.3f})\n  shared:   prefill {:.2f} s, scoring {:.2f} s, answers {:.2f} s -> {:.1f} tok/s; "
      "context KV held once: {:.1f} MiB (whole {:.1f} MiB)\n",
      options.questions, options.question_len, options.gen_len, options.context_len,
      options.policy == "kvzip" ? fmt::format("kvzip@{:g}", options.ratio) : "full", retained,
      shared_prefill_seconds, shared_score_seconds, shared_answer_seconds, shared_throughput,
      context_bytes / 1048576.0, context_bytes_full / 1048576.0);
  if (separate_seconds > 0)
    s += fmt::format("  separate: {:.2f} s -> {:.1f} tok/s (context KV {:.1f} MiB); shared/separate "
                     "throughput {:.2f}x\n",
                     separate_seconds, separate_throughput, separate_kv_bytes / 1048576.0,
                     shared_throughput / separate_throughput);
  s += fmt::format("  decode attention (one row per question, all layers): {:.4f} s vs {:.4f} s "
                   "over the whole context = {:.3f}x",
                   attention_seconds, attention_full_seconds,
                   attention_seconds / attention_full_seconds);
  return s;
}

}  // namespace offgen
