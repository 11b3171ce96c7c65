// Measuring a mixture of experts' routing on a sample (offgen calibrate --model): which experts
// each layer chooses how often, for the hot-first expert order and the planner's expected experts.
#pragma once

#include <string>
#include <vector>

#include "policies/hardware_profile.h"
#include "scheduler/engine.h"

namespace offgen {

// Prompts to route: a built-in sample of varied English prose, code and arithmetic (name
// "built-in sample"), or the non-empty lines of a text file (named by its path; throws Error(kIo)
// when unreadable, kInput when it holds no text).
struct RoutingSample {
  std::string name;
  std::vector<std::string> prompts;
  static RoutingSample built_in();
  static RoutingSample from_file(const std::string& path);
};

// Prefills every prompt of `sample` once (its first tokens where it is longer than the context) with the engine `options` describe (their placement:
// weights may stream from disk) and returns the routing of each layer's rows, for the model's
// content id, with the machine and time it was measured on.
RoutingProfile measure_routing(EngineOptions options, const RoutingSample& sample);

}  // namespace offgen
