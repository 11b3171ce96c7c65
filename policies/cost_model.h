// Cost model of the block schedule: for a model, a placement policy (batch split, tier shares,
// overlap, KV eviction budget) and a workload, the predicted time of every forward — per unit the
// load / compute / store lanes from a HardwareProfile, overlapped as the executor runs them — and
// FlexGen's prefill / decode / total throughputs; plus the tier bytes the engine admits against.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "policies/hardware_profile.h"
#include "policies/policy.h"
#include "runtime/core/backend_caps.h"
#include "runtime/core/kv_format.h"
#include "runtime/model/config.h"

namespace offgen {

struct Workload;

// What the model's layout contributes to costs and memory (filled from a loaded model).
struct ModelFacts {
  std::string key;                   // model_key(config, weight dtype)
  int64_t n_layers = 0, d_model = 0, n_kv_heads = 0, context_length = 0;
  int64_t window_layers = 0, window = 0;  // sliding-window layers and their window (0: none)
  std::vector<uint8_t> sliding;           // per layer: a sliding-window layer (empty: none)
  std::vector<int64_t> unit_bytes;   // blob bytes per unit: attention 2l, MLP 2l+1
  // Mixtures of experts: where each unit's experts start in its blob (unit_bytes: none), and
  // how many a layer has and a token uses. Staged on a backend whose device memory is host
  // memory, a unit's experts move on demand (WeightStore's lazy tail): those a forward routes to.
  std::vector<int64_t> unit_experts_at;
  int64_t n_experts = 0, n_experts_used = 0;
  // Measured routing (offgen calibrate --model; empty: uniform, k / n_experts each): per position
  // of a unit blob's experts (hottest first), the probability that one row chooses the expert
  // there, averaged over the layers, held out where the sample was measured in halves
  // (ranked_choice_probability).
  std::vector<double> expert_choice;
  void use_routing(const RoutingCounts& measured, const RoutingCounts& first_half = {});
  // The expected share of the experts in the last `tail` fraction of a unit's expert slices (the
  // disk part of a blob split between RAM and disk) that a forward of `rows` rows routes to.
  double expected_tail_share(double tail, int64_t rows) const;
  int64_t weight_slots = kWeightStagingSlots;  // the weight store's staging slots
  // Whether unit u's experts are a lazy tail of the weight store under `placement` (moved on
  // demand by forwards that need few of them): the unit has experts, is staged (a disk part) and
  // device memory is host memory.
  bool lazy_experts(const Placement& placement, int64_t unit) const;
  // Multiply-adds of the matmuls per row (token): the attention unit's projections, the MLP's
  // matrices; the output head's per sequence; and the attention core's per (query row x key
  // slot) of one layer (Q.K and the weighted sum of V over every head). 0: unknown.
  int64_t attn_unit_macs = 0, mlp_unit_macs = 0, output_macs = 0, attn_pair_macs = 0;
  int64_t resident_bytes = 0;        // embedding, output head, norms (always in RAM)
  int64_t head_dim = 0;
  // The backend's: device memory is host memory (the CPU), and its KV dtype by default.
  bool device_is_host = true;
  DType default_kv_dtype = DType::kBF16;
  ForwardLayout forward;  // a forward's buffers per row / sequence / thread
  int64_t unit_total() const;
  int64_t unit_max() const;
  // The KV dtype a policy stores the cache as (its kv_dtype, else the backend's default).
  DType kv_dtype(const Policy& p) const { return p.kv_dtype.value_or(default_kv_dtype); }
  // Bytes of one layer's K (or V) row for one token under a policy: kv_row_bytes of its dtype
  // (the same count the KV store allocates by).
  int64_t kv_home_row_bytes(const Policy& p) const {
    return kv_row_bytes(kv_dtype(p), n_kv_heads, head_dim);
  }
  int64_t kv_bytes_per_token(const Policy& p) const { return 2 * n_layers * kv_home_row_bytes(p); }
  // The policy's placement on this backend, and one KV table's layout under the policy.
  Placement placement(const Policy& p) const { return p.placement(device_is_host); }
  KvTableLayout kv_layout(const Policy& p) const;
};

std::string model_key(const ModelConfig& c, const std::string& weight_dtype);
// A compute profile's key: the model's key, the KV dtype its attention was measured over (the
// attention's cost per key depends on the bytes it reads) and the CPU backend's compute_revision
// (figures of other kernels do not count).
std::string compute_key(const std::string& model_key, DType kv_dtype);

// Bytes per tier the stores allocate — what the engine commits — for the weights (every unit
// blob split by the placement, the resident tensors and the staging slots and bounce buffers on
// the device / host tier: Placement::weight_blobs) ...
TierBytes weight_need(const ModelFacts& m, const Policy& p);
// ... and for one sequence's KV table of `capacity` slots (Placement::kv_table, with its
// eviction metadata in RAM).
TierBytes kv_need(const ModelFacts& m, const Policy& p, int64_t capacity);
// ... and for the buffers of the forwards that run them (Placement::forward) ...
ForwardSplit forward_need(const ModelFacts& m, const Policy& p, const ForwardShape& shape);
// ... and all of it for a block of `sequences` sequences of the workload (its prompt_len, gen_len
// and prefill_chunk): the weights, their KV tables and their forwards — what a block commits.
TierBytes block_need(const ModelFacts& m, const Policy& p, const Workload& w,
                     int64_t sequences);

// The largest forward the engine runs with `sequences` sequences at once whose prompts total
// `prompt_tokens` tokens (the longest `longest_prompt`) in KV tables of at most `capacity` slots:
// prefill forwards of at most `prefill_chunk` tokens, decode forwards of a row per sequence, both
// in GPU batches of p.gpu_batch_size sequences; `samplers` of them sample on the host (-1: all).
ForwardShape forward_shape(const Policy& p, int64_t prefill_chunk, int64_t sequences,
                           int64_t prompt_tokens, int64_t longest_prompt, int64_t capacity,
                           int64_t samplers = -1);

struct Workload {
  int64_t prompt_len = 512;
  int64_t gen_len = 32;
  int64_t num_requests = 0;     // 0 = one block of the policy's batch
  // A job of requests of different lengths: prompt_len and gen_len are its typical request (the
  // mean: throughput and a block's KV caches), these its longest prompt and largest max_tokens
  // (the forwards' buffers, and a request that must fit alone); 0: prompt_len, gen_len.
  int64_t longest_prompt_len = 0, longest_gen_len = 0;
  // ... and the mean of its prompts' squared lengths (0: prompt_len^2): a prompt's causal
  // attention pairs grow with the square of its length, so the mean prompt alone undercounts them.
  double prompt_sq_mean = 0;
  // What a job's prefill attention pairs are over those of prompt_len-token prompts (1: uniform).
  double prefill_pair_scale() const {
    const double p = static_cast<double>(prompt_len);
    return prompt_sq_mean > 0 ? (prompt_sq_mean + p) / (p * p + p) : 1.0;
  }
  int64_t longest_prompt() const { return std::max(prompt_len, longest_prompt_len); }
  int64_t longest_gen() const { return std::max(gen_len, longest_gen_len); }
  bool uniform() const { return longest_prompt() == prompt_len && longest_gen() == gen_len; }
  // The longest request's workload (one request of the longest prompt and max_tokens).
  Workload longest() const;
  // The engine's tokens per prefill forward (the CPU backend's default: the planner's profile
  // is the CPU's).
  int64_t prefill_chunk = BackendCaps{}.default_prefill_chunk;
  // Whether the requests sample on the host (a temperature above 0: each sequence keeps its
  // sampler's candidates) rather than greedily, as bench's do.
  bool sampling = false;
  void validate() const;        // throws Error(kConfig) naming the field
};

struct LaneSeconds {
  double load = 0, compute = 0, store = 0;
};

struct Prediction {
  int64_t batch = 0;             // sequences per block (gpu_batch_size x num_gpu_batches)
  int64_t kv_slots = 0;          // KV table capacity per sequence
  double prefill_seconds = 0, decode_seconds = 0;  // one block
  double prefill_throughput = 0, decode_throughput = 0, total_throughput = 0;
  LaneSeconds prefill_lanes, decode_lanes;         // busy time per lane, one block
  TierBytes need;                // weights + KV of one block
  bool fits = true;              // need within the policy's tier capacities
  std::string bottleneck() const;  // "load", "compute" or "store" (busiest decode lane)
};

// Predicts one block of the workload under `p`: `batch` sequences (0 = the policy's block) in GPU
// batches of gpu_batch_size. Throws Error(kConfig) when the profile lacks what the policy needs
// (e.g. disk figures for a policy that uses disk).
Prediction predict(const ModelFacts& m, const ComputeProfile& compute, const HardwareProfile& hw,
                   const Policy& p, const Workload& w, int64_t batch = 0);
// The whole workload: w.num_requests sequences (0 = one block) admitted `block` at a time (0 =
// the policy's block), full blocks then a partial one. Seconds, lanes and throughputs cover all
// requests; batch, kv_slots and need are one block's.
Prediction predict_workload(const ModelFacts& m, const ComputeProfile& compute,
                            const HardwareProfile& hw, const Policy& p, const Workload& w,
                            int64_t block = 0);

}  // namespace offgen
