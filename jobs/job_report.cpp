// Job report: assembled from GenerationStats, JobSummary and the stores' statistics.
#include "jobs/job_report.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/memory_info.h"

namespace offgen {
namespace {

// The process's memory beside what the placement holds (docs/offloading.md, "What the caps
// count"): anonymous memory at its sampled peak, as the process started (the libraries) and
// now, and the file pages resident now (code, libraries, model pages not yet released).
nlohmann::json memory_report() {
  const RssBytes now = rss_bytes();
  return {{"peak_anon_bytes", sample_anon_peak()},
          {"startup_anon_bytes", startup_anon_bytes()},
          {"anon_bytes", now.anon},
          {"file_bytes", now.file}};
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "stop request";
  }
}

}  // namespace

nlohmann::json job_report(const Engine* engine, const GenerateJobOptions& job,
                          const JobSummary& summary, const JobEnd& end) {
  using json = nlohmann::json;
  const GenerationStats& s = summary.stats;
  auto rate = [](double tokens, double seconds) { return seconds > 0 ? tokens / seconds : 0.0; };
  auto known = [](bool is, int64_t v) { return is ? json(v) : json(nullptr); };
  const bool counted = summary.output_opened;
  json r{
      {"model", engine ? engine->options().model : end.model},
      {"backend", engine ? std::string(engine->backend().name()) : end.backend},
      {"kv_dtype", engine ? json(std::string(dtype_name(engine->kv_dtype()))) : json(nullptr)},
      {"input", job.input},
      {"output", job.output},
      {"requests",
       {{"total", known(summary.input_read, summary.lines)},
        {"succeeded", known(counted, summary.succeeded)},
        {"failed", known(counted, summary.failed)},
        {"resumed", known(counted, summary.resumed)},
        {"this_run", known(counted, summary.lines - summary.resumed - summary.unfinished)},
        {"unfinished", known(counted, summary.unfinished)},
        {"max_tokens_clamped", s.max_tokens_clamped}}},
      {"interrupted", summary.interrupted},
      {"interrupted_by", summary.interrupted ? json(signal_name(end.signal)) : json(nullptr)},
      {"interrupted_in", summary.interrupted ? json(summary.stopped_in) : json(nullptr)},
      {"error", end.error.empty() ? json(nullptr)
                                  : json{{"message", end.error},
                                         {"category", end.error_category},
                                         {"phase", summary.stopped_in}}},
      {"exit_code", end.exit_code},
      {"errors", {{"by_kind", summary.errors.by_kind}, {"by_field", summary.errors.by_field}}},
      {"tokens",
       {{"prefill", s.prefill_tokens},
        {"decode", s.decode_tokens},
        {"completion", s.completion_tokens}}},
      {"load_seconds", end.load_seconds},
      {"prefill_seconds", s.prefill_seconds},
      {"decode_seconds", s.decode_seconds},
      {"generate_seconds", s.wall_seconds},
      {"wall_seconds", end.wall_seconds},
      {"prefill_throughput", rate(s.prefill_tokens, s.prefill_seconds)},
      {"decode_throughput", rate(s.decode_tokens, s.decode_seconds)},
      {"total_throughput", rate(s.completion_tokens, s.prefill_seconds + s.decode_seconds)},
      {"batch_size", s.peak_active},
      {"peak_kv_tokens_per_seq", s.peak_kv_tokens},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"memory", memory_report()},
      {"io_bytes",
       {{"disk_read", s.io.bytes_read},
        {"disk_write", s.io.bytes_written},
        {"h2d", s.h2d_bytes},
        {"d2h", s.d2h_bytes}}},
      {"lane_busy_seconds",
       {{"load", s.lanes.load}, {"compute", s.lanes.compute}, {"store", s.lanes.store}}},
      {"overlap_efficiency",
       s.lanes.wall > 0 ? std::max({s.lanes.load, s.lanes.compute, s.lanes.store}) / s.lanes.wall
                        : 0.0},
  };
  json contexts = {{"built", s.contexts},
                   {"tokens", s.context_tokens},
                   {"seconds", s.context_seconds},
                   {"kv_policy", nullptr},
                   {"retained", s.context_retained()},
                   {"peak_bytes", s.context_peak_bytes}};
  json plan = end.plan;
  if (!plan.is_null()) {  // the achieved fraction of the plan's bound (0: no bound)
    const double bound = plan["roofline"].value("bound_total_throughput", 0.0);
    plan["bound_fraction"] = bound > 0 ? r["total_throughput"].get<double>() / bound : 0.0;
  }
  r["plan"] = plan;
  if (!engine) {  // ended before the model was loaded: no stores to read
    r["shared_contexts"] = contexts;
    for (const char* k : {"peak_bytes", "weight_bytes", "kv_peak_bytes", "disk_io"}) r[k] = nullptr;
    return r;
  }
  contexts["kv_policy"] = engine->options().policy.kv.describe();
  r["shared_contexts"] = contexts;
  // Memory as `offgen bench` reports it. CPU backend: the device tier is host RAM, so every
  // resident byte is host; the disk tier holds offloaded weight and KV extents.
  const EngineStats stats = engine->stats();
  const EngineStats::Weights& ws = stats.weights;
  const EngineStats::Kv& ks = stats.kv;
  const TierBytes peak = engine->peak_bytes();
  const bool gpu = !engine->backend().device_is_host();
  const int64_t weights_device = gpu ? engine->weight_bytes() - ws.disk_bytes - ws.ram_bytes : 0;
  const int64_t weights_host = engine->weight_bytes() - ws.disk_bytes - weights_device;
  json disk = nullptr;
  if (stats.disk.used) {
    const IoStats& io = stats.disk.io;
    disk = {{"path", stats.disk.path},
            {"bytes_read", io.bytes_read},
            {"bytes_written", io.bytes_written},
            {"retries", io.retries},
            {"short_transfers", io.short_transfers},
            {"errors", io.errors}};
  }
  r["peak_bytes"] = {{"device", peak.device}, {"host", peak.host}, {"disk", peak.disk}};
  r["weight_bytes"] = {{"device", weights_device}, {"host", weights_host}, {"disk", ws.disk_bytes}};
  r["kv_peak_bytes"] = {{"device", gpu ? ks.peak_tiers.device : 0},
                        {"host", gpu ? ks.peak_tiers.host : ks.peak_ram_bytes},
                        {"disk", ks.peak_disk_bytes}};
  r["disk_io"] = disk;
  return r;
}

void write_job_report(const Engine* engine, const GenerateJobOptions& job,
                      const JobSummary& summary, const JobEnd& end) {
  if (job.report.empty()) return;
  if (end.error.empty()) {
    write_json_atomically(job.report, job_report(engine, job, summary, end));
    return;
  }
  try {
    write_json_atomically(job.report, job_report(engine, job, summary, end));
  } catch (const std::exception& e) {
    log_warn("--report {}: not written: {}", job.report, e.what());
  }
}

}  // namespace offgen
