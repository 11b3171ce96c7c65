// eval ppl: flags, table, JSON and plot.
#include "cli/eval_command.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "cli/line_plot.h"
#include "cli/policy_flags.h"
#include "cli/flag_checks.h"
#include "policies/policy_overrides.h"
#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"
#include "eval/eval_runner.h"
#include "runtime/core/atomic_file.h"

namespace offgen {

void EvalPplCommand::add_to(CLI::App* eval) {
  cmd_ = eval->add_subcommand(
      "ppl", "Teacher-forced perplexity of texts under KV policies and budgets (eviction as in "
             "generation), and top-1 agreement with the full cache");
  cmd_->add_option("--model", model, "Model: a .gguf file, a Hugging Face checkpoint directory, or dummy:PRESET[:FORMAT]")->required();
  cmd_->add_option("--threads", threads, "Compute threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  add_weight_dtype(cmd_, weight_dtype);
  cmd_->add_flag("--compress-weight", compress_weight,
                 "4-bit group-compressed matmul weights (q4g64), to measure their perplexity cost");
  add_kv_dtype(cmd_, kv_dtype, false);
  cmd_->add_flag("--compress-cache", compress_cache, "--kv-dtype q4g64 (FlexGen's name)");
  cmd_->add_option("--kv-reference", kv_reference,
                   "Also score the full cache stored as this KV dtype (e.g. f32) first, and report "
                   "every configuration's next-token KL and top-1 agreement against it")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "q8_0", "q4g64"}));
  cmd_->add_option("--text", texts, "Text file (repeatable, or comma-separated)")->required();
  cmd_->add_option("--kv-policy", policies,
                   "Policies, comma-separated (full always runs as the reference)");
  cmd_->add_option("--kv-budget", budgets,
                   "Budgets, comma-separated: fractions of the evaluated tokens, or token counts");
  cmd_->add_option("--tokens", tokens, "Leading tokens of each text that are evaluated (2048)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 24));
  cmd_->add_option("--prefix", prefix,
                   "Tokens prefilled in one chunk before token-by-token scoring (default 512, "
                   "or half of --tokens when that is smaller)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd_->add_option("--scope", scope,
                   "What the budget bounds: all (every step, default) or prompt (the prefix is "
                   "compacted once, scored tokens are added without eviction)")
      ->check(CLI::IsMember({"all", "prompt"}));
  cmd_->add_option("--json", json, "Write the rows as JSON (DESIGN.md eval rows + text)");
  cmd_->add_option("--plot", plot, "Write a PNG of perplexity against budget per policy");
}

int EvalPplCommand::run() const {
  EngineOptions eo;
  eo.model = model;
  eo.threads = threads;
  eo.weight_dtype = WeightMode::parse(weight_dtype);
  eo.policy.compress_weight = compress_weight;
  PolicyOverrides kv;  // --kv-dtype / --compress-cache as the policy flags resolve them
  kv.kv_dtype = kv_dtype;
  if (compress_cache) kv.compress_cache = true;
  const Policy resolved = kv.resolve();
  eo.policy.kv_dtype = resolved.kv_dtype;
  EvalPplOptions o;
  for (const std::string& t : texts)
    for (const std::string& one : split_list(t)) o.texts.push_back(one);
  for (const std::string& name : split_list(policies)) o.policies.push_back(parse_kv_policy(name));
  o.budgets = parse_number_list(budgets, "--kv-budget");
  o.tokens = tokens;
  // The default prefix (512) shrinks to half of a smaller --tokens; a given one is kept as is.
  o.prefix = cmd_->get_option("--prefix")->count() > 0 ? prefix : std::min(prefix, tokens / 2);
  o.scope = parse_kv_scope(scope);
  if (!kv_reference.empty()) o.reference_kv = parse_kv_dtype(kv_reference);
  const auto rows = run_eval_ppl(eo, o, [](const std::string& line) {
    std::fprintf(stderr, "offgen: eval: %s\n", line.c_str());
  });

  // Table over the pooled texts: one line per policy but the reference (full), by name, ppl and
  // agreement per budget.
  std::map<std::string, std::map<double, std::pair<double, double>>> all;
  double full_ppl = 0;
  for (const EvalRow& r : rows) {
    if (r.text != "all") continue;
    if (r.metric == "reference_ppl" || r.metric == "kl_to_reference" ||
        r.metric == "reference_top1_agreement") {
      if (r.policy == KvPolicyKind::kFull)
        std::printf("full cache against the %s cache: %s %.6g\n", kv_reference.c_str(),
                    r.metric.c_str(), r.value);
      continue;
    }
    if (r.policy == KvPolicyKind::kFull) {
      if (r.metric == "ppl") full_ppl = r.value;
      continue;
    }
    auto& cell = all[std::string(kv_policy_name(r.policy))][r.budget];
    (r.metric == "ppl" ? cell.first : cell.second) = r.value;
  }
  std::printf("perplexity (top-1 agreement with full) over %zu text(s), %lld scored tokens each, "
              "budget scope %s; full cache (KV %s): ppl %.4f\n",
              o.texts.size(), static_cast<long long>(tokens - o.prefix), scope.c_str(),
              std::string(dtype_name(eo.policy.kv_storage(backend_caps(eo.backend)))).c_str(),
              full_ppl);
  std::printf("%-8s", "policy");
  for (double b : o.budgets) std::printf(" %18s", fmt::format("budget {:g}", b).c_str());
  std::printf("\n");
  for (const auto& [policy, cells] : all) {
    std::printf("%-8s", policy.c_str());
    for (double b : o.budgets)
      std::printf(" %18s",
                  fmt::format("{:.3f} ({:.3f})", cells.at(b).first, cells.at(b).second).c_str());
    std::printf("\n");
  }
  if (!json.empty()) write_json_atomically(json, eval_rows_json(rows));
  if (!plot.empty()) {
    LinePlot lp;
    lp.title = fmt::format("Perplexity under KV eviction ({} text(s), scope {})", o.texts.size(),
                           scope);
    const bool fractions = o.budgets.front() <= 1;
    lp.x_label = fractions ? "KV budget (fraction of tokens kept)" : "KV budget (tokens)";
    lp.y_label = "perplexity";
    lp.log_y = true;
    double lo = o.budgets.front(), hi = lo;
    for (double b : o.budgets) lo = std::min(lo, b), hi = std::max(hi, b);
    lp.series.push_back(
        {std::string(kv_policy_name(KvPolicyKind::kFull)), {{lo, full_ppl}, {hi, full_ppl}}});
    for (const auto& [policy, cells] : all) {
      PlotSeries s{policy, {}};
      for (const auto& [b, cell] : cells) s.points.push_back({b, cell.first});
      lp.series.push_back(s);
    }
    write_line_plot_png(lp, plot);
  }
  return 0;
}

}  // namespace offgen
