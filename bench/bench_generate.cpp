// Generation throughput on the CPU engine: prefill and decode tokens/s for several batch sizes at a
// fixed prompt/generation length (random-token prompts, EOS ignored), FlexGen's definitions.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "scheduler/engine.h"

int main(int argc, char** argv) {
  using namespace offgen;
  CLI::App app{"bench_generate: prefill/decode throughput vs batch size"};
  std::string model, json_path, weight_dtype = "native";
  std::vector<int64_t> batches = {1, 8, 32, 64};
  int64_t prompt_len = 128, gen_len = 32;
  int threads = 0;
  app.add_option("--model", model, "Model .gguf")->required();
  app.add_option("--batch-sizes", batches, "Batch sizes")->delimiter(',');
  app.add_option("--prompt-len", prompt_len, "Prompt tokens")->check(CLI::PositiveNumber);
  app.add_option("--gen-len", gen_len, "Generated tokens")->check(CLI::Range(2, 1 << 20));
  app.add_option("--threads", threads, "Threads (0 = all)");
  app.add_option("--json", json_path, "Write results as JSON");
  app.add_option("--weight-dtype", weight_dtype,
                 "Weight storage: native (the file's formats), f32, bf16, q8_0, q4_k, ...");
  CLI11_PARSE(app, argc, argv);
  try {
    int64_t max_batch = 1;
    for (auto b : batches) max_batch = std::max(max_batch, b);
    EngineOptions eo;
    eo.model = model;
    eo.threads = threads;
    eo.weight_dtype = WeightMode::parse(weight_dtype);
    eo.policy.gpu_batch_size = max_batch;
    // Prefill in the backend's default chunks (EngineOptions::prefill_chunk), as `offgen run`.
    Engine engine(eo);
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> tok(100, static_cast<int32_t>(engine.config().vocab_size) - 1);
    nlohmann::json rows = nlohmann::json::array();
    std::printf("%-6s %-8s %-8s %14s %14s %14s\n", "batch", "prompt", "gen", "prefill tok/s",
                "decode tok/s", "total tok/s");
    for (int64_t b : batches) {
      std::vector<Request> reqs(b);
      for (int64_t i = 0; i < b; ++i) {
        reqs[i].id = std::to_string(i);
        for (int64_t t = 0; t < prompt_len; ++t) reqs[i].prompt_ids.push_back(tok(rng));
        reqs[i].sampling.max_tokens = gen_len;
        reqs[i].sampling.ignore_eos = true;
      }
      engine.generate(reqs);  // warm-up (page faults, allocator)
      engine.generate(reqs);
      const auto& s = engine.last_stats();
      const double pre = b * prompt_len / s.prefill_seconds;
      const double dec = b * (gen_len - 1) / s.decode_seconds;
      const double tot = b * gen_len / (s.prefill_seconds + s.decode_seconds);
      std::printf("%-6lld %-8lld %-8lld %14.1f %14.1f %14.1f\n", (long long)b, (long long)prompt_len,
                  (long long)gen_len, pre, dec, tot);
      std::fflush(stdout);
      rows.push_back({{"batch_size", b}, {"prompt_len", prompt_len}, {"gen_len", gen_len},
                      {"prefill_throughput", pre}, {"decode_throughput", dec},
                      {"total_throughput", tot}, {"prefill_seconds", s.prefill_seconds},
                      {"decode_seconds", s.decode_seconds}});
    }
    if (!json_path.empty()) std::ofstream(json_path) << rows.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
