// Calibration measurements.
#include "eval/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "offload/aligned_buffer.h"
#include "offload/nvme_store.h"
#include "policies/kv/kv_policy.h"
#include "runtime/core/kv_format.h"
#include "runtime/core/buffer.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/memory_info.h"
#include "runtime/core/machine_info.h"
#include "runtime/text/sampler.h"

namespace offgen {
namespace {

using Clock = std::chrono::steady_clock;

// Written data awaiting write-back from which the disk calibration waits for it.
constexpr int64_t kWriteBackWait = int64_t{64} << 20;

// Median seconds of fn over at least `reps` runs (and about `budget` seconds), after one warm-up.
template <typename Fn>
double median_time(Fn&& fn, int reps, double budget) {
  fn();
  sample_anon_peak();  // while the measurement's buffers are held
  std::vector<double> t;
  const auto start = Clock::now();
  while (static_cast<int>(t.size()) < reps ||
         (std::chrono::duration<double>(Clock::now() - start).count() < budget && t.size() < 50)) {
    const auto t0 = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
  return t[t.size() / 2];
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

void step(const CalibrateOptions& o, const std::string& what) {
  log_debug("calibrating: anonymous memory {} before {}", format_bytes(rss_bytes().anon), what);
  if (o.on_step) o.on_step(what);
}

// KV tables for `seqs` sequences of `capacity` slots (random K/V stored as `dtype`), with eviction
// metadata when `meta` (positions 0..capacity-1 per head, zero scores).
struct Tables {
  std::vector<std::byte> k, v;
  std::vector<float> sum, max;
  std::vector<int32_t> pos, written;
  std::vector<KvSeqView> views;
  Tables(const ModelConfig& c, int64_t seqs, int64_t capacity, bool meta, DType dtype) {
    const int64_t rb = kv_row_bytes(dtype, c.n_kv_heads, c.head_dim), per = capacity * rb;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    k.resize(seqs * per), v.resize(seqs * per);
    std::vector<float> row(c.kv_dim());
    for (int64_t r = 0; r < seqs * capacity; ++r)
      for (auto* t : {&k, &v}) {
        for (auto& x : row) x = u(rng);
        kv_encode_rows(dtype, row.data(), 0, 1, c.n_kv_heads, c.head_dim, t->data() + r * rb);
      }
    const int64_t table = c.n_kv_heads * capacity;
    if (meta) {
      pos.resize(seqs * table), sum.assign(seqs * table, 0.f), max.assign(seqs * table, 0.f);
      for (int64_t i = 0; i < seqs * table; ++i) pos[i] = static_cast<int32_t>(i % capacity);
    }
    written.resize(seqs * c.n_kv_heads);
    for (int64_t s = 0; s < seqs; ++s) {
      KvSeqView view{k.data() + s * per, v.data() + s * per, capacity};
      view.dtype = dtype;
      if (meta) {
        view.pos = pos.data() + s * table;
        view.sum = sum.data() + s * table;
        view.max = max.data() + s * table;
        view.compact_to = capacity;
      }
      view.written = written.data() + s * c.n_kv_heads;
      views.push_back(view);
    }
  }
};

}  // namespace

// One round of each measurement; the public functions keep the best of o.rounds.
static HardwareProfile transfers_once(const CalibrateOptions& o, HardwareProfile p) {
  p.created = today();
  NvmeStoreOptions no;
  no.dir = o.offload_dir;
  if (no.dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    no.dir = tmp && *tmp ? tmp : "/tmp";
  }
  p.offload_dir = no.dir;
  NvmeStore store(no);
  p.direct_io = store.direct();
  // Within the limits: the file region the ops cycle over fits the disk limit, the op buffer a
  // quarter of the RAM limit (a few sizes always: the smallest two).
  uint64_t span = o.quick ? 8ull << 20 : 256ull << 20;
  if (o.disk_limit > 0) span = std::max<uint64_t>(align_down(o.disk_limit), 8192);
  const auto ram_room = [&](uint64_t bytes, uint64_t share) {
    return o.memory_limit <= 0 || bytes <= static_cast<uint64_t>(o.memory_limit) / share;
  };
  std::vector<uint64_t> sizes;
  for (uint64_t size : o.quick ? std::vector<uint64_t>{4096, 1 << 20}
                               : std::vector<uint64_t>{4096, 16 << 10, 64 << 10, 256 << 10, 1 << 20,
                                                       4 << 20, 16 << 20})
    if (size <= span / 2 && (sizes.size() < 2 || ram_room(size, 4))) sizes.push_back(size);
  const Extent extent = store.allocate(span);
  AlignedHostBuffer buf(sizes.back());
  std::memset(buf.data(), 0x5a, buf.capacity());
  p.disk_read = p.disk_write = p.ram_copy = TimeCurve{};
  // Data written just before (a model file, a job's output) goes on being written back for a
  // while, and the disk would be measured serving it too: it is written back first.
  if (const int64_t unwritten = unwritten_page_bytes(); unwritten >= kWriteBackWait) {
    step(o, fmt::format("waiting for {} of written data to reach the disk",
                        format_bytes(unwritten)));
    ::sync();
  }
  // Fill the region once: the first write to preallocated space also converts the filesystem's
  // unwritten extents, which the runtime pays once per extent, not per write-back.
  step(o, "disk fill");
  for (uint64_t off = 0; off < span; off += sizes.back())
    store.write(Extent{extent.offset + off, std::min<uint64_t>(sizes.back(), span - off)},
                buf.data(), std::min<uint64_t>(sizes.back(), span - off));
  for (const bool write : {true, false}) {
    for (uint64_t size : sizes) {
      step(o, fmt::format("disk {} {} KiB", write ? "write" : "read", size >> 10));
      // Ops walk the region so that reads are not served by a drive cache of the last op.
      uint64_t offset = 0;
      auto op = [&] {
        const Extent at{extent.offset + offset, size};
        if (write) store.write(at, buf.data(), size);
        else store.read(at, buf.data(), size);
        offset = (offset + size) % (span - size + 1) / 4096 * 4096;
      };
      const int reps = o.quick ? 3 : static_cast<int>(std::clamp<uint64_t>((64ull << 20) / size, 5, 200));
      TimeCurve& c = write ? p.disk_write : p.disk_read;
      c.x.push_back(static_cast<double>(size));
      c.seconds.push_back(median_time(op, reps, o.quick ? 0.0 : 0.3));
    }
  }
  std::vector<uint64_t> copy_sizes;  // two buffers of the largest
  for (uint64_t size : o.quick ? std::vector<uint64_t>{4096, 1 << 20}
                               : std::vector<uint64_t>{4096, 64 << 10, 1 << 20, 16 << 20, 64 << 20})
    if (copy_sizes.size() < 2 || ram_room(size, 4)) copy_sizes.push_back(size);
  std::vector<std::byte> from(copy_sizes.back(), std::byte{1}), to(copy_sizes.back());
  for (uint64_t size : copy_sizes) {
    step(o, fmt::format("RAM copy {} KiB", size >> 10));
    p.ram_copy.x.push_back(static_cast<double>(size));
    p.ram_copy.seconds.push_back(median_time([&] { std::memcpy(to.data(), from.data(), size); },
                                             o.quick ? 3 : 10, o.quick ? 0.0 : 0.2));
  }
  return p;
}

static ComputeProfile compute_once(const DecoderModel& model, const std::string& weight_dtype,
                                   DType kv_dtype, const CalibrateOptions& o) {
  const ModelConfig& c = model.config();
  ComputeProfile out;
  out.model_key = compute_key(model_key(c, weight_dtype), kv_dtype);
  out.threads = model.backend().threads().threads();
  out.memory_limit = o.memory_limit;
  // Copies of each unit's blob, cycled through so that weights stream from RAM as in a forward
  // over all layers (one copy would stay in the last-level cache); within a limit, a quarter of
  // it for both units' copies.
  int64_t stream_bytes = o.quick ? (8 << 20) : (128 << 20);
  if (o.memory_limit > 0) stream_bytes = std::min(stream_bytes, o.memory_limit / 8);
  std::vector<Buffer> blobs[2];
  for (int unit = 0; unit < 2; ++unit) {
    const int64_t bytes = model.unit_bytes(unit);
    const int64_t copies = std::max<int64_t>(1, stream_bytes / bytes);
    for (int64_t i = 0; i < copies; ++i) {
      blobs[unit].emplace_back(bytes);
      if (i == 0) model.build_unit(unit, blobs[unit][0].data());
      else std::memcpy(blobs[unit][i].data(), blobs[unit][0].data(), bytes);
    }
  }
  size_t next_blob[2] = {0, 0};
  // Within a limit: beside the blobs, each measurement's KV tables while it runs, and what is
  // kept at its largest from one measurement to the next — the scratch, the hidden rows and
  // their copy and the backend's workspace per row, each thread's attention scores, the logits
  // rows and a sampler's candidates. The shapes are chosen in the order they are measured.
  const ForwardLayout f = model.forward_layout();
  int64_t room = o.memory_limit;
  for (const auto& copies : blobs)
    for (const Buffer& b : copies) room -= b.bytes();
  const int64_t per_row = 2 * f.hidden_row_bytes + f.scratch_row_bytes + f.work_row_bytes;
  int64_t kept_rows = 0, kept_scores = 0, kept_logits = 0;
  auto tables = [&](int64_t seqs, int64_t capacity, bool evict) {
    return seqs * capacity * (2 * c.kv_dim() * 4 + (evict ? 3 * c.n_kv_heads * 4 : 0));
  };
  auto scores = [&](int64_t n_new, int64_t capacity) {
    return f.threads * n_new * ((capacity + f.key_block - 1) / f.key_block * f.key_block) *
           f.score_bytes;
  };
  // Whether a measurement of this many rows, scores, logits and tables fits beside what is kept
  // (always: the smallest shapes); when it does, what it keeps is counted from then on.
  auto take = [&](int64_t rows, int64_t score, int64_t logits, int64_t table, bool always) {
    const int64_t r = std::max(kept_rows, rows), s = std::max(kept_scores, score),
                  l = std::max(kept_logits, logits);
    const int64_t need = r * per_row + f.scratch_buffers * 4096 + s + l + table;
    if (!always && o.memory_limit > 0 && need > room) return false;
    kept_rows = r, kept_scores = s, kept_logits = l;
    return true;
  };
  DecoderScratch scratch;
  const auto kv_policy = make_kv_policy(KvPolicyConfig{.kind = KvPolicyKind::kH2o});
  const int reps = o.quick ? 1 : 3;
  const double budget = o.quick ? 0.0 : 0.3;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> hidden0, hidden;

  // One unit over `seqs` sequences of n_new tokens after n_past slots (tables of `capacity`).
  auto unit_time = [&](int64_t unit, int64_t seqs, int64_t n_new, int64_t n_past, int64_t capacity,
                       bool evict) {
    const int64_t rows = seqs * n_new;
    hidden0.resize(rows * c.d_model);
    for (auto& x : hidden0) x = u(rng) * 0.1f;
    std::vector<SeqSpan> spans;
    std::vector<int32_t> positions;
    for (int64_t s = 0; s < seqs; ++s) {
      spans.push_back(SeqSpan{s * n_new, n_new, n_past});
      for (int64_t t = 0; t < n_new; ++t) positions.push_back(static_cast<int32_t>(n_past + t));
    }
    const bool attn = DecoderModel::unit_has_cache(unit);
    Tables tables(c, attn ? seqs : 0, capacity, evict, kv_dtype);
    const UnitBatch ub{rows, spans, positions.data(), tables.views, evict ? kv_policy.get() : nullptr};
    return median_time(
        [&] {
          hidden = hidden0;
          auto& copies = blobs[unit];
          model.run_unit(unit, copies[next_blob[unit]++ % copies.size()].data(), hidden.data(), ub,
                         scratch);
        },
        reps, budget);
  };

  std::vector<int64_t> rows;
  for (int64_t r : o.quick ? std::vector<int64_t>{1, 16, 128}
                           : std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024,
                                                  2048})
    if (take(r, scores(1, 1), 0, tables(r, 1, false), rows.size() < 2)) rows.push_back(r);
  for (int64_t r : rows) {
    step(o, fmt::format("units at {} rows", r));
    out.mlp.x.push_back(static_cast<double>(r));
    out.mlp.seconds.push_back(unit_time(1, 1, r, 0, r, false));
    out.attn_base.x.push_back(static_cast<double>(r));
    out.attn_base.seconds.push_back(unit_time(0, r, 1, 0, 1, false));
  }
  // Attention core per (query row x key slot). Decode: g sequences over a short and a long past
  // (equal rows, so the projections cancel). Prefill: prompts of n tokens filling one forward,
  // minus attn_base at its rows, per n (the cost per pair grows with n as K/V outgrow the caches). Full caches and
  // h2o tables (statistics accumulated; in decode a victim overwritten per head).
  int64_t g = o.quick ? 8 : 64, l2 = o.quick ? 256 : 1024;
  const int64_t l1 = 32;
  // Within a limit: fewer sequences, then a shorter long past.
  while (!take(g, scores(1, l2 + 1), 0, tables(g, l2 + 1, true), g <= 4 && l2 <= 4 * l1))
    (g > 4 ? g : l2) /= 2;
  std::vector<int64_t> lens;
  for (int64_t n : o.quick ? std::vector<int64_t>{32, 128}
                           : std::vector<int64_t>{32, 64, 128, 256, 512, 1024, 2048}) {
    const int64_t seqs = std::max<int64_t>(1, rows.back() / n);
    if (take(seqs * n, scores(n, n), 0, tables(seqs, n, true), lens.empty())) lens.push_back(n);
  }
  for (const bool evict : {false, true}) {
    step(o, fmt::format("decode attention{}", evict ? " (h2o)" : ""));
    const double d1 = unit_time(0, g, 1, l1, evict ? l1 : l1 + 1, evict);
    const double d2 = unit_time(0, g, 1, l2, evict ? l2 : l2 + 1, evict);
    // The difference of two short, noisy times: when noise swallows it (d2 <= d1, seen under
    // sanitizers on a loaded machine), the whole long-past time per pair bounds it from above.
    const double pair = d2 > d1 ? (d2 - d1) / static_cast<double>(g * (l2 - l1))
                                : d2 / static_cast<double>(g * l2);
    (evict ? out.decode_pair_evict : out.decode_pair) = pair;
    TimeCurve& pre = evict ? out.prefill_pair_evict : out.prefill_pair;
    for (int64_t n : lens) {
      // As the engine's prefill forwards run them: as many prompts of n tokens as make one
      // forward of `rows` tokens (its prefill chunk), beside each other.
      const int64_t seqs = std::max<int64_t>(1, rows.back() / n);
      step(o, fmt::format("prefill attention{} over {} x {} tokens", evict ? " (h2o)" : "", seqs, n));
      const double whole = unit_time(0, seqs, n, 0, n, evict);
      const double t = whole - out.attn_base.at(static_cast<double>(seqs * n));
      const double pairs = static_cast<double>(seqs * n) * static_cast<double>(n + 1) / 2;
      pre.x.push_back(static_cast<double>(n));
      // Noise may swallow the difference (t <= 0): the whole unit's time bounds it from above.
      pre.seconds.push_back((t > 0 ? t : whole) / pairs);
    }
    // Short chunks are a small difference of two noisy times (or the bound above); the cost per
    // pair does not fall as chunks grow, so each point is capped by the next one's.
    for (size_t i = pre.seconds.size() - 1; i-- > 0;)
      pre.seconds[i] = std::min(pre.seconds[i], pre.seconds[i + 1]);
  }
  // Output head and sampling (the engine's default sampling parameters) per sequence.
  std::vector<float> logits;
  std::vector<int64_t> seqs;
  for (int64_t s : o.quick ? std::vector<int64_t>{1, 16}
                           : std::vector<int64_t>{1, 4, 16, 64, 256, 1024})
    if (take(s, 0, s * f.logits_row_bytes + 2 * f.sample_row_bytes, 0, seqs.size() < 2))
      seqs.push_back(s);
  for (int64_t s : seqs) {
    step(o, fmt::format("output head for {} sequences", s));
    hidden0.resize(s * c.d_model);
    for (auto& x : hidden0) x = u(rng) * 0.1f;
    std::vector<int64_t> last(s);
    for (int64_t i = 0; i < s; ++i) last[i] = i;
    logits.resize(s * c.vocab_size);
    Sampler sampler{SamplingParams{}};
    out.output.x.push_back(static_cast<double>(s));
    out.output.seconds.push_back(median_time(
        [&] {
          model.output_step(hidden0.data(), last, logits.data(), scratch);
          for (int64_t i = 0; i < s; ++i)
            sampler.sample({logits.data() + i * c.vocab_size, static_cast<size_t>(c.vocab_size)});
        },
        reps, budget));
  }
  return out;
}

namespace {

// Several rounds of one figure: the best (least disturbed: interference only slows a measurement)
// of directly measured times, the median of derived ones (differences of two times, where the
// least is the noisiest), and the largest spread between rounds of a measured point (of those
// taking a millisecond or more).
constexpr double kSpreadFloor = 1e-3;

struct Rounds {
  double spread = 0;
  std::string at;
  // Each point's seconds over the rounds (the rounds measure the same x).
  static std::vector<std::vector<double>> points(const std::vector<TimeCurve>& all) {
    std::vector<std::vector<double>> v(all.front().x.size());
    for (const TimeCurve& c : all)
      for (size_t i = 0; i < v.size() && i < c.seconds.size(); ++i) v[i].push_back(c.seconds[i]);
    return v;
  }
  // The best of each point; `name(x)` describes a point for the spread.
  template <typename Name>
  TimeCurve best(const std::vector<TimeCurve>& all, Name&& name) {
    TimeCurve out = all.front();
    const auto v = points(all);
    for (size_t i = 0; i < v.size(); ++i) {
      const auto [lo, hi] = std::minmax_element(v[i].begin(), v[i].end());
      out.seconds[i] = *lo;
      // Points under a millisecond are left out: their spread is timer and scheduler noise.
      const double s = *lo >= kSpreadFloor ? *hi / *lo - 1 : 0;
      if (s > spread) spread = s, at = name(out.x[i]);
    }
    return out;
  }
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  }
  static TimeCurve median(const std::vector<TimeCurve>& all) {
    TimeCurve out = all.front();
    const auto v = points(all);
    for (size_t i = 0; i < v.size(); ++i) out.seconds[i] = median(v[i]);
    return out;
  }
};

template <typename T, typename F>
std::vector<TimeCurve> each(const std::vector<T>& all, F&& field) {
  std::vector<TimeCurve> out;
  for (const T& x : all) out.push_back(field(x));
  return out;
}

std::string bytes_point(const char* what, double x) {
  return fmt::format("{} {}", what, format_bytes(static_cast<int64_t>(x)));
}
std::function<std::string(double)> rows_point(const char* unit) {
  return [unit](double x) { return fmt::format("{} at {:.0f} rows", unit, x); };
}

// Provenance of a measurement: the machine as it started, the other processes' CPU share over it.
struct Witness {
  MachineInfo machine = machine_info();
  OthersCpuProbe others;
  ProfileProvenance finish(int rounds, const Rounds& r) const {
    ProfileProvenance p;
    p.measured_at = utc_timestamp(static_cast<int64_t>(std::time(nullptr)));
    p.cpu_model = machine.cpu_model;
    p.kernel = machine.kernel;
    p.cpus = machine.cpus;
    p.loadavg = machine.loadavg;
    p.others_cpu = others.fraction();
    p.rounds = rounds;
    p.spread = r.spread;
    p.spread_at = r.at;
    return p;
  }
};

}  // namespace

int CalibrateOptions::round_count() const { return rounds > 0 ? rounds : quick ? 2 : 3; }

HardwareProfile measure_transfers(const CalibrateOptions& o, HardwareProfile base) {
  const Witness w;
  const int n = o.round_count();
  std::vector<HardwareProfile> all;
  for (int r = 0; r < n; ++r) {
    if (n > 1) step(o, fmt::format("disk and RAM, round {} of {}", r + 1, n));
    all.push_back(transfers_once(o, base));
  }
  Rounds rounds;
  HardwareProfile best = all.front();
  best.disk_read = rounds.best(each(all, [](const auto& p) { return p.disk_read; }),
                               [](double x) { return bytes_point("disk read", x); });
  best.disk_write = rounds.best(each(all, [](const auto& p) { return p.disk_write; }),
                                [](double x) { return bytes_point("disk write", x); });
  best.ram_copy = rounds.best(each(all, [](const auto& p) { return p.ram_copy; }),
                              [](double x) { return bytes_point("RAM copy", x); });
  best.provenance = w.finish(n, rounds);
  return best;
}

ComputeProfile measure_compute(const DecoderModel& model, const std::string& weight_dtype,
                               DType kv_dtype, const CalibrateOptions& o) {
  const Witness w;
  const int n = o.round_count();
  std::vector<ComputeProfile> all;
  for (int r = 0; r < n; ++r) {
    if (n > 1) step(o, fmt::format("compute, round {} of {}", r + 1, n));
    all.push_back(compute_once(model, weight_dtype, kv_dtype, o));
  }
  Rounds rounds;
  ComputeProfile best = all.front();
  best.mlp = rounds.best(each(all, [](const auto& c) { return c.mlp; }), rows_point("MLP unit"));
  best.attn_base = rounds.best(each(all, [](const auto& c) { return c.attn_base; }),
                               rows_point("attention unit"));
  best.output = rounds.best(each(all, [](const auto& c) { return c.output; }),
                            rows_point("output head"));
  std::vector<double> pair, pair_evict;
  for (const ComputeProfile& c : all)
    pair.push_back(c.decode_pair), pair_evict.push_back(c.decode_pair_evict);
  best.decode_pair = Rounds::median(pair);
  best.decode_pair_evict = Rounds::median(pair_evict);
  best.prefill_pair = Rounds::median(each(all, [](const auto& c) { return c.prefill_pair; }));
  best.prefill_pair_evict =
      Rounds::median(each(all, [](const auto& c) { return c.prefill_pair_evict; }));
  best.provenance = w.finish(n, rounds);
  return best;
}

void check_quiet(const ProfileProvenance& p, const std::string& what) {
  OFFGEN_CHECK(!measured_busy(p), kResource,
               "calibrate: the machine is busy: other processes used {:.0f}% of the CPU time "
               "while {} (load average {:.2f} on {} CPUs); figures measured so would be inflated, "
               "so no profile is written. Run it when the machine is quiet, or give --allow-busy "
               "to keep figures marked as measured under load",
               std::max(0.0, p.others_cpu) * 100, what, p.loadavg, p.cpus);
}

ProfileProvenance probe_machine(double seconds) {
  const Witness w;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return w.finish(0, Rounds{});
}

}  // namespace offgen
