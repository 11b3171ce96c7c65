// Top-k routing of a mixture of experts: which experts each row runs, with which weight, grouped
// by expert so that each expert runs once over all of its rows.
#pragma once

#include <cstdint>
#include <vector>

namespace offgen {

struct MoeRouting {
  // Per expert: the rows routed to it (ascending) and their weights.
  std::vector<std::vector<int64_t>> rows;
  std::vector<std::vector<float>> weights;
  // Experts with at least one row.
  int64_t active() const;
};

// How often each mixture-of-experts layer chose each of its experts: the statistics behind the
// hot-first order of experts in a unit blob (DecoderModel, ExpertOrder) and the planner's expected
// experts per step. Measured by `offgen calibrate --model` on a sample (eval/routing_sample.h).
struct RoutingCounts {
  std::vector<int64_t> rows;                 // per layer: rows routed (0: none, or no experts)
  std::vector<std::vector<int64_t>> counts;  // per layer and expert: rows that chose it
  bool empty() const;
  // Sized for n_layers layers of n_experts (zeroed).
  void reset(int64_t n_layers, int64_t n_experts);
  // Adds one routing of `routing`'s rows in `layer` (sized by reset).
  void add(int64_t layer, const MoeRouting& routing, int64_t n_rows);
  // Layer l's experts, most chosen first (equal counts: lower index first).
  std::vector<int64_t> hot_first(int64_t layer) const;
  // The probability that one row of layer l chooses expert e: counts / rows (k of them sum to k).
  std::vector<double> choice_probability(int64_t layer) const;
};

// The probability that one row chooses the expert at each position of a layer's hot-first order,
// averaged over the layers, for rows that route like the sample's but were not in it (a job's):
// by split halves when `first_half` holds part of `all`'s rows (the counts of the sample's first
// half of prompts; the rest is the second): each half's hot-first order with the other half's
// probabilities, the two averaged. Ranking a sample's experts by its own counts and reading the
// same counts overstates the skew (the hottest by chance rank first); the held-out estimate does
// not. Layers without both halves, and every layer when `first_half` is empty: in-sample.
std::vector<double> ranked_choice_probability(const RoutingCounts& all,
                                              const RoutingCounts& first_half, int64_t n_experts);

// Per layer, the experts in the order their slices lie in a unit blob (empty: index order).
using ExpertOrder = std::vector<std::vector<int64_t>>;
// Every layer's experts hottest first by `counts` (empty when counts is).
ExpertOrder hot_first_order(const RoutingCounts& counts);

// Routes `n_rows` rows of router logits (row r at logits + r * stride, n_experts each) to their
// top k experts as Hugging Face's routers do: softmax over all experts in fp32, the k largest
// probabilities (the lower index first on ties), renormalised to sum 1 when `renormalise`.
// A row's result depends on that row alone.
void route_top_k(const float* logits, int64_t n_rows, int64_t n_experts, int64_t stride,
                 int64_t k, bool renormalise, MoeRouting& out);

// The expected share of a layer's experts that `rows` rows route to when each picks k of
// n_experts uniformly: 1 - (1 - k / n_experts)^rows.
double expected_expert_share(int64_t n_experts, int64_t k, int64_t rows);
// The expected number of distinct experts among those with choice probabilities p (one row
// chooses expert e with probability p[e]) that `rows` independent rows route to:
// sum of 1 - (1 - p_e)^rows.
double expected_experts(const std::vector<double>& p, int64_t rows);
// Whether a forward of `rows` rows whose experts are off memory moves only those it routes to
// (after routing, on the compute lane) rather than whole MLP units ahead of compute (overlapped
// with it), by the expected share alone: when it expects to need at most kOnDemandExpertShare of
// them. Beyond that share, move_experts_on_demand decides by cost.
inline constexpr double kOnDemandExpertShare = 0.5;
bool experts_on_demand(int64_t n_experts, int64_t k, int64_t rows);
// Whether a forward of `rows` rows expects more than kOnDemandExpertShare of the experts and
// fewer than all of them: a forward whose experts move by cost (move_experts_on_demand).
bool experts_by_cost(int64_t n_experts, int64_t k, int64_t rows);

// Whether a forward that expects to need `share` of the experts moves only those: always up to
// kOnDemandExpertShare; beyond it (and below all of them) when that takes less time by the
// caller's estimates: whole units cost max(load, compute) overlapped (load + compute without
// overlap), on-demand experts max(load - experts, compute) + share x experts (their reads follow
// routing on the compute lane and share the disk with the load lane's), where `load` is the
// seconds of the forward's whole-unit loads and `experts` their experts' part. The executor
// decides with the times it measured and the roofline with its bounds; the cost model costs the
// forward both ways and keeps the faster (the same rule on its finer schedule).
bool move_experts_on_demand(double share, double load_s, double experts_s, double compute_s,
                            bool overlap);

// A block step runs a mixture of experts' MLP unit over consecutive GPU batches at once (each
// expert one GEMM over its rows of all of them, so that small batches still give each expert
// enough rows for the fast kernels) while their rows together stay within `rows_cap` (a batch
// beyond it runs alone). Per group, in order, its number of batches. The rows of a unit's output
// do not depend on the grouping.
std::vector<int64_t> expert_batch_groups(const std::vector<int64_t>& batch_rows, int64_t rows_cap);
// The cap for expert_batch_groups: the rows the decoder's scratch holds (`scratch_rows`), and no
// more than give each expert kExpertGroupRows rows on average (k of n_experts per row): the CPU's
// folded AMX GEMM runs no faster beyond them, and larger groups only make the expert buffers
// outgrow the caches (bench/gemm/RESULTS_gemm.md, bench/RESULTS.md "MoE").
inline constexpr int64_t kExpertGroupRows = 256;
int64_t expert_group_cap(int64_t scratch_rows, int64_t n_experts, int64_t k);

}  // namespace offgen
