// Shared multi-query contexts on the tiny Qwen2 checkpoint (ChatML template, GQA 4/2): the
// context is stored once for N questions, answering leaves it bitwise untouched, a context that
// keeps every pair is the full cache bitwise (positions continue from the context length), and
// compression physically removes pairs per head.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "policies/kv/kvzip.h"
#include "scheduler/context_compression.h"
#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"
#include "runtime/loaders/model_loader.h"
#include "eval/multiquery_eval.h"
#include "eval/shared_bench.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

struct Fixture {
  OpenedModel om = open_model(std::string(OFFGEN_TEST_DATA) + "/hf_models/qwen2");
  Tokenizer tok{om.vocab};
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  DecoderModel model{*om.source, *be};
  ResidentUnits units{model};
  MultiqueryPrompt prompt() const {
    MultiqueryContext mc;
    mc.context = "The code of Ann is 4172. Rain fell on the hills. The code of Bo is 9930. ok";
    mc.questions = {{"Code of Ann?", "4172"}, {"Code of Bo?", "9930"}, {"Hello", std::nullopt}};
    return build_multiquery_prompt(tok, mc);
  }
};

std::vector<std::vector<int32_t>> keep_all(const ModelConfig& c, int64_t n) {
  std::vector<int32_t> all(n);
  for (int64_t i = 0; i < n; ++i) all[i] = static_cast<int32_t>(i);
  return std::vector<std::vector<int32_t>>(c.n_layers * c.n_kv_heads, all);
}

// Reference: context and question through ONE slot table (stored as `dtype`), the question a
// second chunk at n_past = context length: the question's last-row logits.
std::vector<float> concatenated(const DecoderModel& m, const ResidentUnits& units,
                                const std::vector<int32_t>& ctx, const std::vector<int32_t>& q,
                                DType dtype = DType::kF32) {
  const ModelConfig& c = m.config();
  const int64_t L = static_cast<int64_t>(ctx.size()), Q = static_cast<int64_t>(q.size());
  const int64_t rb = kv_row_bytes(dtype, c.n_kv_heads, c.head_dim);
  std::vector<std::byte> kv(c.n_layers * 2 * rb * (L + Q));
  std::vector<KvSeqView> views(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    std::byte* base = kv.data() + l * 2 * rb * (L + Q);
    views[l] = KvSeqView{base, base + rb * (L + Q), L + Q};
    views[l].dtype = dtype;
  }
  DecoderScratch scratch;
  std::vector<float> logits(c.vocab_size);
  auto feed = [&](const std::vector<int32_t>& ids, int64_t past) {
    std::vector<int32_t> pos(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) pos[i] = static_cast<int32_t>(past + i);
    const SeqSpan span{0, static_cast<int64_t>(ids.size()), past};
    m.forward(ids, pos.data(), {&span, 1},
              [&](int64_t l) { return std::span<const KvSeqView>(&views[l], 1); }, units.fn(),
              logits.data(), scratch);
  };
  feed(ctx, 0);
  feed(q, L);
  return logits;
}

}  // namespace

TEST_CASE("shared context: keeping every pair is the full cache bitwise, positions continue",
          "[multiquery]") {
  Fixture f;
  const MultiqueryPrompt p = f.prompt();
  // In every KV dtype: the context is stored as the sequences' own tables are.
  for (DType t : kv_dtypes()) {
    INFO(dtype_name(t));
    ContextRunner runner(f.model, f.units, t);
    const ContextCache cache = runner.prefill(p.context_ids);
    const int64_t L = cache.n;
    REQUIRE(L == static_cast<int64_t>(p.context_ids.size()));
    const SharedContext ctx(*f.be, f.model.config(), cache, keep_all(f.model.config(), L), L);
    CHECK(ctx.bytes() == ctx.kept_pairs() * kv_head_bytes(t, f.model.config().head_dim) * 2);
    std::vector<std::vector<float>> first;
    runner.answer(ctx, p.question_ids, 4, {}, &first);
    REQUIRE(first.size() == p.question_ids.size());
    for (size_t i = 0; i < p.question_ids.size(); ++i) {
      const auto ref = concatenated(f.model, f.units, p.context_ids, p.question_ids[i], t);
      INFO("question " << i);
      CHECK(std::memcmp(ref.data(), first[i].data(), ref.size() * 4) == 0);
    }
  }
  ContextRunner runner(f.model, f.units, DType::kF32);
  const ContextCache cache = runner.prefill(p.context_ids);
  const int64_t L = cache.n;
  REQUIRE(p.protected_len > 0);
  // KVzip at ratio 1 keeps every pair.
  const std::vector<float> scores = runner.kvzip_scores(
      cache, p, f.tok.encode("Repeat the previous context exactly."),
      f.tok.encode("Repeat the part of the previous context exactly, starting with "));
  const KvzipScores s{f.model.config().n_layers, f.model.config().n_kv_heads, L, p.protected_len,
                      scores};
  CHECK(kvzip_select(s, 1.0, KvzipBudget::kGlobal) == keep_all(f.model.config(), L));
}

TEST_CASE("shared context: stored once for N questions, untouched by answering", "[multiquery]") {
  Fixture f;
  const MultiqueryPrompt p = f.prompt();
  const ModelConfig& c = f.model.config();
  ContextRunner runner(f.model, f.units, DType::kF32);
  const ContextCache cache = runner.prefill(p.context_ids);
  const int64_t L = cache.n;
  const std::vector<float> scores = runner.kvzip_scores(
      cache, p, f.tok.encode("Repeat the previous context exactly."),
      f.tok.encode("Repeat the part of the previous context exactly, starting with "));
  const KvzipScores s{c.n_layers, c.n_kv_heads, L, p.protected_len, scores};
  const auto kept = kvzip_select(s, 0.3, KvzipBudget::kGlobal);
  const SharedContext ctx(*f.be, c, cache, kept, L);
  // Physically removed: only the kept pairs are held, each head its own length.
  const int64_t evictable = c.n_layers * c.n_kv_heads * (L - p.protected_len);
  CHECK(ctx.kept_pairs() ==
        c.n_layers * c.n_kv_heads * p.protected_len + std::llround(0.3 * evictable));
  CHECK(ctx.bytes() == ctx.kept_pairs() * c.head_dim * 4 * 2);
  bool lengths_differ = false;
  for (size_t t = 1; t < kept.size(); ++t) lengths_differ |= kept[t].size() != kept[0].size();
  CHECK(lengths_differ);  // the global threshold gives per-head budgets

  std::vector<std::vector<float>> before;
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      before.push_back(ctx.k_rows(l, h));
    }
  const int64_t max_tokens = 6;
  std::vector<std::vector<float>> batch_first;
  const auto batch = runner.answer(ctx, p.question_ids, max_tokens, {}, &batch_first);
  // Own KV per question only; the context is held once whatever N is.
  int64_t own = 0;
  for (const auto& q : p.question_ids)
    own += c.n_layers * 2 * c.kv_dim() * 4 * (static_cast<int64_t>(q.size()) + max_tokens);
  CHECK(runner.last_own_bytes() == own);
  // Each question alone, one after the other: same answers, same logits; context untouched.
  for (size_t i = 0; i < p.question_ids.size(); ++i) {
    std::vector<std::vector<float>> one_first;
    const auto one = runner.answer(ctx, {p.question_ids[i]}, max_tokens, {}, &one_first);
    CHECK(one[0] == batch[i]);
    CHECK(std::memcmp(one_first[0].data(), batch_first[i].data(), one_first[0].size() * 4) == 0);
  }
  size_t t = 0;
  int changed = 0;
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int64_t h = 0; h < c.n_kv_heads; ++h, ++t) {
      changed += ctx.k_rows(l, h) != before[t];
    }
  CHECK(changed == 0);
}

TEST_CASE("shared context on sliding-window layers: the window's tail kept, the rest compressed",
          "[multiquery]") {
  // The tiny Gemma 3 (five sliding-window layers of window 4, one global; no chat template):
  // questions behind a shared context equal, bitwise, the concatenated prompt whether the context
  // keeps every pair or, on the sliding-window layers, only its last window (what compression
  // keeps there); KVzip chooses among the global layer's pairs only.
  OpenedModel om = open_model(std::string(OFFGEN_TEST_DATA) + "/hf_models/gemma3");
  const Tokenizer tok(om.vocab);
  auto be = make_cpu_backend(2);
  const DecoderModel model(*om.source, *be);
  const ResidentUnits units(model);
  const ModelConfig& c = model.config();
  REQUIRE(c.sliding_window == 4);
  REQUIRE(policy_layers(c) == std::vector<int64_t>{5});
  MultiqueryContext mc;
  mc.context = "The code of Ann is 4172. Rain fell on the hills. The code of Bo is 9930.";
  mc.questions = {{"The code of Ann is", "4172"}, {"The code of Bo is", "9930"}};
  const MultiqueryPrompt p = build_multiquery_prompt(tok, mc, true);
  const int64_t P = tok.vocab().add_bos ? 1 : 0;  // BOS, where the vocabulary adds one
  REQUIRE(p.protected_len == P);
  ContextRunner runner(model, units, DType::kF32);
  const ContextCache cache = runner.prefill(p.context_ids);
  const int64_t L = cache.n;
  REQUIRE(L > 2 * c.sliding_window);
  const KvzipRepeat repeat = KvzipRepeat::from(tok);
  REQUIRE(repeat.first.front() != tok.bos_id());  // the request continues the sequence
  ContextCompressor compressor(runner, cache, p, repeat);
  const auto full = compressor.keep(KvPolicyKind::kFull, 1.0);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    INFO("layer " << l);
    CHECK(static_cast<int64_t>(full[l * c.n_kv_heads].size()) == (c.is_sliding(l) ? 4 : L));
    CHECK(full[l * c.n_kv_heads].back() == L - 1);
  }
  for (const auto& kept : {keep_all(c, L), full}) {
    const SharedContext ctx(*be, c, cache, kept, L);
    std::vector<std::vector<float>> first;
    runner.answer(ctx, p.question_ids, 3, {}, &first);
    for (size_t i = 0; i < p.question_ids.size(); ++i) {
      const auto ref = concatenated(model, units, p.context_ids, p.question_ids[i]);
      INFO("question " << i << " pairs " << ctx.kept_pairs());
      CHECK(std::memcmp(ref.data(), first[i].data(), ref.size() * 4) == 0);
    }
  }
  // KVzip at 0.3: the global layer keeps the protected prefix and 30% of the rest; the
  // sliding-window layers their window whatever the ratio.
  const auto kept = compressor.keep(KvPolicyKind::kKvzip, 0.3);
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      INFO("layer " << l << " head " << h);
      if (c.is_sliding(l)) CHECK(kept[l * c.n_kv_heads + h] == full[l * c.n_kv_heads + h]);
    }
  int64_t global = 0;
  for (int64_t h = 0; h < c.n_kv_heads; ++h) global += kept[5 * c.n_kv_heads + h].size();
  CHECK(global == c.n_kv_heads * P + std::llround(0.3 * c.n_kv_heads * (L - P)));
  const SharedContext ctx(*be, c, cache, kept, L);
  const auto answers = runner.answer(ctx, p.question_ids, 3, {});
  CHECK(answers.size() == 2);
}

TEST_CASE("multiquery contexts file: errors name the line and field", "[multiquery]") {
  const test::TempDir scratch;
  const std::string path = scratch.file("bad.jsonl");
  std::ofstream(path) << "{\"id\": \"a\", \"context\": \"x\", \"questions\": [{\"q\": \"y\"}]}\n"
                      << "\n"
                      << "{\"id\": \"b\", \"context\": \"x\", \"questions\": [{\"answer\": \"z\"}]}\n";
  try {
    load_multiquery_contexts(path);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains(path + ":3") && Catch::Contains("'q'"));
  }
  // Lines that would run but grade nothing or twice: each refused naming line and field.
  const std::string q = "\"questions\": [{\"q\": \"y\"}]";
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"{\"id\": \"a\", \"context\": \"x\", " + q + "}\n{\"id\": \"a\", \"context\": \"w\", " + q +
                "}\n",
            ":2: context id 'a' is given twice (first on line 1)"},
           {"{\"context\": \"\", " + q + "}\n", ":1: field 'context' must not be empty"},
           {"{\"context\": \"x\", \"questions\": [{\"q\": \"\"}]}\n", ":1: questions[0].q must not be empty"},
           {"{\"context\": \"x\", \"questions\": [{\"q\": \"y\", \"answer\": \"!!\"}]}\n",
            ":1: questions[0].answer '!!' has no letter or digit"},
           {"{\"context\": \"x\", \"n\": 1e400, " + q + "}\n", ":1: "}}) {
    std::ofstream(path) << text;
    try {
      load_multiquery_contexts(path);
      FAIL("expected an error for " << text);
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(path + want));
    }
  }
  std::ofstream(path) << "{\"id\": \"a\", \"context\": \"x\", \"questions\": [{\"q\": \"y\", "
                         "\"answer\": \"Z 1\"}]}\n";
  const auto ok = load_multiquery_contexts(path);
  REQUIRE(ok.size() == 1);
  CHECK(ok[0].questions[0].answer == "Z 1");
  CHECK(normalize_answer(" The answer: Z-1! ") == "the answer z 1");
  CHECK(answer_matches("The code of Ann is 4172.", "4172"));
  CHECK_FALSE(answer_matches("The code of Ann is 41723.", "4172"));
  CHECK(answer_matches("It is Z-1", "z 1"));
  CHECK(first_word(" 9463. At the flower shop") == "9463");
  CHECK(first_word("\tZ-1!\n") == "Z-1");
  CHECK(first_word("...") == "");
  CHECK(first_word("  ") == "");
  CHECK(first_word("caf\xc3\xa9, then") == "caf\xc3\xa9");
}

TEST_CASE("bench --shared-context: the context is held once, compressed to the ratio",
          "[multiquery]") {
  EngineOptions eo;
  eo.model = std::string(OFFGEN_TEST_DATA) + "/hf_models/qwen2";
  eo.threads = 2;
  SharedBenchOptions o;
  o.context_len = 40, o.question_len = 5, o.gen_len = 4, o.questions = 3, o.ratio = 0.5;
  const SharedBenchReport r = run_shared_bench(eo, o);
  CHECK(r.retained == Approx(0.5).margin(0.01));
  CHECK(r.context_bytes < r.context_bytes_full);
  CHECK(r.context_bytes_full == 40 * r.separate_kv_bytes / (3 * 40));  // one copy vs three
  CHECK(r.separate_throughput > 0);
  CHECK(r.shared_throughput > 0);
  CHECK(r.to_json().at("kv_policy") == "kvzip@0.5");
  o.policy = KvPolicyKind::kTova;
  CHECK_THROWS_AS(run_shared_bench(eo, o), Error);
}

TEST_CASE("bench --shared-context on sliding-window layers: bytes at the window, retained on the "
          "policy's layers", "[multiquery]") {
  // The tiny Gemma 3: five sliding-window layers of window 4, one global; a 40-token context.
  EngineOptions eo;
  eo.model = std::string(OFFGEN_TEST_DATA) + "/hf_models/gemma3";
  eo.threads = 2;
  SharedBenchOptions o;
  o.context_len = 40, o.question_len = 5, o.gen_len = 4, o.questions = 2, o.ratio = 0.5;
  o.separate = false;
  const OpenedModel om = open_model(eo.model);
  const ModelConfig& c = om.source->config();
  REQUIRE(c.n_sliding_layers() == c.n_layers - 1);
  // In the CPU backend's default KV dtype (bf16: 2 bytes per value).
  const int64_t whole = 2 * ((c.n_layers - 1) * c.sliding_window + 40) * c.kv_dim() * 2;
  CHECK(c.kv_bytes_held(40, DType::kBF16) == whole);
  const SharedBenchReport r = run_shared_bench(eo, o);  // once failed its whole-context check
  CHECK(r.context_bytes_full == whole);
  CHECK(r.retained == Approx(0.5).margin(0.03));
  o.policy = KvPolicyKind::kFull;
  const SharedBenchReport kept = run_shared_bench(eo, o);
  CHECK(kept.retained == 1.0);
  CHECK(kept.context_bytes == whole);
}
