// Measuring a mixture of experts' routing on a sample.
#include "eval/routing_calibration.h"

#include <algorithm>
#include <ctime>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/machine_info.h"

namespace offgen {

RoutingSample RoutingSample::built_in() {
  // Varied registers, so that no one kind of text decides which experts count as hot.
  return {"built-in sample",
          {
              "The committee met on a rainy Tuesday to decide whether the old railway bridge "
              "should be repaired or replaced, and after three hours of argument they agreed "
              "only to commission another survey.",
              "def merge_sorted(a, b):\n    out, i, j = [], 0, 0\n    while i < len(a) and j < "
              "len(b):\n        if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        "
              "else:\n            out.append(b[j]); j += 1\n    return out + a[i:] + b[j:]",
              "Question: a train leaves at 14:35 and arrives at 17:10. How long is the journey? "
              "Answer: from 14:35 to 17:35 is three hours, minus 25 minutes, so 2 hours 35 minutes.",
              "To make a simple tomato sauce, soften a chopped onion in olive oil, add two cloves "
              "of garlic, pour in a tin of tomatoes, season, and let it simmer for twenty minutes.",
              "In 1869 the first transcontinental railroad in the United States was completed, "
              "cutting the journey from coast to coast from months to about a week.",
              "Photosynthesis turns light, water and carbon dioxide into glucose and oxygen; the "
              "light-dependent reactions happen in the thylakoid membranes of the chloroplast.",
              "SELECT customer_id, SUM(amount) AS total FROM orders WHERE created_at >= "
              "'2024-01-01' GROUP BY customer_id HAVING SUM(amount) > 1000 ORDER BY total DESC;",
              "Dear Ms. Alvarez, thank you for your letter of 3 March. I am sorry to hear that the "
              "parcel arrived damaged and have arranged for a replacement to be sent today.",
              "Let f(x) = x^3 - 6x^2 + 11x - 6. Since f(1) = 0, (x - 1) is a factor, and dividing "
              "gives x^2 - 5x + 6 = (x - 2)(x - 3), so the roots are 1, 2 and 3.",
              "The goalkeeper dived to his left, but the penalty went straight down the middle, "
              "and the stadium erupted as the home side took the lead in the final minute.",
              "Der schnelle braune Fuchs springt über den faulen Hund. Le renard brun rapide saute "
              "par-dessus le chien paresseux. El zorro marrón salta sobre el perro perezoso.",
              "#include <stdio.h>\nint main(void) {\n  for (int i = 1; i <= 15; ++i)\n    "
              "printf(i % 15 == 0 ? \"FizzBuzz\\n\" : i % 3 == 0 ? \"Fizz\\n\" : i % 5 == 0 ? "
              "\"Buzz\\n\" : \"%d\\n\", i);\n  return 0;\n}",
              "User: What is the capital of Australia?\nAssistant: The capital of Australia is "
              "Canberra, not Sydney, which is its largest city.",
              "The patient presented with a persistent dry cough and mild fever for five days; a "
              "chest X-ray showed no consolidation, and she was advised to rest and drink fluids.",
              "Markets fell sharply on Thursday after the central bank raised interest rates by "
              "half a percentage point, its largest increase in more than two decades.",
              "Once upon a time, in a village at the edge of a great forest, there lived a "
              "clockmaker who could mend anything except the one clock that had stopped the day "
              "his daughter left.",
          },
          {}};
}

RoutingSample RoutingSample::from_file(const std::string& path) {
  std::ifstream in(path);
  OFFGEN_CHECK(in, kIo, "{}: cannot read the routing sample", path);
  RoutingSample s{path, {}, {}};
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  auto blank = [](const std::string& l) { return l.find_first_not_of(" \t\r") == std::string::npos; };
  // JSONL when the first line with text opens an object.
  bool jsonl = false;
  for (const std::string& l : lines)
    if (!blank(l)) {
      jsonl = l[l.find_first_not_of(" \t\r")] == '{';
      break;
    }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (blank(lines[i])) continue;
    if (!jsonl) {
      s.prompts.push_back(lines[i]);
      continue;
    }
    const nlohmann::json j = nlohmann::json::parse(lines[i], nullptr, false);
    OFFGEN_CHECK(!j.is_discarded() && j.is_object(), kInput,
                 "{}: line {}: not a JSON object (a JSONL routing sample holds requests)", path, i + 1);
    if (j.contains("prompt_ids")) {
      const auto& ids = j["prompt_ids"];
      OFFGEN_CHECK(ids.is_array() && !ids.empty(), kInput,
                   "{}: line {}: 'prompt_ids' must be a non-empty list of token ids", path, i + 1);
      std::vector<int32_t> v;
      for (const auto& t : ids) {
        OFFGEN_CHECK(t.is_number_integer() && t.get<int64_t>() >= 0 &&
                         t.get<int64_t>() <= INT32_MAX,
                     kInput, "{}: line {}: 'prompt_ids' holds {}, not a token id", path, i + 1,
                     t.dump());
        v.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      s.prompt_ids.push_back(std::move(v));
    } else {
      OFFGEN_CHECK(j.contains("prompt") && j["prompt"].is_string() &&
                       !j["prompt"].get<std::string>().empty(),
                   kInput, "{}: line {}: a request needs a 'prompt' text or 'prompt_ids'", path,
                   i + 1);
      s.prompts.push_back(j["prompt"].get<std::string>());
    }
  }
  OFFGEN_CHECK(s.size() > 0, kInput, "{}: the routing sample holds no text", path);
  return s;
}

RoutingProfile measure_routing(EngineOptions options, const RoutingSample& sample) {
  options.count_routing = true;
  options.expert_routing = {};
  Engine engine(options);
  OFFGEN_CHECK(engine.config().moe(), kConfig,
               "{}: routing is measured on a mixture of experts; this model has none",
               options.model);
  // Tokenised here, so that a prompt longer than the context window routes its beginning.
  const auto room = static_cast<size_t>(
      std::max<int64_t>(1, engine.max_context() - kRoutingSampleGenerated));
  std::vector<Request> requests;
  auto add = [&](Request r) {
    r.id = "routing-" + std::to_string(requests.size());
    if (r.prompt_ids.empty()) r.prompt_ids = engine.encode_prompt(r);
    if (r.prompt_ids.size() > room) r.prompt_ids.resize(room);
    r.sampling.max_tokens = kRoutingSampleGenerated;
    r.sampling.ignore_eos = true;
    requests.push_back(std::move(r));
  };
  for (const std::string& text : sample.prompts) {
    Request r;
    r.prompt = text;
    add(std::move(r));
  }
  for (const std::vector<int32_t>& ids : sample.prompt_ids) {
    Request r;
    r.prompt_ids = ids;
    add(std::move(r));
  }
  // In two halves of the prompts, so that plans can estimate the skew on prompts the hot-first
  // order was not measured on (ranked_choice_probability).
  RoutingProfile out;
  const auto half = static_cast<std::ptrdiff_t>(requests.size() / 2);
  const std::vector<std::vector<Request>> halves = {
      {requests.begin(), requests.begin() + half}, {requests.begin() + half, requests.end()}};
  for (const std::vector<Request>& part : halves) {
    if (part.empty()) continue;
    for (const Result& r : engine.generate(part))
      OFFGEN_CHECK(r.error.empty(), kInput, "{}: a prompt of the routing sample failed: {}",
                   sample.name, r.error);
    if (&part == &halves[0]) out.first_half = engine.routing_counts();
  }
  out.model_id = engine.model_id();
  out.model = options.model;
  out.sample = sample.name;
  out.counts = engine.routing_counts();
  const MachineInfo m = machine_info();
  out.provenance.measured_at = utc_timestamp(static_cast<int64_t>(std::time(nullptr)));
  out.provenance.cpu_model = m.cpu_model;
  out.provenance.kernel = m.kernel;
  out.provenance.cpus = m.cpus;
  out.provenance.loadavg = m.loadavg;
  return out;
}

}  // namespace offgen
