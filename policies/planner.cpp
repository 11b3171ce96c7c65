// Policy search over the cost model.
#include "policies/planner.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "runtime/core/error.h"

namespace offgen {
namespace {

const int64_t kBatchSizes[] = {1,   2,   4,   8,   12,  16,   24,   32,   48,   64,   96,
                               128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096};
const int64_t kNumBatches[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};

struct Candidate {
  Policy policy;
  Prediction prediction;  // the whole workload
};

}  // namespace

void PlanOptions::validate() const {
  workload.validate();
  base.validate();
  OFFGEN_CHECK(max_batch >= 1, kConfig, "plan: max batch {} must be >= 1", max_batch);
  OFFGEN_CHECK(!base.kv_dtype_auto, kInternal, "plan: --kv-dtype auto goes through plan_kv_dtype");
  OFFGEN_CHECK(percent_step > 0 && percent_step <= 100 &&
                   std::abs(100 / percent_step - std::round(100 / percent_step)) < 1e-9,
               kConfig, "plan: percent step {} must divide 100", percent_step);
}

std::string plan_overflow(const PlanOptions& o, const TierBytes& need) {
  return o.base.overflow(need, o.device_is_host);
}

PlanResult plan(const ModelFacts& m, const ComputeProfile& c, const HardwareProfile& hw,
                const PlanOptions& o) {
  o.validate();
  const Workload& w = o.workload;
  // Batch factors the user gave stay as given; the search covers the others.
  const int64_t g_fix = o.base.gpu_batch_given ? o.base.gpu_batch_size : 0;
  const int64_t k_fix = o.base.num_batches_given ? o.base.num_gpu_batches : 0;
  const int64_t job_cap = w.num_requests > 0 ? std::min(o.max_batch, w.num_requests) : o.max_batch;
  const int64_t cap_batch =
      std::max(job_cap, std::max<int64_t>(g_fix, 1) * std::max<int64_t>(k_fix, 1));
  auto grid = [](std::span<const int64_t> values, int64_t fixed) {
    return fixed > 0 ? std::vector<int64_t>{fixed} : std::vector<int64_t>(values.begin(), values.end());
  };
  const std::vector<int64_t> g_grid = grid(kBatchSizes, g_fix), k_grid = grid(kNumBatches, k_fix);
  const int64_t capacity = o.base.kv.table_slots(w.prompt_len, w.gen_len);
  // Tier shares: where device memory is host memory the RAM share goes on the host tier.
  auto place = [&](Policy& p, double w_ram, double c_ram) {
    (o.device_is_host ? p.weight_cpu_percent : p.weight_gpu_percent) = w_ram;
    (o.device_is_host ? p.weight_gpu_percent : p.weight_cpu_percent) = 0;
    (o.device_is_host ? p.cache_cpu_percent : p.cache_gpu_percent) = c_ram;
    (o.device_is_host ? p.cache_gpu_percent : p.cache_cpu_percent) = 0;
  };
  auto need_of = [&](const Policy& p) { return block_need(m, p, w, p.block_size()); };
  // Requests of different lengths: a block is sized by the typical one (the engine admits the
  // others as memory allows), and the longest must fit alone (what it needs alone depends on the
  // tier shares, not on the batch shape).
  const Workload longest = w.longest();
  auto longest_fits = [&](const Policy& p) {
    return w.uniform() || plan_overflow(o, block_need(m, p, longest, 1)).empty();
  };
  // RAM shares searched: the grid, or the given shares alone.
  std::vector<double> w_shares, c_shares;
  if (o.base.shares_given) {
    w_shares = {o.base.weight_gpu_percent + o.base.weight_cpu_percent};
    c_shares = {o.base.cache_gpu_percent + o.base.cache_cpu_percent};
  } else {
    for (int s = 0; s <= static_cast<int>(std::lround(100 / o.percent_step)); ++s)
      w_shares.push_back(s * o.percent_step), c_shares.push_back(s * o.percent_step);
  }

  PlanResult out;
  Candidate best;
  bool found = false;
  for (double w_share : w_shares)
    for (double c_share : c_shares)
      for (bool overlap : {true, false}) {
        o.stop.check("plan");
        Policy p = o.base;
        place(p, w_share, c_share);
        p.overlap = overlap;
        p.fix_batch();
        if (!longest_fits(p)) continue;
        // Batch shapes: the grid, plus for each grid value of one factor the largest other
        // factor that fits (memory grows with the block, and throughput mostly with it).
        auto fits = [&](int64_t g, int64_t k) {
          p.gpu_batch_size = g;
          p.num_gpu_batches = k;
          return g * k <= cap_batch && plan_overflow(o, need_of(p)).empty();
        };
        auto largest = [&](auto&& ok, int64_t hi) {  // largest n in [0, hi] with ok(n)
          int64_t lo = 0;
          while (lo < hi) {
            const int64_t mid = (lo + hi + 1) / 2;
            if (ok(mid)) lo = mid;
            else hi = mid - 1;
          }
          return lo;
        };
        // The largest value of a free factor that fits beside `other`; a given factor, if it fits.
        auto top = [&](int64_t fixed, int64_t other, bool g_free) {
          auto ok = [&](int64_t n) { return g_free ? fits(n, other) : fits(other, n); };
          if (fixed > 0) return ok(fixed) ? fixed : int64_t{0};
          return largest(ok, cap_batch / other);
        };
        std::set<std::pair<int64_t, int64_t>> shapes;
        for (int64_t g : g_grid) {
          if (g > cap_batch) break;
          const int64_t kmax = top(k_fix, g, false);
          for (int64_t k : k_grid)
            if (k < kmax) shapes.insert({g, k});
          if (kmax > 0) shapes.insert({g, kmax});
        }
        for (int64_t k : k_grid) {
          if (k > cap_batch) break;
          const int64_t gmax = top(g_fix, k, true);
          if (gmax > 0) shapes.insert({gmax, k});
        }
        for (const auto& [g, k] : shapes) {
          p.gpu_batch_size = g;
          p.num_gpu_batches = k;
          Candidate cand{p, predict_workload(m, c, hw, p, w)};
          ++out.evaluated;
          if (!found || cand.prediction.total_throughput > best.prediction.total_throughput)
            best = std::move(cand), found = true;
        }
      }
  if (!found) {
    Policy p = o.base;
    place(p, w_shares.front(), c_shares.front());
    p.gpu_batch_size = std::max<int64_t>(g_fix, 1);
    p.num_gpu_batches = std::max<int64_t>(k_fix, 1);
    TierBytes need = need_of(p);
    if (plan_overflow(o, need).empty()) need = block_need(m, p, longest, 1);  // the longest alone
    const int64_t slots = p.kv.table_slots(longest.prompt_len, longest.gen_len);
    OFFGEN_THROW(kConfig,
                 "plan: nothing fits: {} with {} needs {} of RAM and {} of disk ({}); raise {}",
                 p.block_size() == 1 ? std::string("one sequence")
                                     : fmt::format("a block of {} x {} sequences (the batch "
                                                   "sizes given)",
                                                   p.gpu_batch_size, p.num_gpu_batches),
                 o.base.shares_given ? fmt::format("weights {}% and KV {}% in RAM (--percent)",
                                                   w_shares.front(), c_shares.front())
                                     : std::string("weights and KV wholly on disk"),
                 format_bytes(need.device + need.host), format_bytes(need.disk),
                 w.uniform() ? fmt::format("{} KV slots per sequence", capacity)
                             : fmt::format("{} KV slots per typical sequence, {} for the longest",
                                           capacity, slots),
                 plan_overflow(o, need));
  }
  out.policy = best.policy;
  out.prediction = best.prediction;
  if (m.mlp_unit_macs > 0) out.roofline = roofline(m, c, hw, best.policy, w);

  // Why not bigger: probe the next larger block and the next RAM share of weights and cache.
  const Policy& b = best.policy;
  std::vector<std::string> reasons;
  auto probe = [&](const Policy& p, const std::string& what) {
    const TierBytes t = need_of(p);
    const std::string tier = plan_overflow(o, t);
    out.memory_bound = out.memory_bound || !tier.empty();
    if (!tier.empty())
      reasons.push_back(fmt::format("{} ({}: {} needed)", tier, what,
                                    format_bytes(tier == "--disk-mem" ? t.disk : t.device + t.host)));
  };
  if ((g_fix > 0 && k_fix > 0) || (b.block_size() >= cap_batch && cap_batch > job_cap)) {
    reasons.push_back(
        fmt::format("the batch sizes given ({} x {})", b.gpu_batch_size, b.num_gpu_batches));
  } else if (b.block_size() >= cap_batch) {
    reasons.push_back(w.num_requests > 0 && cap_batch == w.num_requests
                          ? fmt::format("requests ({} in the workload)", w.num_requests)
                          : fmt::format("max batch ({})", o.max_batch));
  } else {
    Policy p = b;
    (g_fix > 0 ? p.num_gpu_batches : p.gpu_batch_size) += 1;  // the factor the planner chose
    probe(p, fmt::format("a block of {}", p.block_size()));
  }
  const double w_ram = b.weight_gpu_percent + b.weight_cpu_percent;
  const double c_ram = b.cache_gpu_percent + b.cache_cpu_percent;
  if (w_ram < 100 && !o.base.shares_given) {
    Policy p = b;
    place(p, w_ram + o.percent_step, c_ram);
    probe(p, fmt::format("weights {}% in RAM", w_ram + o.percent_step));
  }
  if (c_ram < 100 && !o.base.shares_given) {
    Policy p = b;
    place(p, w_ram, c_ram + o.percent_step);
    probe(p, fmt::format("KV cache {}% in RAM", c_ram + o.percent_step));
  }
  out.binding = reasons.empty()
                    ? fmt::format("none: larger blocks or more RAM are predicted no faster "
                                  "(decode bound by the {} lane)",
                                  out.prediction.bottleneck())
                    : fmt::format("{}", fmt::join(reasons, "; "));
  return out;
}

PlanResult plan_kv_dtype(const ModelFacts& m,
                         const std::function<const ComputeProfile&(DType)>& compute,
                         const HardwareProfile& hw, const PlanOptions& o) {
  auto plan_with = [&](DType t) {
    PlanOptions ot = o;
    ot.base.kv_dtype = t;
    ot.base.kv_dtype_auto = false;
    return plan(m, compute(t), hw, ot);
  };
  const DType wide = m.default_kv_dtype;
  if (wide == DType::kQ8_0) return plan_with(wide);
  std::optional<PlanResult> w;
  try {
    w = plan_with(wide);
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kConfig) throw;  // nothing fits at 16 bits: q8_0's turn
  }
  if (w && !w->memory_bound) return *w;
  PlanResult q = plan_with(DType::kQ8_0);  // throws when nothing fits either
  q.evaluated += w ? w->evaluated : 0;
  if (w && q.prediction.total_throughput < kAutoQ8Gain * w->prediction.total_throughput) {
    w->evaluated = q.evaluated;
    return *w;
  }
  q.binding += w ? fmt::format("; q8_0 KV: {:.2f}x the total of {}", 
                               q.prediction.total_throughput / w->prediction.total_throughput,
                               dtype_name(wide))
                 : fmt::format("; q8_0 KV: nothing fits with {}", dtype_name(wide));
  return q;
}

}  // namespace offgen
