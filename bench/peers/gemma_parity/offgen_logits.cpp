// offgen side of the llama.cpp parity check (bench/peers/gemma_parity.py): for each line of a
// file of token ids ("id id id ..."), the next-token logits after the prompt (fp32, appended to
// --logits) and a greedy continuation of --steps tokens (one line of ids on stdout per prompt).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"
#include "scheduler/engine.h"

int main(int argc, char** argv) {
  CLI::App app{"offgen next-token logits and greedy continuations for pre-tokenised prompts"};
  std::string model, ids_path, logits_path, weight_dtype = "native", kv_dtype = "f32";
  int64_t steps = 32;
  int threads = 0;
  app.add_option("--model", model)->required();
  app.add_option("--ids", ids_path, "one prompt per line: token ids separated by spaces")
      ->required();
  app.add_option("--logits", logits_path, "fp32 rows out: [prompts][vocab]")->required();
  app.add_option("--steps", steps, "greedy tokens per prompt");
  app.add_option("--weight-dtype", weight_dtype);
  app.add_option("--threads", threads);
  app.add_option("--kv-dtype", kv_dtype, "KV cache storage (default f32, as llama.cpp's fp32 K/V)");
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<offgen::Request> reqs;
    std::ifstream in(ids_path);
    for (std::string line; std::getline(in, line);) {
      std::istringstream ss(line);
      offgen::Request r;
      r.id = std::to_string(reqs.size());
      for (int32_t id; ss >> id;) r.prompt_ids.push_back(id);
      if (r.prompt_ids.empty()) continue;
      r.sampling.temperature = 0.0f;
      r.sampling.max_tokens = steps;
      r.sampling.ignore_eos = true;
      reqs.push_back(std::move(r));
    }
    offgen::EngineOptions eo;
    eo.model = model;
    eo.weight_dtype = offgen::WeightMode::parse(weight_dtype);
    eo.threads = threads;
    eo.policy.kv_dtype = offgen::parse_kv_dtype(kv_dtype);
    offgen::Engine engine(eo);
    std::vector<std::vector<float>> first(reqs.size());
    offgen::GenerateCallbacks cb;
    cb.on_logits = [&](size_t i, int64_t step, std::span<const float> row) {
      if (step == 0) first[i].assign(row.begin(), row.end());
    };
    const std::vector<offgen::Result> res = engine.generate(reqs, cb);
    std::ofstream out(logits_path, std::ios::binary);
    for (size_t i = 0; i < res.size(); ++i) {
      OFFGEN_CHECK(res[i].error.empty(), kInternal, "prompt {}: {}", i, res[i].error);
      out.write(reinterpret_cast<const char*>(first[i].data()),
                static_cast<std::streamsize>(first[i].size() * 4));
      for (size_t t = 0; t < res[i].tokens.size(); ++t)
        std::cout << (t ? " " : "") << res[i].tokens[t];
      std::cout << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offgen_logits: %s\n", e.what());
    return 1;
  }
  return 0;
}
