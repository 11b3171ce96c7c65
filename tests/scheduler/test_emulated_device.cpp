// The host-side paths of a GPU backend, checked on the CPU: the emulated-device backend keeps
// device memory apart from host memory and runs the load lane's copies on a worker stream, so
// weights staged through device slots (from device, pinned-host and disk homes, through bounce
// buffers), event ordering between the load and compute streams, device-resident and host
// (cpu_cache_compute) KV homes, device logits copied back and greedy sampling on the device all
// run as on a GPU — and must give bitwise the logits and tokens of the plain CPU backend.
#include <catch2/catch.hpp>

#include <cstring>
#include <filesystem>
#include <map>

#include "runtime/core/error.h"
#include "scheduler/engine.h"
#include "tests/engine_run.h"
#include "tests/temp_dir.h"

using namespace offgen;
using offgen::test::EngineRun;
using offgen::test::require_same_run;
using offgen::test::run_engine;

namespace {

std::vector<Request> requests() {
  std::vector<Request> reqs;
  for (const char* prompt : {"Hello, the other day", "42 + 17 =", "ok", "haha 中中 😀!!",
                             "The quick brown fox jumps over"}) {
    Request r;
    r.id = std::to_string(reqs.size());
    r.prompt = prompt;
    r.sampling.max_tokens = 3 + static_cast<int64_t>(reqs.size());
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

EngineRun run(const std::string& model, const std::string& backend, const Policy& p,
              const std::vector<Request>& reqs, bool record_logits = true) {
  const test::TempDir dir;
  EngineOptions eo;
  eo.model = model;
  eo.backend = parse_backend_kind(backend);
  eo.threads = 2;
  eo.policy = p;
  eo.policy.offload_dir = dir.path();
  return run_engine(eo, reqs, record_logits);
}

Policy placement(double wg, double wc, double cg, double cc, bool overlap, int gbs, int ngb) {
  Policy p;
  p.weight_gpu_percent = wg, p.weight_cpu_percent = wc;
  p.cache_gpu_percent = cg, p.cache_cpu_percent = cc;
  p.cpu_cache_compute = cc >= 100;
  p.overlap = overlap;
  p.gpu_batch_size = gbs;
  p.num_gpu_batches = ngb;
  p.fix_batch();
  return p;
}

}  // namespace

TEST_CASE("emulated device: every weight placement, overlap and split is the CPU backend bitwise",
          "[emulated]") {
  for (const char* name : {"llama", "opt", "qwen2", "gemma3", "qwen2_moe"}) {
    const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/" + name;
    INFO("model " << name);
    for (const char* kv : {"full", "h2o"}) {
      INFO("kv policy " << kv);
      Policy ref_p = placement(100, 0, 100, 0, false, 2, 2);
      ref_p.kv.kind = parse_kv_policy(kv);
      ref_p.kv.budget = 0.6;
      const EngineRun ref = run(model, "cpu", ref_p, requests());
      struct Case {
        double wg, wc, cg, cc;
        bool overlap;
        int gbs, ngb;
      };
      const Case cases[] = {
          {100, 0, 100, 0, true, 2, 2},   // all on the device
          {0, 100, 100, 0, true, 2, 2},   // weights streamed from pinned host memory
          {50, 50, 100, 0, false, 2, 2},  // half and half, sequential lanes
          {30, 30, 100, 0, true, 4, 1},   // device + host + disk (bounce buffers)
          {0, 0, 100, 0, true, 1, 3},     // weights wholly on disk
          {40, 60, 0, 100, true, 2, 2},   // KV in host memory, attention on the CPU
      };
      for (const Case& c : cases) {
        Policy p = placement(c.wg, c.wc, c.cg, c.cc, c.overlap, c.gbs, c.ngb);
        p.kv = ref_p.kv;
        INFO("placement " << c.wg << " " << c.wc << " " << c.cg << " " << c.cc << " overlap "
                          << c.overlap << " batches " << c.gbs << "x" << c.ngb);
        const EngineRun got = run(model, "cpu-emulated-device", p, requests());
        require_same_run(ref, got);
        if (c.wg < 100) CHECK(got.weight_h2d > 0);  // the weights really moved
        else CHECK(got.weight_h2d == 0);
      }
    }
  }
}

TEST_CASE("emulated device: greedy tokens sampled on the device match the host sampler",
          "[emulated]") {
  const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/qwen2";
  const Policy p = placement(50, 50, 100, 0, true, 2, 2);
  const EngineRun host = run(model, "cpu-emulated-device", p, requests(), true);     // logits back, host sampler
  const EngineRun device = run(model, "cpu-emulated-device", p, requests(), false);  // argmax on the device
  require_same_run(host, device);
  const EngineRun cpu = run(model, "cpu", p, requests(), false);
  require_same_run(host, cpu);
}

TEST_CASE("emulated device: placements a GPU backend does not support yet are config errors",
          "[emulated]") {
  const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/qwen2";
  EngineOptions eo;
  eo.model = model;
  eo.backend = BackendKind::kCpuEmulatedDevice;
  auto expect = [&](const Policy& p, const char* what) {
    eo.policy = p;
    try {
      Engine e(eo);
      FAIL("expected a config error about " << what);
    } catch (const Error& err) {
      CHECK(err.category() == ErrorCategory::kConfig);
      CHECK_THAT(err.what(), Catch::Contains(what));
    }
  };
  expect(placement(100, 0, 50, 50, true, 2, 1), "KV cache");
  Policy host_kv = placement(100, 0, 0, 100, true, 2, 1);
  host_kv.cpu_cache_compute = false;
  expect(host_kv, "cpu-cache-compute");
  Policy act = placement(100, 0, 100, 0, true, 2, 1);
  act.act_gpu_percent = 50, act.act_cpu_percent = 50;
  expect(act, "activations");
}

TEST_CASE("emulated device: shared contexts (kvzip, h2o, snapkv) are the CPU backend's bitwise",
          "[emulated]") {
  const std::string model = std::string(OFFGEN_TEST_DATA) + "/hf_models/qwen2";
  const auto reqs = test::fact_context_requests({"Ann's code?", "Bo's code?", "Cy's locker?"}, 4);
  for (const char* kv : {"kvzip", "h2o", "snapkv"}) {
    INFO("context policy " << kv);
    Policy p = placement(40, 60, 100, 0, true, 2, 2);
    p.kv.kind = parse_kv_policy(kv);
    p.kv.budget = 0.5;
    require_same_run(run(model, "cpu", p, reqs), run(model, "cpu-emulated-device", p, reqs));
  }
}
