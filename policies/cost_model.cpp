// Block-schedule cost model.
#include "policies/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "runtime/core/error.h"
#include "runtime/model/kv_slots.h"
#include "runtime/model/moe_routing.h"

namespace offgen {
namespace {

constexpr int64_t kPage = kPlacementAlign;  // the unit of every disk transfer
int64_t page_up(int64_t b) { return (b + kPage - 1) / kPage * kPage; }
int64_t page_down(int64_t b) { return b / kPage * kPage; }

// One sequence's share of a forward: n_new tokens after n_past used slots; `mult` identical ones.
struct Piece {
  int64_t n_past = 0, n_new = 0, mult = 1;
};
// A GPU batch of a forward, `repeat` identical ones.
struct Batch {
  std::vector<Piece> pieces;
  int64_t repeat = 1;
};

struct Ctx {
  const ModelFacts& m;
  const ComputeProfile& c;
  const HardwareProfile& hw;
  const Policy& p;
  Placement placement;  // the stores' splits (m.placement(p))
  int64_t capacity = 0, compact_to = 0, ram_slots = 0;
  int64_t kv_row = 0;  // home bytes of a KV row in the policy's KV dtype
  bool evicts = false, kv_resident = true;
  double pair_scale = 1;      // Workload::prefill_pair_scale: prefill pieces' attention pairs
  bool load_weights = false;  // some blob is assembled in staging (the weight store's rule)
  // Mixtures of experts: the executor's scratch rows (ForwardShape::batch_rows), within which
  // MLP units run batches together (expert_group_cap, expert_batch_groups).
  int64_t group_rows = 0;

  // Disk seconds of the reads and writes costed since the last take_disk(): the store serialises
  // its I/O calls, so the load and store lanes share the disk.
  mutable double disk = 0;
  double take_disk() const { return std::exchange(disk, 0.0); }
  double read(int64_t bytes) const {
    const double t = bytes > 0 ? hw.disk_read.at(static_cast<double>(bytes)) : 0;
    disk += t;
    return t;
  }
  double write(int64_t bytes) const {
    const double t = bytes > 0 ? hw.disk_write.at(static_cast<double>(bytes)) : 0;
    disk += t;
    return t;
  }
  double copy(int64_t bytes) const { return bytes > 0 ? hw.ram_copy.at(static_cast<double>(bytes)) : 0; }

  // Forwards that expect more than kOnDemandExpertShare of the experts (and fewer than all):
  // whether this costing moves them on demand (forward_time costs both ways, keeps the faster).
  bool on_demand_beyond_share = false;
  // Whether unit u's experts move on demand in a forward of `rows` rows (the weight store's and
  // the executor's rule: a staged unit on a backend whose device memory is host memory, in a
  // forward that expects to need few of them: experts_on_demand; beyond that, by cost).
  bool lazy_experts(int64_t unit, int64_t rows) const {
    if (!m.lazy_experts(placement, unit)) return false;
    return experts_on_demand(m.n_experts, m.n_experts_used, rows) ||
           (on_demand_beyond_share && experts_by_cost(m.n_experts, m.n_experts_used, rows));
  }
  // Whether a forward of `rows` rows has experts that may move either way (by cost).
  bool moves_by_cost(int64_t rows) const {
    if (!load_weights || !experts_by_cost(m.n_experts, m.n_experts_used, rows)) return false;
    for (size_t u = 0; u < m.unit_bytes.size(); ++u)
      if (m.lazy_experts(placement, static_cast<int64_t>(u))) return true;
    return false;
  }
  // The load lane's part of unit u in a forward of `rows` rows: the whole blob, or the bytes
  // before its experts.
  double weight_load(int64_t unit, int64_t rows) const {
    const int64_t bytes = m.unit_bytes[unit];
    const int64_t disk_part = placement.weight_blob(bytes).disk;
    if (lazy_experts(unit, rows)) {
      const int64_t head = m.unit_experts_at[unit], memory = bytes - disk_part;
      return copy(std::min(head, memory)) + read(std::max<int64_t>(0, head - memory));
    }
    return copy(bytes - disk_part) + read(disk_part);
  }
  // The experts of unit u a forward of `rows` rows routes to, moved on demand by the compute
  // lane: under uniform routing E (1 - (1 - k/E)^rows) distinct experts, each read from RAM and
  // disk in the proportion its blob's tail lies there.
  double expert_load(int64_t unit, int64_t rows) const {
    const int64_t total = m.unit_bytes[unit], head = m.unit_experts_at[unit];
    const int64_t tail = total - head, disk_part = placement.weight_blob(total).disk;
    const auto e = static_cast<double>(m.n_experts);
    const double each = static_cast<double>(tail) / e;
    const double on_disk = std::min<double>(1.0, static_cast<double>(disk_part) / tail);
    if (!m.expert_choice.empty()) {
      // Measured routing, experts hottest first: the disk holds the coldest (the blob's tail).
      const double from_disk = on_disk * e * m.expected_tail_share(on_disk, rows);
      const double from_ram = e * m.expected_tail_share(1.0, rows) - from_disk;
      return from_ram * copy(static_cast<int64_t>(each)) +
             from_disk * read(page_up(static_cast<int64_t>(each)));
    }
    const double distinct = e * expected_expert_share(m.n_experts, m.n_experts_used, rows);
    return distinct * (copy(static_cast<int64_t>(each * (1 - on_disk))) +
                       read(page_up(static_cast<int64_t>(each * on_disk))));
  }
  // K and V of slots [0, n) from their homes into staging.
  double cache_load(int64_t n) const {
    const int64_t row = kv_row;
    const int64_t ram = std::min(n, ram_slots);
    double t = 0;
    for (int which = 0; which < 2; ++which)  // K, then V
      t += copy(ram * row) + (n > ram_slots ? read(page_up((n - ram_slots) * row)) : 0);
    return t;
  }
  // K and V of slots [begin, end) back to their homes (whole pages on disk).
  double cache_store_range(int64_t begin, int64_t end) const {
    const int64_t row = kv_row;
    double t = 0;
    for (int which = 0; which < 2; ++which) {  // K, then V
      if (begin < std::min(end, ram_slots)) t += copy((std::min(end, ram_slots) - begin) * row);
      if (end > ram_slots) {
        const int64_t from = page_down((std::max(begin, ram_slots) - ram_slots) * row);
        t += write(page_up((end - ram_slots) * row) - from);
      }
    }
    return t;
  }
  double cache_store(const Piece& pc) const {
    switch (kv_write_kind(pc.n_past, pc.n_new, capacity, compact_to, evicts)) {
      case KvWrite::kAppend:
        return cache_store_range(pc.n_past, pc.n_past + pc.n_new);
      case KvWrite::kCompact:
        return cache_store_range(0, compact_to);
      case KvWrite::kReplace:
        disk += replace_disk;
        return replace_seconds;
    }
    return 0;
  }
  // A full table's decode write-back: the victim slot's K and V rows, in RAM or as the page(s)
  // holding them on disk, expected over the slots (the disk part's page layout repeats every
  // `granule` slots). One victim per table: the heads of a layer mostly give up the same slot
  // (measured with h2o on SmolLM2: 1.6 pages written per K or V, against 1.3 for one shared
  // victim and 2.8 for independent ones).
  double replace_seconds = 0, replace_disk = 0;
  void estimate_replace(int64_t granule) {
    const int64_t disk_slots = capacity - ram_slots, period = std::min(granule, disk_slots);
    take_disk();
    const double in_ram = ram_slots > 0 ? cache_store_range(0, 1) : 0;
    double on_disk = 0;
    for (int64_t s = ram_slots; s < ram_slots + period; ++s) on_disk += cache_store_range(s, s + 1);
    const double share = static_cast<double>(disk_slots) / static_cast<double>(capacity);
    const double per = static_cast<double>(std::max<int64_t>(period, 1));  // none on disk: 0/1
    replace_seconds = (1 - share) * in_ram + share * on_disk / per;
    replace_disk = share * take_disk() / per;
  }
  // Activations of `rows` rows from / to their home between units.
  double hidden_move(int64_t rows, bool load) const {
    if (placement.activations().memory() >= 100) return 0;
    const TierBytes a = placement.activation(rows * m.d_model * 4);
    return copy(a.host) + (load ? read(a.disk) : write(a.disk));
  }
};

// Times of one forward: per unit the lanes' busy times, combined as the executor runs them.
struct ForwardTime {
  double seconds = 0;
  LaneSeconds lanes;
};

int64_t rows_of(const std::vector<Batch>& batches) {
  int64_t rows = 0;
  for (const Batch& b : batches)
    for (const Piece& pc : b.pieces) rows += b.repeat * pc.n_new * pc.mult;
  return rows;
}

// forward_time with x's way of moving experts (x.on_demand_beyond_share).
ForwardTime forward_time_as(const Ctx& x, const Ctx* xw, const std::vector<Batch>& batches) {
  const int64_t U = 2 * x.m.n_layers;
  const bool load_weights = x.load_weights;
  const bool load_hidden = x.placement.activations().memory() < 100;
  // Per unit: lane busy times, and the disk's share of the load (Ld) and store (Sd) lanes.
  std::vector<double> L(U + 1, 0), C(U, 0), S(U, 0), Ld(U + 1, 0), Sd(U, 0);
  // Over every batch: what decides whether experts move on demand.
  const int64_t forward_rows = rows_of(batches);
  // A mixture of experts' MLP units over groups of batches, as the executor runs them.
  const bool group_experts = x.m.n_experts > 0 && !load_hidden && !batches.empty();
  std::vector<int64_t> group_rows;
  if (group_experts) {
    std::vector<int64_t> rows;
    for (const Batch& b : batches) {
      int64_t r = 0;
      for (const Piece& pc : b.pieces) r += pc.n_new * pc.mult;
      rows.insert(rows.end(), static_cast<size_t>(b.repeat), r);
    }
    const int64_t cap = expert_group_cap(
        std::max(x.group_rows, *std::max_element(rows.begin(), rows.end())), x.m.n_experts,
        x.m.n_experts_used);
    size_t k = 0;
    for (const int64_t n : expert_batch_groups(rows, cap)) {
      group_rows.push_back(std::accumulate(rows.begin() + k, rows.begin() + k + n, int64_t{0}));
      k += static_cast<size_t>(n);
    }
  }
  for (int64_t u = 0; u < U; ++u) {
    const bool attn = u % 2 == 0;
    const auto layer = static_cast<size_t>(u / 2);
    // A window table holds min(n_past, window) slots (exact: it is a window table only when the
    // sequence's tables are larger than the window).
    const Ctx& y = xw && layer < x.m.sliding.size() && x.m.sliding[layer] ? *xw : x;
    x.take_disk();
    if (load_weights) L[u] += x.weight_load(u, forward_rows);
    Ld[u] += x.take_disk();
    for (const Batch& b : batches) {
      int64_t rows = 0, seqs = 0;
      double core = 0, cl = 0, cs = 0, cl_disk = 0, cs_disk = 0;
      for (const Piece& full : b.pieces) {
        const Piece pc{std::min(full.n_past, y.capacity), full.n_new, full.mult};
        rows += pc.n_new * pc.mult;
        seqs += pc.mult;
        if (attn) {
          const double pairs = static_cast<double>(pc.n_new) * static_cast<double>(pc.n_past) +
                               static_cast<double>(pc.n_new) * static_cast<double>(pc.n_new + 1) / 2;
          const double len = static_cast<double>(pc.n_past + pc.n_new);
          const double per_pair =
              pc.n_new == 1 ? (x.evicts ? x.c.decode_pair_evict : x.c.decode_pair)
                            : (x.evicts ? x.c.prefill_pair_evict : x.c.prefill_pair).at(len);
          const double scale = pc.n_new > 1 ? x.pair_scale : 1.0;  // a mixed job's prompts
          core += static_cast<double>(pc.mult) * pairs * scale * per_pair;
        }
        if (attn && !x.kv_resident) {
          const auto mult = static_cast<double>(pc.mult);
          cl += mult * y.cache_load(pc.n_past);
          cl_disk += mult * y.take_disk();
          cs += mult * y.cache_store(pc);
          cs_disk += mult * y.take_disk();
        }
      }
      double c = 0;
      if (attn) {
        c = x.c.attn_base.at(static_cast<double>(rows)) + core;
      } else if (!group_experts) {
        c = x.c.mlp.at(static_cast<double>(rows));
      }
      if (u + 1 == U) c += x.c.output.at(static_cast<double>(seqs));
      const double r = static_cast<double>(b.repeat);
      C[u] += r * c;
      const double hl = load_hidden && u > 0 ? x.hidden_move(rows, true) : 0;
      const double hl_disk = x.take_disk();
      const double hs = load_hidden && u + 1 < U ? x.hidden_move(rows, false) : 0;
      const double hs_disk = x.take_disk();
      L[u] += r * (cl + hl);
      Ld[u] += r * (cl_disk + hl_disk);
      S[u] += r * (cs + hs);
      Sd[u] += r * (cs_disk + hs_disk);
    }
    if (!attn && group_experts)
      for (const int64_t r : group_rows) C[u] += x.c.mlp.at(static_cast<double>(r));
    if (load_weights && x.lazy_experts(u, forward_rows)) {  // every batch's experts, once
      C[u] += x.expert_load(u, forward_rows);
      x.take_disk();
    }
  }
  ForwardTime f;
  for (int64_t u = 0; u < U; ++u) f.lanes.load += L[u], f.lanes.compute += C[u], f.lanes.store += S[u];
  const bool lanes = x.p.overlap && (f.lanes.load > 0 || f.lanes.store > 0);
  if (!lanes) {
    f.seconds = f.lanes.load + f.lanes.compute + f.lanes.store;
    return f;
  }
  if (x.m.weight_slots > 2) {
    // W slots: unit u's load starts once the lane is free and unit u - W's compute has released
    // its slot; compute follows its load, stores follow compute (the lanes' disk sharing is not
    // modelled here).
    const int64_t W = x.m.weight_slots;
    std::vector<double> load_end(U, 0), compute_end(U, 0);
    double store_end = 0;
    for (int64_t u = 0; u < U; ++u) {
      const double lane = u > 0 ? load_end[u - 1] : 0.0, slot = u >= W ? compute_end[u - W] : 0.0;
      load_end[u] = std::max(lane, slot) + L[u];
      compute_end[u] = std::max(u > 0 ? compute_end[u - 1] : 0.0, load_end[u]) + C[u];
      store_end = std::max(store_end, compute_end[u]) + S[u];
    }
    f.seconds = std::max(compute_end[U - 1], store_end);
    return f;
  }
  // Loads run one unit ahead of compute, stores one unit behind (double-buffered staging); the
  // disk serves the reads and writes of a stage one after the other.
  f.seconds = L[0] + S[U - 1];
  for (int64_t u = 0; u < U; ++u) {
    const double store = u > 0 ? S[u - 1] : 0.0, store_disk = u > 0 ? Sd[u - 1] : 0.0;
    f.seconds += std::max({L[u + 1], C[u], store, Ld[u + 1] + store_disk});
  }
  return f;
}

// xw: the costs of sliding-window layers' window tables (null: none; see KvTableLayout). A
// forward whose experts may move either way (Ctx::moves_by_cost) is costed both ways; the
// faster counts, as the executor picks by the times it measures.
ForwardTime forward_time(const Ctx& x, const Ctx* xw, const std::vector<Batch>& batches) {
  const ForwardTime whole = forward_time_as(x, xw, batches);
  if (!x.moves_by_cost(rows_of(batches))) return whole;
  Ctx y = x;
  y.on_demand_beyond_share = true;
  const ForwardTime on_demand = forward_time_as(y, xw, batches);
  return on_demand.seconds < whole.seconds ? on_demand : whole;
}

void add(LaneSeconds& a, const LaneSeconds& b, double w = 1) {
  a.load += w * b.load, a.compute += w * b.compute, a.store += w * b.store;
}

}  // namespace

void ModelFacts::use_routing(const RoutingCounts& measured, const RoutingCounts& first_half) {
  expert_choice = ranked_choice_probability(measured, first_half, n_experts);  // empty: uniform
}

double ModelFacts::expected_tail_share(double tail, int64_t rows) const {
  if (expert_choice.empty()) return expected_expert_share(n_experts, n_experts_used, rows);
  // Positions [E (1 - tail), E): the boundary expert counts by the part of it in the tail.
  const auto e = static_cast<double>(expert_choice.size());
  const double from = e * (1.0 - std::clamp(tail, 0.0, 1.0));
  double used = 0, n = 0;
  for (size_t i = 0; i < expert_choice.size(); ++i) {
    const double w = std::clamp(static_cast<double>(i + 1) - from, 0.0, 1.0);
    if (w <= 0) continue;
    used += w * (1.0 - std::pow(1.0 - std::clamp(expert_choice[i], 0.0, 1.0), static_cast<double>(rows)));
    n += w;
  }
  return n > 0 ? used / n : 0.0;
}

bool ModelFacts::lazy_experts(const Placement& placement, int64_t unit) const {
  const auto u = static_cast<size_t>(unit);
  return device_is_host && u < unit_experts_at.size() && unit_experts_at[u] < unit_bytes[u] &&
         placement.weight_blob(unit_bytes[u]).disk > 0;
}

int64_t ModelFacts::unit_total() const {
  return std::accumulate(unit_bytes.begin(), unit_bytes.end(), int64_t{0});
}
int64_t ModelFacts::unit_max() const {
  return unit_bytes.empty() ? 0 : *std::max_element(unit_bytes.begin(), unit_bytes.end());
}

std::string model_key(const ModelConfig& c, const std::string& weight_dtype) {
  return fmt::format("{}/{}L/d{}/h{}-{}/ff{}/v{}/{}", c.name, c.n_layers, c.d_model, c.n_heads,
                     c.n_kv_heads, c.ffn_dim, c.vocab_size, weight_dtype);
}

std::string compute_key(const std::string& model_key, DType kv_dtype) {
  return fmt::format("{}/kv-{}/kernels-{}", model_key, dtype_name(kv_dtype),
                     backend_caps(BackendKind::kCpu).compute_revision);
}

KvTableLayout ModelFacts::kv_layout(const Policy& p) const {
  KvTableLayout l;
  l.n_layers = n_layers;
  l.row_bytes = kv_home_row_bytes(p);
  l.compressed = kv_block_elems(kv_dtype(p)) > 1;  // as the KV store stages block formats
  l.n_kv_heads = n_kv_heads;
  l.with_meta = p.kv.evicts();
  l.window_layers = window_layers;
  l.window = window;
  return l;
}

TierBytes weight_need(const ModelFacts& m, const Policy& p) {
  TierBytes t = m.placement(p).weight_blobs(m.unit_bytes, m.weight_slots).total();
  t.device += m.resident_bytes;
  return t;
}

TierBytes kv_need(const ModelFacts& m, const Policy& p, int64_t capacity) {
  return m.placement(p).kv_table(m.kv_layout(p), capacity).tiers;
}

ForwardSplit forward_need(const ModelFacts& m, const Policy& p, const ForwardShape& shape) {
  return m.placement(p).forward(m.forward, m.kv_layout(p), shape);
}

ForwardShape forward_shape(const Policy& p, int64_t prefill_chunk, int64_t sequences,
                           int64_t prompt_tokens, int64_t longest_prompt, int64_t capacity,
                           int64_t samplers) {
  const int64_t n = sequences, g = p.gpu_batch_size;
  if (n <= 0) return {};
  const int64_t chunk = std::min(prefill_chunk, prompt_tokens);  // the largest prefill forward
  ForwardShape s;
  s.rows = std::max(chunk, n);
  s.batch_rows = std::max(chunk, std::min(g, n));
  s.batches = (n + g - 1) / g;
  s.sequences = n;
  s.batch_sequences = std::min(g, n);
  s.new_rows = std::min(prefill_chunk, longest_prompt);
  s.capacity = capacity;
  s.samplers = samplers < 0 ? n : samplers;
  return s;
}

TierBytes block_need(const ModelFacts& m, const Policy& p, const Workload& w, int64_t sequences) {
  const int64_t capacity = p.kv.table_slots(w.prompt_len, w.gen_len);
  // The forwards' buffers grow with the largest prompt chunk and table among those running.
  const int64_t largest = p.kv.table_slots(w.longest_prompt(), w.longest_gen());
  TierBytes t = weight_need(m, p);
  t += kv_need(m, p, capacity) * sequences;
  t += forward_need(m, p,
                    forward_shape(p, w.prefill_chunk, sequences, sequences * w.prompt_len,
                                  w.longest_prompt(), largest, w.sampling ? sequences : 0))
           .total();
  return t;
}

Workload Workload::longest() const {
  Workload l = *this;
  l.prompt_len = longest_prompt();
  l.gen_len = longest_gen();
  l.longest_prompt_len = l.longest_gen_len = 0;
  l.prompt_sq_mean = 0;
  l.num_requests = 1;
  return l;
}

void Workload::validate() const {
  OFFGEN_CHECK(prompt_len >= 1, kConfig, "--prompt-len {} must be >= 1", prompt_len);
  OFFGEN_CHECK(gen_len >= 2, kConfig, "--gen-len {} must be >= 2", gen_len);
  OFFGEN_CHECK(num_requests >= 0, kConfig, "--num-requests {} must be >= 0", num_requests);
  OFFGEN_CHECK(prefill_chunk >= 1, kConfig, "prefill chunk {} must be >= 1", prefill_chunk);
  OFFGEN_CHECK(prompt_sq_mean >= 0, kConfig, "the mean squared prompt {} must be >= 0",
               prompt_sq_mean);
  OFFGEN_CHECK(longest_prompt_len >= 0 && longest_gen_len >= 0, kConfig,
               "the longest prompt {} and max_tokens {} must be >= 0", longest_prompt_len,
               longest_gen_len);
}

std::string Prediction::bottleneck() const {
  const LaneSeconds& l = decode_lanes;
  if (l.load >= l.compute && l.load >= l.store) return "load";
  return l.store > l.compute ? "store" : "compute";
}

Prediction predict(const ModelFacts& m, const ComputeProfile& compute, const HardwareProfile& hw,
                   const Policy& p, const Workload& w, int64_t batch) {
  w.validate();
  Ctx x{m, compute, hw, p, m.placement(p)};
  x.evicts = p.kv.evicts();
  x.pair_scale = w.prefill_pair_scale();
  x.capacity = p.kv.table_slots(w.prompt_len, w.gen_len);
  x.compact_to = p.kv.compact_slots(w.prompt_len, w.gen_len);
  const KvTableLayout layout = m.kv_layout(p);
  x.ram_slots = x.placement.kv_table(layout, x.capacity).memory_slots;
  x.kv_resident = x.ram_slots == x.capacity;
  x.kv_row = layout.row_bytes;
  // Slots after which the disk part's page layout repeats.
  const int64_t period = layout.page_period();
  x.load_weights = x.placement.weight_blobs(m.unit_bytes, m.weight_slots).staging_slots > 0;
  OFFGEN_CHECK(!p.uses_disk() || (!hw.disk_read.empty() && !hw.disk_write.empty()), kConfig,
               "the hardware profile has no disk figures; run `offgen calibrate --offload-dir DIR`");
  if (x.evicts && !x.kv_resident) x.estimate_replace(period);
  // Sliding-window layers' window tables: their own capacity and memory / disk cut.
  std::optional<Ctx> xw;
  if (layout.windowed(x.capacity)) {
    xw.emplace(x);
    xw->capacity = xw->compact_to = layout.window_capacity(x.capacity);
    xw->ram_slots = x.placement.kv_table(layout, x.capacity).window_memory_slots;
    xw->evicts = true;
    if (!x.kv_resident) xw->estimate_replace(period);
  }
  const Ctx* window_costs = xw ? &*xw : nullptr;

  Prediction r;
  r.batch = batch > 0 ? batch : p.block_size();
  r.kv_slots = x.capacity;
  r.need = block_need(m, p, w, r.batch);
  r.fits = p.fits(r.need, m.device_is_host);
  const int64_t N = r.batch, gbs = p.gpu_batch_size;
  x.group_rows = forward_shape(p, w.prefill_chunk, N, N * w.prompt_len, w.prompt_len, x.capacity, 0)
                     .batch_rows;

  // Prefill: the engine's forwards of at most prefill_chunk tokens (a prompt may span two), each
  // split into GPU batches of gbs sequences. Most forwards of a block repeat one shape: each
  // shape's time is computed once (a block of thousands of sequences has thousands of forwards).
  std::map<std::vector<int64_t>, ForwardTime> shape_time;
  std::vector<int64_t> done(N, 0), used(N, 0);
  int64_t i = 0;
  while (i < N) {
    std::vector<Batch> batches;
    int64_t budget = w.prefill_chunk, in_group = 0;
    while (i < N && budget > 0) {
      const int64_t take = std::min(w.prompt_len - done[i], budget);
      if (in_group % gbs == 0) batches.emplace_back();
      batches.back().pieces.push_back(Piece{used[i], take, 1});
      used[i] = kv_slots_after(used[i], take, x.capacity, x.compact_to, x.evicts);
      done[i] += take;
      budget -= take;
      ++in_group;
      if (done[i] == w.prompt_len) ++i;
      else break;
    }
    std::vector<int64_t> shape;
    for (const Batch& b : batches) {
      shape.push_back(b.repeat);
      shape.push_back(static_cast<int64_t>(b.pieces.size()));
      for (const Piece& q : b.pieces) shape.insert(shape.end(), {q.n_past, q.n_new, q.mult});
    }
    auto it = shape_time.find(shape);
    if (it == shape_time.end())
      it = shape_time.emplace(std::move(shape), forward_time(x, window_costs, batches)).first;
    const ForwardTime& f = it->second;
    r.prefill_seconds += f.seconds;
    add(r.prefill_lanes, f.lanes);
  }

  // Decode: gen_len - 1 forwards of the whole block; 17 sampled steps, summed as linear in
  // between (the per-step cost is piecewise linear in the used slots).
  const int64_t steps = w.gen_len - 1;
  auto step_time = [&](int64_t n_used) {
    std::vector<Batch> batches;
    if (N / gbs > 0) batches.push_back(Batch{{Piece{n_used, 1, gbs}}, N / gbs});
    if (N % gbs > 0) batches.push_back(Batch{{Piece{n_used, 1, N % gbs}}, 1});
    return forward_time(x, window_costs, batches);
  };
  std::vector<int64_t> used_at(steps);  // used slots before decode step s
  int64_t u = used[0];
  for (int64_t s = 0; s < steps; ++s) {
    used_at[s] = u;
    u = kv_slots_after(u, 1, x.capacity, x.compact_to, x.evicts);
  }
  const int64_t kSamples = 16;
  std::vector<int64_t> at;
  for (int64_t j = 0; j <= kSamples; ++j) at.push_back(j * (steps - 1) / kSamples);
  at.erase(std::unique(at.begin(), at.end()), at.end());
  std::vector<ForwardTime> ft;
  for (int64_t s : at) ft.push_back(step_time(used_at[s]));
  // Steps [a, b) of a segment, linear between its ends: (n+1)/2 of c(a) and (n-1)/2 of c(b).
  for (size_t j = 0; j + 1 < at.size(); ++j) {
    const double n = static_cast<double>(at[j + 1] - at[j]);
    r.decode_seconds += (n + 1) / 2 * ft[j].seconds + (n - 1) / 2 * ft[j + 1].seconds;
    add(r.decode_lanes, ft[j].lanes, (n + 1) / 2);
    add(r.decode_lanes, ft[j + 1].lanes, (n - 1) / 2);
  }
  r.decode_seconds += ft.back().seconds;
  add(r.decode_lanes, ft.back().lanes);

  const auto n = static_cast<double>(N);
  r.prefill_throughput = n * static_cast<double>(w.prompt_len) / r.prefill_seconds;
  r.decode_throughput = n * static_cast<double>(steps) / r.decode_seconds;
  r.total_throughput = n * static_cast<double>(w.gen_len) / (r.prefill_seconds + r.decode_seconds);
  return r;
}

Prediction predict_workload(const ModelFacts& m, const ComputeProfile& compute,
                            const HardwareProfile& hw, const Policy& p, const Workload& w,
                            int64_t block) {
  if (block <= 0) block = p.block_size();
  const int64_t n = w.num_requests > 0 ? w.num_requests : block;
  Prediction r = predict(m, compute, hw, p, w, std::min(n, block));
  if (n <= block) return r;
  const auto full = static_cast<double>(n / block);
  r.prefill_seconds *= full, r.decode_seconds *= full;
  LaneSeconds pre, dec;
  add(pre, r.prefill_lanes, full);
  add(dec, r.decode_lanes, full);
  if (n % block > 0) {
    const Prediction rest = predict(m, compute, hw, p, w, n % block);
    r.prefill_seconds += rest.prefill_seconds, r.decode_seconds += rest.decode_seconds;
    add(pre, rest.prefill_lanes);
    add(dec, rest.decode_lanes);
  }
  r.prefill_lanes = pre, r.decode_lanes = dec;
  const auto seqs = static_cast<double>(n);
  r.prefill_throughput = seqs * static_cast<double>(w.prompt_len) / r.prefill_seconds;
  r.decode_throughput = seqs * static_cast<double>(w.gen_len - 1) / r.decode_seconds;
  r.total_throughput = seqs * static_cast<double>(w.gen_len) / (r.prefill_seconds + r.decode_seconds);
  return r;
}

}  // namespace offgen
