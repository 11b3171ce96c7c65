// eval multiquery: flags, table, JSON and plot.
#include "cli/multiquery_command.h"

#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "cli/line_plot.h"
#include "cli/policy_flags.h"
#include "cli/flag_checks.h"
#include "runtime/core/atomic_file.h"
#include "runtime/core/error.h"
#include "eval/multiquery_eval.h"

namespace offgen {

void EvalMultiqueryCommand::add_to(CLI::App* eval) {
  cmd_ = eval->add_subcommand(
      "multiquery", "Answers to several questions per context over a context compressed once "
                    "and shared: agreement with the full cache and accuracy, per policy and ratio");
  cmd_->add_option("--model", model,
                   "Model: a .gguf file, a Hugging Face checkpoint directory, or dummy:PRESET[:FORMAT]")
      ->required();
  cmd_->add_option("--contexts", contexts,
                   "JSONL: {\"id\", \"context\", \"questions\": [{\"q\", \"answer\"?}, ...]} per line")
      ->required();
  cmd_->add_option("--threads", threads, "Compute threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  add_weight_dtype(cmd_, weight_dtype);
  add_kv_dtype(cmd_, kv_dtype, false);
  std::vector<std::string> context;  // the registry's context policies but the reference
  for (const KvPolicyInfo& p : kv_policies())
    if (p.compresses_context() && p.kind != KvPolicyKind::kFull) context.emplace_back(p.name);
  cmd_->add_option("--kv-policy", policies,
                   fmt::format("Policies, comma-separated: {} (full always runs as the reference)",
                               fmt::join(context, ", ")));
  cmd_->add_option("--kv-budget", budgets, "Retained fractions of the context, comma-separated");
  cmd_->add_option("--max-tokens", max_tokens, "Greedy answer length limit (24)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd_->add_option("--max-contexts", max_contexts, "Evaluate only the first N contexts (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  cmd_->add_flag("--completion", completion,
                 "Questions are starts of sentences for the model to complete (base models): "
                 "each follows the context after a blank line, no chat template");
  cmd_->add_option("--json", json, "Write the rows as JSON (DESIGN.md eval rows)");
  cmd_->add_option("--answers", answers,
                   "Write every answer as JSONL (context, question, policy, ratio, answer, "
                   "full_answer, gold)");
  cmd_->add_option("--plot", plot, "Write a PNG of agreement against the retained ratio");
}

int EvalMultiqueryCommand::run() const {
  EngineOptions eo;
  eo.model = model;
  eo.threads = threads;
  eo.weight_dtype = WeightMode::parse(weight_dtype);
  if (!kv_dtype.empty()) eo.policy.set_kv_dtype(kv_dtype);
  EvalMultiqueryOptions o;
  o.contexts = contexts;
  for (const std::string& name : split_list(policies)) {
    const KvPolicyInfo* p = find_kv_policy(name);
    OFFGEN_CHECK(p != nullptr && p->compresses_context(), kConfig,
                 "eval multiquery: unknown policy '{}' ({})", name,
                 fmt::join(context_policy_names(), ", "));
    o.policies.push_back(p->kind);
  }
  o.ratios = parse_number_list(budgets, "--kv-budget");
  o.max_answer_tokens = max_tokens;
  o.max_contexts = max_contexts;
  o.answers = answers;
  o.completion = completion;
  const auto rows = run_eval_multiquery(eo, o, [](const std::string& line) {
    std::fprintf(stderr, "offgen: eval: %s\n", line.c_str());
  });
  // policy (by name) -> its kind, and ratio -> (agreement, accuracy or -1)
  struct Line {
    KvPolicyKind kind = KvPolicyKind::kFull;
    std::map<double, std::pair<double, double>> cells;
  };
  std::map<std::string, Line> table;
  // A completion's whole answer includes what a base model runs on with after the value: the
  // table and plot give the first words' agreement there.
  const std::string shown = completion ? "first_word_agreement" : "agreement";
  for (const EvalRow& r : rows) {
    Line& line = table[std::string(kv_policy_name(r.policy))];
    line.kind = r.policy;
    auto& cell = line.cells.try_emplace(r.budget, 0.0, -1.0).first->second;
    if (r.metric == shown) cell.first = r.value;
    if (r.metric == "accuracy") cell.second = r.value;
  }
  std::printf("%s with the full cache (accuracy) per retained ratio of the context\n",
              completion ? "first-word agreement" : "agreement");
  std::printf("%-14s", "policy");
  for (double b : o.ratios) std::printf(" %16s", fmt::format("ratio {:g}", b).c_str());
  std::printf("\n");
  for (const auto& [policy, line] : table) {
    std::printf("%-14s", policy.c_str());
    for (double b : o.ratios) {
      // The reference ran once, at ratio 1.
      auto it = line.cells.find(line.kind == KvPolicyKind::kFull ? 1.0 : b);
      std::string cell = "-";
      if (it != line.cells.end())
        cell = it->second.second >= 0
                   ? fmt::format("{:.3f} ({:.3f})", it->second.first, it->second.second)
                   : fmt::format("{:.3f}", it->second.first);
      std::printf(" %16s", cell.c_str());
    }
    std::printf("\n");
  }
  if (!json.empty()) write_json_atomically(json, eval_rows_json(rows));
  if (!plot.empty()) {
    LinePlot lp;
    lp.title = "Multi-query answers over a context compressed once";
    lp.x_label = "context KV retained (fraction)";
    lp.y_label = completion ? "first-word agreement with the full cache"
                            : "agreement with the full cache";
    for (const auto& [policy, line] : table) {
      if (line.kind == KvPolicyKind::kFull) continue;
      PlotSeries s{policy, {}};
      for (const auto& [b, cell] : line.cells) s.points.push_back({b, cell.first});
      lp.series.push_back(s);
    }
    write_line_plot_png(lp, plot);
  }
  return 0;
}

}  // namespace offgen
