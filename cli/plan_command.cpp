// The calibrate and plan commands.
#include "cli/plan_command.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include <fmt/format.h>

#include "cli/flag_checks.h"
#include "runtime/backend/backend.h"
#include "runtime/core/dtype.h"
#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/core/atomic_file.h"
#include "runtime/core/memory_info.h"
#include "eval/routing_calibration.h"

namespace offgen {
void calibration_progress(const std::string& what) {
  std::fprintf(stderr, "offgen: calibrating: %s\n", what.c_str());
}

namespace {

void (*const progress)(const std::string&) = calibration_progress;

double gbps(const TimeCurve& c, size_t i) { return c.x[i] / c.seconds[i] / 1e9; }

void print_curve(const char* name, const TimeCurve& c) {
  std::printf("  %-11s", name);
  for (size_t i = 0; i < c.x.size(); ++i)
    std::printf(" %s %.2f", format_bytes(static_cast<int64_t>(c.x[i])).c_str(), gbps(c, i));
  std::printf("  (GB/s per op size)\n");
}

}  // namespace

nlohmann::json prediction_json(const Prediction& p) {
  return {{"predicted_prefill_throughput", p.prefill_throughput},
          {"predicted_decode_throughput", p.decode_throughput},
          {"predicted_total_throughput", p.total_throughput},
          {"predicted_prefill_seconds", p.prefill_seconds},
          {"predicted_decode_seconds", p.decode_seconds},
          {"predicted_bottleneck", p.bottleneck()},
          {"predicted_lane_busy_seconds",
           {{"load", p.prefill_lanes.load + p.decode_lanes.load},
            {"compute", p.prefill_lanes.compute + p.decode_lanes.compute},
            {"store", p.prefill_lanes.store + p.decode_lanes.store}}}};
}

void CalibrateCommand::add_to(CLI::App* app) {
  cmd_ = app->add_subcommand("calibrate",
                             "Measure disk, RAM and (with --model) compute into a hardware profile");
  cmd_->add_option("--offload-dir", offload_dir, "Disk to measure (default $TMPDIR)");
  cmd_->add_option("--json", json, "Profile to write (default: the cache, " + default_profile_path() + ")");
  cmd_->add_option("--model", model, "Also measure this model's units (.gguf or dummy:PRESET[:FORMAT])");
  add_weight_dtype(cmd_, weight_dtype);
  cmd_->add_option("--threads", threads, "Compute threads (0 = all cores)")->check(CLI::Range(0, 1024));
  cmd_->add_flag("--quick", quick, "Fewer sizes and repetitions (rougher; for smoke tests)");
  add_kv_dtype(cmd_, kv_dtype, false);
  cmd_->add_option("--rounds", rounds,
                   "Rounds of every measurement; the best of them is kept (default 3, --quick 2)")
      ->check(CLI::Range(1, 100));
  cmd_->add_option("--routing-sample", routing_sample,
                   "A mixture of experts' routing is measured on these prompts (a JSONL request "
                   "file such as the job's --input, or a text file of one prompt per line; default "
                   "a built-in sample): its hottest experts then stay in RAM when weights are split "
                   "between RAM and disk")
      ->check(CLI::ExistingFile);
  cmd_->add_flag("--routing-only", routing_only,
                 "Measure only the routing of --model (a mixture of experts), keeping the rest of "
                 "the profile");
  cmd_->add_flag("--allow-busy", allow_busy,
                 "Keep figures measured while other processes load the machine (marked as such; "
                 "every plan from them warns)");
}

int CalibrateCommand::run() const {
  const std::string path = json.empty() ? default_profile_path() : json;
  CalibrateOptions co;
  co.offload_dir = offload_dir;
  co.quick = quick;
  co.rounds = rounds;
  co.on_step = progress;
  // Refused before any measurement when the machine is busy now, and after when it was meanwhile.
  auto quiet = [&](const ProfileProvenance& p, const std::string& what) {
    if (!allow_busy) check_quiet(p, "the " + what + " were measured");
    else if (measured_busy(p))
      std::fprintf(stderr, "offgen: warning: the %s are measured on a busy machine (other "
                   "processes %.0f%% of the CPU): kept, marked as such (--allow-busy)\n",
                   what.c_str(), std::max(0.0, p.others_cpu) * 100);
    if (p.spread > kSpreadLimit)
      std::fprintf(stderr, "offgen: warning: the %s moved by %.0f%% between rounds (%s): the "
                   "machine's speed was not stable; the best of each point is kept\n",
                   what.c_str(), p.spread * 100, p.spread_at.c_str());
  };
  // A routing sample is read before anything is measured: a bad one fails at once.
  const RoutingSample sample =
      routing_sample.empty() ? RoutingSample::built_in() : RoutingSample::from_file(routing_sample);
  // Keeps the compute entries of other models already in the file.
  HardwareProfile base;
  if (std::FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
    try {
      base = load_cached_profile(path);
    } catch (const Error& e) {
      std::fprintf(stderr, "offgen: replacing an unreadable profile: %s\n", e.what());
    }
  }
  if (routing_only) {  // no timing: the machine's load does not matter
    OFFGEN_CHECK(!model.empty(), kConfig, "--routing-only measures a model's routing: give --model");
    routing_into(base, sample);
    save_profile(path, base);
    std::printf("profile written to %s\n", path.c_str());
    return 0;
  }
  if (!allow_busy) check_quiet(probe_machine(1.0), "probed for a second before measuring");
  HardwareProfile hw = measure_transfers(co, std::move(base));
  quiet(hw.provenance, "disk and RAM figures");
  const auto now = static_cast<int64_t>(std::time(nullptr));
  std::printf("disk and RAM figures %s\n", provenance_line(hw.provenance, now).c_str());
  std::printf("offload dir %s (O_DIRECT %s)\n", hw.offload_dir.c_str(), hw.direct_io ? "yes" : "no");
  print_curve("disk read", hw.disk_read);
  print_curve("disk write", hw.disk_write);
  print_curve("RAM copy", hw.ram_copy);
  if (!model.empty()) {
    auto backend = make_cpu_backend(threads, WeightMode::parse(weight_dtype));
    OpenedModel opened = open_model(model);
    DecoderModel m(*opened.source, *backend);
    const DType kv = kv_dtype.empty() ? backend->caps().default_kv_dtype : parse_kv_dtype(kv_dtype);
    const ComputeProfile c = measure_compute(m, weight_dtype, kv, co);
    quiet(c.provenance, "compute figures");
    hw.put_compute(c);
    std::printf("compute %s, %d threads, %s:\n", c.model_key.c_str(), c.threads,
                provenance_line(c.provenance, now).c_str());
    for (size_t i = 0; i < c.mlp.x.size(); ++i)
      std::printf("  %5.0f rows: MLP unit %.3f ms, attention unit %.3f ms\n", c.mlp.x[i],
                  c.mlp.seconds[i] * 1e3, c.attn_base.seconds[i] * 1e3);
    std::printf("  attention per (row x slot): decode %.2f ns (h2o %.2f); prefill", c.decode_pair * 1e9,
                c.decode_pair_evict * 1e9);
    for (size_t i = 0; i < c.prefill_pair.x.size(); ++i)
      std::printf(" %.0f tokens %.2f ns (h2o %.2f)%s", c.prefill_pair.x[i], c.prefill_pair.seconds[i] * 1e9,
                  c.prefill_pair_evict.seconds[i] * 1e9, i + 1 < c.prefill_pair.x.size() ? "," : "\n");
  }
  if (!model.empty()) routing_into(hw, sample);
  save_profile(path, hw);
  std::printf("profile written to %s\n", path.c_str());
  return 0;
}

void CalibrateCommand::routing_into(HardwareProfile& hw, const RoutingSample& sample) const {
  bool moe = false;
  int64_t unit_bytes = 0;
  {
    auto backend = make_cpu_backend(threads, WeightMode::parse(weight_dtype));
    OpenedModel opened = open_model(model);
    const DecoderModel m(*opened.source, *backend);
    moe = m.config().moe();
    for (int64_t u = 0; u < m.num_units(); ++u) unit_bytes += m.unit_bytes(u);
  }
  if (!moe) {
    OFFGEN_CHECK(!routing_only, kConfig, "--routing-only: {} is not a mixture of experts", model);
    if (!routing_sample.empty())
      std::fprintf(stderr, "offgen: warning: --routing-sample: %s has no experts to route\n",
                   model.c_str());
    return;
  }
  // The weights in RAM where they take at most half of what is available, else streamed from the
  // offload directory (the sample's one prefill forward reads them once).
  EngineOptions eo;
  eo.model = model;
  eo.threads = threads;
  eo.weight_dtype = WeightMode::parse(weight_dtype);
  eo.policy.offload_dir = offload_dir;
  const int64_t avail = available_ram_bytes();
  const bool in_ram = avail <= 0 || unit_bytes <= avail / 2;
  if (!in_ram) {
    eo.policy.weight_gpu_percent = eo.policy.weight_cpu_percent = 0;
    eo.prefill_chunk = 8192;
  }
  progress(fmt::format("expert routing of {} prompts ({}), weights {}", sample.size(),
                       sample.name, in_ram ? "in RAM" : "streamed from disk"));
  const RoutingProfile r = measure_routing(eo, sample);
  std::printf("%s\n", r.summary(static_cast<int64_t>(std::time(nullptr))).c_str());
  hw.put_routing(r);
}

void PlanCommand::add_to(CLI::App* app) {
  cmd_ = app->add_subcommand(
      "plan", "Choose batch sizes, tier shares and overlap for a workload within memory limits");
  cmd_->add_option("--model", model, "Model: a .gguf file, a Hugging Face checkpoint directory, or dummy:PRESET[:FORMAT]")->required();
  add_weight_dtype(cmd_, weight_dtype);
  cmd_->add_option("--threads", threads, "Compute threads (0 = all cores)")->check(CLI::Range(0, 1024));
  cmd_->add_option("--prompt-len", workload.prompt_len, "Prompt tokens")->required()->check(CLI::Range(1, 1 << 20));
  cmd_->add_option("--gen-len", workload.gen_len, "Generated tokens")->required()->check(CLI::Range(2, 1 << 20));
  cmd_->add_option("--num-requests", workload.num_requests,
                   "Requests in the job (0 = unbounded: blocks as large as fit)")
      ->check(non_negative_int());
  cmd_->add_option("--max-batch", max_batch, "Largest block of sequences considered")
      ->check(CLI::Range(1, 1 << 20));
  add_prefill_chunk(cmd_, prefill_chunk);
  cmd_->add_option("--profile", profile, "Hardware profile (default the cache; measured when absent)");
  cmd_->add_option("--json", json, "Write the plan and its predicted figures as JSON");
  policy.add_to(cmd_);
}

int PlanCommand::run() const {
  const Policy base = policy.resolve();
  const WeightMode storage = base.weight_storage(WeightMode::parse(weight_dtype));
  PlanningContext ctx{model,    storage, threads, profile, base.offload_dir,
                      progress, planning_kv_dtypes(base)};
  const PlanningInputs in = planning_inputs(ctx.limits_of(base));
  Workload w = workload;
  if (prefill_chunk > 0) w.prefill_chunk = prefill_chunk;
  PlanOptions o = calibrated_plan_options(w, base);
  o.max_batch = max_batch;
  const PlanResult r = plan_inputs(in, o);
  const Prediction& pr = r.prediction;
  std::printf("# offgen plan for %s: prompt %lld, gen %lld, %s\n", in.facts.key.c_str(),
              static_cast<long long>(workload.prompt_len), static_cast<long long>(workload.gen_len),
              workload.num_requests > 0 ? fmt::format("{} requests", workload.num_requests).c_str()
                                        : "requests unbounded");
  std::printf("# predicted: prefill %.1f tok/s, decode %.1f tok/s, total %.1f tok/s "
              "(blocks of %lld: %.2f s + %.2f s for %s; decode bound by the %s lane)\n",
              pr.prefill_throughput, pr.decode_throughput, pr.total_throughput,
              static_cast<long long>(pr.batch), pr.prefill_seconds, pr.decode_seconds,
              workload.num_requests > 0 ? "the requests" : "one block", pr.bottleneck().c_str());
  std::printf("# memory: device %s, host %s, disk %s (KV %lld slots per sequence, %s)\n",
              format_bytes(pr.need.device).c_str(), format_bytes(pr.need.host).c_str(),
              format_bytes(pr.need.disk).c_str(), static_cast<long long>(pr.kv_slots),
              std::string(dtype_name(in.facts.kv_dtype(r.policy))).c_str());
  if (base.ram_mem() == 0 && r.policy.cpu_mem > 0)
    std::printf("# RAM: planned within %s, 90%% of what is available now (--cpu-mem sets the "
                "limit)\n",
                format_bytes(r.policy.cpu_mem).c_str());
  std::printf("# binding constraint: %s\n# %lld candidate policies evaluated\n", r.binding.c_str(),
              static_cast<long long>(r.evaluated));
  if (r.roofline.known()) std::printf("%s", r.roofline.describe(pr.total_throughput).c_str());
  std::printf("# profile %s\n", in.profile_path.c_str());
  for (const std::string& w : in.warnings) std::printf("# warning: %s\n", w.c_str());
  std::printf("%s", policy_toml(r.policy).c_str());
  if (!json.empty()) {
    const Policy& p = r.policy;
    nlohmann::json j = prediction_json(pr);
    j["model"] = in.facts.key;
    j["batch_size"] = pr.batch;
    j["gpu_batch_size"] = p.gpu_batch_size;
    j["num_gpu_batches"] = p.num_gpu_batches;
    j["percent"] = {p.weight_gpu_percent, p.weight_cpu_percent, p.cache_gpu_percent,
                    p.cache_cpu_percent, p.act_gpu_percent, p.act_cpu_percent};
    j["overlap"] = p.overlap;
    j["kv_policy"] = p.kv.describe();
    j["kv_dtype"] = std::string(dtype_name(in.facts.kv_dtype(p)));
    j["kv_slots_per_seq"] = pr.kv_slots;
    j["need_bytes"] = {{"device", pr.need.device}, {"host", pr.need.host}, {"disk", pr.need.disk}};
    j["binding"] = r.binding;
    j["evaluated"] = r.evaluated;
    j["policy_toml"] = policy_toml(p);
    j["roofline"] = r.roofline.to_json();
    j["profile"] = in.profile_json();
    write_json_atomically(json, j);
  }
  return 0;
}

}  // namespace offgen
