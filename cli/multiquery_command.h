// `offgen eval multiquery`: flags, the run over scheduler/multiquery_eval, the printed table,
// --json rows and the --plot chart (agreement with the full cache against the retained ratio).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace offgen {

class EvalMultiqueryCommand {
 public:
  void add_to(CLI::App* eval);
  bool parsed() const { return cmd_ && cmd_->parsed(); }
  int run() const;  // exit code; throws offgen::Error

 private:
  CLI::App* cmd_ = nullptr;
  std::string model, weight_dtype = "f32", contexts, json, plot, answers, kv_dtype;
  std::string policies = "kvzip,h2o,snapkv,sinks", budgets = "1,0.7,0.5,0.3,0.2,0.1";
  int threads = 0;
  int64_t max_tokens = 24, max_contexts = 0;
  bool completion = false;
};

}  // namespace offgen
