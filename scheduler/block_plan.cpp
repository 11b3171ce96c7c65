// Zig-zag block schedule planning.
#include "scheduler/block_plan.h"

#include <fmt/format.h>

#include "runtime/core/error.h"

namespace offgen {

const char* task_kind_name(TaskKind k) {
  switch (k) {
    case TaskKind::kLoadWeight: return "load_weight";
    case TaskKind::kLoadCache: return "load_cache";
    case TaskKind::kLoadHidden: return "load_hidden";
    case TaskKind::kCompute: return "compute";
    case TaskKind::kStoreCache: return "store_cache";
    case TaskKind::kStoreHidden: return "store_hidden";
  }
  return "?";
}

std::vector<Task> plan_step(const StepShape& s) {
  OFFGEN_CHECK(s.num_units > 0 && s.num_batches > 0, kInternal, "plan_step: empty shape");
  OFFGEN_CHECK(static_cast<int64_t>(s.unit_has_cache.size()) == s.num_units, kInternal,
               "plan_step: unit_has_cache has {} entries for {} units", s.unit_has_cache.size(),
               s.num_units);
  OFFGEN_CHECK(s.weight_slots >= 2, kInternal, "plan_step: {} weight slots", s.weight_slots);
  const int64_t U = s.num_units, K = s.num_batches, W = s.weight_slots;
  std::vector<Task> plan;
  // Index of the task of each kind per (unit, batch), -1 when absent.
  std::vector<int64_t> load_w(U, -1), compute(U * K, -1), load_c(U * K, -1), store_c(U * K, -1),
      load_h(U * K, -1), store_h(U * K, -1);
  auto at = [K](int64_t u, int64_t k) { return u * K + k; };
  auto add = [&](Task t) {
    plan.push_back(std::move(t));
    return static_cast<int64_t>(plan.size()) - 1;
  };
  auto emit_weight_load = [&](int64_t u) {
    if (!s.load_weights || u >= U) return;
    Task t{TaskKind::kLoadWeight, Lane::kLoad, u, -1, static_cast<int>(u % W), {}};
    // The slot was last used by unit u-W: all of its computes must be done.
    if (u >= W)
      for (int64_t k = 0; k < K; ++k) t.deps.push_back(compute[at(u - W, k)]);
    load_w[u] = add(std::move(t));
  };
  // Cache staging slots alternate over the (unit, batch) pairs that use the cache, so a slot's
  // previous user is the cache pair two before (not simply two (unit, batch) pairs before).
  std::vector<int64_t> cache_pairs;     // at(u, k) of cache-using pairs, in plan order
  std::vector<int> cache_slot(U * K, 0);
  int64_t deferred_hidden = -1;  // at(u, k) of a hidden load planned after its producer's store
  auto emit_hidden_load = [&](int64_t u, int64_t k) {
    const int64_t prev = at(u, k) - 2;  // previous user of the same activation staging slot
    // Batch k's activations come from its previous unit's store. With one batch the pair
    // prefetched next is the successor of the pair about to compute, whose store is not planned
    // yet: the load then goes right after that store (nothing to overlap it with anyway).
    if (store_h[at(u - 1, k)] < 0) {
      deferred_hidden = at(u, k);
      return;
    }
    Task t{TaskKind::kLoadHidden, Lane::kLoad, u, k, static_cast<int>(at(u, k) % 2), {}};
    t.deps.push_back(store_h[at(u - 1, k)]);
    if (prev >= 0) {
      if (store_h[prev] >= 0) t.deps.push_back(store_h[prev]);
      if (compute[prev] >= 0) t.deps.push_back(compute[prev]);
    }
    load_h[at(u, k)] = add(std::move(t));
  };
  auto emit_batch_loads = [&](int64_t u, int64_t k) {
    if (u >= U) return;
    if (s.load_cache && s.unit_has_cache[u]) {
      const int cslot = static_cast<int>(cache_pairs.size() % 2);
      cache_slot[at(u, k)] = cslot;
      Task t{TaskKind::kLoadCache, Lane::kLoad, u, k, cslot, {}};
      if (cache_pairs.size() >= 2) {
        const int64_t p = cache_pairs[cache_pairs.size() - 2];
        t.deps.push_back(compute[p]);
        t.deps.push_back(store_c[p]);
      }
      cache_pairs.push_back(at(u, k));
      load_c[at(u, k)] = add(std::move(t));
    }
    if (s.load_hidden && u > 0) emit_hidden_load(u, k);  // unit 0 starts from the embedding
  };

  for (int64_t u = 0; u + 1 < W; ++u) emit_weight_load(u);
  emit_batch_loads(0, 0);
  for (int64_t u = 0; u < U; ++u) {
    for (int64_t k = 0; k < K; ++k) {
      if (k == 0) emit_weight_load(u + W - 1);
      if (k + 1 < K) emit_batch_loads(u, k + 1);
      else emit_batch_loads(u + 1, 0);
      const bool cache = s.load_cache && s.unit_has_cache[u];
      Task c{TaskKind::kCompute, Lane::kCompute, u, k,
             cache ? cache_slot[at(u, k)] : static_cast<int>(at(u, k) % 2), {}};
      if (load_w[u] >= 0) c.deps.push_back(load_w[u]);
      if (load_c[at(u, k)] >= 0) c.deps.push_back(load_c[at(u, k)]);
      if (load_h[at(u, k)] >= 0) c.deps.push_back(load_h[at(u, k)]);
      if (u > 0 && load_h[at(u, k)] < 0) c.deps.push_back(compute[at(u - 1, k)]);
      // Without a hidden load (unit 0) the compute itself fills the activation slot its store
      // reads back, so it must wait for the store of that slot's previous pair.
      if (load_h[at(u, k)] < 0 && at(u, k) >= 2 && store_h[at(u, k) - 2] >= 0)
        c.deps.push_back(store_h[at(u, k) - 2]);
      compute[at(u, k)] = add(std::move(c));
      if (cache)
        store_c[at(u, k)] = add(Task{TaskKind::kStoreCache, Lane::kStore, u, k,
                                     cache_slot[at(u, k)], {compute[at(u, k)]}});
      if (s.load_hidden && u + 1 < U)  // the last unit's output is the logits
        store_h[at(u, k)] = add(Task{TaskKind::kStoreHidden, Lane::kStore, u, k,
                                     static_cast<int>(at(u, k) % 2), {compute[at(u, k)]}});
      if (deferred_hidden >= 0) {
        const int64_t d = deferred_hidden;
        deferred_hidden = -1;
        emit_hidden_load(d / K, d % K);
      }
    }
  }
  return plan;
}

std::string describe_plan(const std::vector<Task>& plan) {
  std::string out;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Task& t = plan[i];
    out += fmt::format("{}: {}(u{}{}) slot {}", i, task_kind_name(t.kind), t.unit,
                       t.batch >= 0 ? fmt::format(",b{}", t.batch) : std::string(), t.slot);
    if (!t.deps.empty()) out += fmt::format(" after {}", fmt::join(t.deps, ","));
    out += "\n";
  }
  return out;
}

}  // namespace offgen
