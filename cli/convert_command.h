// `offgen convert`: writes a model (GGUF, Hugging Face checkpoint directory or dummy:PRESET) as a
// GGUF file in a chosen weight type (runtime/loaders/gguf_convert.h), so quantising happens once.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace offgen {

class ConvertCommand {
 public:
  void add_to(CLI::App* app);
  bool parsed() const { return cmd_ && cmd_->parsed(); }
  // Prints what was written (types, size, time); throws offgen::Error with one clear line.
  int run() const;

 private:
  CLI::App* cmd_ = nullptr;
  std::string model, out, weight_dtype = "native";
  int threads = 0;
  bool overwrite = false;
};

}  // namespace offgen
