// Top-k routing of a mixture of experts.
#include "runtime/model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace offgen {

int64_t MoeRouting::active() const {
  int64_t n = 0;
  for (const auto& r : rows) n += r.empty() ? 0 : 1;
  return n;
}

void route_top_k(const float* logits, int64_t n_rows, int64_t n_experts, int64_t stride,
                 int64_t k, bool renormalise, MoeRouting& out) {
  out.rows.resize(static_cast<size_t>(n_experts));
  out.weights.resize(static_cast<size_t>(n_experts));
  for (auto& r : out.rows) r.clear();
  for (auto& w : out.weights) w.clear();
  std::vector<float> p(static_cast<size_t>(n_experts));
  std::vector<int64_t> order(static_cast<size_t>(n_experts));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* l = logits + r * stride;
    const float mx = *std::max_element(l, l + n_experts);
    float sum = 0.0f;
    for (int64_t e = 0; e < n_experts; ++e) sum += p[e] = std::exp(l[e] - mx);
    for (int64_t e = 0; e < n_experts; ++e) p[e] /= sum;
    std::iota(order.begin(), order.end(), int64_t{0});
    // NaN (a broken model's logits) ranks last, keeping the order strict.
    auto key = [&p](int64_t e) { return std::isnan(p[e]) ? -1.0f : p[e]; };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&key](int64_t a, int64_t b) {
      return key(a) > key(b) || (key(a) == key(b) && a < b);
    });
    float top = 0.0f;
    for (int64_t i = 0; i < k; ++i) top += p[order[i]];
    for (int64_t i = 0; i < k; ++i) {
      const int64_t e = order[i];
      out.rows[e].push_back(r);
      out.weights[e].push_back(renormalise ? p[e] / top : p[e]);
    }
  }
}

bool RoutingCounts::empty() const {
  return std::all_of(rows.begin(), rows.end(), [](int64_t r) { return r == 0; });
}

void RoutingCounts::reset(int64_t n_layers, int64_t n_experts) {
  rows.assign(static_cast<size_t>(n_layers), 0);
  counts.assign(static_cast<size_t>(n_layers),
                std::vector<int64_t>(static_cast<size_t>(n_experts), 0));
}

void RoutingCounts::add(int64_t layer, const MoeRouting& routing, int64_t n_rows) {
  std::vector<int64_t>& c = counts.at(static_cast<size_t>(layer));
  for (size_t e = 0; e < routing.rows.size() && e < c.size(); ++e)
    c[e] += static_cast<int64_t>(routing.rows[e].size());
  rows.at(static_cast<size_t>(layer)) += n_rows;
}

std::vector<int64_t> RoutingCounts::hot_first(int64_t layer) const {
  const std::vector<int64_t>& c = counts.at(static_cast<size_t>(layer));
  std::vector<int64_t> order(c.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&c](int64_t a, int64_t b) { return c[a] > c[b]; });
  return order;
}

std::vector<double> RoutingCounts::choice_probability(int64_t layer) const {
  const std::vector<int64_t>& c = counts.at(static_cast<size_t>(layer));
  const auto n = static_cast<double>(rows.at(static_cast<size_t>(layer)));
  std::vector<double> p(c.size(), 0.0);
  for (size_t e = 0; e < c.size() && n > 0; ++e) p[e] = static_cast<double>(c[e]) / n;
  return p;
}

std::vector<double> ranked_choice_probability(const RoutingCounts& all,
                                              const RoutingCounts& first_half, int64_t n_experts) {
  std::vector<double> sum(static_cast<size_t>(std::max<int64_t>(0, n_experts)), 0.0);
  int64_t layers = 0;
  const size_t n_layers = std::min(all.counts.size(), all.rows.size());
  const bool halves = first_half.counts.size() == n_layers && first_half.rows.size() == n_layers;
  for (size_t l = 0; l < n_layers; ++l) {
    if (all.rows[l] == 0 || static_cast<int64_t>(all.counts[l].size()) != n_experts) continue;
    const auto layer = static_cast<int64_t>(l);
    std::vector<double> ranked(sum.size(), 0.0);
    const bool split = halves && first_half.counts[l].size() == all.counts[l].size() &&
                       first_half.rows[l] > 0 && first_half.rows[l] < all.rows[l];
    if (split) {
      RoutingCounts a, b;  // this layer of the two halves
      a.rows = {first_half.rows[l]};
      a.counts = {first_half.counts[l]};
      b.rows = {all.rows[l] - first_half.rows[l]};
      b.counts = {all.counts[l]};
      for (size_t e = 0; e < b.counts[0].size(); ++e)  // (a half larger than all: none left)
        b.counts[0][e] = std::max<int64_t>(0, b.counts[0][e] - a.counts[0][e]);
      const std::vector<int64_t> order_a = a.hot_first(0), order_b = b.hot_first(0);
      const std::vector<double> pa = a.choice_probability(0), pb = b.choice_probability(0);
      for (size_t i = 0; i < ranked.size(); ++i)
        ranked[i] = 0.5 * (pb[static_cast<size_t>(order_a[i])] + pa[static_cast<size_t>(order_b[i])]);
    } else {
      const std::vector<double> p = all.choice_probability(layer);
      const std::vector<int64_t> order = all.hot_first(layer);
      for (size_t i = 0; i < ranked.size(); ++i) ranked[i] = p[static_cast<size_t>(order[i])];
    }
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += ranked[i];
    ++layers;
  }
  if (layers == 0) return {};
  for (double& x : sum) x /= static_cast<double>(layers);
  return sum;
}

ExpertOrder hot_first_order(const RoutingCounts& counts) {
  ExpertOrder order;
  if (counts.empty()) return order;
  for (size_t l = 0; l < counts.counts.size(); ++l)
    order.push_back(counts.hot_first(static_cast<int64_t>(l)));
  return order;
}

double expected_experts(const std::vector<double>& p, int64_t rows) {
  double n = 0;
  for (double q : p) n += 1.0 - std::pow(1.0 - std::clamp(q, 0.0, 1.0), static_cast<double>(rows));
  return n;
}

double expected_expert_share(int64_t n_experts, int64_t k, int64_t rows) {
  if (n_experts <= 0) return 1.0;
  const double p = static_cast<double>(k) / static_cast<double>(n_experts);
  return 1.0 - std::pow(1.0 - p, static_cast<double>(rows));
}

bool experts_on_demand(int64_t n_experts, int64_t k, int64_t rows) {
  return n_experts > 0 && expected_expert_share(n_experts, k, rows) <= kOnDemandExpertShare;
}

bool experts_by_cost(int64_t n_experts, int64_t k, int64_t rows) {
  if (n_experts <= 0) return false;
  const double share = expected_expert_share(n_experts, k, rows);
  return share > kOnDemandExpertShare && share < 1.0;
}

bool move_experts_on_demand(double share, double load_s, double experts_s, double compute_s,
                            bool overlap) {
  if (share <= kOnDemandExpertShare) return true;
  if (share >= 1.0 || experts_s <= 0) return false;
  const double rest = std::max(0.0, load_s - experts_s), fetched = share * experts_s;
  if (!overlap) return rest + fetched < load_s;  // the same compute either way
  // The fetched experts wait for routing and hold up compute; they also share the disk with the
  // load lane's reads of the rest.
  return std::max(rest, compute_s) + fetched < std::max(load_s, compute_s);
}

int64_t expert_group_cap(int64_t scratch_rows, int64_t n_experts, int64_t k) {
  return std::min(scratch_rows, (kExpertGroupRows * n_experts + k - 1) / std::max<int64_t>(1, k));
}

std::vector<int64_t> expert_batch_groups(const std::vector<int64_t>& batch_rows,
                                         int64_t rows_cap) {
  std::vector<int64_t> groups;
  int64_t rows = 0;
  for (const int64_t r : batch_rows) {
    if (groups.empty() || rows + r > rows_cap) {
      groups.push_back(0);
      rows = 0;
    }
    ++groups.back();
    rows += r;
  }
  return groups;
}

}  // namespace offgen
