// llama.cpp side of bench/peers/gemma_parity.py, compiled by that script against a libllama
// built from the llama-cpp-python sdist (never part of the offgen build). For each line of a
// prompts file: the prompt's token ids (llama_tokenize with BOS) into --ids, the next-token
// logits after the prompt (fp32) appended to --logits, and a greedy continuation of --steps
// tokens (argmax of each step's logits, one decode per token) as one line of ids on stdout.
// With "special" as the 8th argument, each line is a rendered chat prompt: a backslash before n
// stands for a newline, before another character for that character, and special tokens
// (<|im_start|>) are parsed as such.
#include <llama.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: %s MODEL PROMPTS IDS_OUT LOGITS_OUT STEPS [THREADS [default|exact "
                 "[special]]]\n",
                 argv[0]);
    return 2;
  }
  const int steps = std::atoi(argv[5]);
  const int threads = argc > 6 ? std::atoi(argv[6]) : 2;
  const bool special = argc > 8 && std::strcmp(argv[8], "special") == 0;
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  // No repacked (AMX / extra) weight buffers: this build's AMX matmul crashes on this CPU (Xeon
  // with AMX), and the plain CPU path computes the same products.
  mp.use_extra_bufts = false;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 1024;
  cp.n_batch = 1024;
  cp.n_ubatch = 1024;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  // The exact configuration by default: fp32 K/V cache, no flash attention (its defaults, f16
  // K/V and flash attention, with "default" as the 7th argument).
  if (!(argc > 7 && std::strcmp(argv[7], "default") == 0)) {
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  }
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  std::ifstream in(argv[2]);
  std::ofstream ids_out(argv[3]);
  std::ofstream logits_out(argv[4], std::ios::binary);
  auto argmax = [&](const float* row) {
    int best = 0;
    for (int j = 1; j < n_vocab; ++j)
      if (row[j] > row[best]) best = j;
    return best;
  };
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (special) {
      std::string raw;
      for (size_t i = 0; i < line.size(); ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) {
          raw += line[i + 1] == 'n' ? '\n' : line[i + 1];
          ++i;
        } else {
          raw += line[i];
        }
      }
      line = raw;
    }
    std::vector<llama_token> toks(line.size() + 8);
    const int n = llama_tokenize(vocab, line.data(), static_cast<int32_t>(line.size()), toks.data(),
                                 static_cast<int32_t>(toks.size()), true, special);
    if (n < 0) return 1;
    toks.resize(n);
    for (int i = 0; i < n; ++i) ids_out << (i ? " " : "") << toks[i];
    ids_out << "\n";
    llama_memory_clear(llama_get_memory(ctx), true);
    if (llama_decode(ctx, llama_batch_get_one(toks.data(), n)) != 0) return 1;
    const float* row = llama_get_logits_ith(ctx, -1);
    logits_out.write(reinterpret_cast<const char*>(row), n_vocab * 4);
    llama_token next = argmax(row);
    for (int t = 0; t < steps; ++t) {
      std::printf("%s%d", t ? " " : "", next);
      if (t + 1 == steps) break;
      if (llama_decode(ctx, llama_batch_get_one(&next, 1)) != 0) return 1;
      next = argmax(llama_get_logits_ith(ctx, -1));
    }
    std::printf("\n");
  }
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
