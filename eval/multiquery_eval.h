// `offgen eval multiquery`: contexts with several questions each; per KV policy and retained
// ratio, the context is compressed once and every question is answered greedily over it (shared,
// read-only; each question's KV dropped after it). Metrics: agreement of the answers with the full
// cache's and accuracy against given answers; an answer ends at the end of the turn or at its
// first line break. Policies: kvzip (query-agnostic reconstruction
// scores, one global threshold; kvzip-uniform: the same count per head), h2o (the context
// prefill's accumulated attention), snapkv (scored by the first question, reused for all),
// sinks (StreamingLLM), full. The prompt follows kvpress's pipeline: the chat template rendered
// for one user turn holding the context, split there; question + the template's postfix.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/engine.h"
#include "scheduler/shared_context.h"
#include "eval/eval_runner.h"

namespace offgen {

struct MultiqueryQuestion {
  std::string q;
  std::optional<std::string> answer;
};
struct MultiqueryContext {
  std::string id, context;
  std::vector<MultiqueryQuestion> questions;
};

// Reads the JSONL (`{"id", "context", "questions": [{"q", "answer"?}, ...]}` per line; blank
// lines skipped). Throws Error(kInput) naming the file, line and field.
std::vector<MultiqueryContext> load_multiquery_contexts(const std::string& path);

struct EvalMultiqueryOptions {
  std::string contexts;               // JSONL file
  std::vector<KvPolicyKind> policies;  // context policies (the registry's; full always runs)
  std::vector<double> ratios;         // retained fractions of the context, (0, 1]
  int64_t max_answer_tokens = 24;
  int64_t max_contexts = 0;           // 0 = all
  std::string answers;                // JSONL of every answer ("" = none)
  // Questions are the starts of sentences to complete (base models): "\n\n" + q after the
  // context, no chat template, nothing after it.
  bool completion = false;
  void validate() const;              // throws Error(kConfig)
};

// Rows: per (policy, ratio) "agreement" (answers identical to the full cache's),
// "first_word_agreement" (their first words, first_word(), identical: the value a completion
// puts first, before a base model runs on), "accuracy"
// (answer_matches; only when answers are given) and
// "retained" (kept context pairs / all context pairs, protected prefix included, on the layers
// the policy compresses: policy_layers(), the global ones on a sliding-window model); `tokens` =
// questions. Also per context in the log. `base` gives the model and threads.
std::vector<EvalRow> run_eval_multiquery(const EngineOptions& base, const EvalMultiqueryOptions& o,
                                         const std::function<void(const std::string&)>& log = {});

// kvpress's prompt split: the chat template rendered for one user turn holding the context, cut
// after the context; the protected prefix (system prompt + user header) tokenised on its own;
// each question = a blank line + its text + the template's postfix (turn end + assistant header).
// Without a template: BOS (where the vocabulary adds one, protected) + the context, each question
// "\n\n" + q + "\n"; `completion`: BOS + the context, each question "\n\n" + q (template or not).
MultiqueryPrompt build_multiquery_prompt(const Tokenizer& tok, const MultiqueryContext& mc,
                                         bool completion = false);

// Accuracy: the normalised gold answer (lower case, every other character than letters, digits
// and non-ASCII a space, spaces collapsed) occurs in the normalised output between word
// boundaries (bench/peers/kvpress_multiquery.py scores the same way).
std::string normalize_answer(const std::string& s);
bool answer_matches(const std::string& output, const std::string& gold);
// The first whitespace-separated word without trailing punctuation ("9463. At the" -> "9463"; bytes
// >= 0x80 count as word characters), as bench/peers/kvpress_multiquery.py's first_word.
std::string first_word(const std::string& answer);

}  // namespace offgen
