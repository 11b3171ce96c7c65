// Opens a model spec (`path/to/model.gguf`, a Hugging Face checkpoint directory or `dummy:PRESET`)
// as a WeightSource plus its tokenizer vocabulary.
#pragma once

#include <memory>
#include <string>

#include "runtime/model/weight_source.h"
#include "runtime/text/tokenizer.h"

namespace offgen {

struct OpenedModel {
  std::unique_ptr<WeightSource> source;
  VocabData vocab;
};

// Throws offgen::Error with one clear line when the spec is missing, unreadable or malformed.
OpenedModel open_model(const std::string& spec);

}  // namespace offgen
