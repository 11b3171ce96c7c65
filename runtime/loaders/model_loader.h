// Opens a model spec (`path/to/model.gguf`, a Hugging Face checkpoint directory or `dummy:PRESET`)
// as a WeightSource plus its tokenizer vocabulary.
#pragma once

#include <memory>
#include <string>

#include "runtime/core/stop.h"
#include "runtime/model/weight_source.h"
#include "runtime/text/tokenizer.h"

namespace offgen {

struct OpenedModel {
  std::unique_ptr<WeightSource> source;
  VocabData vocab;
  // What the model is, independent of where it lies: a hash of its files' leading bytes (GGUF
  // header and tensor table, safetensors headers, config and tokenizer files), sizes and sampled
  // pages of the data, so that a moved or copied model resumes a job and a changed one does not.
  std::string content_id;
};

// model_content_id's hash of one file (its first 32 MiB, its size and 64 pages spread over the
// rest), hex. Throws Error(kIo) when it cannot be read.
std::string file_content_id(const std::string& path);

// OpenedModel::content_id of a model spec without opening it (reads what the hash covers).
// Throws Error(kIo) when the model is not there.
std::string model_content_id(const std::string& spec);

// Throws offgen::Error with one clear line when the spec is missing, unreadable or malformed.
// `stop` is checked ("load") once the files are read, and by a dummy model's source while it
// generates tensors (throws Stopped).
OpenedModel open_model(const std::string& spec, StopToken stop = {});

// What open_model checks once the source and vocabulary are read, before anything is sized from
// the config: the tensor table against the weights' shapes (tensor_table.h) and the tokenizer
// against the embedding rows (padding the vocabulary with unused placeholder tokens up to them).
// Throws Error(kInput) naming `spec`.
void check_opened_model(OpenedModel& m, const std::string& spec);

}  // namespace offgen
