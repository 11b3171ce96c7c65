// eval multiquery: flags, table, JSON and plot.
#include "cli/multiquery_command.h"

#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "cli/line_plot.h"
#include "cli/policy_flags.h"
#include "cli/flag_checks.h"
#include "runtime/core/atomic_file.h"
#include "eval/multiquery_eval.h"

namespace offgen {

void EvalMultiqueryCommand::add_to(CLI::App* eval) {
  cmd_ = eval->add_subcommand(
      "multiquery", "Answers to several questions per context over a context compressed once "
                    "and shared: agreement with the full cache and accuracy, per policy and ratio");
  cmd_->add_option("--model", model,
                   "Model: a .gguf file, a Hugging Face checkpoint directory, or dummy:PRESET")
      ->required();
  cmd_->add_option("--contexts", contexts,
                   "JSONL: {\"id\", \"context\", \"questions\": [{\"q\", \"answer\"?}, ...]} per line")
      ->required();
  cmd_->add_option("--threads", threads, "Compute threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  add_weight_dtype(cmd_, weight_dtype);
  cmd_->add_option("--kv-policy", policies,
                   "Policies, comma-separated: kvzip, kvzip-uniform, h2o, snapkv, sinks (full "
                   "always runs as the reference)");
  cmd_->add_option("--kv-budget", budgets, "Retained fractions of the context, comma-separated");
  cmd_->add_option("--max-tokens", max_tokens, "Greedy answer length limit (24)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  cmd_->add_option("--max-contexts", max_contexts, "Evaluate only the first N contexts (0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
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
  eo.weight_dtype = weight_dtype;
  EvalMultiqueryOptions o;
  o.contexts = contexts;
  o.policies = split_list(policies);
  o.ratios = parse_number_list(budgets, "--kv-budget");
  o.max_answer_tokens = max_tokens;
  o.max_contexts = max_contexts;
  o.answers = answers;
  const auto rows = run_eval_multiquery(eo, o, [](const std::string& line) {
    std::fprintf(stderr, "offgen: eval: %s\n", line.c_str());
  });
  // policy -> ratio -> (agreement, accuracy or -1)
  std::map<std::string, std::map<double, std::pair<double, double>>> table;
  for (const EvalRow& r : rows) {
    auto& cell = table[r.policy].try_emplace(r.budget, 0.0, -1.0).first->second;
    if (r.metric == "agreement") cell.first = r.value;
    if (r.metric == "accuracy") cell.second = r.value;
  }
  std::printf("agreement with the full cache (accuracy) per retained ratio of the context\n");
  std::printf("%-14s", "policy");
  for (double b : o.ratios) std::printf(" %16s", fmt::format("ratio {:g}", b).c_str());
  std::printf("\n");
  for (const auto& [policy, cells] : table) {
    std::printf("%-14s", policy.c_str());
    for (double b : o.ratios) {
      auto it = cells.find(policy == "full" ? 1.0 : b);
      std::string cell = "-";
      if (it != cells.end())
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
    lp.y_label = "agreement with the full cache";
    for (const auto& [policy, cells] : table) {
      if (policy == "full") continue;
      PlotSeries s{policy, {}};
      for (const auto& [b, cell] : cells) s.points.push_back({b, cell.first});
      lp.series.push_back(s);
    }
    write_line_plot_png(lp, plot);
  }
  return 0;
}

}  // namespace offgen
