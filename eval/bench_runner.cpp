// Throughput benchmark over the Engine.
#include "eval/bench_runner.h"

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "policies/policy.h"
#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/core/memory_info.h"

namespace offgen {

void BenchOptions::validate() const {
  OFFGEN_CHECK(prompt_len >= 1, kConfig, "--prompt-len {} must be >= 1", prompt_len);
  OFFGEN_CHECK(gen_len >= 2, kConfig, "--gen-len {} must be >= 2 (decode throughput needs a step)",
               gen_len);
  OFFGEN_CHECK(batch_size >= 0, kConfig, "batch size {} must be >= 0", batch_size);
}

BenchReport run_bench(Engine& engine, const BenchOptions& o) {
  o.validate();
  OFFGEN_CHECK(o.prompt_len + o.gen_len <= engine.max_context(), kConfig,
               "--prompt-len {} + --gen-len {} exceed the context window of {}", o.prompt_len,
               o.gen_len, engine.max_context());
  const Policy& policy = engine.options().policy;
  const int64_t capacity = engine.kv_capacity(o.prompt_len, o.gen_len);
  const bool fit = o.batch_size == 0 && !policy.batch_given() && policy.has_capacity_limit();
  const int64_t b = o.batch_size > 0 ? o.batch_size
                    : fit            ? engine.fit_sequences(o.prompt_len, o.gen_len)
                                     : policy.block_size();
  OFFGEN_CHECK(b > 0, kConfig,
               "not even one sequence of {} KV slots fits the tier capacities next to the weights",
               capacity);
  // More prompts than the policy's block (given, or the planner's) run block by block: generate
  // admits at most max_active at once, so one block must fit.
  engine.check_fits(std::min(b, engine.max_active()), o.prompt_len, o.gen_len);
  std::mt19937_64 rng(o.seed);
  const int32_t vocab = static_cast<int32_t>(engine.config().vocab_size);
  std::uniform_int_distribution<int32_t> tok(std::min(100, vocab - 1), vocab - 1);
  std::vector<Request> reqs(b);
  for (int64_t i = 0; i < b; ++i) {
    reqs[i].id = std::to_string(i);
    reqs[i].prompt_ids.resize(o.prompt_len);
    for (auto& t : reqs[i].prompt_ids) t = tok(rng);
    reqs[i].sampling.max_tokens = o.gen_len;
    reqs[i].sampling.ignore_eos = true;
  }
  if (o.warmup) {
    auto warm = reqs;
    for (auto& r : warm) r.sampling.max_tokens = 2;
    engine.generate(warm);
  }
  engine.generate(reqs);
  const GenerationStats& s = engine.last_stats();
  BenchReport r;
  r.num_prompts = b;
  r.batch_size = s.peak_active;
  r.kv_policy = policy.kv.describe();
  r.kv_slots_per_seq = capacity;
  r.peak_kv_tokens_per_seq = s.peak_kv_tokens;
  r.peak_kv_bytes_per_seq = engine.config().kv_bytes_held(s.peak_kv_tokens, engine.kv_dtype());
  const TierBytes kv = engine.kv_need(capacity);
  r.kv_bytes_per_seq = kv.device + kv.host + kv.disk;
  r.batch_limited_by = fit ? "memory" : "policy";
  r.prompt_len = o.prompt_len;
  r.gen_len = o.gen_len;
  r.prefill_seconds = s.prefill_seconds;
  r.decode_seconds = s.decode_seconds;
  r.generate_seconds = s.wall_seconds;
  r.prefill_throughput = b * o.prompt_len / s.prefill_seconds;
  r.decode_throughput = b * (o.gen_len - 1) / s.decode_seconds;
  r.total_throughput = b * o.gen_len / (s.prefill_seconds + s.decode_seconds);
  // CPU backend: the device tier is host RAM, so every resident byte is reported as host.
  const TierBytes peak = engine.peak_bytes();
  r.peak_device = peak.device;
  r.peak_host = peak.host;
  r.peak_disk = peak.disk;
  r.peak_rss = peak_rss_bytes();
  r.peak_anon = sample_anon_peak();
  r.startup_anon = startup_anon_bytes();
  r.disk_read = static_cast<int64_t>(s.io.bytes_read);
  r.disk_write = static_cast<int64_t>(s.io.bytes_written);
  r.h2d = s.h2d_bytes;
  r.d2h = s.d2h_bytes;
  r.forwards = s.forwards;
  r.on_demand_forwards = s.on_demand_forwards;
  r.expert_loads = s.expert_loads;
  r.expert_load_bytes = s.expert_load_bytes;
  r.experts_ahead = s.experts_ahead;
  r.experts_ahead_used = s.experts_ahead_used;
  r.expert_unit_runs = s.expert_unit_runs;
  r.expert_unit_batches = s.expert_unit_batches;
  r.expert_unit_rows = s.expert_unit_rows;
  r.experts_hot_first = engine.experts_hot_first();
  r.backend = engine.backend().name();
  r.weight_dtype = engine.options().weight_dtype.name();
  r.kv_dtype = dtype_name(engine.kv_dtype());
  r.prefill_chunk = engine.options().prefill_chunk;
  r.lanes = s.lanes;
  const double busiest = std::max({s.lanes.load, s.lanes.compute, s.lanes.store});
  r.overlap_efficiency = s.lanes.wall > 0 ? busiest / s.lanes.wall : 0.0;
  r.forward_overlap_efficiency = s.lanes.wall > 0 ? s.lanes.bound / s.lanes.wall : 0.0;
  return r;
}

nlohmann::json BenchReport::to_json() const {
  return nlohmann::json{
      {"prefill_throughput", prefill_throughput},
      {"generate_seconds", generate_seconds},
      {"load_seconds", load_seconds},
      {"decode_throughput", decode_throughput},
      {"total_throughput", total_throughput},
      {"prefill_seconds", prefill_seconds},
      {"decode_seconds", decode_seconds},
      {"batch_size", batch_size},
      {"num_prompts", num_prompts},
      {"backend", backend},
      {"weight_dtype", weight_dtype},
      {"kv_dtype", kv_dtype},
      {"prefill_chunk", prefill_chunk},
      {"batch_limited_by", batch_limited_by},
      {"kv_policy", kv_policy},
      {"kv_slots_per_seq", kv_slots_per_seq},
      {"kv_bytes_per_seq", kv_bytes_per_seq},
      {"peak_kv_tokens_per_seq", peak_kv_tokens_per_seq},
      {"peak_kv_bytes_per_seq", peak_kv_bytes_per_seq},
      {"prompt_len", prompt_len},
      {"gen_len", gen_len},
      {"peak_bytes", {{"device", peak_device}, {"host", peak_host}, {"disk", peak_disk}}},
      {"peak_rss_bytes", peak_rss},
      {"peak_anon_bytes", peak_anon},
      {"startup_anon_bytes", startup_anon},
      {"io_bytes", {{"disk_read", disk_read}, {"disk_write", disk_write}, {"h2d", h2d}, {"d2h", d2h}}},
      {"experts_loaded",
       {{"forwards", forwards},
        {"on_demand_forwards", on_demand_forwards},
        {"total", expert_loads},
        {"per_on_demand_forward",
         on_demand_forwards > 0 ? double(expert_loads) / double(on_demand_forwards) : 0.0},
        {"bytes", expert_load_bytes},
        {"fetched_ahead", experts_ahead},
        {"fetched_ahead_used", experts_ahead_used},
        {"order", experts_hot_first ? "hot_first" : "index"}}},
      {"expert_unit_runs",
       {{"runs", expert_unit_runs},
        {"batches_per_run", expert_unit_runs > 0 ? double(expert_unit_batches) / double(expert_unit_runs) : 0.0},
        {"rows_per_run", expert_unit_runs > 0 ? double(expert_unit_rows) / double(expert_unit_runs) : 0.0}}},
      {"lane_busy_seconds", {{"load", lanes.load}, {"compute", lanes.compute}, {"store", lanes.store}}},
      {"overlap_efficiency", overlap_efficiency},
      {"forward_overlap_efficiency", forward_overlap_efficiency},
  };
}

std::string BenchReport::summary() const {
  return fmt::format(
      "batch {}{} x prompt {} + gen {} (batch set by {}); KV {} ({}): {} slots, {} per sequence\n"
      "  prefill {:10.1f} tok/s  ({:.3f} s)\n"
      "  decode  {:10.1f} tok/s  ({:.3f} s)\n"
      "  total   {:10.1f} tok/s\n"
      "  wall: {}generate {:.3f} s, of which {:.3f} s outside prefill and decode (admission, "
      "buffers and KV caches reserved)\n"
      "  peak memory placed: device {}, host {}, disk {}; process peak RSS {}\n"
      "  disk I/O: read {}, written {}\n"
      "  lanes busy: load {:.3f} s, compute {:.3f} s, store {:.3f} s of {:.3f} s; overlap "
      "efficiency {:.2f} (forward by forward {:.2f})",
      batch_size,
      num_prompts != batch_size ? fmt::format(" ({} prompts)", num_prompts) : std::string(),
      prompt_len, gen_len, batch_limited_by, kv_policy, kv_dtype, kv_slots_per_seq,
      format_bytes(kv_bytes_per_seq), prefill_throughput, prefill_seconds, decode_throughput,
      decode_seconds, total_throughput,
      load_seconds > 0 ? fmt::format("load {:.3f} s, ", load_seconds) : std::string(),
      generate_seconds, std::max(0.0, generate_seconds - prefill_seconds - decode_seconds),
      format_bytes(peak_device), format_bytes(peak_host),
      format_bytes(peak_disk), format_bytes(peak_rss),
      format_bytes(disk_read), format_bytes(disk_write), lanes.load, lanes.compute, lanes.store,
      lanes.wall, overlap_efficiency, forward_overlap_efficiency) +
         (expert_loads > 0
              ? fmt::format("\n  experts moved on demand: {:.1f} per forward over all layers ({} "
                            "in {} of the {} forwards; the others moved whole units), {}; {} "
                            "fetched ahead, {} of them routed to",
                            double(expert_loads) / double(std::max<int64_t>(1, on_demand_forwards)),
                            expert_loads, on_demand_forwards, forwards,
                            format_bytes(expert_load_bytes), experts_ahead, experts_ahead_used)
              : std::string());
}

}  // namespace offgen
