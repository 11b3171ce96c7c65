// Bindings of the Engine: construction from options, and generate() over request lines parsed by
// the job reader's parser (scheduler/job_io.h) exactly as `offgen generate` parses a JSONL file,
// with the GIL released while the engine runs, progress reported to a Python callable and
// Ctrl-C (a pending signal) stopping the run between engine iterations.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <optional>

#include "eval/planning.h"
#include "jobs/job_io.h"
#include "python/src/bindings.h"
#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/loaders/model_loader.h"
#include "scheduler/engine.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace offgen::python {
namespace {

// One input's outcome: a completion, or an error record's fields (finish_reason "error"), or
// "interrupted".
struct Output {
  std::string id;
  bool numeric_id = false;  // the request gave its id as an integer (`id` holds its digits)
  std::string text;
  std::vector<int32_t> tokens;
  std::string finish_reason;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  std::string error, error_kind, error_field;
};

// Request lines read as a JSONL file of them (line i is line i + 1, ids and seeds as the CLI
// gives them); `defaults` holds one SamplingParams for every line, or one per line.
std::vector<JobLine> parse_lines(const std::vector<std::string>& lines,
                                 const std::vector<SamplingParams>& defaults, bool chat) {
  OFFGEN_CHECK(defaults.size() == 1 || defaults.size() == lines.size(), kConfig,
               "{} sampling parameter sets for {} requests: give one, or one per request",
               defaults.size(), lines.size());
  std::string text;
  for (const std::string& l : lines) {
    OFFGEN_CHECK(l.find('\n') == std::string::npos, kInternal, "a request line holds a newline");
    text += l;
    text += '\n';
  }
  std::vector<JobLine> out = parse_request_text(text, defaults[0], chat);
  OFFGEN_CHECK(out.size() == lines.size(), kInternal, "{} request lines parsed as {}", lines.size(),
               out.size());
  if (defaults.size() > 1)
    for (size_t i = 1; i < out.size(); ++i) {
      // Its own defaults: the line's fields over them, the id the whole text gave it, and the
      // default seed mixed with that id unless the line has a seed (as parse_request_line does).
      JobLine& jl = out[i];
      if (!jl.request) continue;
      JobLine again = parse_request_line(lines[i], jl.line_no, defaults[i], chat);
      OFFGEN_CHECK(again.request.has_value(), kInternal, "line {} parsed differently", jl.line_no);
      again.request->id = jl.id;
      if (!again.own_seed) again.request->sampling.seed = defaults[i].seed ^ fnv1a64(jl.id);
      jl.request = std::move(again.request);
    }
  return out;
}

Output error_output(const nlohmann::json& record, const JobLine& line) {
  const nlohmann::json& e = record["error"];
  Output o;
  o.id = line.id;
  o.numeric_id = line.numeric_id;
  o.finish_reason = "error";
  o.error = e.value("message", "");
  o.error_kind = e.value("kind", "");
  if (e.contains("field") && e["field"].is_string()) o.error_field = e["field"].get<std::string>();
  return o;
}

class PyEngine {
 public:
  explicit PyEngine(EngineOptions options) : engine_(std::move(options)) {}

  std::vector<Output> generate(const std::vector<std::string>& lines,
                               const std::vector<SamplingParams>& defaults, bool chat,
                               nb::object on_progress, bool check_signals) {
    std::unique_lock lock(busy_, std::try_to_lock);
    OFFGEN_CHECK(lock.owns_lock(), kConfig,
                 "generate() is already running on this LLM (one call at a time)");
    std::optional<nb::python_error> raised;  // a callback's exception (KeyboardInterrupt, ...)
    std::vector<JobLine> parsed;
    std::vector<Result> results;
    std::vector<size_t> line_of;
    {
      nb::gil_scoped_release released;
      parsed = parse_lines(lines, defaults, chat);
      std::vector<Request> requests;
      for (size_t i = 0; i < parsed.size(); ++i)
        if (parsed[i].request) {
          requests.push_back(*parsed[i].request);
          line_of.push_back(i);
        }
      GenerateCallbacks cb;
      if (!on_progress.is_none())
        cb.on_progress = [&](const Progress& p) {
          nb::gil_scoped_acquire gil;
          if (raised) return;
          try {
            on_progress(p.done, p.total, p.completion_tokens, p.elapsed_seconds);
          } catch (nb::python_error& e) {
            raised.emplace(std::move(e));
          }
        };
      cb.should_stop = [&] {
        if (!check_signals && on_progress.is_none()) return false;
        nb::gil_scoped_acquire gil;
        if (!raised && check_signals && PyErr_CheckSignals() != 0) raised.emplace();
        return raised.has_value();
      };
      results = engine_.generate(requests, cb);
    }
    if (raised) throw std::move(*raised);
    const std::string model_name =
        engine_.config().name.empty() ? engine_.options().model : engine_.config().name;
    std::vector<Output> out(parsed.size());
    for (size_t i = 0; i < parsed.size(); ++i)
      if (!parsed[i].request) out[i] = error_output(error_record(parsed[i]), parsed[i]);
    for (size_t k = 0; k < results.size(); ++k) {
      const JobLine& line = parsed[line_of[k]];
      Result& r = results[k];
      if (r.finish_reason == FinishReason::kError) {
        out[line_of[k]] = error_output(result_record(line, r, model_name), line);
        continue;
      }
      Output& o = out[line_of[k]];
      o.id = line.id;
      o.numeric_id = line.numeric_id;
      o.text = text_as_recorded(r.text);  // the CLI's record, valid UTF-8 for Python
      o.tokens = std::move(r.tokens);
      o.finish_reason = finish_reason_name(r.finish_reason);
      o.prompt_tokens = r.prompt_tokens;
      o.completion_tokens = r.completion_tokens;
    }
    return out;
  }

  nb::dict stats() const {
    const GenerationStats& s = engine_.last_stats();
    nb::dict d;
    d["requests"] = s.requests;
    d["failed"] = s.failed;
    d["prefill_tokens"] = s.prefill_tokens;
    d["decode_tokens"] = s.decode_tokens;
    d["completion_tokens"] = s.completion_tokens;
    d["prefill_seconds"] = s.prefill_seconds;
    d["decode_seconds"] = s.decode_seconds;
    d["wall_seconds"] = s.wall_seconds;
    d["contexts"] = s.contexts;
    d["context_tokens"] = s.context_tokens;
    d["context_seconds"] = s.context_seconds;
    return d;
  }

  Engine& engine() { return engine_; }

 private:
  Engine engine_;
  std::mutex busy_;
};

// `policy="auto"`: the planner's policy for these requests (as `generate --policy auto` plans
// for its input file) and true; without a valid request, unplanned_policy(base) and false.
std::pair<Policy, bool> plan_job(const std::string& model, const std::string& weight_dtype, int threads,
                const Policy& base, const std::vector<std::string>& lines,
                const std::vector<SamplingParams>& defaults, bool chat, int64_t max_context) {
  std::vector<Request> requests;
  for (const JobLine& l : parse_lines(lines, defaults, chat))
    if (l.request) requests.push_back(*l.request);
  const Workload w = [&] {  // the tokenizer goes before the planning inputs are measured
    OpenedModel opened = open_model(model);
    const Tokenizer tokenizer(std::move(opened.vocab));
    return job_workload(tokenizer, requests, max_context);
  }();
  if (w.num_requests == 0) return {unplanned_policy(base), false};
  PlanningContext ctx{model,
                            base.weight_storage(WeightMode::parse(weight_dtype)),
                            threads,
                            "",
                            base.offload_dir,
                            [](const std::string& what) {
                              std::fprintf(stderr, "offgen: calibrating: %s\n", what.c_str());
                            },
                            planning_kv_dtypes(base)};
  return {auto_plan(planning_inputs(ctx.limits_of(base)), w, base).policy, true};
}

}  // namespace

void bind_engine(nb::module_& m) {
  nb::class_<Output>(m, "Output")
      .def_ro("id", &Output::id)
      .def_ro("numeric_id", &Output::numeric_id)
      .def_ro("text", &Output::text)
      .def_ro("tokens", &Output::tokens)
      .def_ro("finish_reason", &Output::finish_reason)
      .def_ro("prompt_tokens", &Output::prompt_tokens)
      .def_ro("completion_tokens", &Output::completion_tokens)
      .def_ro("error", &Output::error)
      .def_ro("error_kind", &Output::error_kind)
      .def_ro("error_field", &Output::error_field);

  nb::class_<PyEngine>(m, "Engine")
      .def(
          "__init__",
          [](PyEngine* self, const std::string& model, const std::string& backend, int threads,
             const std::string& weight_dtype, const Policy& policy, int64_t max_context,
             int64_t prefill_chunk) {
            EngineOptions o;
            o.model = model;
            o.backend = parse_backend_kind(backend);
            o.threads = threads;
            o.weight_dtype = WeightMode::parse(weight_dtype);
            o.policy = policy;
            o.max_context = max_context;
            o.prefill_chunk = prefill_chunk;
            o.expert_routing = measured_routing(model);  // hot experts first, as the CLI
            new (self) PyEngine(std::move(o));
          },
          "model"_a, "backend"_a, "threads"_a, "weight_dtype"_a, "policy"_a, "max_context"_a,
          "prefill_chunk"_a, nb::call_guard<nb::gil_scoped_release>())
      .def("generate", &PyEngine::generate, "lines"_a, "defaults"_a, "chat"_a,
           "on_progress"_a.none(), "check_signals"_a)
      .def("stats", &PyEngine::stats)
      .def_prop_ro("model_name", [](PyEngine& e) { return e.engine().config().name; })
      .def_prop_ro("max_context", [](PyEngine& e) { return e.engine().max_context(); })
      .def_prop_ro("policy", [](PyEngine& e) { return e.engine().options().policy; })
      .def_prop_ro("threads", [](PyEngine& e) { return e.engine().backend().threads().threads(); });

  m.def("plan_job", &plan_job, "model"_a, "weight_dtype"_a, "threads"_a, "base"_a, "lines"_a,
        "defaults"_a, "chat"_a, "max_context"_a, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace offgen::python
