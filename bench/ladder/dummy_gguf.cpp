// dummy_gguf: writes a dummy:PRESET[:FORMAT] Llama-shaped model as a GGUF file (for llama.cpp and
// other peers), streamed tensor by tensor. Example:
//   build/bench/dummy_gguf --model dummy:llama-7b:q4_k --out /data/llama-7b-q4_k.gguf
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <string>

#include "runtime/core/error.h"
#include "runtime/loaders/dummy_source.h"
#include "runtime/loaders/gguf_write.h"

int main(int argc, char** argv) {
  CLI::App app{"Write a dummy:PRESET[:FORMAT] Llama-shaped model as a GGUF file"};
  std::string model, out;
  app.add_option("--model", model, "dummy:PRESET or dummy:PRESET:FORMAT (e.g. dummy:llama-7b:q4_k)")
      ->required();
  app.add_option("--out", out, "GGUF file to write")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    OFFGEN_CHECK(model.rfind("dummy:", 0) == 0, kConfig,
                 "--model {}: expected dummy:PRESET[:FORMAT]", model);
    const offgen::DummyWeightSource src(model.substr(6));
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t bytes =
        offgen::write_gguf(out, src, offgen::placeholder_spm_vocab(src.config().vocab_size));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("{}: {} written, {:.2f} GiB in {:.1f} s\n", out, src.describe(),
               static_cast<double>(bytes) / (1ull << 30), s);
  } catch (const offgen::Error& e) {
    fmt::print(stderr, "dummy_gguf: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
