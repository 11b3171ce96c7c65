// `offgen eval ppl`: flags, the run over scheduler/eval_runner, the printed table, --json rows
// and the --plot chart.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace offgen {

class EvalPplCommand {
 public:
  // Adds the `ppl` subcommand (and its flags) under `eval`.
  void add_to(CLI::App* eval);
  bool parsed() const { return cmd_ && cmd_->parsed(); }
  int run() const;  // exit code; throws offgen::Error

 private:
  CLI::App* cmd_ = nullptr;
  std::string model, weight_dtype = "f32", json, plot, scope = "all";
  int threads = 0;
  std::vector<std::string> texts;
  std::string policies = "h2o,window,sinks,tova,snapkv", budgets = "1,0.5,0.3,0.2,0.1";
  int64_t tokens = 2048, prefix = 512;
  bool compress_weight = false, compress_cache = false;
  std::string kv_dtype, kv_reference;
};

}  // namespace offgen
