// Model spec dispatch.
#include "runtime/loaders/model_loader.h"

#include <filesystem>

#include "runtime/core/error.h"
#include "runtime/loaders/dummy_source.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/gguf_vocab.h"

namespace offgen {

OpenedModel open_model(const std::string& spec) {
  namespace fs = std::filesystem;
  OFFGEN_CHECK(!spec.empty(), kConfig, "no model given (--model PATH.gguf or dummy:PRESET)");
  if (spec.rfind("dummy:", 0) == 0) {
    auto src = std::make_unique<DummyWeightSource>(spec.substr(6));
    OpenedModel m;
    m.vocab = src->vocab();
    m.source = std::move(src);
    return m;
  }
  std::error_code ec;
  OFFGEN_CHECK(fs::exists(spec, ec), kIo, "{}: model file not found", spec);
  OFFGEN_CHECK(!fs::is_directory(spec, ec), kConfig,
               "{}: is a directory; this build loads GGUF model files (PATH.gguf)", spec);
  auto src = std::make_unique<GgufWeightSource>(GgufFile::open(spec));
  OpenedModel m;
  m.vocab = vocab_from_gguf(src->file());
  m.source = std::move(src);
  return m;
}

}  // namespace offgen
