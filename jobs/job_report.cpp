// Job report: assembled from GenerationStats, JobSummary and the stores' statistics.
#include "jobs/job_report.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/core/memory_info.h"

namespace offgen {

nlohmann::json job_report(const Engine& engine, const GenerateJobOptions& job,
                          const JobSummary& summary, double load_seconds, double wall_seconds) {
  using json = nlohmann::json;
  const GenerationStats& s = summary.stats;
  auto rate = [](double tokens, double seconds) { return seconds > 0 ? tokens / seconds : 0.0; };
  // Memory as `offgen bench` reports it. CPU backend: the device tier is host RAM, so every
  // resident byte is host; the disk tier holds offloaded weight and KV extents.
  const EngineStats stats = engine.stats();
  const EngineStats::Weights& ws = stats.weights;
  const EngineStats::Kv& ks = stats.kv;
  const TierBytes peak = engine.peak_bytes();
  const bool gpu = !engine.backend().device_is_host();
  const int64_t weights_device = gpu ? engine.weight_bytes() - ws.disk_bytes - ws.ram_bytes : 0;
  const int64_t weights_host = engine.weight_bytes() - ws.disk_bytes - weights_device;
  const double busiest = std::max({s.lanes.load, s.lanes.compute, s.lanes.store});
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
  return json{
      {"model", engine.options().model},
      {"backend", engine.backend().name()},
      {"input", job.input},
      {"output", job.output},
      {"requests",
       {{"total", summary.lines},
        {"succeeded", summary.succeeded},
        {"failed", summary.failed},
        {"resumed", summary.resumed},
        {"this_run", summary.lines - summary.resumed - summary.unfinished},
        {"unfinished", summary.unfinished},
        {"max_tokens_clamped", s.max_tokens_clamped}}},
      {"interrupted", summary.interrupted},
      {"errors", {{"by_kind", summary.errors.by_kind}, {"by_field", summary.errors.by_field}}},
      {"tokens",
       {{"prefill", s.prefill_tokens},
        {"decode", s.decode_tokens},
        {"completion", s.completion_tokens}}},
      {"load_seconds", load_seconds},
      {"prefill_seconds", s.prefill_seconds},
      {"decode_seconds", s.decode_seconds},
      {"generate_seconds", s.wall_seconds},
      {"wall_seconds", wall_seconds},
      {"prefill_throughput", rate(s.prefill_tokens, s.prefill_seconds)},
      {"decode_throughput", rate(s.decode_tokens, s.decode_seconds)},
      {"total_throughput", rate(s.completion_tokens, s.prefill_seconds + s.decode_seconds)},
      {"batch_size", s.peak_active},
      {"shared_contexts",
       {{"built", s.contexts},
        {"tokens", s.context_tokens},
        {"seconds", s.context_seconds},
        {"kv_policy", engine.options().policy.kv.describe()},
        {"retained", s.context_retained()},
        {"peak_bytes", s.context_peak_bytes}}},
      {"peak_bytes", {{"device", peak.device}, {"host", peak.host}, {"disk", peak.disk}}},
      {"peak_rss_bytes", peak_rss_bytes()},
      {"weight_bytes",
       {{"device", weights_device}, {"host", weights_host}, {"disk", ws.disk_bytes}}},
      {"kv_peak_bytes",
       {{"device", gpu ? ks.peak_tiers.device : 0},
        {"host", gpu ? ks.peak_tiers.host : ks.peak_ram_bytes},
        {"disk", ks.peak_disk_bytes}}},
      {"io_bytes",
       {{"disk_read", s.io.bytes_read},
        {"disk_write", s.io.bytes_written},
        {"h2d", s.h2d_bytes},
        {"d2h", s.d2h_bytes}}},
      {"disk_io", disk},
      {"lane_busy_seconds",
       {{"load", s.lanes.load}, {"compute", s.lanes.compute}, {"store", s.lanes.store}}},
      {"overlap_efficiency", s.lanes.wall > 0 ? busiest / s.lanes.wall : 0.0},
  };
}

}  // namespace offgen
