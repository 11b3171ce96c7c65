// Calibration a busy machine cannot poison: the refusal on an injected busy load, rounds with
// their provenance, the re-check's 25% rule, and a profile of this model re-checked against the
// machine it runs on (a profile a hundred times too fast is flagged whatever the machine's load).
#include <catch2/catch.hpp>

#include "eval/calibrate.h"
#include "eval/planning.h"
#include "eval/profile_check.h"
#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/core/memory_info.h"
#include "runtime/loaders/model_loader.h"
#include "tests/temp_dir.h"

using namespace offgen;

TEST_CASE("calibration: a busy machine is refused, a quiet one is not", "[calibrate]") {
  ProfileProvenance p;
  p.measured_at = "2026-12-03T10:00:00Z";
  p.cpus = 2;
  p.loadavg = 2.1;
  p.others_cpu = 0.95;  // two busy loops on two cores
  CHECK_THROWS_WITH(check_quiet(p, "the disk and RAM figures were measured"),
                    Catch::Contains("other processes used 95% of the CPU time while the disk and "
                                    "RAM figures were measured (load average 2.10 on 2 CPUs)") &&
                        Catch::Contains("--allow-busy"));
  try {
    check_quiet(p, "x");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kResource);
  }
  p.others_cpu = 0.05;
  p.loadavg = 0.1;
  CHECK_NOTHROW(check_quiet(p, "x"));
}

TEST_CASE("calibration: rounds keep the best of each point and record provenance",
          "[calibrate][nvme]") {
  test::TempDir dir;
  CalibrateOptions o;
  o.offload_dir = dir.path();
  o.quick = true;
  CHECK(o.round_count() == 2);
  o.rounds = 3;
  const HardwareProfile hw = measure_transfers(o);
  const ProfileProvenance& p = hw.provenance;
  CHECK(p.rounds == 3);
  CHECK(parse_utc_timestamp(p.measured_at) > 0);
  CHECK(p.cpus >= 1);
  CHECK(p.spread >= 0);
  CHECK(p.others_cpu <= 1);
  CHECK(hw.disk_read.x.size() == 2);
  for (double s : hw.disk_read.seconds) CHECK(s > 0);
}

TEST_CASE("re-check: figures off by more than 25% either way are flagged", "[calibrate]") {
  CHECK_FALSE(RecheckPoint{"a", 1.0, 1.2}.differs());
  CHECK_FALSE(RecheckPoint{"a", 1.0, 0.8}.differs());
  CHECK(RecheckPoint{"a", 1.0, 1.3}.differs());  // the profile measured on a faster machine
  CHECK(RecheckPoint{"a", 1.0, 0.7}.differs());  // ... or under load
  ProfileRecheck r;
  r.points = {{"MLP unit at 64 rows", 0.002, 0.001}, {"disk read 1.0 MiB", 0.001, 0.00105}};
  const auto w = r.warnings();
  REQUIRE(w.size() == 1);
  CHECK_THAT(w[0], Catch::Contains("the profile's MLP unit at 64 rows takes 2 ms; it takes 1 ms "
                                   "now (0.50x"));
  CHECK(r.to_json()["points"][0]["differs"] == true);
  // A disk read that differs while much written data awaited write-back says so; little does not.
  r.points = {{"disk read 1.0 MiB", 0.001, 0.002, int64_t{3} << 30},
              {"disk read 1.0 MiB", 0.001, 0.002, int64_t{1} << 20}};
  const auto d = r.warnings();
  REQUIRE(d.size() == 2);
  CHECK_THAT(d[0], Catch::Contains("(3.0 GiB of data written just before was still being written"));
  CHECK_THAT(d[1], !Catch::Contains("written just before"));
  CHECK(r.to_json()["points"][0]["unwritten_bytes"] == int64_t{3} << 30);
}

TEST_CASE("re-check: a profile a hundred times faster than this machine is flagged",
          "[calibrate][nvme]") {
  test::TempDir dir;
  auto backend = make_cpu_backend(1, WeightMode::native_mode());
  OpenedModel opened = open_model("dummy:smollm2-135m:q4_0");
  DecoderModel model(*opened.source, *backend);
  CalibrateOptions o;
  o.offload_dir = dir.path();
  o.quick = true;
  o.rounds = 1;
  HardwareProfile hw = measure_transfers(o);
  ComputeProfile c = measure_compute(model, "native", backend->caps().default_kv_dtype, o);
  // Load only slows a measurement, but it may have slowed these: a hundredth of them stays
  // beyond the tolerance of what this machine does now, loaded or not.
  for (double& s : hw.disk_read.seconds) s /= 100;
  for (double& s : c.mlp.seconds) s /= 100;
  const ProfileRecheck r = recheck_profile(model, &c, &hw, dir.path());
  REQUIRE(r.points.size() == 2);
  for (const RecheckPoint& p : r.points) {
    INFO(p.what << ": profile " << p.profile_seconds << " s, now " << p.now_seconds << " s");
    CHECK(p.differs());
    CHECK(p.ratio() > 1.25);
  }
  CHECK(r.warnings().size() == 2);
  // Only what is asked for is re-checked.
  CHECK(recheck_profile(model, &c, nullptr, dir.path()).points.size() == 1);
}

TEST_CASE("planning: without a RAM limit a plan keeps to the RAM available now", "[plan]") {
  Policy base;
  base.cpu_mem = int64_t{3} << 30;
  CHECK(planning_ram_limit(base) == base.cpu_mem);
  CHECK(calibrated_plan_options(Workload{}, base).base.cpu_mem == base.cpu_mem);
  base.cpu_mem = 0;
  base.gpu_mem = int64_t{1} << 30;  // a RAM limit on the CPU backend too: kept as given
  CHECK(planning_ram_limit(base) == 0);
  base.gpu_mem = 0;
  const int64_t avail = available_ram_bytes();
  if (avail > 0) {
    const int64_t limit = calibrated_plan_options(Workload{}, base).base.cpu_mem;
    CHECK(limit > 0);
    CHECK(limit <= avail);
  }
}

TEST_CASE("planning: a job's workload is its mean request beside its longest", "[plan]") {
  OpenedModel opened = open_model("dummy:smollm2-135m:q4_0");
  const Tokenizer tokenizer(std::move(opened.vocab));
  std::vector<Request> reqs(4);
  const int64_t prompts[] = {10, 20, 30, 1000}, gens[] = {8, 8, 8, 200};
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].prompt_ids.assign(static_cast<size_t>(prompts[i]), 7);
    reqs[i].sampling.max_tokens = gens[i];
  }
  Workload w = job_workload(tokenizer, reqs, 0);
  CHECK(w.num_requests == 4);
  CHECK(w.prompt_len == 265);  // (10 + 20 + 30 + 1000) / 4, rounded up
  CHECK(w.gen_len == 56);
  CHECK(w.longest_prompt() == 1000);
  CHECK(w.longest_gen() == 200);
  CHECK(!w.uniform());
  CHECK(w.longest().prompt_len == 1000);
  CHECK(w.longest().gen_len == 200);
  CHECK(w.prompt_sq_mean == Approx((100.0 + 400 + 900 + 1e6) / 4));
  CHECK(w.prefill_pair_scale() > 3);  // one long prompt: most of the pairs
  // max_tokens past the context window are cut where the engine cuts them, request by request.
  w = job_workload(tokenizer, reqs, 1100);
  CHECK(w.longest_gen() == 100);
  CHECK(w.gen_len == (8 + 8 + 8 + 100 + 3) / 4);
  // One length for all: the workload is uniform.
  for (Request& r : reqs) r.prompt_ids.assign(16, 7), r.sampling.max_tokens = 4;
  w = job_workload(tokenizer, reqs, 0);
  CHECK(w.uniform());
  CHECK(w.prefill_pair_scale() == 1);
  CHECK(w.prompt_len == 16);
  CHECK(w.gen_len == 4);
}
