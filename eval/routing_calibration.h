// Measuring a mixture of experts' routing on a sample (offgen calibrate --model): which experts
// each layer chooses how often, for the hot-first expert order and the planner's expected experts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "policies/hardware_profile.h"
#include "scheduler/engine.h"

namespace offgen {

// Prompts to route: a built-in sample of varied English prose, code and arithmetic (name
// "built-in sample"), or a file (named by its path): a JSONL request file (`generate --input`'s
// lines: each a "prompt" text or "prompt_ids" list; other fields are ignored), or else a text file
// whose non-empty lines are the prompts. Throws Error(kIo) when unreadable, kInput naming the
// line when a JSONL line has neither, and when the file holds no prompt.
struct RoutingSample {
  std::string name;
  std::vector<std::string> prompts;
  std::vector<std::vector<int32_t>> prompt_ids;  // pre-tokenised prompts (JSONL "prompt_ids")
  size_t size() const { return prompts.size() + prompt_ids.size(); }
  static RoutingSample built_in();
  static RoutingSample from_file(const std::string& path);
};

// Tokens generated (greedily) after each prompt of a routing sample: their decode steps are routed
// and counted with the prompts' rows, as a job's decode steps run on what the model writes.
inline constexpr int64_t kRoutingSampleGenerated = 16;

// Runs every prompt of `sample` (its first tokens where it is longer than the context) and
// kRoutingSampleGenerated generated tokens with the engine `options` describe (their placement:
// weights may stream from disk), the first half of the prompts and then the rest, and returns the
// routing of each layer's rows (all of them, and the first half's), for the model's content id,
// with the machine and time it was measured on.
RoutingProfile measure_routing(EngineOptions options, const RoutingSample& sample);

}  // namespace offgen
