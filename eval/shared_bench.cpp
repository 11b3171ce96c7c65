// Shared-context throughput and decode attention time against separate prefills.
#include "eval/shared_bench.h"

#include <chrono>
#include <random>

#include <fmt/format.h>

#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"
#include "scheduler/context_compression.h"

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
  // The questions' own tables in the context's KV dtype (as the engine stores them).
  const DType t = ctx.dtype();
  const int64_t rb = kv_row_bytes(t, c.n_kv_heads, c.head_dim);
  std::vector<float> rows(questions * own * c.kv_dim()), hq(questions * c.q_dim());
  std::vector<std::byte> hk(questions * own * rb), hv(hk.size());
  for (auto* table : {&hk, &hv}) {
    for (auto& x : rows) x = n01(rng);
    kv_encode_rows(t, rows.data(), c.kv_dim(), questions * own, c.n_kv_heads, c.head_dim,
                   table->data());
  }
  for (auto& x : hq) x = n01(rng);
  // In the backend's device memory, where the context lives.
  const Buffer k = be.upload(hk.data(), static_cast<int64_t>(hk.size()));
  const Buffer v = be.upload(hv.data(), static_cast<int64_t>(hv.size()));
  const Buffer q = be.upload(hq.data(), static_cast<int64_t>(hq.size()) * 4);
  const Buffer out = be.alloc(static_cast<int64_t>(hq.size()) * 4, Tier::kDevice);
  std::vector<SeqSpan> seqs(questions);
  for (int64_t i = 0; i < questions; ++i) seqs[i] = SeqSpan{i, 1, q_len};
  double seconds = 0;
  for (int rep = 0; rep < reps; ++rep)
    for (int64_t l = 0; l < c.n_layers; ++l) {
      std::vector<KvSeqView> views(questions);
      for (int64_t i = 0; i < questions; ++i) {
        views[i] = KvSeqView{k.as<std::byte>() + i * own * rb, v.as<std::byte>() + i * own * rb,
                             own};
        views[i].dtype = t;
        views[i].prefix = ctx.layer(l);
      }
      AttentionArgs a;
      a.n_heads = c.n_heads, a.n_kv_heads = c.n_kv_heads, a.head_dim = c.head_dim;
      a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      a.seqs = seqs;
      a.kv = views;
      const auto t = std::chrono::steady_clock::now();
      be.attention(q.as<float>(), a, out.as<float>());
      be.synchronize();
      seconds += since(t);
    }
  return seconds / reps;
}

}  // namespace

void SharedBenchOptions::validate() const {
  OFFGEN_CHECK(context_len >= 1 && question_len >= 1 && gen_len >= 1 && questions >= 1, kConfig,
               "--shared-context, --prompt-len, --gen-len and --num-prompts must be positive");
  OFFGEN_CHECK(kv_policy_info(policy).compresses_context(), kConfig,
               "bench --shared-context: --kv-policy {} cannot compress a context (use one of: {})",
               kv_policy_name(policy), fmt::join(context_policy_names(), ", "));
  OFFGEN_CHECK(ratio > 0 && ratio <= 1, kConfig, "--kv-budget {} must be in (0, 1]", ratio);
}

std::string SharedBenchOptions::describe() const {
  if (!kv_policy_info(policy).takes(KvParam::kBudget)) return std::string(kv_policy_name(policy));
  return fmt::format("{}@{:g}", kv_policy_name(policy), ratio);
}

SharedBenchReport run_shared_bench(const EngineOptions& base, const SharedBenchOptions& o) {
  o.validate();
  SharedBenchReport r;
  r.options = o;
  // One engine for both runs: the shared requests name the context, the separate ones carry it
  // in their prompts (the context policy does not apply to requests without a context).
  EngineOptions eo = base;
  eo.policy.gpu_batch_size = o.questions;
  eo.policy.num_gpu_batches = 1;
  eo.policy.fix_batch();
  eo.policy.kv.kind = o.policy;
  eo.policy.kv.budget = o.ratio;
  eo.max_context = o.context_len + o.question_len + o.gen_len;
  Engine engine(eo);
  const ModelConfig& c = engine.config();
  OFFGEN_CHECK(eo.max_context <= c.context_length, kConfig,
               "context {} + question {} + generation {} exceed the model's window of {}",
               o.context_len, o.question_len, o.gen_len, c.context_length);
  std::mt19937_64 rng(o.seed);
  const std::vector<int32_t> context = random_ids(engine.tokenizer(), o.context_len, rng);
  std::vector<Request> shared(o.questions);
  for (int64_t i = 0; i < o.questions; ++i) {
    shared[i].id = std::to_string(i);
    shared[i].context_ids = context;
    shared[i].prompt_ids = random_ids(engine.tokenizer(), o.question_len, rng);
    shared[i].sampling.max_tokens = o.gen_len;
    shared[i].sampling.ignore_eos = true;
  }
  // The decode attention op over a built context, on the engine's backend, timed inside the
  // callback (and excluded from the answer time).
  double callback_seconds = 0;
  const auto time_context = [&](Engine& on, double& attention, int64_t& bytes) {
    Backend* be = &on.backend();
    GenerateCallbacks cb;
    cb.on_context = [&, be](const SharedContext& ctx) {
      const auto t0 = std::chrono::steady_clock::now();
      bytes = ctx.bytes();
      attention = time_attention(*be, c, ctx, o.question_len, o.questions, 3);
      callback_seconds += since(t0);
    };
    return cb;
  };

  // Shared: the context once, compressed once, every question over it.
  const GenerateCallbacks cb = time_context(engine, r.attention_seconds, r.context_bytes);
  auto t = std::chrono::steady_clock::now();
  for (const Result& res : engine.generate(shared, cb))
    OFFGEN_CHECK(res.error.empty(), kResource, "bench: a shared-context request failed: {}",
                 res.error);
  const double shared_seconds = since(t) - callback_seconds;
  const GenerationStats st = engine.last_stats();
  r.shared_prefill_seconds = st.context_prefill_seconds;
  r.shared_score_seconds = st.context_seconds - st.context_prefill_seconds;
  r.shared_answer_seconds = shared_seconds - st.context_seconds;
  r.shared_throughput = static_cast<double>(o.questions * o.gen_len) / shared_seconds;
  r.retained = st.context_retained();  // over the layers the policy compresses, as --report
  r.context_bytes_full = c.kv_bytes_held(o.context_len, engine.kv_dtype());
  // The same attention over the whole context: one question through a full-context engine.
  if (!kv_policy_info(o.policy).takes(KvParam::kBudget) || o.ratio >= 1) {
    r.attention_full_seconds = r.attention_seconds;
  } else {
    EngineOptions full = eo;
    full.policy.kv.kind = KvPolicyKind::kFull;
    Engine whole(full);
    std::vector<Request> one(1, shared[0]);
    one[0].sampling.max_tokens = 1;
    int64_t whole_bytes = 0;
    whole.generate(one, time_context(whole, r.attention_full_seconds, whole_bytes));
    OFFGEN_CHECK(whole_bytes == r.context_bytes_full, kInternal,
                 "bench: the whole context holds {} bytes, expected {}", whole_bytes,
                 r.context_bytes_full);
  }
  if (!o.separate) return r;

  // Separate: the engine prefills context + question for every prompt.
  std::vector<Request> separate = shared;
  for (Request& req : separate) {
    req.prompt_ids.insert(req.prompt_ids.begin(), context.begin(), context.end());
    req.context_ids.clear();
  }
  t = std::chrono::steady_clock::now();
  for (const Result& res : engine.generate(separate))
    OFFGEN_CHECK(res.error.empty(), kResource, "bench: a separate prompt failed: {}", res.error);
  r.separate_seconds = since(t);
  r.separate_throughput = static_cast<double>(o.questions * o.gen_len) / r.separate_seconds;
  r.separate_kv_bytes = o.questions * c.kv_bytes_held(o.context_len, engine.kv_dtype());
  return r;
}

nlohmann::json SharedBenchReport::to_json() const {
  return {{"shared_context", options.context_len},
          {"questions", options.questions},
          {"question_len", options.question_len},
          {"gen_len", options.gen_len},
          {"kv_policy", options.describe()},
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
      options.describe(),
      retained,
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
