// HardwareProfile: what `offgen calibrate` measured on this machine — disk and RAM transfer times
// through the runtime's own paths, and the compute times of one model's units at several shapes —
// with JSON I/O and the interpolations the cost model reads. Pure data: measuring is scheduler's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "policies/profile_provenance.h"
#include "runtime/model/moe_routing.h"

namespace offgen {

// Measured (x, seconds) points, x ascending; time at any x by piecewise-linear interpolation and
// linear extrapolation from the last two points (at least one point).
struct TimeCurve {
  std::vector<double> x, seconds;
  double at(double x) const;
  bool empty() const { return x.empty(); }
};

// Compute times of one model (by key: name, shape, weight dtype) at one thread count.
struct ComputeProfile {
  std::string model_key;  // see model_key() in cost_model.h
  int threads = 0;
  TimeCurve mlp;          // MLP unit, x = rows
  TimeCurve attn_base;    // attention unit over x single-token sequences with no past (projections)
  TimeCurve output;       // output head + argmax, x = sequences
  // Seconds per (query row x key slot) of the attention core beyond attn_base, for full caches
  // and for h2o tables (which accumulate statistics and, in decode, overwrite a victim per head):
  double decode_pair = 0, decode_pair_evict = 0;  // one new token over a long cache
  TimeCurve prefill_pair, prefill_pair_evict;     // causal chunk of x tokens (n(n+1)/2 pairs);
                                                  // grows with x as K/V leave the caches
  // The RAM the measurements were held to (0: none). Shapes that would have needed more were
  // left out (the curves extrapolate them); a later plan with more RAM measures again.
  int64_t memory_limit = 0;
  // Whether these figures serve a plan whose measurements may hold `limit` bytes (0: no limit).
  bool covers(int64_t limit) const {
    return memory_limit == 0 || (limit > 0 && limit <= memory_limit);
  }
  ProfileProvenance provenance;
};

// A mixture of experts' routing measured on a sample (offgen calibrate --model): which experts
// each layer chose how often. Keyed by the model's content, not its shape: the weights decide.
struct RoutingProfile {
  std::string model_id;  // OpenedModel::content_id
  std::string model;     // the spec it was measured with (for messages)
  std::string sample;    // what was routed ("built-in sample", a file name)
  RoutingCounts counts;
  // The part of `counts` from the sample's first half of prompts (empty: not measured in halves),
  // for the held-out estimate of the skew (ranked_choice_probability).
  RoutingCounts first_half;
  ProfileProvenance provenance;
  bool empty() const { return counts.empty(); }
  // One line: rows routed, the hottest quarter's share of the choices (in the sample, and held
  // out where measured in halves), when.
  std::string summary(int64_t now_unix) const;
};

struct HardwareProfile {
  static constexpr int kVersion = 2;
  int version = kVersion;
  std::string created;        // ISO date
  std::string offload_dir;    // where disk was measured
  bool direct_io = true;      // O_DIRECT was granted
  TimeCurve disk_read;        // blocking NvmeStore::read, x = bytes
  TimeCurve disk_write;       // blocking NvmeStore::write, x = bytes
  TimeCurve ram_copy;         // memcpy on one thread, x = bytes
  bool has_gpu = false;       // host<->device figures exist only with a GPU backend
  ProfileProvenance provenance;  // of the disk and RAM figures
  std::vector<ComputeProfile> compute;
  std::vector<RoutingProfile> routing;  // absent from profiles written before it was measured

  const ComputeProfile* find_compute(const std::string& model_key, int threads) const;
  // Replaces the entry for the same model key and threads, or appends.
  void put_compute(ComputeProfile c);
  const RoutingProfile* find_routing(const std::string& model_id) const;
  void put_routing(RoutingProfile r);  // replaces the entry of the same model_id, or appends

  nlohmann::json to_json() const;
  // Throws Error(kInput) naming `source` and the offending field. With `dropped`, a malformed
  // entry of 'compute' or 'routing' (each measured on its own) is left out and its error appended
  // there instead, so that one damaged entry does not cost the others.
  static HardwareProfile from_json(const nlohmann::json& j, const std::string& source,
                                   std::vector<std::string>* dropped = nullptr);
};

}  // namespace offgen
