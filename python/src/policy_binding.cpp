// Bindings of the policy side: PolicyOverrides (what offgen.Policy gives), the resolved Policy,
// SamplingParams, and the planner (offgen.plan).
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdio>

#include "eval/planning.h"
#include "policies/planner.h"
#include "policies/policy_overrides.h"
#include "python/src/bindings.h"
#include "runtime/text/sampler.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace offgen::python {
namespace {

struct PlanAnswer {
  Policy policy;
  Prediction prediction;
  std::string binding;
  int64_t evaluated = 0;
  std::string model_key;
};

PlanAnswer run_plan(const std::string& model, const std::string& weight_dtype, int threads,
                    const std::string& profile, const Policy& base, const Workload& workload,
                    int64_t max_batch) {
  PlanningContext ctx{model,
                            base.weight_storage(WeightMode::parse(weight_dtype)),
                            threads,
                            profile,
                            base.offload_dir,
                            [](const std::string& what) {
                              std::fprintf(stderr, "offgen: calibrating: %s\n", what.c_str());
                            },
                            planning_kv_dtypes(base)};
  const PlanningInputs in = planning_inputs(ctx.limits_of(base));
  PlanOptions o;
  o.workload = workload;
  o.base = base;
  o.max_batch = max_batch;
  PlanResult r = plan_inputs(in, o);
  return {r.policy, r.prediction, r.binding, r.evaluated, in.facts.key};
}

}  // namespace

void bind_policy(nb::module_& m) {
  nb::class_<PolicyOverrides>(m, "PolicyOverrides")
      .def(nb::init<>())
      .def_rw("file", &PolicyOverrides::file)
      .def_rw("percent", &PolicyOverrides::percent)
      .def_rw("gpu_batch_size", &PolicyOverrides::gpu_batch_size)
      .def_rw("num_gpu_batches", &PolicyOverrides::num_gpu_batches)
      .def_rw("offload_dir", &PolicyOverrides::offload_dir)
      .def_rw("overlap", &PolicyOverrides::overlap)
      .def_rw("compress_weight", &PolicyOverrides::compress_weight)
      .def_rw("compress_cache", &PolicyOverrides::compress_cache)
      .def_rw("kv_dtype", &PolicyOverrides::kv_dtype)
      .def_rw("cpu_cache_compute", &PolicyOverrides::cpu_cache_compute)
      .def_rw("io_queue_depth", &PolicyOverrides::io_queue_depth)
      .def_rw("gpu_mem", &PolicyOverrides::gpu_mem)
      .def_rw("cpu_mem", &PolicyOverrides::cpu_mem)
      .def_rw("disk_mem", &PolicyOverrides::disk_mem)
      .def_rw("kv_policy", &PolicyOverrides::kv_policy)
      .def_rw("kv_budget", &PolicyOverrides::kv_budget)
      .def("resolve", &PolicyOverrides::resolve);

  nb::class_<Policy>(m, "ResolvedPolicy")
      .def_ro("gpu_batch_size", &Policy::gpu_batch_size)
      .def_ro("num_gpu_batches", &Policy::num_gpu_batches)
      .def_prop_ro("batch_given", [](const Policy& p) { return p.batch_given(); })
      .def_prop_ro("percent",
                   [](const Policy& p) {
                     return std::vector<double>{p.weight_gpu_percent, p.weight_cpu_percent,
                                                p.cache_gpu_percent,  p.cache_cpu_percent,
                                                p.act_gpu_percent,    p.act_cpu_percent};
                   })
      .def_ro("overlap", &Policy::overlap)
      .def_ro("cpu_cache_compute", &Policy::cpu_cache_compute)
      .def_ro("compress_weight", &Policy::compress_weight)
      .def_prop_ro("kv_dtype",
                   [](const Policy& p) -> std::optional<std::string> {
                     const std::string t = p.kv_dtype_text();
                     if (t.empty()) return std::nullopt;
                     return t;
                   })
      .def_ro("offload_dir", &Policy::offload_dir)
      .def_ro("io_queue_depth", &Policy::io_queue_depth)
      .def_ro("gpu_mem", &Policy::gpu_mem)
      .def_ro("cpu_mem", &Policy::cpu_mem)
      .def_ro("disk_mem", &Policy::disk_mem)
      .def_prop_ro("kv_policy", [](const Policy& p) { return std::string(kv_policy_name(p.kv.kind)); })
      .def_prop_ro("kv_budget", [](const Policy& p) { return p.kv.budget; })
      .def("toml", [](const Policy& p) { return policy_toml(p); });

  nb::class_<SamplingParams>(m, "SamplingParams")
      .def(nb::init<>())
      .def_rw("max_tokens", &SamplingParams::max_tokens)
      .def_rw("temperature", &SamplingParams::temperature)
      .def_rw("top_p", &SamplingParams::top_p)
      .def_rw("top_k", &SamplingParams::top_k)
      .def_rw("seed", &SamplingParams::seed)
      .def_rw("stop", &SamplingParams::stop)
      .def_rw("ignore_eos", &SamplingParams::ignore_eos)
      .def("validate", &SamplingParams::validate);

  nb::class_<PlanAnswer>(m, "PlanAnswer")
      .def_ro("policy", &PlanAnswer::policy)
      .def_ro("binding", &PlanAnswer::binding)
      .def_ro("evaluated", &PlanAnswer::evaluated)
      .def_ro("model_key", &PlanAnswer::model_key)
      .def_prop_ro("batch_size", [](const PlanAnswer& a) { return a.prediction.batch; })
      .def_prop_ro("kv_slots", [](const PlanAnswer& a) { return a.prediction.kv_slots; })
      .def_prop_ro("prefill_seconds",
                   [](const PlanAnswer& a) { return a.prediction.prefill_seconds; })
      .def_prop_ro("decode_seconds",
                   [](const PlanAnswer& a) { return a.prediction.decode_seconds; })
      .def_prop_ro("prefill_throughput",
                   [](const PlanAnswer& a) { return a.prediction.prefill_throughput; })
      .def_prop_ro("decode_throughput",
                   [](const PlanAnswer& a) { return a.prediction.decode_throughput; })
      .def_prop_ro("total_throughput",
                   [](const PlanAnswer& a) { return a.prediction.total_throughput; })
      .def_prop_ro("bottleneck", [](const PlanAnswer& a) { return a.prediction.bottleneck(); })
      .def_prop_ro("need_bytes", [](const PlanAnswer& a) {
        nb::dict d;
        d["device"] = a.prediction.need.device;
        d["host"] = a.prediction.need.host;
        d["disk"] = a.prediction.need.disk;
        return d;
      });

  m.def(
      "plan",
      [](const std::string& model, const std::string& weight_dtype, int threads,
         const std::string& profile, const Policy& base, int64_t prompt_len, int64_t gen_len,
         int64_t num_requests, int64_t max_batch) {
        Workload w;
        w.prompt_len = prompt_len;
        w.gen_len = gen_len;
        w.num_requests = num_requests;
        return run_plan(model, weight_dtype, threads, profile, base, w, max_batch);
      },
      "model"_a, "weight_dtype"_a, "threads"_a, "profile"_a, "base"_a, "prompt_len"_a, "gen_len"_a,
      "num_requests"_a, "max_batch"_a, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace offgen::python
