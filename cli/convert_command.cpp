// `offgen convert` (convert_command.h).
#include "cli/convert_command.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/flag_checks.h"
#include "runtime/core/backend_caps.h"
#include "runtime/core/error.h"
#include "runtime/loaders/gguf_convert.h"
#include "runtime/loaders/model_loader.h"

namespace offgen {

void ConvertCommand::add_to(CLI::App* app) {
  cmd_ = app->add_subcommand(
      "convert",
      "Write a model as a GGUF file (llama.cpp and offgen load it) in a chosen weight type, so "
      "quantising happens once instead of at every load");
  cmd_->add_option("--model", model,
                   "Model: a .gguf file, a Hugging Face checkpoint directory, or dummy:PRESET[:FORMAT]")
      ->required();
  cmd_->add_option("--out", out, "GGUF file to write")->required();
  add_weight_dtype(cmd_, weight_dtype);
  cmd_->add_option("--threads", threads, "Threads quantising (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  cmd_->add_flag("--overwrite", overwrite, "Replace --out when it exists");
}

int ConvertCommand::run() const {
  namespace fs = std::filesystem;
  const WeightMode mode = WeightMode::parse(weight_dtype);
  std::error_code ec;
  // Never the file being read, nor an existing file unless asked.
  OFFGEN_CHECK(!fs::exists(model, ec) || !fs::exists(out, ec) || !fs::equivalent(model, out, ec),
               kConfig, "--out {} is the model being converted", out);
  OFFGEN_CHECK(overwrite || !fs::exists(out, ec), kConfig,
               "--out {} exists (--overwrite replaces it)", out);
  OFFGEN_CHECK(!fs::is_directory(out, ec), kConfig, "--out {} is a directory", out);
  const auto t0 = std::chrono::steady_clock::now();
  OpenedModel m = open_model(model);
  const ConvertStats s = convert_to_gguf(*m.source, m.vocab, out, mode, threads);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<std::string> types;
  for (const auto& [t, n] : s.tensors)
    types.push_back(fmt::format("{} {} ({:.1f} MiB)", n, dtype_name(t),
                                static_cast<double>(s.tensor_bytes.at(t)) / (1 << 20)));
  std::printf("%s: %s as %s GGUF (--weight-dtype %s), %.2f GiB in %.1f s; tensors: %s\n",
              out.c_str(), model.c_str(), s.arch.c_str(), mode.name().c_str(),
              static_cast<double>(s.file_bytes) / (1ull << 30), secs,
              fmt::format("{}", fmt::join(types, ", ")).c_str());
  return 0;
}

}  // namespace offgen
