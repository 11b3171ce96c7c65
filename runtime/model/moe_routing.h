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

// Routes `n_rows` rows of router logits (row r at logits + r * stride, n_experts each) to their
// top k experts as Hugging Face's routers do: softmax over all experts in fp32, the k largest
// probabilities (the lower index first on ties), renormalised to sum 1 when `renormalise`.
// A row's result depends on that row alone.
void route_top_k(const float* logits, int64_t n_rows, int64_t n_experts, int64_t stride,
                 int64_t k, bool renormalise, MoeRouting& out);

// The expected share of a layer's experts that `rows` rows route to when each picks k of
// n_experts uniformly: 1 - (1 - k / n_experts)^rows.
double expected_expert_share(int64_t n_experts, int64_t k, int64_t rows);
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

}  // namespace offgen
