// The block schedule as data: for one generation step over num_batches GPU batches and num_units
// schedulable units (attention / MLP), the zig-zag task list (unit-major, batch-minor) with the
// lane each task runs on and the tasks it waits for. Pure: no I/O, unit-tested on its own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace offgen {

enum class Lane { kLoad, kCompute, kStore };
enum class TaskKind { kLoadWeight, kLoadCache, kLoadHidden, kCompute, kStoreCache, kStoreHidden };

const char* task_kind_name(TaskKind k);

struct Task {
  TaskKind kind = TaskKind::kCompute;
  Lane lane = Lane::kCompute;
  int64_t unit = 0;
  int64_t batch = 0;   // -1 for weight loads (shared by every batch)
  int slot = 0;        // staging slot the task fills/uses (weights: unit % weight_slots)
  std::vector<int64_t> deps;  // indices of earlier tasks in the plan that must finish first
};

struct StepShape {
  int64_t num_units = 0;
  int64_t num_batches = 0;
  std::vector<bool> unit_has_cache;  // which units read/write the KV cache (attention units)
  bool load_weights = true;          // false when every weight is resident (no load tasks)
  bool load_cache = true;            // false when every KV block is resident
  bool load_hidden = false;          // true when activations live (partly) off the compute tier
  // Weight staging slots (>= 2): weight loads run up to weight_slots - 1 units ahead of compute,
  // so a unit whose load outlasts the compute before it borrows the slack of earlier units.
  int weight_slots = 2;
};

// Tasks in a valid sequential order (running them in order is the no-overlap schedule); every
// dependency points to an earlier task, so lanes that each run their own tasks in plan order
// never deadlock. Weight slot = unit % weight_slots; cache slot alternates over the cache-using (unit, batch)
// pairs; activation slot = (unit * num_batches + batch) % 2.
// Unit 0 computes the embedding first (no hidden load); the last unit ends with the logits
// (no hidden store).
std::vector<Task> plan_step(const StepShape& shape);

std::string describe_plan(const std::vector<Task>& plan);

// Seconds each lane was busy running its tasks, and the wall time of the steps (accumulated by
// the executor; overlap_efficiency = busiest lane / wall). bound: the sum over forwards of each
// forward's busiest lane — the wall time a perfect overlap of every forward would take, so
// bound / wall is the overlap achieved forward by forward (a run whose prefill is compute-bound
// and whose decode is load-bound has busiest / wall < 1 however well each forward overlaps).
struct LaneTimes {
  double load = 0, compute = 0, store = 0, wall = 0, bound = 0;
};

}  // namespace offgen
