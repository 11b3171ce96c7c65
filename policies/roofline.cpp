// Roofline bounds from a profile's rates and a plan's bytes and FLOPs.
#include "policies/roofline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.h"
#include "runtime/model/moe_routing.h"

namespace offgen {
namespace {

constexpr int64_t kPage = kPlacementAlign;  // disk transfers are whole pages
double pages(double bytes) {
  return bytes <= 0
             ? 0
             : static_cast<double>((static_cast<int64_t>(bytes) + kPage - 1) / kPage * kPage);
}

// Per-block sums of one phase (prefill or decode) and its bound.
struct Phase {
  StepCost total;    // bytes, FLOPs and resource seconds summed over the phase
  double bound = 0;  // sum over its steps of the binding resource's time
  int64_t steps = 0;
  void add(const StepCost& s, double times = 1) {
    total.disk_bytes += times * s.disk_bytes, total.flops += times * s.flops;
    total.memory_bytes += times * s.memory_bytes;
    total.disk_seconds += times * s.disk_seconds,
        total.compute_seconds += times * s.compute_seconds;
    total.memory_seconds += times * s.memory_seconds;
    bound += times * s.seconds();
  }
  StepCost mean() const {
    StepCost m = total;
    const double n = static_cast<double>(std::max<int64_t>(steps, 1));
    m.disk_bytes /= n, m.flops /= n, m.memory_bytes /= n;
    m.disk_seconds /= n, m.compute_seconds /= n, m.memory_seconds /= n;
    return m;
  }
};

struct Block {
  Phase prefill, decode;
};

struct Ctx {
  const ModelFacts& m;
  const Policy& p;
  const Workload& w;
  ResourceRates rates;
  Placement placement;
  int64_t capacity = 0, ram_slots = 0, row = 0;
  double weight_disk = 0, weight_memory = 0;  // per forward
  // Mixtures of experts whose experts move on demand (cost_model.h ModelFacts): the disk bytes of
  // every layer's experts (weight_disk leaves them out).
  double expert_disk = 0, expert_total = 0;  // and all of their bytes
  int64_t global_layers = 0, window_layers = 0, window = 0;

  // The weights' disk bytes of one forward of `rows` rows whose FLOPs take `compute_s`: with
  // experts moved on demand (move_experts_on_demand on the bound's disk and compute times, with
  // the uniform share as the executor decides), the expected share of the experts on disk that
  // the rows route to (ModelFacts::expected_tail_share: uniform routing, or measured routing with
  // the coldest experts on disk).
  double weight_disk_at(double rows, double compute_s) const {
    if (expert_disk <= 0) return weight_disk;
    const auto n = static_cast<int64_t>(rows);
    const double rate = rates.disk_bytes_per_second;
    const bool on_demand = move_experts_on_demand(
        expected_expert_share(m.n_experts, m.n_experts_used, n), (weight_disk + expert_disk) / rate,
        expert_disk / rate, compute_s, p.overlap);
    return weight_disk +
           expert_disk * (on_demand ? m.expected_tail_share(expert_disk / expert_total, n) : 1.0);
  }

  StepCost timed(StepCost s) const {
    s.disk_seconds = s.disk_bytes / rates.disk_bytes_per_second;
    s.compute_seconds = s.flops / rates.flops_per_second;
    s.memory_seconds = s.memory_bytes / rates.memory_bytes_per_second;
    return s;
  }
  // One forward over `seqs` sequences with `rows` new tokens and `pairs` attention pairs per
  // layer (window layers: `window_pairs`), whose K/V of `kv_read` slots per sequence and layer
  // are read (the disk part `kv_read_disk` of them) and `kv_written` rows per sequence and layer
  // written (`kv_written_disk` bytes of them on disk, whole pages), `sampled` of them sampling.
  StepCost forward(double rows, double pairs, double window_pairs, double kv_read,
                   double kv_read_disk_bytes, double kv_written, double kv_written_disk_bytes,
                   double sampled) const {
    const double L = static_cast<double>(m.n_layers), r = static_cast<double>(row);
    StepCost s;
    s.flops = 2 * (rows * L * static_cast<double>(m.attn_unit_macs + m.mlp_unit_macs) +
                   sampled * static_cast<double>(m.output_macs) +
                   (pairs * static_cast<double>(global_layers) +
                    window_pairs * static_cast<double>(window_layers)) *
                       static_cast<double>(m.attn_pair_macs));
    // K and V (x2) per layer.
    s.disk_bytes = weight_disk_at(rows, s.flops / rates.flops_per_second) +
                   2 * L * (kv_read_disk_bytes + kv_written_disk_bytes);
    s.memory_bytes = weight_memory + 2 * L * ((kv_read + kv_written) * r + kv_read_disk_bytes);
    return timed(s);
  }
  // Disk bytes of reading slots [0, n) of one layer's K (or V).
  double read_disk(int64_t n) const {
    return n > ram_slots ? pages(static_cast<double>((n - ram_slots) * row)) : 0;
  }
  // Disk bytes of writing slots [begin, end) of one layer's K (or V): the pages holding them.
  double write_disk(int64_t begin, int64_t end) const {
    if (end <= ram_slots) return 0;
    const int64_t from = std::max(begin, ram_slots) - ram_slots, to = end - ram_slots;
    return static_cast<double>((to * row + kPage - 1) / kPage * kPage - from * row / kPage * kPage);
  }

  Block block(int64_t B) const {
    Block out;
    const auto b = static_cast<double>(B);
    const int64_t P = w.prompt_len, cap = capacity;
    const int64_t kept = std::min(P, cap);
    // Prefill: the block's prompts in forwards of at most prefill_chunk tokens; each prompt's
    // causal pairs (on window layers at most `window` keys per query).
    const int64_t forwards = (B * P + w.prefill_chunk - 1) / w.prefill_chunk;
    // (A mixed job's prompts: the pairs of its mean prompt scaled to those of its lengths.)
    const double pairs =
        static_cast<double>(P) * static_cast<double>(P + 1) / 2 * w.prefill_pair_scale();
    const double wpairs = window > 0 && P > window
                              ? static_cast<double>(window) * static_cast<double>(window + 1) / 2 +
                                    static_cast<double>(P - window) * static_cast<double>(window)
                              : pairs;
    StepCost pre = forward(b * static_cast<double>(P), b * pairs, b * wpairs, 0, 0,
                           b * static_cast<double>(kept), b * write_disk(0, kept), b);
    // The weights move once per forward (the experts a forward of its rows routes to); the
    // forwards are alike: the phase is `forwards` times their mean.
    const double f = static_cast<double>(forwards);
    const double all_rows = b * static_cast<double>(P);
    const double all_compute = pre.flops / rates.flops_per_second;
    pre.disk_bytes = (pre.disk_bytes - weight_disk_at(all_rows, all_compute) +
                      f * weight_disk_at(all_rows / f, all_compute / f)) /
                     f;
    pre.memory_bytes = (pre.memory_bytes + (f - 1) * weight_memory) / f;
    pre.flops /= f;
    out.prefill.steps = forwards;
    out.prefill.add(timed(pre), f);
    // Decode: gen_len - 1 steps, each a row per sequence over its used slots.
    const int64_t steps = w.gen_len - 1;
    out.decode.steps = steps;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t used = std::min(P + s, cap);
      const int64_t wused = window > 0 ? std::min(used, window) : used;
      const int64_t slot = std::min(P + s, cap - 1);  // where the new row goes (the last when full)
      out.decode.add(forward(b, b * static_cast<double>(used + 1),
                             b * static_cast<double>(wused + 1), b * static_cast<double>(used),
                             b * read_disk(used), b, b * write_disk(slot, slot + 1), b));
    }
    return out;
  }
};

void add_block(Roofline& r, const Block& b, double times) {
  r.disk_seconds += times * (b.prefill.total.disk_seconds + b.decode.total.disk_seconds);
  r.compute_seconds += times * (b.prefill.total.compute_seconds + b.decode.total.compute_seconds);
  r.memory_seconds += times * (b.prefill.total.memory_seconds + b.decode.total.memory_seconds);
  r.bound_seconds += times * (b.prefill.bound + b.decode.bound);
}

const char* largest(double disk, double compute, double memory) {
  if (compute >= disk && compute >= memory) return "compute";
  return disk >= memory ? "disk" : "memory";
}

std::string rate(double per_second, const char* unit) {
  const char* prefix[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  while (per_second >= 1000 && i < 5) per_second /= 1000, ++i;
  return fmt::format("{:.3g} {}{}", per_second, prefix[i], unit);
}

std::string step_line(const char* what, int64_t count, const StepCost& s) {
  return fmt::format(
      "#   {} ({} per block): disk {:.3g} s ({}), compute {:.3g} s ({}), memory "
      "{:.3g} s ({}): {} binds\n",
      what, count, s.disk_seconds, rate(s.disk_bytes, "B"), s.compute_seconds,
      rate(s.flops, "FLOP"), s.memory_seconds, rate(s.memory_bytes, "B"), s.binding());
}

}  // namespace

ResourceRates resource_rates(const ModelFacts& m, const ComputeProfile& c,
                             const HardwareProfile& hw) {
  OFFGEN_CHECK(!c.mlp.empty() && m.mlp_unit_macs > 0, kConfig,
               "roofline: no compute figures or matmul sizes for {}", m.key);
  ResourceRates r;
  for (size_t i = 0; i < c.mlp.x.size(); ++i)
    if (c.mlp.seconds[i] > 0)
      r.flops_per_second = std::max(r.flops_per_second, 2 * static_cast<double>(m.mlp_unit_macs) *
                                                            c.mlp.x[i] / c.mlp.seconds[i]);
  auto bandwidth = [](const TimeCurve& t, double moved) {
    return t.empty() || t.seconds.back() <= 0 ? 0 : moved * t.x.back() / t.seconds.back();
  };
  r.disk_bytes_per_second = bandwidth(hw.disk_read, 1);
  r.memory_bytes_per_second = bandwidth(hw.ram_copy, 2);
  OFFGEN_CHECK(r.flops_per_second > 0 && r.memory_bytes_per_second > 0, kConfig,
               "roofline: the profile's compute or RAM figures are zero");
  return r;
}

double StepCost::seconds() const {
  return std::max({disk_seconds, compute_seconds, memory_seconds});
}

std::string StepCost::binding() const {
  return largest(disk_seconds, compute_seconds, memory_seconds);
}

nlohmann::json StepCost::to_json() const {
  return {{"disk_bytes", disk_bytes},
          {"flops", flops},
          {"memory_bytes", memory_bytes},
          {"disk_seconds", disk_seconds},
          {"compute_seconds", compute_seconds},
          {"memory_seconds", memory_seconds},
          {"binding", binding()}};
}

Roofline roofline(const ModelFacts& m, const ComputeProfile& c, const HardwareProfile& hw,
                  const Policy& p, const Workload& w, int64_t block) {
  w.validate();
  Ctx x{m, p, w, resource_rates(m, c, hw), m.placement(p)};
  x.capacity = p.kv.table_slots(w.prompt_len, w.gen_len);
  const KvTableLayout layout = m.kv_layout(p);
  x.ram_slots = x.placement.kv_table(layout, x.capacity).memory_slots;
  x.row = layout.row_bytes;
  x.window_layers = layout.windowed(x.capacity) ? m.window_layers : 0;
  x.global_layers = m.n_layers - x.window_layers;
  x.window = x.window_layers > 0 ? m.window : 0;
  for (size_t u = 0; u < m.unit_bytes.size(); ++u) {
    const int64_t bytes = m.unit_bytes[u];
    const TierBytes t = x.placement.weight_blob(bytes);
    if (m.lazy_experts(x.placement, static_cast<int64_t>(u))) {  // experts on demand
      const int64_t head_disk = std::max<int64_t>(0, m.unit_experts_at[u] - (bytes - t.disk));
      x.weight_disk += static_cast<double>(head_disk);
      x.expert_disk += static_cast<double>(t.disk - head_disk);
      x.expert_total += static_cast<double>(bytes - m.unit_experts_at[u]);
    } else {
      x.weight_disk += static_cast<double>(t.disk);
    }
    // The matmuls read every byte; a blob with a disk part is assembled in staging first (its
    // disk part written there, its memory part copied: read and written).
    x.weight_memory += static_cast<double>(bytes) +
                       (t.disk > 0 ? static_cast<double>(t.disk + 2 * (bytes - t.disk)) : 0);
  }
  x.weight_memory += static_cast<double>(m.resident_bytes);  // the output head, mostly
  const bool weights_on_disk = x.weight_disk + x.expert_disk > 0;
  OFFGEN_CHECK(
      !weights_on_disk || x.rates.disk_bytes_per_second > 0, kConfig,
      "the hardware profile has no disk figures; run `offgen calibrate --offload-dir DIR`");
  if (!weights_on_disk && x.rates.disk_bytes_per_second <= 0) x.rates.disk_bytes_per_second = 1;

  Roofline r;
  r.rates = x.rates;
  r.block = block > 0 ? block : p.block_size();
  const int64_t n = w.num_requests > 0 ? w.num_requests : r.block;
  r.block = std::min(r.block, n);
  const Block full = x.block(r.block);
  r.blocks = (n + r.block - 1) / r.block;
  r.prefill_forwards = full.prefill.steps;
  r.decode_steps = full.decode.steps;
  r.prefill_forward = full.prefill.mean();
  r.decode_step = full.decode.mean();
  add_block(r, full, static_cast<double>(n / r.block));
  if (n % r.block > 0) add_block(r, x.block(n % r.block), 1);
  r.binding = largest(r.disk_seconds, r.compute_seconds, r.memory_seconds);
  r.bound_total_throughput =
      static_cast<double>(n) * static_cast<double>(w.gen_len) / r.bound_seconds;
  return r;
}

nlohmann::json Roofline::to_json() const {
  return {{"rates",
           {{"disk_bytes_per_second", rates.disk_bytes_per_second},
            {"flops_per_second", rates.flops_per_second},
            {"memory_bytes_per_second", rates.memory_bytes_per_second}}},
          {"block", block},
          {"blocks", blocks},
          {"prefill_forwards", prefill_forwards},
          {"decode_steps", decode_steps},
          {"prefill_forward", prefill_forward.to_json()},
          {"decode_step", decode_step.to_json()},
          {"seconds",
           {{"disk", disk_seconds}, {"compute", compute_seconds}, {"memory", memory_seconds}}},
          {"binding", binding},
          {"bound_seconds", bound_seconds},
          {"bound_total_throughput", bound_total_throughput}};
}

std::string Roofline::describe(double predicted) const {
  std::string s =
      fmt::format("# roofline of a block of {} (rates: disk {}, GEMM {}, memory {}):\n", block,
                  rate(rates.disk_bytes_per_second, "B/s"), rate(rates.flops_per_second, "FLOP/s"),
                  rate(rates.memory_bytes_per_second, "B/s"));
  s += step_line("prefill forward", prefill_forwards, prefill_forward);
  s += step_line("decode step", decode_steps, decode_step);
  s += fmt::format(
      "# bound: {:.3g} tok/s total over {} block{} ({} binds: disk {:.3g} s, compute "
      "{:.3g} s, memory {:.3g} s in all); predicted {:.3g} tok/s = {:.0f}% of the "
      "bound\n",
      bound_total_throughput, blocks, blocks == 1 ? "" : "s", binding, disk_seconds,
      compute_seconds, memory_seconds, predicted,
      bound_total_throughput > 0 ? 100 * predicted / bound_total_throughput : 0.0);
  return s;
}

}  // namespace offgen
