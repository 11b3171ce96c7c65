// Property tests of plan_step over many step shapes: plan order is a valid sequential order, the
// task set is exactly what the shape asks for, and no staging slot is refilled while a task of its
// previous occupant may still run (checked on the dependency closure and by random lane
// interleavings with per-slot owners).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "scheduler/block_plan.h"

using namespace offgen;

namespace {

struct ShapeCase {
  StepShape shape;
  std::string name;
};

std::vector<ShapeCase> all_shapes() {
  const char* patterns[] = {"alternating", "alternating-mlp-first", "all", "none"};
  std::vector<ShapeCase> out;
  for (int64_t U = 1; U <= 7; ++U)
    for (int p = 0; p < 4; ++p)
      for (int64_t K = 1; K <= 5; ++K)
        for (int flags = 0; flags < 8 * 3; ++flags) {
          StepShape s;
          s.weight_slots = 2 + flags / 8;
          s.num_units = U;
          s.num_batches = K;
          for (int64_t u = 0; u < U; ++u)
            s.unit_has_cache.push_back(p == 0 ? u % 2 == 0 : p == 1 ? u % 2 == 1 : p == 2);
          s.load_weights = flags & 1;
          s.load_cache = flags & 2;
          s.load_hidden = flags & 4;
          out.push_back({s, "U=" + std::to_string(U) + " " + patterns[p] +
                                " K=" + std::to_string(K) + " w=" + std::to_string(s.load_weights) +
                                " c=" + std::to_string(s.load_cache) +
                                " h=" + std::to_string(s.load_hidden) +
                                " W=" + std::to_string(s.weight_slots)});
        }
  return out;
}

// Transitive ancestors over explicit deps only (bit j of row i: task j must finish before i).
std::vector<std::vector<bool>> ancestors(const std::vector<Task>& plan) {
  std::vector<std::vector<bool>> anc(plan.size(), std::vector<bool>(plan.size(), false));
  for (size_t i = 0; i < plan.size(); ++i)
    for (int64_t d : plan[i].deps) {
      if (d < 0 || d >= static_cast<int64_t>(i)) continue;  // reported by the order check
      anc[i][d] = true;
      for (size_t j = 0; j < static_cast<size_t>(d); ++j)
        if (anc[d][j]) anc[i][j] = true;
    }
  return anc;
}

// One access of a task to a staging slot: `fill` starts a new occupant, otherwise the task
// reads (or updates in place) the slot and expects `owner` to be its current occupant.
enum Staging { kWeight, kCache, kHidden };
struct Access {
  Staging kind;
  int slot;
  int64_t owner;  // unit for weights, unit * K + batch otherwise
  bool fill;
};

const char* staging_name(Staging s) {
  return s == kWeight ? "weight" : s == kCache ? "cache" : "hidden";
}

std::vector<std::vector<Access>> accesses(const StepShape& s, const std::vector<Task>& plan) {
  const int64_t K = s.num_batches;
  std::map<int64_t, int> weight_slot, hidden_load_slot, hidden_store_slot;
  for (const Task& t : plan) {
    if (t.kind == TaskKind::kLoadWeight) weight_slot[t.unit] = t.slot;
    if (t.kind == TaskKind::kLoadHidden) hidden_load_slot[t.unit * K + t.batch] = t.slot;
    if (t.kind == TaskKind::kStoreHidden) hidden_store_slot[t.unit * K + t.batch] = t.slot;
  }
  std::vector<std::vector<Access>> out(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const Task& t = plan[i];
    const int64_t pair = t.unit * K + t.batch;
    switch (t.kind) {
      case TaskKind::kLoadWeight:
        out[i].push_back({kWeight, t.slot, t.unit, true});
        break;
      case TaskKind::kLoadCache:
        out[i].push_back({kCache, t.slot, pair, true});
        break;
      case TaskKind::kLoadHidden:
        out[i].push_back({kHidden, t.slot, pair, true});
        break;
      case TaskKind::kStoreCache:
        out[i].push_back({kCache, t.slot, pair, false});
        break;
      case TaskKind::kStoreHidden:
        out[i].push_back({kHidden, t.slot, pair, false});
        break;
      case TaskKind::kCompute:
        if (weight_slot.count(t.unit))
          out[i].push_back({kWeight, weight_slot[t.unit], t.unit, false});
        if (s.load_cache && s.unit_has_cache[t.unit])
          out[i].push_back({kCache, t.slot, pair, false});
        // The compute reads its loaded activations and updates them in place; unit 0 has no
        // load and produces the activations (the embedding) that its store reads back.
        if (hidden_load_slot.count(pair))
          out[i].push_back({kHidden, hidden_load_slot[pair], pair, false});
        else if (hidden_store_slot.count(pair))
          out[i].push_back({kHidden, hidden_store_slot[pair], pair, true});
        break;
    }
  }
  return out;
}

// Static slot-safety check: every fill of slot s must have as dependency ancestors all tasks of
// the previous occupant of s on other lanes (same-lane tasks are ordered by the lane itself), and
// in plan order every access must see its own occupant. Returns human-readable violations.
std::vector<std::string> slot_violations(const StepShape& s, const std::vector<Task>& plan) {
  const auto acc = accesses(s, plan);
  const auto anc = ancestors(plan);
  std::vector<std::string> bad;
  struct Occupant {
    int64_t owner = -1;
    std::vector<size_t> tasks;
  };
  std::map<std::pair<int, int>, Occupant> cur;
  for (size_t i = 0; i < plan.size(); ++i)
    for (const Access& a : acc[i]) {
      Occupant& o = cur[{a.kind, a.slot}];
      if (a.fill) {
        for (size_t j : o.tasks)
          if (plan[j].lane != plan[i].lane && !anc[i][j])
            bad.push_back(fmt::format(
                "{} slot {}: task {} ({} u{} b{}) refills it without waiting "
                "for task {} ({} u{} b{}) of the previous occupant",
                staging_name(a.kind), a.slot, i, task_kind_name(plan[i].kind), plan[i].unit,
                plan[i].batch, j, task_kind_name(plan[j].kind), plan[j].unit, plan[j].batch));
        o = Occupant{a.owner, {i}};
      } else {
        if (o.owner != a.owner)
          bad.push_back(
              fmt::format("{} slot {}: task {} ({} u{} b{}) expects occupant {} but plan "
                          "order leaves {}",
                          staging_name(a.kind), a.slot, i, task_kind_name(plan[i].kind),
                          plan[i].unit, plan[i].batch, a.owner, o.owner));
        o.tasks.push_back(i);
      }
    }
  return bad;
}

// Runs the plan as the overlapped executor does (each lane in plan order, a task starts once its
// deps are done) with lanes picked by `pick`; returns a violation or "" when the run was clean.
template <class Pick>
std::string simulate(const StepShape& s, const std::vector<Task>& plan, Pick&& pick) {
  const auto acc = accesses(s, plan);
  std::array<std::vector<size_t>, 3> lanes;
  for (size_t i = 0; i < plan.size(); ++i) lanes[static_cast<int>(plan[i].lane)].push_back(i);
  std::array<size_t, 3> next{0, 0, 0};
  std::vector<char> done(plan.size(), 0);
  std::map<std::pair<int, int>, int64_t> owner;
  for (size_t ran = 0; ran < plan.size(); ++ran) {
    std::vector<int> ready;
    for (int l = 0; l < 3; ++l) {
      if (next[l] == lanes[l].size()) continue;
      const Task& t = plan[lanes[l][next[l]]];
      if (std::all_of(t.deps.begin(), t.deps.end(), [&](int64_t d) {
            return d >= 0 && d < static_cast<int64_t>(plan.size()) && done[d];
          }))
        ready.push_back(l);
    }
    if (ready.empty()) return fmt::format("deadlock after {} of {} tasks", ran, plan.size());
    const int l = pick(ready);
    const size_t i = lanes[l][next[l]++];
    for (const Access& a : acc[i]) {
      auto key = std::make_pair(static_cast<int>(a.kind), a.slot);
      if (a.fill) {
        owner[key] = a.owner;
      } else {
        auto it = owner.find(key);
        const int64_t have = it == owner.end() ? -1 : it->second;
        if (have != a.owner)
          return fmt::format("task {} ({} u{} b{}) read {} slot {} holding {} instead of {}", i,
                             task_kind_name(plan[i].kind), plan[i].unit, plan[i].batch,
                             staging_name(a.kind), a.slot, have, a.owner);
      }
    }
    done[i] = 1;
  }
  return "";
}

// Every schedule the lanes can produce under fixed lane priorities plus `random_runs` random ones.
std::string simulate_many(const StepShape& s, const std::vector<Task>& plan, int random_runs,
                          uint32_t seed) {
  std::array<int, 3> prio{0, 1, 2};
  do {
    auto by_prio = [&](const std::vector<int>& ready) {
      for (int l : prio)
        if (std::find(ready.begin(), ready.end(), l) != ready.end()) return l;
      return ready.front();
    };
    std::string r = simulate(s, plan, by_prio);
    if (!r.empty()) return "priority schedule: " + r;
  } while (std::next_permutation(prio.begin(), prio.end()));
  std::mt19937 rng(seed);
  for (int run = 0; run < random_runs; ++run) {
    auto random_lane = [&](const std::vector<int>& ready) {
      return ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng)];
    };
    std::string r = simulate(s, plan, random_lane);
    if (!r.empty()) return "random schedule " + std::to_string(run) + ": " + r;
  }
  return "";
}

int64_t find_task(const std::vector<Task>& plan, TaskKind kind, int64_t unit, int64_t batch) {
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan[i].kind == kind && plan[i].unit == unit && plan[i].batch == batch)
      return static_cast<int64_t>(i);
  return -1;
}

StepShape attention_mlp_shape(int64_t units, int64_t batches) {
  StepShape s;
  s.num_units = units;
  s.num_batches = batches;
  for (int64_t u = 0; u < units; ++u) s.unit_has_cache.push_back(u % 2 == 0);
  s.load_weights = true;
  s.load_cache = true;
  s.load_hidden = false;
  return s;
}

}  // namespace

TEST_CASE("plan order is a valid sequential order", "[block_plan]") {
  for (const auto& c : all_shapes()) {
    INFO(c.name);
    const auto plan = plan_step(c.shape);
    std::string bad;
    for (size_t i = 0; i < plan.size() && bad.empty(); ++i)
      for (int64_t d : plan[i].deps)
        if (d < 0 || d >= static_cast<int64_t>(i))
          bad = fmt::format("task {} ({} u{} b{}) depends on {}", i, task_kind_name(plan[i].kind),
                            plan[i].unit, plan[i].batch, d);
    CHECK(bad == "");
  }
}

TEST_CASE("plan has exactly the tasks the shape asks for", "[block_plan]") {
  for (const auto& c : all_shapes()) {
    INFO(c.name);
    const StepShape& s = c.shape;
    const int64_t U = s.num_units, K = s.num_batches;
    const auto plan = plan_step(s);
    std::map<std::tuple<int, int64_t, int64_t>, int> count;
    std::vector<std::pair<int64_t, int64_t>> compute_order;
    for (const Task& t : plan) {
      ++count[{static_cast<int>(t.kind), t.unit, t.batch}];
      REQUIRE(t.unit >= 0);
      REQUIRE(t.unit < U);
      REQUIRE(t.batch >= (t.kind == TaskKind::kLoadWeight ? -1 : 0));
      REQUIRE(t.batch < K);
      const Lane want = t.kind == TaskKind::kCompute ? Lane::kCompute
                        : (t.kind == TaskKind::kStoreCache || t.kind == TaskKind::kStoreHidden)
                            ? Lane::kStore
                            : Lane::kLoad;
      CHECK(t.lane == want);
      CHECK(t.slot >= 0);
      CHECK(t.slot < (t.kind == TaskKind::kLoadWeight ? s.weight_slots : 2));
      if (t.kind == TaskKind::kCompute) compute_order.emplace_back(t.unit, t.batch);
      if (t.kind == TaskKind::kLoadWeight) {
        CHECK(t.batch == -1);
        CHECK(t.slot == t.unit % s.weight_slots);  // the executor's slot for the unit
      }
      if (t.kind == TaskKind::kLoadHidden || t.kind == TaskKind::kStoreHidden)
        CHECK(t.slot == (t.unit * K + t.batch) % 2);
    }
    std::vector<std::pair<int64_t, int64_t>> want_order;
    for (int64_t u = 0; u < U; ++u)
      for (int64_t k = 0; k < K; ++k) want_order.emplace_back(u, k);
    CHECK(compute_order == want_order);
    auto n = [&](TaskKind kind, int64_t u, int64_t k) {
      auto it = count.find({static_cast<int>(kind), u, k});
      return it == count.end() ? 0 : it->second;
    };
    size_t expected = 0;
    for (int64_t u = 0; u < U; ++u) {
      CHECK(n(TaskKind::kLoadWeight, u, -1) == (s.load_weights ? 1 : 0));
      expected += s.load_weights ? 1 : 0;
      const bool cache = s.load_cache && s.unit_has_cache[u];
      for (int64_t k = 0; k < K; ++k) {
        CHECK(n(TaskKind::kCompute, u, k) == 1);
        CHECK(n(TaskKind::kLoadCache, u, k) == (cache ? 1 : 0));
        CHECK(n(TaskKind::kStoreCache, u, k) == (cache ? 1 : 0));
        CHECK(n(TaskKind::kLoadHidden, u, k) == (s.load_hidden && u > 0 ? 1 : 0));
        CHECK(n(TaskKind::kStoreHidden, u, k) == (s.load_hidden && u + 1 < U ? 1 : 0));
        expected += 1 + (cache ? 2 : 0) + (s.load_hidden && u > 0) + (s.load_hidden && u + 1 < U);
      }
    }
    CHECK(plan.size() == expected);
  }
}

TEST_CASE("computes and stores depend on their inputs", "[block_plan]") {
  for (const auto& c : all_shapes()) {
    INFO(c.name);
    const StepShape& s = c.shape;
    const auto plan = plan_step(s);
    const auto anc = ancestors(plan);
    auto before = [&](int64_t a, int64_t b) { return a < 0 || anc[b][a]; };
    for (int64_t u = 0; u < s.num_units; ++u)
      for (int64_t k = 0; k < s.num_batches; ++k) {
        INFO("u" << u << " b" << k);
        const int64_t comp = find_task(plan, TaskKind::kCompute, u, k);
        REQUIRE(comp >= 0);
        CHECK(before(find_task(plan, TaskKind::kLoadWeight, u, -1), comp));
        CHECK(before(find_task(plan, TaskKind::kLoadCache, u, k), comp));
        CHECK(before(find_task(plan, TaskKind::kLoadHidden, u, k), comp));
        // Batch k's activations flow through the units in order.
        if (u > 0) CHECK(before(find_task(plan, TaskKind::kCompute, u - 1, k), comp));
        for (TaskKind st : {TaskKind::kStoreCache, TaskKind::kStoreHidden}) {
          const int64_t store = find_task(plan, st, u, k);
          if (store >= 0) CHECK(anc[store][comp]);
        }
        const int64_t lc = find_task(plan, TaskKind::kLoadCache, u, k);
        if (lc >= 0) {
          CHECK(plan[comp].slot == plan[lc].slot);  // the compute reads the slot its load filled
          CHECK(plan[find_task(plan, TaskKind::kStoreCache, u, k)].slot == plan[lc].slot);
        }
      }
  }
}

TEST_CASE("no staging slot is refilled before its previous occupant is done", "[block_plan]") {
  for (const auto& c : all_shapes()) {
    INFO(c.name);
    const auto plan = plan_step(c.shape);
    const auto bad = slot_violations(c.shape, plan);
    for (const auto& b : bad) INFO(b);
    CHECK(bad.empty());
    if (!bad.empty()) FAIL_CHECK(bad.front() << "\n" << describe_plan(plan));
  }
}

TEST_CASE("random lane interleavings complete without reading a foreign slot", "[block_plan]") {
  uint32_t seed = 1;
  for (const auto& c : all_shapes()) {
    INFO(c.name);
    const auto plan = plan_step(c.shape);
    const std::string r = simulate_many(c.shape, plan, 25, seed++);
    if (!r.empty()) FAIL_CHECK(r << "\n" << describe_plan(plan));
    CHECK(r.empty());
  }
}

TEST_CASE("cache slots alternate over the cache-using pairs (regression)", "[block_plan]") {
  // Attention/MLP repeated, 4 batches, KV cache off the compute tier. The old scheme used cache
  // slot (unit * K + batch) % 2 and made a cache load wait for the pair two (unit, batch) pairs
  // before: load_cache(u2, b0) -> slot 0 waited for the MLP pair (u1, b2), which has no cache
  // store, so it could overwrite slot 0 while store_cache(u0, b2) was still writing it back.
  for (int64_t units : {2, 4, 6}) {
    const StepShape s = attention_mlp_shape(units, 4);
    const auto plan = plan_step(s);
    INFO("units " << units << "\n" << describe_plan(plan));
    CHECK(slot_violations(s, plan).empty());
    CHECK(simulate_many(s, plan, 200, 7) == "");
    if (units >= 4) {
      const auto anc = ancestors(plan);
      const int64_t load = find_task(plan, TaskKind::kLoadCache, 2, 0);
      REQUIRE(load >= 0);
      // Cache pairs in order: (0,0..3), (2,0..3): (2,0) is the 4th, so slot 0 after (0,2).
      CHECK(plan[load].slot == 0);
      CHECK(anc[load][find_task(plan, TaskKind::kStoreCache, 0, 2)]);
      CHECK(anc[load][find_task(plan, TaskKind::kCompute, 0, 2)]);
      // ... and slot 1 for (2,1), after (0,3).
      const int64_t load1 = find_task(plan, TaskKind::kLoadCache, 2, 1);
      CHECK(plan[load1].slot == 1);
      CHECK(anc[load1][find_task(plan, TaskKind::kStoreCache, 0, 3)]);
    }
  }

  // The checks above do reject the old scheme: rebuild its slots and deps on today's plan.
  const int64_t K = 4;
  const StepShape s = attention_mlp_shape(4, K);
  auto old = plan_step(s);
  std::map<int64_t, int64_t> compute_at, store_at;
  for (size_t i = 0; i < old.size(); ++i) {
    if (old[i].kind == TaskKind::kCompute) compute_at[old[i].unit * K + old[i].batch] = i;
    if (old[i].kind == TaskKind::kStoreCache) store_at[old[i].unit * K + old[i].batch] = i;
  }
  for (Task& t : old) {
    const int64_t at = t.unit * K + t.batch;
    if (t.kind == TaskKind::kLoadCache) {
      t.deps.clear();
      if (at >= 2) {
        t.deps.push_back(compute_at.at(at - 2));
        if (store_at.count(at - 2)) t.deps.push_back(store_at.at(at - 2));
      }
    }
    if (t.kind == TaskKind::kLoadCache || t.kind == TaskKind::kStoreCache ||
        (t.kind == TaskKind::kCompute && s.unit_has_cache[t.unit]))
      t.slot = static_cast<int>(at % 2);
  }
  const auto bad = slot_violations(s, old);
  REQUIRE_FALSE(bad.empty());
  CHECK(std::any_of(bad.begin(), bad.end(), [](const std::string& b) {
    return b.find("cache slot 0: task") != std::string::npos &&
           b.find("store_cache u0 b2") != std::string::npos;
  }));
  CHECK(simulate_many(s, old, 200, 7) != "");
}

TEST_CASE("activation slots: a unit-0 compute waits for the store two pairs back", "[block_plan]") {
  // Unit 0 has no hidden load: its compute produces the activations in slot (0*K+k)%2 that its
  // store reads back, so it refills that slot and must wait for the store of batch k-2.
  StepShape s;
  s.num_units = 3;
  s.num_batches = 3;
  s.unit_has_cache = {true, false, true};
  s.load_weights = false;
  s.load_cache = false;
  s.load_hidden = true;
  const auto plan = plan_step(s);
  INFO(describe_plan(plan));
  const auto anc = ancestors(plan);
  CHECK(anc[find_task(plan, TaskKind::kCompute, 0, 2)]
           [find_task(plan, TaskKind::kStoreHidden, 0, 0)]);
  CHECK(slot_violations(s, plan).empty());
}

TEST_CASE("a single batch with offloaded activations plans valid deps", "[block_plan]") {
  StepShape s;
  s.num_units = 4;
  s.num_batches = 1;
  s.unit_has_cache = {true, false, true, false};
  s.load_hidden = true;
  const auto plan = plan_step(s);
  INFO(describe_plan(plan));
  for (size_t i = 0; i < plan.size(); ++i)
    for (int64_t d : plan[i].deps) {
      CHECK(d >= 0);
      CHECK(d < static_cast<int64_t>(i));
    }
  for (int64_t u = 1; u < 4; ++u) {
    const int64_t load = find_task(plan, TaskKind::kLoadHidden, u, 0);
    const int64_t store = find_task(plan, TaskKind::kStoreHidden, u - 1, 0);
    REQUIRE(load >= 0);
    CHECK(std::count(plan[load].deps.begin(), plan[load].deps.end(), store) == 1);
  }
}

TEST_CASE("describe_plan names every task kind it contains", "[block_plan]") {
  for (const auto& c : all_shapes()) {
    INFO(c.name);
    const auto plan = plan_step(c.shape);
    const std::string text = describe_plan(plan);
    REQUIRE_FALSE(text.empty());
    CHECK(std::count(text.begin(), text.end(), '\n') == static_cast<long>(plan.size()));
    for (const Task& t : plan) CHECK(text.find(task_kind_name(t.kind)) != std::string::npos);
  }
  StepShape full = attention_mlp_shape(3, 2);
  full.load_hidden = true;
  const std::string text = describe_plan(plan_step(full));
  for (const char* kind :
       {"load_weight", "load_cache", "load_hidden", "compute", "store_cache", "store_hidden"})
    CHECK(text.find(kind) != std::string::npos);
}

TEST_CASE("plan_step rejects inconsistent shapes", "[block_plan]") {
  StepShape s = attention_mlp_shape(2, 2);
  s.unit_has_cache.pop_back();
  CHECK_THROWS(plan_step(s));
  CHECK_THROWS(plan_step(attention_mlp_shape(0, 1)));
  StepShape no_batches = attention_mlp_shape(2, 1);
  no_batches.num_batches = 0;
  CHECK_THROWS(plan_step(no_batches));
}
