// Profile cache and planning inputs.
#include "eval/planning.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <algorithm>
#include <ctime>

#include <fmt/format.h>

#include <fmt/format.h>

#include "runtime/backend/backend.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/memory_info.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/core/atomic_file.h"
#include "runtime/core/machine_info.h"
#include "runtime/core/memory_info.h"
#include "scheduler/engine.h"

namespace offgen {

std::string default_profile_path() {
  if (const char* p = std::getenv("OFFGEN_PROFILE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/offgen/profile.json";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/offgen/profile.json";
}

RoutingProfile measured_routing(const std::string& model, const std::string& path) {
  const std::string file = path.empty() ? default_profile_path() : path;
  std::error_code ec;
  if (model.empty() || !std::filesystem::exists(file, ec)) return {};
  HardwareProfile hw;
  try {
    hw = load_cached_profile(file);
  } catch (const Error& e) {
    std::fprintf(stderr, "offgen: warning: no measured expert routing: %s\n", e.what());
    return {};
  }
  if (hw.routing.empty()) return {};
  std::string id;
  try {
    id = model_content_id(model);
  } catch (const Error&) {
    return {};  // a model that cannot be opened: the job itself says why, once
  }
  const RoutingProfile* r = hw.find_routing(id);
  return r ? *r : RoutingProfile{};
}

HardwareProfile load_profile(const std::string& path, std::vector<std::string>* dropped) {
  std::ifstream in(path);
  OFFGEN_CHECK(in.good(), kIo, "{}: cannot read the hardware profile", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    OFFGEN_THROW(kInput, "{}: not JSON (byte {}): run `offgen calibrate` to rewrite it", path,
                 e.byte);
  }
  return HardwareProfile::from_json(j, path, dropped);
}

HardwareProfile load_cached_profile(const std::string& path) {
  std::vector<std::string> dropped;
  HardwareProfile p = load_profile(path, &dropped);
  for (const std::string& d : dropped)
    std::fprintf(stderr,
                 "offgen: warning: %s: that entry is left out (measured again when needed)\n",
                 d.c_str());
  return p;
}

void save_profile(const std::string& path, const HardwareProfile& p) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  OFFGEN_CHECK(!ec, kIo, "{}: cannot create the profile directory: {}", dir.string(), ec.message());
  write_json_atomically(path, p.to_json());
}

std::vector<DType> planning_kv_dtypes(const Policy& base) {
  const DType d = backend_caps(BackendKind::kCpu).default_kv_dtype;
  if (base.kv_dtype_auto) return d == DType::kQ8_0 ? std::vector<DType>{d} : std::vector<DType>{d, DType::kQ8_0};
  return {base.kv_dtype.value_or(d)};
}

const ComputeProfile& PlanningInputs::compute_for(DType t) const {
  for (size_t i = 0; i < kv_dtypes.size(); ++i)
    if (kv_dtypes[i] == t) return compute[i];
  OFFGEN_THROW(kInternal, "planning: no compute figures over a {} KV cache", dtype_name(t));
}

namespace {

// Drops the parts of `hw` measured on a busy machine (so they are measured again) when the
// machine is quiet now.
void retire_busy_figures(const std::string& path, HardwareProfile& hw) {
  bool busy = measured_busy(hw.provenance);
  for (const ComputeProfile& c : hw.compute) busy = busy || measured_busy(c.provenance);
  if (!busy || measured_busy(probe_machine(1.0))) return;
  std::fprintf(stderr,
               "offgen: %s: figures measured on a busy machine; this one is quiet now: measuring "
               "them again\n",
               path.c_str());
  if (measured_busy(hw.provenance)) hw.disk_read = hw.disk_write = hw.ram_copy = TimeCurve{};
  std::erase_if(hw.compute, [](const ComputeProfile& c) { return measured_busy(c.provenance); });
}

// Prints the provenance of the figures a plan uses and what makes them doubtful, and re-checks
// those read from the cache against the machine now (one GEMM, one disk read; the compute figures
// of the first KV dtype).
void check_profile(const PlanningContext& ctx, const DecoderModel& model, PlanningInputs& in,
                   bool fresh_transfers, bool fresh_compute) {
  const MachineInfo now = machine_info();
  const auto t = static_cast<int64_t>(std::time(nullptr));
  const std::string transfers = "disk and RAM figures";
  std::fprintf(stderr, "offgen: profile %s: %s %s\n", in.profile_path.c_str(), transfers.c_str(),
               provenance_line(in.hw.provenance, t).c_str());
  in.warnings = provenance_warnings(in.hw.provenance, transfers, now, t);
  for (const ComputeProfile& c : in.compute) {
    const std::string compute =
        fmt::format("compute figures of {} at {} threads", c.model_key, c.threads);
    std::fprintf(stderr, "offgen: profile %s: %s %s\n", in.profile_path.c_str(), compute.c_str(),
                 provenance_line(c.provenance, t).c_str());
    for (std::string& w : provenance_warnings(c.provenance, compute, now, t))
      in.warnings.push_back(std::move(w));
  }
  if (ctx.recheck && (!fresh_transfers || !fresh_compute)) {
    in.recheck = recheck_profile(model, fresh_compute ? nullptr : &in.compute.front(),
                                 fresh_transfers ? nullptr : &in.hw, ctx.offload_dir);
    for (std::string& w : in.recheck.warnings()) in.warnings.push_back(std::move(w));
    for (const std::string& n : in.recheck.notes)
      std::fprintf(stderr, "offgen: profile re-check: %s\n", n.c_str());
  }
  for (const std::string& w : in.warnings)
    std::fprintf(stderr, "offgen: warning: %s\n", w.c_str());
}

}  // namespace

nlohmann::json PlanningInputs::profile_json() const {
  return {{"path", profile_path},
          {"transfers", hw.provenance.to_json()},
          {"compute", compute.empty() ? nlohmann::json() : compute.front().provenance.to_json()},
          {"recheck", recheck.to_json()},
          {"warnings", warnings}};
}

PlanningInputs planning_inputs(const PlanningContext& ctx) {
  trim_free_memory();  // what reading the requests freed: a calibration below keeps to a limit
  const std::string path = ctx.profile_path.empty() ? default_profile_path() : ctx.profile_path;
  PlanningInputs in;
  bool have = std::filesystem::exists(path), changed = false;
  if (have) {
    try {
      // A profile the user named is read strictly; the cache keeps its sound entries.
      in.hw = ctx.profile_path.empty() ? load_cached_profile(path) : load_profile(path);
    } catch (const Error& e) {
      // An outdated or damaged cache is measured again (and replaced), not a dead end; a profile
      // the user named is theirs: its error stands.
      if (!ctx.profile_path.empty()) throw;
      std::fprintf(stderr, "offgen: %s; measuring again\n", e.what());
      in.hw = HardwareProfile{};
      have = false;
    }
  }
  CalibrateOptions co;
  co.offload_dir = ctx.offload_dir;
  co.on_step = ctx.on_step;
  co.disk_limit = ctx.disk_limit;
  auto limits = [&] {
    return ctx.ram_limit > 0 ? fmt::format(", within {} of RAM", format_bytes(ctx.ram_limit))
                             : std::string();
  };
  // Figures of the cache measured on a busy machine are measured again when it is quiet now.
  if (have && ctx.profile_path.empty()) retire_busy_figures(path, in.hw);
  bool fresh_transfers = false, fresh_compute = false;
  if (!have || in.hw.disk_read.empty() || in.hw.ram_copy.empty()) {
    std::fprintf(stderr,
                 "offgen: %s has no disk and RAM figures of this machine: measuring them once "
                 "(about 10 s%s)\n",
                 path.c_str(), limits().c_str());
    co.memory_limit = ctx.ram_limit > 0 ? std::max<int64_t>(ctx.ram_limit - kPlanningOverhead,
                                                            int64_t{16} << 20)
                                        : 0;
    in.hw = measure_transfers(co, std::move(in.hw));
    changed = fresh_transfers = true;
  }
  auto backend = make_cpu_backend(ctx.threads, ctx.weight_dtype);
  OpenedModel opened = open_model(ctx.model);
  DecoderModel model(*opened.source, *backend);
  opened.source->release_pages();  // its tensors are copied out
  const std::string storage = ctx.weight_dtype.name();  // part of the profile's keys
  in.facts = model_facts(model, storage);
  // Measured routing: the engine places each layer's experts hottest first (cli engine_options),
  // and the costs expect the rows' experts by it.
  if (const RoutingProfile* r = in.hw.find_routing(opened.content_id)) {
    in.facts.use_routing(r->counts, r->first_half);
    std::fprintf(stderr, "offgen: expert %s\n",
                 r->summary(static_cast<int64_t>(std::time(nullptr))).c_str());
  }
  const int threads = backend->threads().threads();
  // The measurements share the RAM limit with the model's resident tensors.
  co.memory_limit =
      ctx.ram_limit > 0 ? std::max<int64_t>(ctx.ram_limit - model.resident_bytes() -
                                                kPlanningOverhead,
                                            int64_t{16} << 20)
                        : 0;
  in.kv_dtypes = ctx.kv_dtypes;
  if (in.kv_dtypes.empty()) in.kv_dtypes = {backend->caps().default_kv_dtype};
  for (DType t : in.kv_dtypes) {
    const ComputeProfile* cached = in.hw.find_compute(compute_key(in.facts.key, t), threads);
    if (cached && cached->covers(co.memory_limit)) {
      in.compute.push_back(*cached);
      continue;
    }
    std::fprintf(stderr,
                 "offgen: %s has no compute figures of %s at %d threads over a %s KV cache%s: "
                 "measuring them once (best of %d rounds%s)\n",
                 path.c_str(), ctx.model.c_str(), threads, std::string(dtype_name(t)).c_str(),
                 cached ? " measured with this much RAM" : "", co.round_count(), limits().c_str());
    in.compute.push_back(measure_compute(model, storage, t, co));
    in.hw.put_compute(in.compute.back());
    changed = true;
    if (in.compute.size() == 1) fresh_compute = true;
  }
  if (changed) save_profile(path, in.hw);
  in.profile_path = path;
  check_profile(ctx, model, in, fresh_transfers, fresh_compute);
  return in;
}

PlanOptions calibrated_plan_options(const Workload& w, const Policy& base) {
  PlanOptions o;
  o.workload = w;
  o.base = base;
  o.device_is_host = backend_caps(BackendKind::kCpu).device_is_host;
  o.base.cpu_mem = planning_ram_limit(base);
  return o;
}

int64_t planning_ram_limit(const Policy& base) {
  if (base.ram_mem() > 0) return base.cpu_mem;
  // As the engine admits without a limit: 90% of what is available now.
  const int64_t avail = available_ram_bytes();
  return avail > 0 ? avail / 10 * 9 : 0;
}

PlanResult plan_inputs(const PlanningInputs& in, const PlanOptions& o) {
  if (!o.base.kv_dtype_auto) return plan(in.facts, in.compute_for(o.base), in.hw, o);
  return plan_kv_dtype(in.facts, [&](DType t) -> const ComputeProfile& { return in.compute_for(t); },
                       in.hw, o);
}

PlanResult auto_plan(const PlanningInputs& in, const Workload& w, const Policy& base,
                     const StopToken& stop) {
  PlanOptions o = calibrated_plan_options(w, base);
  o.stop = stop;
  PlanResult r = plan_inputs(in, o);
  const Policy& p = r.policy;
  std::fprintf(stderr,
               "offgen: policy auto: %lld x %lld sequences, weights %g%% / KV %g%% in RAM (%s), "
               "overlap %s; predicted %.1f tok/s total (binding: %s)\n",
               static_cast<long long>(p.gpu_batch_size), static_cast<long long>(p.num_gpu_batches),
               p.weight_gpu_percent + p.weight_cpu_percent,
               p.cache_gpu_percent + p.cache_cpu_percent,
               std::string(dtype_name(in.facts.kv_dtype(p))).c_str(), p.overlap ? "on" : "off",
               r.prediction.total_throughput, r.binding.c_str());
  if (base.ram_mem() == 0 && p.cpu_mem > 0)
    std::fprintf(stderr,
                 "offgen: policy auto: planned within %s of RAM, 90%% of what is available now "
                 "(--cpu-mem sets the limit)\n",
                 format_bytes(p.cpu_mem).c_str());
  const Roofline& b = r.roofline;
  if (b.known())
    std::fprintf(stderr,
                 "offgen: policy auto: bound %.3g tok/s total (%s binds the job; a decode step of "
                 "%lld sequences: disk %.3g s, compute %.3g s, memory %.3g s, %s binds); predicted "
                 "%.0f%% of the bound\n",
                 b.bound_total_throughput, b.binding.c_str(), static_cast<long long>(b.block),
                 b.decode_step.disk_seconds, b.decode_step.compute_seconds,
                 b.decode_step.memory_seconds, b.decode_step.binding().c_str(),
                 100 * r.prediction.total_throughput / b.bound_total_throughput);
  return r;
}

Workload job_workload(const Tokenizer& tokenizer, const std::vector<Request>& requests,
                      int64_t max_context, const StopToken& stop) {
  Workload w;
  int64_t prompts = 0, gens = 0, longest_prompt = 1, longest_gen = 2;
  double squares = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i % 256 == 0) stop.check("plan");
    const Request& r = requests[i];
    int64_t p = 0;
    try {
      p = static_cast<int64_t>(encode_request(tokenizer, r).size());
    } catch (const Error&) {
      continue;  // reported per request by the run itself
    }
    // What the engine generates at most: max_tokens, cut at the context window.
    int64_t g = r.sampling.max_tokens;
    if (max_context > 0) g = std::min(g, max_context - p);
    g = std::max<int64_t>(g, 0);
    prompts += p;
    squares += static_cast<double>(p) * static_cast<double>(p);
    gens += g;
    longest_prompt = std::max(longest_prompt, p);
    longest_gen = std::max(longest_gen, g);
    w.sampling = w.sampling || (r.sampling.temperature != 0.0f && r.forced.empty());
    ++w.num_requests;
  }
  // The typical request is the mean one (rounded up); the longest bound the buffers and must fit.
  const int64_t n = std::max<int64_t>(w.num_requests, 1);
  w.prompt_len = std::max<int64_t>(1, (prompts + n - 1) / n);
  w.gen_len = std::max<int64_t>(2, (gens + n - 1) / n);
  w.longest_prompt_len = longest_prompt;
  w.longest_gen_len = longest_gen;
  w.prompt_sq_mean = squares / static_cast<double>(n);
  return w;
}

Policy unplanned_policy(const Policy& base) {
  Policy p = base;
  p.fix_batch();
  p.gpu_mem = p.cpu_mem = p.disk_mem = 0;  // nothing runs: limits the planner would meet by
  return p;                                 // moving weights must not refuse the job
}

}  // namespace offgen
