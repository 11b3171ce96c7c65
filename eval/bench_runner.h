// FlexGen's throughput workload on an Engine: a block of random-token prompts of one length,
// a fixed number of generated tokens (EOS ignored), prefill/decode/total tokens/s by FlexGen's
// definitions, memory peaks, I/O bytes and lane busy times — the `offgen bench` JSON contract.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "scheduler/engine.h"

namespace offgen {

struct BenchOptions {
  int64_t prompt_len = 512;
  int64_t gen_len = 32;
  // Prompts; 0 = the policy's block (gpu_batch_size x num_gpu_batches) when batch sizes are
  // given or no tier capacity is set, else the largest batch the capacities allow.
  int64_t batch_size = 0;
  bool warmup = true;      // one short untimed run first
  uint64_t seed = 1234;
  void validate() const;
};

struct BenchReport {
  int64_t batch_size = 0;   // sequences run at once (FlexGen's gpu batch x num gpu batches)
  int64_t num_prompts = 0;  // prompts run (batch_size unless --num-prompts says otherwise)
  int64_t prompt_len = 0, gen_len = 0;
  std::string kv_policy;           // e.g. "h2o@0.2"
  int64_t kv_slots_per_seq = 0;    // KV table capacity of one sequence
  int64_t kv_bytes_per_seq = 0;    // its bytes on all tiers (K, V and slot metadata)
  // The most KV slots one sequence held at once (GenerationStats::peak_kv_tokens: with eviction
  // and chunked prefill at most the budget plus one chunk) and their K+V bytes in the KV dtype.
  int64_t peak_kv_tokens_per_seq = 0, peak_kv_bytes_per_seq = 0;
  std::string batch_limited_by;    // "policy" (given sizes) or "memory" (fit to the capacities)
  double prefill_seconds = 0, decode_seconds = 0;
  double prefill_throughput = 0, decode_throughput = 0, total_throughput = 0;
  // Wall time outside the throughput figures: the measured generate() call as a whole
  // (admission, the forwards' buffers and KV caches reserved and first touched, prefill, decode)
  // and the engine's load, where the caller timed it (0: not timed).
  double generate_seconds = 0, load_seconds = 0;
  // The bytes offgen places per tier at most (weights, staging, KV, shared contexts; not
  // activations, the tokenizer or the allocator's slack) and the process's peak RSS so far.
  int64_t peak_device = 0, peak_host = 0, peak_disk = 0, peak_rss = 0;
  int64_t peak_anon = 0, startup_anon = 0;  // sample_anon_peak(), startup_anon_bytes()
  int64_t disk_read = 0, disk_write = 0, h2d = 0, d2h = 0;
  // Mixtures of experts with experts on disk: experts moved on demand per forward (all layers)
  // and their bytes over the run; 0 for dense models and for weights in memory.
  int64_t forwards = 0, on_demand_forwards = 0, expert_loads = 0, expert_load_bytes = 0;
  int64_t experts_ahead = 0, experts_ahead_used = 0;  // of expert_loads: fetched ahead; used
  // MoE MLP unit runs and the batches and rows they covered (GenerationStats::expert_unit_runs).
  int64_t expert_unit_runs = 0, expert_unit_batches = 0, expert_unit_rows = 0;
  bool experts_hot_first = false;  // their slices lie hottest first (measured routing)
  std::string backend, weight_dtype, kv_dtype;
  int64_t prefill_chunk = 0;       // prompt tokens per prefill forward, at most
  LaneTimes lanes;
  double overlap_efficiency = 0;          // busiest lane over the whole run / wall
  double forward_overlap_efficiency = 0;  // LaneTimes::bound / wall
  nlohmann::json to_json() const;
  std::string summary() const;  // one human-readable block
};

BenchReport run_bench(Engine& engine, const BenchOptions& options);

}  // namespace offgen
