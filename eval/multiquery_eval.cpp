// Multi-query evaluation over shared compressed contexts.
#include "eval/multiquery_eval.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/backend/backend.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/text/chat_template.h"
#include "scheduler/context_compression.h"
#include "scheduler/context_prompt.h"

namespace offgen {
namespace {

using nlohmann::json;

}  // namespace

MultiqueryPrompt build_multiquery_prompt(const Tokenizer& tok, const MultiqueryContext& mc,
                                         bool completion) {
  // Each question as a request over the context: the chat form where the model has a template
  // (the context opens the user turn, a blank line before the question — kvpress's pipeline with
  // bench/peers/kvpress_multiquery.py's QUESTION_PREFIX), else plain text on its own lines; a
  // completion-style question (the start of a sentence) after a blank line, ending there.
  const bool chat = !completion && !tok.vocab().chat_template.empty();
  MultiqueryPrompt p;
  for (size_t i = 0; i < mc.questions.size(); ++i) {
    Request r;
    r.context = mc.context;
    r.chat = chat;
    r.prompt = chat         ? mc.questions[i].q
               : completion ? "\n\n" + mc.questions[i].q
                            : "\n\n" + mc.questions[i].q + "\n";
    ContextSplit s = split_at_context(tok, r);
    if (i == 0) {
      p.context_ids = std::move(s.context_ids);
      p.protected_len = s.protected_len;
      p.postfix_ids = std::move(s.postfix_ids);
    }
    p.question_ids.push_back(std::move(s.question_ids));
  }
  return p;
}

std::string normalize_answer(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    const bool word = std::isalnum(ch) || ch >= 0x80;
    if (word)
      out += static_cast<char>(std::tolower(ch));
    else if (!out.empty() && out.back() != ' ')
      out += ' ';
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string first_word(const std::string& answer) {
  const auto space = [](unsigned char ch) { return std::isspace(ch) != 0; };
  auto b = std::find_if_not(answer.begin(), answer.end(), space);
  auto e = std::find_if(b, answer.end(), space);
  const auto word = [](unsigned char ch) { return std::isalnum(ch) || ch == '_' || ch >= 0x80; };
  while (e != b && !word(static_cast<unsigned char>(*(e - 1)))) --e;
  return std::string(b, e);
}

bool answer_matches(const std::string& output, const std::string& gold) {
  const std::string g = normalize_answer(gold);
  if (g.empty()) return false;
  // Whole words: the answer between spaces inside the padded output.
  std::string padded_out(1, ' '), padded_gold(1, ' ');
  padded_out.append(normalize_answer(output)).push_back(' ');
  padded_gold.append(g).push_back(' ');
  return padded_out.find(padded_gold) != std::string::npos;
}

std::vector<MultiqueryContext> load_multiquery_contexts(const std::string& path) {
  std::ifstream in(path);
  OFFGEN_CHECK(in.good(), kInput, "{}: cannot read the contexts file", path);
  std::vector<MultiqueryContext> out;
  std::map<std::string, int64_t> line_of;  // context id -> its line
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      OFFGEN_THROW(kInput, "{}:{}: not valid JSON at byte {}: {}", path, no, e.byte, e.what());
    } catch (const json::exception& e) {  // valid syntax, e.g. a number beyond a double
      OFFGEN_THROW(kInput, "{}:{}: {}", path, no, e.what());
    }
    auto str = [&](const json& o, const char* key, bool required) -> std::optional<std::string> {
      auto it = o.find(key);
      if (it == o.end() || it->is_null()) {
        OFFGEN_CHECK(!required, kInput, "{}:{}: field '{}' is missing", path, no, key);
        return std::nullopt;
      }
      OFFGEN_CHECK(it->is_string(), kInput, "{}:{}: field '{}' must be a string", path, no, key);
      return it->get<std::string>();
    };
    OFFGEN_CHECK(j.is_object(), kInput, "{}:{}: a line must be a JSON object", path, no);
    MultiqueryContext mc;
    mc.id = str(j, "id", false).value_or(std::to_string(out.size()));
    const auto [first, fresh] = line_of.emplace(mc.id, no);
    OFFGEN_CHECK(fresh, kInput, "{}:{}: context id '{}' is given twice (first on line {})", path,
                 no, mc.id, first->second);
    mc.context = *str(j, "context", true);
    OFFGEN_CHECK(!mc.context.empty(), kInput, "{}:{}: field 'context' must not be empty", path, no);
    auto qs = j.find("questions");
    OFFGEN_CHECK(qs != j.end() && qs->is_array() && !qs->empty(), kInput,
                 "{}:{}: field 'questions' must be a non-empty array", path, no);
    for (size_t i = 0; i < qs->size(); ++i) {
      const json& q = (*qs)[i];
      OFFGEN_CHECK(q.is_object(), kInput, "{}:{}: questions[{}] must be an object", path, no, i);
      MultiqueryQuestion mq{*str(q, "q", true), str(q, "answer", false)};
      OFFGEN_CHECK(!mq.q.empty(), kInput, "{}:{}: questions[{}].q must not be empty", path, no, i);
      // An answer that normalises to nothing could never match: every accuracy would be 0.
      OFFGEN_CHECK(!mq.answer || !normalize_answer(*mq.answer).empty(), kInput,
                   "{}:{}: questions[{}].answer '{}' has no letter or digit to grade", path, no,
                   i, *mq.answer);
      mc.questions.push_back(std::move(mq));
    }
    out.push_back(std::move(mc));
  }
  OFFGEN_CHECK(!out.empty(), kInput, "{}: no contexts", path);
  return out;
}

void EvalMultiqueryOptions::validate() const {
  OFFGEN_CHECK(!contexts.empty(), kConfig, "eval multiquery: give --contexts FILE");
  for (KvPolicyKind p : policies)
    OFFGEN_CHECK(kv_policy_info(p).compresses_context(), kConfig,
                 "eval multiquery: unknown policy '{}' ({})", kv_policy_name(p),
                 fmt::join(context_policy_names(), ", "));
  for (double r : ratios)
    OFFGEN_CHECK(r > 0 && r <= 1, kConfig, "--kv-budget {} must be a retained fraction in (0, 1]",
                 r);
  OFFGEN_CHECK(max_answer_tokens >= 1, kConfig, "--max-tokens must be >= 1");
}

std::vector<EvalRow> run_eval_multiquery(const EngineOptions& base, const EvalMultiqueryOptions& o,
                                         const std::function<void(const std::string&)>& log) {
  o.validate();
  auto contexts = load_multiquery_contexts(o.contexts);
  if (o.max_contexts > 0 && static_cast<int64_t>(contexts.size()) > o.max_contexts)
    contexts.resize(o.max_contexts);
  OpenedModel om = open_model(base.model);
  const Tokenizer tok(om.vocab);
  auto backend = make_cpu_backend(base.threads, base.weight_dtype);
  const DecoderModel model(*om.source, *backend);
  const ResidentUnits units(model);
  const ModelConfig& c = model.config();
  // The engine's KV dtype (its --kv-dtype, or the CPU backend's default).
  ContextRunner runner(model, units, base.policy.kv_storage(backend->caps()));
  // An answer ends at the end of the turn or its first line break (QA-style answers; the
  // rambling a small model adds after the answer would make agreement a test of the ramble).
  std::vector<int32_t> stop = {tok.eos_id()};
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (id != tok.eos_id() && tok.token_bytes(id).find('\n') != std::string::npos)
      stop.push_back(id);
  const KvzipRepeat repeat = KvzipRepeat::from(tok);

  struct Tally {
    int64_t questions = 0, agree = 0, first_agree = 0, graded = 0, correct = 0, kept = 0,
            pairs = 0;
  };
  // By (policy name, ratio): the rows come out in that order.
  std::map<std::pair<std::string, double>, std::pair<KvPolicyKind, Tally>> tally;
  std::ofstream answers_out;
  if (!o.answers.empty()) {
    answers_out.open(o.answers, std::ios::trunc);
    OFFGEN_CHECK(answers_out.good(), kIo, "{}: cannot write the answers", o.answers);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t ci = 0; ci < contexts.size(); ++ci) {
    const MultiqueryContext& mc = contexts[ci];
    const MultiqueryPrompt p = build_multiquery_prompt(tok, mc, o.completion);
    const int64_t n = static_cast<int64_t>(p.context_ids.size());
    int64_t longest = 0;
    for (const auto& q : p.question_ids) longest = std::max<int64_t>(longest, q.size());
    OFFGEN_CHECK(n + longest + o.max_answer_tokens <= c.context_length, kInput,
                 "{}: context '{}' has {} tokens, its longest question {} and each answer up to "
                 "{} (--max-tokens): {} in all, past the model's window of {}",
                 o.contexts, mc.id, n, longest, o.max_answer_tokens,
                 n + longest + o.max_answer_tokens, c.context_length);
    const ContextCache cache = runner.prefill(p.context_ids);
    // Answers over a compressed context, and its kept pairs on the layers the policy compresses
    // (sliding-window layers keep their window whatever the policy).
    const auto answers_for = [&](const std::vector<std::vector<int32_t>>& kept) {
      const SharedContext shared(*backend, c, cache, kept, n);
      return std::pair{runner.answer(shared, p.question_ids, o.max_answer_tokens, stop),
                       policy_pairs(c, kept)};
    };
    ContextCompressor compressor(runner, cache, p, repeat);
    const auto full_run = answers_for(compressor.keep(KvPolicyKind::kFull, 1.0));
    const std::vector<std::vector<int32_t>>& full = full_run.first;
    const int64_t full_pairs = full_run.second;
    std::vector<std::string> full_text;  // the reference answers, decoded once per context
    for (const auto& ids : full) full_text.push_back(tok.decode(ids, true));
    auto score = [&](KvPolicyKind policy, double ratio,
                     const std::vector<std::vector<int32_t>>& got, int64_t kept) {
      const std::string name(kv_policy_name(policy));
      auto& [kind, t] = tally[{name, ratio}];
      kind = policy;
      t.kept += kept, t.pairs += full_pairs;
      for (size_t i = 0; i < got.size(); ++i) {
        const std::string answer = tok.decode(got[i], true);
        if (answers_out.is_open())
          answers_out << json{{"context", mc.id},
                              {"question", mc.questions[i].q},
                              {"policy", name},
                              {"ratio", ratio},
                              {"answer", answer},
                              {"full_answer", full_text[i]},
                              {"gold", mc.questions[i].answer.value_or("")}}
                                 .dump(-1, ' ', false, json::error_handler_t::replace)
                          << "\n";
        ++t.questions;
        t.agree += got[i] == full[i];
        t.first_agree += first_word(answer) == first_word(full_text[i]);
        if (const auto& gold = mc.questions[i].answer) {
          ++t.graded;
          t.correct += answer_matches(answer, *gold);
        }
      }
    };
    score(KvPolicyKind::kFull, 1.0, full, full_pairs);
    for (KvPolicyKind policy : o.policies) {
      if (policy == KvPolicyKind::kFull) continue;
      for (double r : o.ratios) {
        const auto run = answers_for(compressor.keep(policy, r));
        score(policy, r, run.first, run.second);
      }
    }
    if (log)
      log(fmt::format("context {}/{} '{}': {} tokens, {} questions, {:.1f} s", ci + 1,
                      contexts.size(), mc.id, n, mc.questions.size(),
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  }
  std::vector<EvalRow> rows;
  for (const auto& [key, entry] : tally) {
    const double ratio = key.second;
    const auto& [policy, t] = entry;
    rows.push_back({policy, ratio, "agreement", static_cast<double>(t.agree) / t.questions,
                    t.questions, "all"});
    rows.push_back({policy, ratio, "first_word_agreement",
                    static_cast<double>(t.first_agree) / t.questions, t.questions, "all"});
    if (t.graded > 0)
      rows.push_back({policy, ratio, "accuracy", static_cast<double>(t.correct) / t.graded,
                      t.graded, "all"});
    rows.push_back({policy, ratio, "retained", static_cast<double>(t.kept) / t.pairs, t.questions,
                    "all"});
  }
  return rows;
}

}  // namespace offgen
