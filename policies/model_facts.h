// The cost model's view of a loaded model (ModelFacts, cost_model.h): unit blob bytes, resident
// bytes, KV row sizes and whether its backend's device memory is host memory, read off the decoder
// the engine and the planner both use.
#pragma once

#include <string>

#include "policies/cost_model.h"
#include "runtime/model/decoder.h"

namespace offgen {

// `weight_dtype` is the matmul storage name (part of the facts' key).
ModelFacts model_facts(const DecoderModel& model, const std::string& weight_dtype);

}  // namespace offgen
