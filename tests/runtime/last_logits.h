// Test helper: one prompt through every unit of a model with a private KV cache, last-position
// logits (the plain forward the parity tests compare against their references).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/model/decoder.h"

namespace offgen::test {

inline std::vector<float> last_logits(const DecoderModel& m, const ResidentUnits& units,
                                      const std::vector<int32_t>& ids) {
  const ModelConfig& c = m.config();
  const int64_t n = static_cast<int64_t>(ids.size());
  std::vector<float> kv(c.n_layers * 2 * c.kv_dim() * n);
  std::vector<KvSeqView> views(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    float* base = kv.data() + l * 2 * c.kv_dim() * n;
    views[l] = KvSeqView{base, base + c.kv_dim() * n, n};
  }
  std::vector<int32_t> pos(n);
  for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(i);
  SeqSpan span{0, n, 0};
  std::vector<float> logits(c.vocab_size);
  DecoderScratch scratch;
  m.forward(ids, pos.data(), {&span, 1},
            [&](int64_t l) { return std::span<const KvSeqView>(&views[l], 1); }, units.fn(),
            logits.data(), scratch);
  return logits;
}

}  // namespace offgen::test
