// The `offgen` executable: argument parsing over the scheduler's Engine and job runner.
#include <CLI/CLI.hpp>

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "cli/convert_command.h"
#include "cli/eval_command.h"
#include "cli/flag_checks.h"
#include "cli/inspect_command.h"
#include "cli/multiquery_command.h"
#include "cli/plan_command.h"
#include "cli/policy_flags.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/stop.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/model_loader.h"
#include "eval/bench_runner.h"
#include "scheduler/engine.h"
#include "jobs/job_report.h"
#include "jobs/job_runner.h"
#include "eval/shared_bench.h"

namespace {

using namespace offgen;

struct CommonFlags {
  std::string model;
  int threads = 0;
  std::string weight_dtype_text = "native";  // GGML blocks as the file holds them
  std::string backend_text{backend_name(BackendKind::kCpu)};
  int64_t prefill_chunk = 0;  // 0 = the backend's default (generate and bench only)
  // Parsed by resolve() after the command line.
  BackendKind backend = BackendKind::kCpu;
  WeightMode weight_dtype = WeightMode::native_mode();
  void resolve() {
    backend = parse_backend_kind(backend_text);
    weight_dtype = WeightMode::parse(weight_dtype_text);
  }
};

void add_common(CLI::App* app, CommonFlags& f) {
  app->add_option("--model", f.model, "Model: a .gguf file, a Hugging Face checkpoint directory, or dummy:PRESET[:FORMAT]")->required();
  app->add_option("--threads", f.threads, "Compute threads (0 = all cores)")->check(CLI::Range(0, 1024));
  app->add_option("--backend", f.backend_text, "Compute backend: cpu (default) or cuda (GPU 0)")
      ->check(CLI::IsMember(backend_flag_names()));
  add_weight_dtype(app, f.weight_dtype_text);
}

// The engine options every engine-running command shares.
EngineOptions engine_options(const CommonFlags& f, const Policy& policy, int64_t max_context) {
  EngineOptions eo;
  eo.model = f.model;
  eo.threads = f.threads;
  eo.backend = f.backend;
  eo.weight_dtype = f.weight_dtype;
  eo.policy = policy;
  eo.prefill_chunk = f.prefill_chunk;
  eo.max_context = max_context;
  eo.expert_routing = measured_routing(f.model);
  return eo;
}

// The planner's workload forwards as the engine will run them.
void set_workload_chunk(const CommonFlags& f, Workload& w) {
  if (f.prefill_chunk > 0) w.prefill_chunk = f.prefill_chunk;
}

void add_sampling(CLI::App* app, SamplingParams& s) {
  app->add_option("--max-tokens", s.max_tokens, "Max tokens to generate per request")
      ->check(non_negative_int());
  app->add_option("--temperature", s.temperature, "Sampling temperature (0 = greedy)")
      ->check(number_in(0.0, 100.0));
  app->add_option("--top-p", s.top_p, "Nucleus sampling mass (0, 1]")->check(number_in(0.0, 1.0, true));
  app->add_option("--top-k", s.top_k, "Keep the k most likely tokens (0 = all)")
      ->check(non_negative_int());
  app->add_option("--seed", s.seed, "Sampling seed (mixed with each request's id unless the request sets one)")
      ->check(non_negative_int(std::numeric_limits<uint64_t>::max()));
  app->add_option("--stop", s.stop, "Stop string (repeatable; non-empty UTF-8)")->check(utf8_text());
}

// The planner's hardware profile is the CPU backend's (offgen calibrate).
void check_auto_backend(const CommonFlags& f, const PolicyFlags& pf) {
  OFFGEN_CHECK(!pf.auto_policy() || backend_caps(f.backend).calibrated_profile, kConfig,
               "--policy auto plans with the CPU backend's calibrated profile; on "
               "--backend {} give the placement (--percent, --gpu-batch-size, ...) yourself",
               backend_name(f.backend));
}

// SIGINT / SIGTERM during `generate`: the first one asks the job to stop in whatever phase it is
// (records written so far are kept, the report says "interrupted" and in which phase), a second
// one ends the process at once. The handler only sets the stop source; the work checks it.
StopSource g_stop;
extern "C" void on_stop_signal(int sig) { g_stop.request(sig); }

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  // The next one gets the default action. No SA_RESTART: a read of a pipe whose writer waits
  // returns EINTR, and the reader notices the stop.
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // Test hook: OFFGEN_DEBUG_PAUSE=PHASE[:N] pauses at the Nth (default 1st) checkpoint of PHASE
  // until a signal arrives (StopSource::pause_at), so tests signal a phase in progress.
  if (const char* p = std::getenv("OFFGEN_DEBUG_PAUSE"); p && *p) {
    const std::string spec(p);
    const size_t colon = spec.find(':');
    int64_t nth = 1;
    if (colon != std::string::npos) {
      const std::string n = spec.substr(colon + 1);
      const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), nth);
      OFFGEN_CHECK(ec == std::errc() && end == n.data() + n.size() && nth > 0, kConfig,
                   "OFFGEN_DEBUG_PAUSE={}: expected PHASE or PHASE:N with N >= 1", spec);
    }
    g_stop.pause_at(spec.substr(0, colon), nth);
  }
}

// `generate --policy auto`: plans a block of the job's typical (mean) request, in which its
// longest fits alone (eval/planning.h: job_workload), over its valid requests. `report` gets the
// plan's figures (prediction, roofline, the profile's provenance) for --report.
Policy plan_for_job(const CommonFlags& f, const std::vector<JobLine>& lines, const Policy& base,
                    int64_t max_context, const StopToken& stop, nlohmann::json& report) {
  std::vector<Request> requests;
  for (const JobLine& l : lines)
    if (l.request) requests.push_back(*l.request);
  Workload w = [&] {  // the tokenizer goes before the planning inputs are measured
    OpenedModel opened = open_model(f.model, stop);
    const Tokenizer tokenizer(std::move(opened.vocab));
    return job_workload(tokenizer, requests, max_context, stop);
  }();
  if (w.num_requests == 0) return unplanned_policy(base);
  set_workload_chunk(f, w);
  PlanningContext ctx{f.model, base.weight_storage(f.weight_dtype), f.threads, "",
                      base.offload_dir,
                      [&](const std::string& what) {
                        calibration_progress(what);
                        stop.check("plan");  // between calibration steps
                      },
                      planning_kv_dtypes(base)};
  const PlanningInputs in = planning_inputs(ctx.limits_of(base));
  const PlanResult r = auto_plan(in, w, base, stop);
  report = prediction_json(r.prediction);
  report["policy_toml"] = policy_toml(r.policy);
  report["binding"] = r.binding;
  report["roofline"] = r.roofline.to_json();
  report["profile"] = in.profile_json();
  return r.policy;
}

// A failure as the command reports it: one line, the exit status (2: the configuration; 1: the
// rest) and the error's category ("" when it is not an offgen::Error).
struct Failure {
  std::string message;
  std::string category;
  int exit_code = 1;
};

Failure describe_failure(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return {e.what(), error_category_name(e.category()),
            e.category() == ErrorCategory::kConfig ? 2 : 1};
  } catch (const std::bad_alloc&) {
    return {"out of memory (lower the batch size or max_tokens, or set --cpu-mem)", "", 1};
  } catch (const std::exception& e) {
    return {e.what(), "", 1};
  } catch (...) {
  }
  return {"unknown error", "", 1};
}

// Ends a job interrupted by a stop request: one line on stderr; the status is 128 + the signal.
int interrupted_exit(const JobSummary& s, int sig) {
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  if (s.output_opened)
    std::fprintf(stderr,
                 "offgen: interrupted by %s (in %s): %lld of %lld records written, %lld "
                 "unfinished; run the same command again to resume\n",
                 name, s.stopped_in.c_str(), static_cast<long long>(s.lines - s.unfinished),
                 static_cast<long long>(s.lines), static_cast<long long>(s.unfinished));
  else
    std::fprintf(stderr,
                 "offgen: interrupted by %s (in %s): no record written by this run; run the same "
                 "command again to resume\n",
                 name, s.stopped_in.c_str());
  return 128 + (sig == SIGINT ? SIGINT : SIGTERM);
}

int cmd_generate(const CommonFlags& f, GenerateJobOptions& job, const PolicyFlags& pf,
                 int64_t max_context, bool quiet) {
  const auto start = std::chrono::steady_clock::now();
  auto since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  install_stop_handlers();
  check_job_files(job, f.model);  // refusals before the job: no report
  // From here on the job exists: every way out writes its report.
  const StopToken stop = g_stop.token();
  JobSummary s;
  JobEnd end;
  end.model = f.model;
  end.backend = backend_name(f.backend);
  std::unique_ptr<Engine> engine;
  const char* phase = "input";
  try {
    const JobInput input = load_job_input(job, stop);  // once: the input may be a pipe
    s.input_read = true;
    s.lines = static_cast<int64_t>(input.lines.size());
    phase = "plan";
    Policy policy = pf.resolve();
    OFFGEN_CHECK(job.context_file.empty() || policy.kv.info().compresses_context(), kConfig,
                 "--context: --kv-policy {} cannot compress a shared context; use one of: {}",
                 policy.kv.name(), fmt::join(context_policy_names(), ", "));
    check_auto_backend(f, pf);
    if (pf.auto_policy()) policy = plan_for_job(f, input.lines, policy, max_context, stop, end.plan);
    phase = "load";
    engine = std::make_unique<Engine>(engine_options(f, policy, max_context), stop);
    end.load_seconds = since_start();
    job.progress = !quiet;
    run_generate_job(*engine, job, input, s, stop);
  } catch (const Stopped& e) {  // before the records (run_generate_job returns on a stop)
    s.interrupted = true;
    s.stopped_in = e.phase();
    if (!engine) end.load_seconds = since_start();  // up to the stop
  } catch (...) {
    const Failure failure = describe_failure(std::current_exception());
    if (s.stopped_in.empty()) s.stopped_in = phase;
    if (!engine) end.load_seconds = since_start();
    end.error = failure.message;
    end.error_category = failure.category;
    end.exit_code = failure.exit_code;
    end.wall_seconds = since_start();
    write_job_report(engine.get(), job, s, end);
    throw;
  }
  const int sig = g_stop.reason();
  end.signal = sig;
  end.exit_code = s.interrupted ? 128 + (sig == SIGINT ? SIGINT : SIGTERM) : s.failed > 0 ? 3 : 0;
  end.wall_seconds = since_start();
  write_job_report(engine.get(), job, s, end);
  if (s.interrupted) return interrupted_exit(s, sig);
  const auto& st = s.stats;
  std::fprintf(stderr,
               "offgen: done: %lld requests (%lld resumed from an earlier run), %lld failed; prefill %lld tokens in %.2fs (%.1f tok/s), "
               "decode %lld tokens in %.2fs (%.1f tok/s); generate %.2fs, wall %.2fs (load %.2fs); output %s\n",
               static_cast<long long>(s.lines), static_cast<long long>(s.resumed),
               static_cast<long long>(s.failed),
               static_cast<long long>(st.prefill_tokens), st.prefill_seconds,
               st.prefill_seconds > 0 ? st.prefill_tokens / st.prefill_seconds : 0.0,
               static_cast<long long>(st.decode_tokens), st.decode_seconds,
               st.decode_seconds > 0 ? st.decode_tokens / st.decode_seconds : 0.0, st.wall_seconds,
               since_start(), end.load_seconds, job.output.c_str());
  return end.exit_code;
}

int cmd_bench(const CommonFlags& f, const PolicyFlags& pf, const BenchOptions& bo,
              const std::string& json_path, bool predict_flag) {
  // One run per KV variant (--kv-policy full,h2o ...), in one process so ratios share conditions.
  check_auto_backend(f, pf);
  OFFGEN_CHECK(!predict_flag || backend_caps(f.backend).calibrated_profile, kConfig,
               "--predict uses the CPU backend's calibrated profile (not --backend {})",
               backend_name(f.backend));
  nlohmann::json runs = nlohmann::json::array();
  const std::vector<Policy> variants = pf.resolve_variants();
  Workload w;
  w.prompt_len = bo.prompt_len;
  w.gen_len = bo.gen_len;
  w.num_requests = bo.batch_size;
  set_workload_chunk(f, w);
  // The planner's inputs (model layout, hardware profile), loaded once for every variant.
  std::optional<PlanningInputs> in;
  if (pf.auto_policy() || predict_flag)
    in = planning_inputs(PlanningContext{f.model, variants.front().weight_storage(f.weight_dtype),
                                         f.threads, "", variants.front().offload_dir,
                                         calibration_progress,
                                         planning_kv_dtypes(variants.front())}
                             .limits_of(variants.front()));
  for (Policy p : variants) {
    if (pf.auto_policy()) p = auto_plan(*in, w, p).policy;
    const auto load_start = std::chrono::steady_clock::now();
    Engine engine(engine_options(f, p, bo.prompt_len + bo.gen_len));
    const std::chrono::duration<double> load = std::chrono::steady_clock::now() - load_start;
    BenchReport r = run_bench(engine, bo);
    r.load_seconds = load.count();
    std::printf("%s\n", r.summary().c_str());
    nlohmann::json j = r.to_json();
    if (in) {
      // The cost model's figures for what ran: these prompts, admitted as the engine admits them.
      Workload ran = w;
      ran.num_requests = r.batch_size;
      const Prediction pr = predict_workload(in->facts, in->compute_for(p), in->hw, p, ran,
                                             std::min(r.batch_size, engine.max_active()));
      j.update(prediction_json(pr));
      j["policy_source"] = pf.auto_policy() ? "auto" : "given";
      j["policy_toml"] = policy_toml(p);
      const Roofline rl = roofline(in->facts, in->compute_for(p), in->hw, p, ran,
                                   std::min(r.batch_size, engine.max_active()));
      j["roofline"] = rl.to_json();
      j["bound_fraction"] = rl.known() ? r.total_throughput / rl.bound_total_throughput : 0.0;
      j["profile"] = in->profile_json();
      std::printf("  predicted: prefill %.1f, decode %.1f, total %.1f tok/s (measured/predicted "
                  "total %.2f)\n",
                  pr.prefill_throughput, pr.decode_throughput, pr.total_throughput,
                  r.total_throughput / pr.total_throughput);
      std::printf("  bound: %.3g tok/s total, %s binds; measured %.0f%% of it\n",
                  rl.bound_total_throughput, rl.binding.c_str(),
                  100 * r.total_throughput / rl.bound_total_throughput);
    }
    std::fflush(stdout);
    runs.push_back(std::move(j));
  }
  if (variants.size() > 1) {
    std::printf("\n%-16s %8s %14s %12s %12s\n", "kv policy", "batch", "KV/sequence", "decode tok/s",
                "total tok/s");
    for (const auto& r : runs)
      std::printf("%-16s %8lld %14s %12.1f %12.1f\n", r["kv_policy"].get<std::string>().c_str(),
                  static_cast<long long>(r["batch_size"].get<int64_t>()),
                  format_bytes(r["kv_bytes_per_seq"].get<int64_t>()).c_str(),
                  r["decode_throughput"].get<double>(), r["total_throughput"].get<double>());
  }
  // One variant: the report object; several: a list of them.
  if (!json_path.empty()) write_json_atomically(json_path, variants.size() > 1 ? runs : runs[0]);
  return 0;
}

int cmd_shared_bench(const CommonFlags& f, const PolicyFlags& pf, const BenchOptions& bo,
                     int64_t context_len, bool separate, const std::string& json_path) {
  // Placement from the flags; batch sizes and the KV policy are the bench's.
  const EngineOptions eo = engine_options(f, pf.resolve(), 0);
  SharedBenchOptions o;
  o.context_len = context_len;
  o.question_len = bo.prompt_len;
  o.gen_len = bo.gen_len;
  o.questions = bo.batch_size > 0 ? bo.batch_size : 64;
  if (!pf.kv_policy_text().empty()) {
    const KvPolicyInfo* p = find_kv_policy(pf.kv_policy_text());
    OFFGEN_CHECK(
        p != nullptr && p->compresses_context(), kConfig,
        "bench --shared-context: --kv-policy {} cannot compress a context (use one of: {})",
        pf.kv_policy_text(), fmt::join(context_policy_names(), ", "));
    o.policy = p->kind;
  } else {
    o.policy = KvPolicyKind::kFull;
  }
  o.ratio = pf.kv_budget_text().empty() ? 1.0
                                        : parse_number_list(pf.kv_budget_text(), "--kv-budget")[0];
  o.separate = separate;
  o.seed = bo.seed;
  const SharedBenchReport r = run_shared_bench(eo, o);
  std::printf("%s\n", r.summary().c_str());
  if (!json_path.empty()) write_json_atomically(json_path, r.to_json());
  return 0;
}

int cmd_inspect(const CommonFlags& f, const std::string& kv_dtype) {
  return run_inspect(f.model, f.threads, f.weight_dtype_text, f.backend, kv_dtype);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"offgen: offline high-throughput LLM batch generation"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "offgen 0.1.0");

  CommonFlags gen_common, ins_common;
  GenerateJobOptions job;
  PolicyFlags gen_policy;
  int64_t max_context = 0;
  bool quiet = false;
  auto* gen = app.add_subcommand("generate", "Complete every request of a JSONL file");
  add_common(gen, gen_common);
  add_prefill_chunk(gen, gen_common.prefill_chunk);
  gen->add_option("--input", job.input,
                  "Input JSONL (one request per line): a file, a named pipe, or - for standard input")
      ->required();
  gen->add_option("--output", job.output, "Output JSONL (one record per request)")->required();
  gen_policy.add_to(gen);
  gen->add_option("--max-context", max_context,
                  "Cap the context window (prompt + completion tokens; 0 = the model's)")
      ->check(non_negative_int());
  gen->add_flag("--chat", job.chat, "Apply the model's chat template to plain prompts");
  gen->add_option("--context", job.context_file,
                  "A shared context (text file) for every request without a \"context\" field: "
                  "prefilled once, compressed once by --kv-policy/--kv-budget, read by all");
  gen->add_flag("--quiet,-q", quiet, "No progress output");
  gen->add_flag("--overwrite", job.overwrite,
                "Start afresh when the output exists (default: resume it, skipping written ids)");
  std::string fsync_text(fsync_policy_name(job.fsync));
  std::vector<std::string> fsync_names;
  for (FsyncPolicy p : kFsyncPolicies) fsync_names.emplace_back(fsync_policy_name(p));
  gen->add_option("--fsync", fsync_text,
                  fmt::format("Durability of output records: {}", fmt::join(fsync_names, ", ")))
      ->check(CLI::IsMember(fsync_names));
  add_sampling(gen, job.defaults);
  gen->add_option("--report", job.report,
                  "Write a JSON report (times, throughput, memory, I/O, request and error counts)");

  CommonFlags bench_common;
  PolicyFlags bench_policy;
  BenchOptions bench_opts;
  std::string bench_json;
  auto* bench = app.add_subcommand("bench", "FlexGen's throughput workload: random prompts, fixed lengths");
  add_common(bench, bench_common);
  add_prefill_chunk(bench, bench_common.prefill_chunk);
  bench_policy.add_to(bench);
  bench->add_option("--prompt-len", bench_opts.prompt_len, "Prompt tokens (default 512)")
      ->check(CLI::Range(1, 1 << 20));
  bench->add_option("--gen-len", bench_opts.gen_len, "Generated tokens (default 32)")
      ->check(CLI::Range(2, 1 << 20));
  bench->add_option("--num-prompts", bench_opts.batch_size,
                    "Prompts (default: gpu batch size x num gpu batches); more than a block "
                    "run block by block")
      ->check(CLI::Range(1, 1 << 24));
  bench->add_flag("!--no-warmup", bench_opts.warmup, "Skip the untimed warm-up run");
  bench->add_option("--json", bench_json, "Write the report as JSON");
  int64_t shared_context = 0;
  bool shared_no_separate = false;
  bench->add_option("--shared-context", shared_context,
                    "Shared-context mode: --num-prompts questions of --prompt-len tokens over one "
                    "context of N tokens, prefilled and compressed once (--kv-policy kvzip "
                    "--kv-budget R, or full), against the same prompts prefilled separately")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  bench->add_flag("--no-separate", shared_no_separate,
                  "With --shared-context: skip the separate-prefill baseline");
  bool bench_predict = false;
  bench->add_flag("--predict", bench_predict,
                  "Add the cost model's predicted figures for the policy that ran (hardware profile "
                  "from the cache; measured first when absent)");
  CalibrateCommand calibrate;
  calibrate.add_to(&app);
  PlanCommand plan_cmd;
  plan_cmd.add_to(&app);
  ConvertCommand convert_cmd;
  convert_cmd.add_to(&app);

  auto* eval = app.add_subcommand("eval", "Quality of KV policies");
  eval->require_subcommand(1);
  EvalPplCommand eval_ppl;
  eval_ppl.add_to(eval);
  EvalMultiqueryCommand eval_mq;
  eval_mq.add_to(eval);

  auto* ins = app.add_subcommand("inspect", "Print a model's config, tensor table and memory footprint");
  add_common(ins, ins_common);
  std::string ins_kv_dtype;
  add_kv_dtype(ins, ins_kv_dtype, false);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "offgen: error: %s (--help lists the flags)\n", e.what());
    return 2;
  }
  try {
    for (CommonFlags* f : {&gen_common, &ins_common, &bench_common}) f->resolve();
    job.fsync = parse_fsync_policy(fsync_text);
    if (gen->get_option("--temperature")->count() > 0)
      job.openai_temperature = job.defaults.temperature;
    if (gen->parsed()) return cmd_generate(gen_common, job, gen_policy, max_context, quiet);
    if (ins->parsed()) return cmd_inspect(ins_common, ins_kv_dtype);
    if (bench->parsed() && shared_context > 0)
      return cmd_shared_bench(bench_common, bench_policy, bench_opts, shared_context,
                              !shared_no_separate, bench_json);
    if (bench->parsed()) return cmd_bench(bench_common, bench_policy, bench_opts, bench_json, bench_predict);
    if (calibrate.parsed()) return calibrate.run();
    if (plan_cmd.parsed()) return plan_cmd.run();
    if (convert_cmd.parsed()) return convert_cmd.run();
    if (eval_ppl.parsed()) return eval_ppl.run();
    if (eval_mq.parsed()) return eval_mq.run();
  } catch (...) {
    const Failure failure = describe_failure(std::current_exception());
    std::fprintf(stderr, "offgen: error: %s\n", failure.message.c_str());
    return failure.exit_code;
  }
  return 0;
}
