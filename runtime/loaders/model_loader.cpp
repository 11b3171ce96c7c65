// Model spec dispatch: dummy presets, Hugging Face checkpoint directories, GGUF files.
#include "runtime/loaders/model_loader.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/loaders/dummy_source.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/gguf_vocab.h"
#include "runtime/loaders/hf_json.h"
#include "runtime/loaders/hf_source.h"
#include "runtime/loaders/hf_tokenizer.h"
#include "runtime/model/tensor_table.h"

namespace offgen {
namespace {

// Files of a checkpoint directory that define the model (weights, config, tokenizer, template).
bool defines_model(const std::filesystem::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".safetensors" || ext == ".json" || ext == ".jinja" || ext == ".model" ||
         ext == ".txt";
}

std::string dir_content_id(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) && defines_model(e.path())) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  uint64_t h = kFnv1aSeed;
  for (const std::string& n : names) {
    const std::string part = n + "=" + file_content_id((fs::path(dir) / n).string()) + ";";
    h = fnv1a64(part.data(), part.size(), h);
  }
  return fmt::format("hf:{:016x}", h);
}

// generation_config.json's eos_token_id (an id or a list of ids: every one ends generation in
// transformers' generate) joins the vocabulary's end-of-generation ids.
void add_generation_eos(const std::filesystem::path& path, VocabData& v) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  const nlohmann::json j =
      hf::parse_json(hf::read_text_file(path.string()), path.string(), false, false);
  if (!j.is_object() || !j.contains("eos_token_id") || j["eos_token_id"].is_null()) return;
  const nlohmann::json& e = j["eos_token_id"];
  const nlohmann::json list = e.is_array() ? e : nlohmann::json::array({e});
  for (const auto& id : list) {
    OFFGEN_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 &&
                     id.get<int64_t>() < static_cast<int64_t>(v.tokens.size()),
                 kInput, "{}: eos_token_id {} is not a token id of the vocabulary ({} tokens)",
                 path.string(), id.dump(), v.tokens.size());
    v.eog_ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
}

}  // namespace

std::string file_content_id(const std::string& path) {
  constexpr int64_t kHead = int64_t{32} << 20, kPage = 4096, kSamples = 64;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  OFFGEN_CHECK(f != nullptr, kIo, "{}: cannot open: {}", path, std::strerror(errno));
  std::vector<unsigned char> buf(1 << 20);
  uint64_t h = kFnv1aSeed;
  int64_t size = 0;
  size_t n;
  while (size < kHead && (n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    h = fnv1a64(buf.data(), n, h);
    size += static_cast<int64_t>(n);
  }
  bool ok = std::ferror(f) == 0 && std::fseek(f, 0, SEEK_END) == 0;
  const int64_t total = ok ? static_cast<int64_t>(std::ftell(f)) : -1;
  for (int64_t i = 0; ok && total > kHead && i < kSamples; ++i) {
    const int64_t at = kHead + (total - kHead - 1) / kSamples * i;
    ok = std::fseek(f, static_cast<long>(at), SEEK_SET) == 0;
    n = ok ? std::fread(buf.data(), 1, kPage, f) : 0;
    h = fnv1a64(buf.data(), n, h);
  }
  ok = ok && std::ferror(f) == 0 && total >= 0;
  std::fclose(f);
  OFFGEN_CHECK(ok, kIo, "{}: read error", path);
  return fmt::format("{:016x}-{}", h, total);
}

void check_opened_model(OpenedModel& m, const std::string& spec) {
  // Every config field that sizes something must agree with the weights before it is used.
  check_tensor_shapes(*m.source);
  // Checkpoints often pad the embedding past the tokenizer (OPT: 50272 rows, 50265 tokens): the
  // extra ids become unused placeholder tokens.
  const int64_t n_model = m.source->config().vocab_size;
  const int64_t n_tok = static_cast<int64_t>(m.vocab.tokens.size());
  OFFGEN_CHECK(n_tok <= n_model, kInput,
               "{}: the tokenizer has {} tokens but the model's vocabulary only {}", spec, n_tok,
               n_model);
  if (n_tok < n_model) {
    if (m.vocab.token_types.empty()) m.vocab.token_types.assign(n_tok, 1);
    for (int64_t i = n_tok; i < n_model; ++i) {
      m.vocab.tokens.push_back(fmt::format("<unused_{}>", i));
      m.vocab.token_types.push_back(static_cast<int32_t>(TokenType::kUnused));
    }
  }
}

std::string model_content_id(const std::string& spec) {
  namespace fs = std::filesystem;
  if (spec.rfind("dummy:", 0) == 0) return spec;  // the weights are a function of the preset and format
  std::error_code ec;
  OFFGEN_CHECK(fs::exists(spec, ec), kIo, "{}: model file not found", spec);
  if (fs::is_directory(spec, ec)) return dir_content_id(spec);
  return "gguf:" + file_content_id(spec);
}

OpenedModel open_model(const std::string& spec, StopToken stop) {
  namespace fs = std::filesystem;
  OFFGEN_CHECK(!spec.empty(), kConfig, "no model given (--model PATH.gguf, a Hugging Face checkpoint directory or dummy:PRESET)");
  if (spec.rfind("dummy:", 0) == 0) {
    auto src = std::make_unique<DummyWeightSource>(spec.substr(6), stop);
    OpenedModel m;
    m.content_id = model_content_id(spec);
    m.vocab = src->vocab();
    m.source = std::move(src);
    return m;
  }
  std::error_code ec;
  OFFGEN_CHECK(fs::exists(spec, ec), kIo, "{}: model file not found", spec);
  OpenedModel m;
  if (fs::is_directory(spec, ec)) {
    const fs::path dir(spec);
    OFFGEN_CHECK(fs::exists(dir / "config.json", ec), kConfig,
                 "{}: a model directory must be a Hugging Face checkpoint (config.json, "
                 "*.safetensors, tokenizer.json); config.json is missing",
                 spec);
    // Older checkpoints (facebook/opt-*) ship pytorch_model.bin and vocab.json + merges.txt;
    // transformers' save_pretrained writes the formats offgen reads.
    const char* convert =
        "convert once with transformers: python3 -c \"import sys; from transformers import "
        "AutoModelForCausalLM as M, AutoTokenizer as T; d=sys.argv[1]; "
        "M.from_pretrained(d).save_pretrained(d); T.from_pretrained(d).save_pretrained(d)\" DIR";
    bool has_safetensors = false;
    for (const auto& e : fs::directory_iterator(dir, ec))
      has_safetensors = has_safetensors || e.path().extension() == ".safetensors";
    OFFGEN_CHECK(has_safetensors || !fs::exists(dir / "pytorch_model.bin", ec), kConfig,
                 "{}: holds pytorch_model.bin but no *.safetensors (offgen reads safetensors "
                 "only; {})",
                 spec, convert);
    OFFGEN_CHECK(fs::exists(dir / "tokenizer.json", ec), kConfig,
                 "{}: tokenizer.json is missing (offgen reads Hugging Face fast-tokenizer files; "
                 "{})",
                 spec, convert);
    auto src = std::make_unique<HfWeightSource>(spec);
    const fs::path tc = dir / "tokenizer_config.json";
    m.vocab = vocab_from_hf_tokenizer((dir / "tokenizer.json").string(),
                                      fs::exists(tc, ec) ? tc.string() : std::string());
    add_generation_eos(dir / "generation_config.json", m.vocab);
    m.source = std::move(src);
    m.content_id = model_content_id(spec);
  } else {
    auto src = std::make_unique<GgufWeightSource>(GgufFile::open(spec));
    m.vocab = vocab_from_gguf(src->file());
    src->file().release_arrays();  // the vocabulary's copy in the metadata is read
    m.source = std::move(src);
    m.content_id = model_content_id(spec);
  }
  stop.check("load");
  check_opened_model(m, spec);
  return m;
}

}  // namespace offgen
