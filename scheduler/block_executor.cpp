// Block-schedule execution over lanes.
#include "scheduler/block_executor.h"

#include <algorithm>
#include <utility>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/model/moe_routing.h"

namespace offgen {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

BlockExecutor::BlockExecutor(const DecoderModel& model, WeightStore& weights, KvStore& kv,
                             bool overlap, const Placement& placement, NvmeStore* disk,
                             const KvSlotPolicy* policy)
    : model_(model),
      backend_(model.backend()),
      weights_(weights),
      kv_(kv),
      overlap_(overlap),
      placement_(placement),
      disk_(disk),
      policy_(policy) {
  const bool offloaded = placement.activations().memory() < 100;
  OFFGEN_CHECK(!offloaded || disk != nullptr, kInternal,
               "activations placed on disk without an NVMe store");
  OFFGEN_CHECK(!offloaded || backend_.device_is_host(), kConfig,
               "on the {} backend activations stay in GPU memory (--percent ... 100 0): "
               "offloading them is not supported there yet",
               backend_.name());
  load_stream_ = backend_.make_stream();
}

void BlockExecutor::prepare_activation(size_t k, int64_t rows) {
  const int64_t d = model_.config().d_model;
  if (act_home_.size() <= k) act_home_.resize(k + 1);
  ActHome& h = act_home_[k];
  const TierBytes split = placement_.activation(rows * d * 4);
  const int64_t bytes = split.host + split.disk;
  if (bytes <= h.bytes) return;  // homes only grow
  h.bytes = bytes;
  h.ram_bytes = split.host;
  if (static_cast<int64_t>(h.ram.capacity()) < h.ram_bytes) h.ram = AlignedHostBuffer(h.ram_bytes);
  const auto disk_bytes = static_cast<uint64_t>(split.disk);
  // The outgrown extent goes back to the store (no I/O of an earlier forward is in flight:
  // forwards are synchronous); the new one is exactly what the placement says, as admission
  // counted it.
  if (h.disk.bytes < disk_bytes) {
    const Extent old = std::exchange(h.disk, Extent{});  // never named again once released
    disk_->release(old);
    h.disk = disk_->allocate(disk_bytes);
  }
  for (auto& st : act_stage_)
    if (static_cast<int64_t>(st.capacity()) < bytes) st = AlignedHostBuffer(bytes);
}

void BlockExecutor::prepare_kv_staging(int64_t seqs, int64_t capacity) {
  const int64_t need = kv_.staging_bytes(capacity);
  for (int slot = 0; slot < 2; ++slot) {
    auto& v = kv_stage_[slot];
    if (need > stage_bytes_) v.clear();
    while (static_cast<int64_t>(v.size()) < 2 * seqs) v.emplace_back(std::max(need, stage_bytes_));
  }
  stage_bytes_ = std::max(stage_bytes_, need);
}

void BlockExecutor::reserve(const ForwardShape& s) {
  if (s.rows == 0) return;
  const ModelConfig& c = model_.config();
  if (placement_.activations().memory() >= 100) {
    hidden_.reserve(backend_, s.rows * c.d_model);
  } else {
    for (int64_t k = 0; k < s.batches; ++k)
      prepare_activation(static_cast<size_t>(k), s.batch_rows);
  }
  scratch_.reserve(backend_, c, s.batch_rows);
  group_rows_ = std::max(group_rows_, s.batch_rows);
  if (!backend_.device_is_host()) logits_.reserve(backend_, s.sequences * c.vocab_size);
  if (s.capacity > 0 && kv_.ram_slots(s.capacity) < s.capacity)
    prepare_kv_staging(s.batch_sequences, s.capacity);
}

TierBytes BlockExecutor::held() const {
  auto pages = [](int64_t bytes) { return (bytes + 4095) / 4096 * 4096; };
  TierBytes t;
  t.device = pages(hidden_.capacity() * 4) + scratch_.bytes() + pages(logits_.capacity() * 4);
  for (const ActHome& h : act_home_) {
    t.host += static_cast<int64_t>(h.ram.capacity());
    t.disk += static_cast<int64_t>(h.disk.bytes);
  }
  for (const auto& st : act_stage_) t.host += static_cast<int64_t>(st.capacity());
  for (const auto& slot : kv_stage_)
    for (const AlignedHostBuffer& b : slot) t.device += static_cast<int64_t>(b.capacity());
  return t;
}

float* BlockExecutor::hidden(int64_t unit, int64_t batch) {
  if (!offload_act_) return hidden_.data() + row_offset_[batch] * model_.config().d_model;
  const int64_t slot = (unit * static_cast<int64_t>(logits_offset_.size()) + batch) % 2;
  return reinterpret_cast<float*>(act_stage_[slot].data());
}

std::byte* BlockExecutor::stage(int slot, size_t seq, int which) {
  return reinterpret_cast<std::byte*>(kv_stage_[slot][seq * 2 + which].data());
}

std::vector<KvSeqView> BlockExecutor::kv_views(const BatchInput& b, int64_t layer, int slot) {
  std::vector<KvSeqView> views(b.size());
  const int64_t heads = model_.config().n_kv_heads;
  written_[slot].resize(b.size() * heads);
  for (size_t i = 0; i < b.size(); ++i) {
    if (b.external) {
      views[i] = (*b.external)[layer][i];
    } else if (kv_.resident(b.kv[i])) {
      views[i] = kv_.home_view(b.kv[i], layer);
    } else {
      views[i] = KvSeqView{stage(slot, i, 0), stage(slot, i, 1), kv_.capacity(b.kv[i], layer)};
      views[i].dtype = kv_.kv_dtype();
      kv_.attach_meta(b.kv[i], layer, views[i]);
    }
    if (!b.prefix.empty() && b.prefix[i]) views[i].prefix = b.prefix[i] + layer;
    views[i].written = written_[slot].data() + i * heads;
  }
  return views;
}

std::vector<SeqSpan> BlockExecutor::layer_spans(const BatchInput& b, int64_t layer) const {
  std::vector<SeqSpan> spans = b.spans;
  if (b.external) return spans;
  for (size_t i = 0; i < spans.size(); ++i) {
    // Tokens fed before this chunk: its first row's position (no shared context on models with
    // sliding-window layers).
    const int64_t fed = b.positions[static_cast<size_t>(spans[i].row_begin)];
    spans[i].n_past = kv_.slots_used(b.kv[i], layer, spans[i].n_past, fed);
  }
  return spans;
}

BlockExecutor::SlotExperts& BlockExecutor::slot_experts(int slot, int64_t unit) {
  if (slot_experts_.size() <= static_cast<size_t>(slot)) slot_experts_.resize(slot + 1);
  SlotExperts& x = slot_experts_[static_cast<size_t>(slot)];
  if (x.unit != unit || x.forward != forwards_) {
    OFFGEN_CHECK(x.pending.empty(), kInternal, "weight slot {}: reads of unit {} still pending",
                 slot, x.unit);
    const auto n = static_cast<size_t>(model_.config().n_experts);
    x.unit = unit;
    x.forward = forwards_;
    x.held.assign(n, 0);
    x.ahead.assign(n, 0);
  }
  return x;
}

void BlockExecutor::wait_pending(SlotExperts& x, bool quiet) {
  while (!x.pending.empty()) {
    const Ticket t = x.pending.back();
    x.pending.pop_back();
    try {
      weights_.wait_ranges(t);
    } catch (...) {
      if (!quiet) throw;  // else the failure that ended the run is the one reported
    }
  }
}

void BlockExecutor::drain_ahead(bool quiet) {
  for (SlotExperts& x : slot_experts_) wait_pending(x, quiet);
}

void BlockExecutor::fetch_experts(int64_t unit, int slot, const void* blob, const float* h,
                                  int64_t rows) {
  SlotExperts& x = slot_experts(slot, unit);
  model_.route_unit(unit, blob, h, rows, scratch_, routed_);
  std::vector<std::pair<int64_t, int64_t>> missing;
  for (int64_t e : routed_) {
    const auto i = static_cast<size_t>(e);
    if (x.ahead[i] == 1) {
      x.ahead[i] = 2;
      ++ahead_.used;
    }
    if (x.held[i] != 0) continue;
    x.held[i] = 1;
    missing.push_back(model_.expert_range(unit, e));
  }
  // Read together with what is still on its way from ahead (the disk queue stays full); a wait
  // that throws leaves the rest pending for the failure path (drain_ahead).
  if (const std::optional<Ticket> t = weights_.fetch_ranges(unit, slot, missing))
    x.pending.push_back(*t);
  wait_pending(x, false);
}

void BlockExecutor::fetch_ahead(int64_t unit, const float* h, int64_t rows) {
  const int64_t next = unit + 2;  // the next MLP unit
  // Its slot is the attention unit's before this one (three slots), whose compute has finished.
  if (!experts_ahead_ || weights_.staging_slots() < 3 || next >= model_.num_units() ||
      !weights_.lazy(next) || !model_.predict_experts(next, h, rows, scratch_, predicted_))
    return;
  const int slot = static_cast<int>(next % weights_.staging_slots());
  SlotExperts& x = slot_experts(slot, next);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t e : predicted_) {
    const auto i = static_cast<size_t>(e);
    if (x.held[i] != 0) continue;
    x.held[i] = 1;
    x.ahead[i] = 1;
    ++ahead_.fetched;
    ranges.push_back(model_.expert_range(next, e));
  }
  if (const std::optional<Ticket> t = weights_.fetch_ranges(next, slot, ranges))
    x.pending.push_back(*t);
}

bool BlockExecutor::choose_on_demand(int64_t rows) {
  const ModelConfig& c = model_.config();
  if (experts_on_demand(c.n_experts, c.n_experts_used, rows)) return true;
  if (!weights_.any_lazy() || !experts_by_cost(c.n_experts, c.n_experts_used, rows)) return false;
  const auto it = expert_move_times_.find(rows);
  if (it == expert_move_times_.end() || it->second.whole_wall < 0) return false;
  const ExpertMoveTimes& t = it->second;
  if (t.on_demand_wall >= 0) return t.on_demand_wall < t.whole_wall;
  // The experts' part of the load lane's time: their share of the disk bytes it reads.
  int64_t disk = 0, experts = 0;
  for (int64_t u = 0; u < weights_.num_units(); ++u) {
    disk += weights_.disk_bytes(u);
    experts += weights_.lazy_disk_bytes(u);
  }
  const double part = disk > 0 ? static_cast<double>(experts) / static_cast<double>(disk) : 0.0;
  return move_experts_on_demand(expected_expert_share(c.n_experts, c.n_experts_used, rows), t.load,
                                part * t.load, t.compute, overlap_);
}

bool BlockExecutor::choose_ahead(int64_t rows) {
  if (!overlap_ || !weights_.any_lazy()) return false;
  const auto it = expert_move_times_.find(rows);
  if (it == expert_move_times_.end() || it->second.plain_wall < 0) return false;
  ExpertMoveTimes& t = it->second;
  if (t.ahead_wall < 0) return true;
  const bool faster = t.ahead_wall < t.plain_wall;
  if (++t.since_probe < kAheadProbe) return faster;
  t.since_probe = 0;
  return !faster;
}

void BlockExecutor::note_expert_move(int64_t rows, double load, double compute, double wall) {
  const ModelConfig& c = model_.config();
  if (!weights_.any_lazy()) return;
  if (experts_on_demand_) {
    double& avg = experts_ahead_ ? expert_move_times_[rows].ahead_wall
                                 : expert_move_times_[rows].plain_wall;
    avg = avg < 0 ? wall : 0.75 * avg + 0.25 * wall;
  }
  if (!experts_by_cost(c.n_experts, c.n_experts_used, rows)) return;
  ExpertMoveTimes& t = expert_move_times_[rows];
  if (experts_on_demand_) {
    t.on_demand_wall = wall;
  } else {
    t.load = load, t.compute = compute, t.whole_wall = wall;
  }
}

void BlockExecutor::execute(const Task& t, const std::vector<BatchInput>& batches) {
  const ModelConfig& c = model_.config();
  switch (t.kind) {
    case TaskKind::kLoadWeight:
      weights_.load(t.unit, t.slot, *load_stream_, !experts_on_demand_);
      return;
    case TaskKind::kLoadCache: {
      const BatchInput& b = batches[t.batch];
      const int64_t layer = DecoderModel::unit_layer(t.unit);
      const std::vector<SeqSpan> spans = layer_spans(b, layer);
      for (size_t i = 0; i < b.kv.size(); ++i)
        if (!kv_.resident(b.kv[i]))
          kv_.load(b.kv[i], layer, spans[i].n_past, stage(t.slot, i, 0), stage(t.slot, i, 1));
      return;
    }
    case TaskKind::kCompute: {
      const BatchInput& b = batches[t.batch];
      float* h = hidden(t.unit, t.batch);
      if (t.unit == 0) model_.embed(b.ids, b.positions.data(), h, scratch_);
      // A mixture of experts' MLP unit runs once over a group of batches (group_end_), at the
      // group's first batch; the others' tasks find their rows computed.
      const bool experts = model_.config().moe() && !DecoderModel::unit_has_cache(t.unit);
      const int64_t end = experts ? group_end_[static_cast<size_t>(t.batch)] : t.batch + 1;
      const int wslot = static_cast<int>(t.unit % weights_.staging_slots());
      const void* blob = weights_.acquire(t.unit, wslot);
      if (end > t.batch) {
        int64_t rows = 0;
        for (int64_t k = t.batch; k < end; ++k) rows += static_cast<int64_t>(batches[k].ids.size());
        std::vector<KvSeqView> views;
        std::vector<SeqSpan> spans;
        std::vector<int32_t> positions;
        if (DecoderModel::unit_has_cache(t.unit)) {
          views = kv_views(b, DecoderModel::unit_layer(t.unit), t.slot);
          spans = layer_spans(b, DecoderModel::unit_layer(t.unit));
        } else if (end > t.batch + 1) {  // the group's spans and positions, batch after batch
          for (int64_t k = t.batch; k < end; ++k) {
            const int64_t first = row_offset_[k] - row_offset_[t.batch];
            for (SeqSpan sp : batches[k].spans) {
              sp.row_begin += first;
              spans.push_back(sp);
            }
            positions.insert(positions.end(), batches[k].positions.begin(),
                             batches[k].positions.end());
          }
        }
        const UnitBatch ub{rows, spans.empty() ? b.spans : spans,
                           positions.empty() ? b.positions.data() : positions.data(), views,
                           b.external ? b.external_policy : policy_};
        if (experts_on_demand_ && weights_.lazy(t.unit)) {
          fetch_experts(t.unit, wslot, blob, h, rows);
          fetch_ahead(t.unit, h, rows);
        }
        model_.run_unit(t.unit, blob, h, ub, scratch_);
        if (experts) {
          ++expert_runs_.runs;
          expert_runs_.batches += end - t.batch;
          expert_runs_.rows += rows;
        }
      }
      weights_.release(t.unit, wslot);
      if (t.unit + 1 == model_.num_units()) {
        std::vector<int64_t> last;
        for (const auto& sp : b.spans) last.push_back(sp.row_begin + sp.n_new - 1);
        model_.output_step(h, last, logits_out_ + logits_offset_[t.batch] * c.vocab_size,
                           scratch_);
      }
      return;
    }
    case TaskKind::kStoreCache: {
      const BatchInput& b = batches[t.batch];
      const int64_t layer = DecoderModel::unit_layer(t.unit);
      const int64_t heads = model_.config().n_kv_heads;
      const std::vector<SeqSpan> spans = layer_spans(b, layer);
      std::vector<int32_t> slots;
      for (size_t i = 0; i < b.kv.size(); ++i) {
        if (kv_.resident(b.kv[i])) continue;
        // The slots compute wrote (KvStep): appended ones, each head's replaced one, or all.
        const SeqSpan& sp = spans[i];
        const int64_t cap = kv_.capacity(b.kv[i], layer);
        const int64_t target = kv_.compact_to(b.kv[i], layer);
        const bool evicts = policy_ != nullptr || kv_.window_table(b.kv[i], layer);
        std::byte* k = stage(t.slot, i, 0);  // non-const: a block format's disk image is patched
        std::byte* v = stage(t.slot, i, 1);
        switch (kv_write_kind(sp.n_past, sp.n_new, cap, target, evicts)) {
          case KvWrite::kAppend:
            kv_.store(b.kv[i], layer, sp.n_past, sp.n_past + sp.n_new, k, v);
            break;
          case KvWrite::kCompact:
            kv_.store(b.kv[i], layer, 0, target, k, v);
            break;
          case KvWrite::kReplace: {
            const int32_t* w = written_[t.slot].data() + i * heads;
            slots.assign(w, w + heads);
            std::sort(slots.begin(), slots.end());
            slots.erase(std::unique(slots.begin(), slots.end()), slots.end());
            kv_.store_slots(b.kv[i], layer, slots, k, v);
            break;
          }
        }
      }
      return;
    }
    case TaskKind::kLoadHidden: {
      ActHome& home = act_home_[t.batch];
      auto* dst = reinterpret_cast<std::byte*>(hidden(t.unit, t.batch));
      if (home.ram_bytes > 0) std::memcpy(dst, home.ram.data(), home.ram_bytes);
      if (home.bytes > home.ram_bytes)
        disk_->read(home.disk, dst + home.ram_bytes, home.bytes - home.ram_bytes);
      return;
    }
    case TaskKind::kStoreHidden: {
      ActHome& home = act_home_[t.batch];
      const auto* src = reinterpret_cast<const std::byte*>(hidden(t.unit, t.batch));
      if (home.ram_bytes > 0) std::memcpy(home.ram.data(), src, home.ram_bytes);
      if (home.bytes > home.ram_bytes)
        disk_->write(home.disk, src + home.ram_bytes, home.bytes - home.ram_bytes);
      return;
    }
  }
}

void BlockExecutor::run(const std::vector<BatchInput>& batches, float* logits, int32_t* argmax,
                        const std::function<void()>& checkpoint) {
  const auto t_wall = Clock::now();
  ++forwards_;
  int64_t rows = 0;
  for (const BatchInput& b : batches) rows += static_cast<int64_t>(b.ids.size());
  experts_on_demand_ = choose_on_demand(rows);
  experts_ahead_ = experts_on_demand_ && choose_ahead(rows);
  if (experts_on_demand_ && weights_.any_lazy()) ++on_demand_forwards_;
  const int64_t K = static_cast<int64_t>(batches.size());
  StepShape shape;
  shape.num_units = model_.num_units();
  shape.num_batches = K;
  for (int64_t u = 0; u < shape.num_units; ++u) shape.unit_has_cache.push_back(DecoderModel::unit_has_cache(u));
  shape.load_weights = weights_.needs_load();
  shape.weight_slots = weights_.staging_slots();
  shape.load_cache = false;
  int64_t max_seqs = 0, max_cap = 0;
  logits_offset_.assign(K, 0);
  int64_t off = 0;
  for (int64_t k = 0; k < K; ++k) {
    logits_offset_[k] = off;
    off += static_cast<int64_t>(batches[k].size());
    max_seqs = std::max<int64_t>(max_seqs, static_cast<int64_t>(batches[k].size()));
    for (int64_t h : batches[k].kv)
      if (!kv_.resident(h)) {
        shape.load_cache = true;
        max_cap = std::max(max_cap, kv_.capacity(h));
      }
  }
  if (shape.load_cache) prepare_kv_staging(max_seqs, max_cap);
  OFFGEN_CHECK(!shape.load_cache || backend_.device_is_host(), kInternal,
               "KV staging on the {} backend", backend_.name());
  // Logits straight into the caller's rows where device memory is host memory.
  const int64_t n_logits = off * model_.config().vocab_size;
  if (backend_.device_is_host() && logits) {
    logits_out_ = logits;
  } else {
    logits_.reserve(backend_, n_logits);
    logits_out_ = logits_.data();
  }
  // Activations: every batch's rows in one array, or (a share below 100%) each batch's home.
  offload_act_ = placement_.activations().memory() < 100;
  if (offload_act_) {
    for (size_t k = 0; k < batches.size(); ++k)
      prepare_activation(k, static_cast<int64_t>(batches[k].ids.size()));
  } else {
    row_offset_.assign(K, 0);
    int64_t rows = 0;
    for (int64_t k = 0; k < K; ++k) {
      row_offset_[k] = rows;
      rows += static_cast<int64_t>(batches[k].ids.size());
    }
    hidden_.reserve(backend_, rows * model_.config().d_model);
  }
  shape.load_hidden = offload_act_;
  // Mixtures of experts: batches grouped for the MLP units (expert_batch_groups) within
  // expert_group_cap, when every batch's activations lie in one array.
  group_end_.assign(static_cast<size_t>(K), 0);
  for (int64_t k = 0; k < K; ++k) group_end_[k] = k + 1;
  if (model_.config().moe() && !offload_act_ && K > 0) {
    std::vector<int64_t> batch_rows;
    for (const BatchInput& b : batches) batch_rows.push_back(static_cast<int64_t>(b.ids.size()));
    const int64_t cap = expert_group_cap(
        std::max(group_rows_, *std::max_element(batch_rows.begin(), batch_rows.end())),
        model_.config().n_experts, model_.config().n_experts_used);
    int64_t k = 0;
    for (const int64_t n : expert_batch_groups(batch_rows, cap)) {
      group_end_[k] = k + n;
      for (int64_t j = k + 1; j < k + n; ++j) group_end_[j] = -1;
      k += n;
    }
  }
  const std::vector<Task> plan = plan_step(shape);

  // The results to the host once everything ran (waits for the device).
  auto finish = [&] {
    if (argmax) backend_.argmax_rows(logits_out_, off, model_.config().vocab_size, argmax);
    if (logits && logits_out_ != logits) backend_.copy(logits, logits_out_, n_logits * 4);
    if (!backend_.device_is_host())
      d2h_bytes_ += (argmax ? off * 4 : 0) + (logits ? n_logits * 4 : 0);
    backend_.synchronize();
    load_stream_->synchronize();
  };
  const bool lanes = overlap_ && (shape.load_weights || shape.load_cache || shape.load_hidden);
  if (!lanes) {
    LaneTimes run;  // this forward's lanes
    for (const Task& t : plan) {
      const auto t0 = Clock::now();
      try {
        if (checkpoint && t.lane == Lane::kCompute) checkpoint();
        execute(t, batches);
      } catch (...) {  // nothing may still be reading or writing the buffers of this run
        backend_.synchronize();
        load_stream_->synchronize();
        drain_ahead(true);
        throw;
      }
      const double dt = since(t0);
      (t.lane == Lane::kLoad ? run.load : t.lane == Lane::kStore ? run.store : run.compute) += dt;
    }
    finish();
    note_expert_move(rows, run.load, run.compute, since(t_wall));
    times_.load += run.load;
    times_.store += run.store;
    times_.compute += run.compute;
    times_.bound += std::max({run.load, run.compute, run.store});
    times_.wall += since(t_wall);
    return;
  }

  // Overlapped: each lane runs its own tasks in plan order, waiting for their dependencies.
  std::vector<char> done(plan.size(), 0);
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;
  bool failed = false;
  auto lane_fn = [&](Lane lane, double& busy) {
    for (size_t i = 0; i < plan.size(); ++i) {
      const Task& t = plan[i];
      if (t.lane != lane) continue;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] {
          if (failed) return true;
          for (int64_t d : t.deps)
            if (!done[d]) return false;
          return true;
        });
        if (failed) return;
      }
      const auto t0 = Clock::now();
      try {
        if (checkpoint && lane == Lane::kCompute) checkpoint();  // the calling thread's lane
        execute(t, batches);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!failed) error = std::current_exception();
        failed = true;
        cv.notify_all();
        return;
      }
      busy += since(t0);
      std::lock_guard lock(mu);
      done[i] = 1;
      cv.notify_all();
    }
  };
  double load_busy = 0, store_busy = 0, compute_busy = 0;
  std::thread load_thread(lane_fn, Lane::kLoad, std::ref(load_busy));
  std::thread store_thread(lane_fn, Lane::kStore, std::ref(store_busy));
  lane_fn(Lane::kCompute, compute_busy);
  load_thread.join();
  store_thread.join();
  if (!error) {
    const auto t0 = Clock::now();
    drain_ahead(false);  // none left: each was waited for by the unit it was fetched for
    finish();
    compute_busy += since(t0);
  } else {  // nothing may still be reading or writing the buffers of this run
    backend_.synchronize();
    load_stream_->synchronize();
    drain_ahead(true);
  }
  if (!error) note_expert_move(rows, load_busy, compute_busy, since(t_wall));
  times_.load += load_busy;
  times_.store += store_busy;
  times_.compute += compute_busy;
  times_.bound += std::max({load_busy, compute_busy, store_busy});
  times_.wall += since(t_wall);
  if (error) std::rethrow_exception(error);
}

}  // namespace offgen
