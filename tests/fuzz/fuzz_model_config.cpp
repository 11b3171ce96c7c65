// libFuzzer target for model configurations: the first byte picks the form — 'H': the rest is a
// config.json over the tiny Llama test checkpoint's weights; anything else: the rest is a GGUF
// file. A config must be refused (offgen::Error) or agree with the weights; run-fuzz runs it
// under -rss_limit_mb / -malloc_limit_mb, so a config value that allocates before it is checked
// (a vocab_size of 10^9, a huge layer count) fails as an out-of-memory crash.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/core/error.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/gguf_vocab.h"
#include "runtime/loaders/hf_source.h"
#include "runtime/loaders/hf_tokenizer.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/model/tensor_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace offgen;
  if (size == 0) return 0;
  static const std::string dir = std::string(OFFGEN_FUZZ_DATA) + "/hf_models/llama";
  static const VocabData hf_vocab = vocab_from_hf_tokenizer(dir + "/tokenizer.json", "");
  const std::span<const uint8_t> rest(data + 1, size - 1);
  volatile int64_t sink = 0;
  try {
    OpenedModel m;
    if (data[0] == 'H') {
      const std::string_view text(reinterpret_cast<const char*>(rest.data()), rest.size());
      m.source = std::make_unique<HfWeightSource>(dir, text, "fuzz/config.json");
      m.vocab = hf_vocab;
    } else {
      auto src = std::make_unique<GgufWeightSource>(GgufFile::parse(rest, "fuzz.gguf"));
      m.vocab = vocab_from_gguf(src->file());
      m.source = std::move(src);
    }
    check_opened_model(m, "fuzz");
    // Accepted: every size the config implies is now backed by a tensor in the input.
    for (const TensorSpec& t : model_tensors(m.source->config()))
      sink = sink + static_cast<int64_t>(m.source->tensor_dims(t.name).size());
    sink = sink + static_cast<int64_t>(m.vocab.tokens.size());
  } catch (const Error&) {
    // Refused with a message: the expected outcome for most inputs.
  }
  (void)sink;
  return 0;
}
