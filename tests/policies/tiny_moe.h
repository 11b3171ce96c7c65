// The made-up MoE layer the cost-model and roofline tests share: a one-layer model's MLP unit
// becomes a 4 KiB head (norm, router) and 4 experts of 4 KiB, 1 used per token, staged through
// three slots as the engine stages MoE models.
#pragma once

#include "policies/cost_model.h"

namespace offgen::test {

inline ModelFacts with_tiny_experts(ModelFacts m) {
  m.unit_bytes = {4096, 4096 + 4 * 4096};
  m.unit_experts_at = {4096, 4096};
  m.n_experts = 4, m.n_experts_used = 1;
  m.weight_slots = 3;
  return m;
}

}  // namespace offgen::test
