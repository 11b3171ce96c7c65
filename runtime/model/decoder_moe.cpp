// The mixture-of-experts MLP of the decoder: every row is routed first, then each chosen expert
// runs once over all of its rows.
#include <cmath>

#include "runtime/model/decoder.h"

namespace offgen {

const float* DecoderModel::moe_route(const Layout& L, const uint8_t* base, const float* in,
                                     int64_t rows, DecoderScratch& s) const {
  const ModelConfig& c = config_;
  const int64_t ne = c.n_experts;
  const bool shared = c.shared_ffn_dim > 0;
  // Router logits [rows, n_experts], then the shared expert's gate logits [rows], on the host.
  float* logits = s.route.data();
  matmul(in, rows, L.router, base, logits);
  if (shared) matmul(in, rows, L.shared_gate, base, logits + rows * ne);
  const int64_t n_logits = rows * (ne + (shared ? 1 : 0));
  const float* host = logits;
  if (!backend_.device_is_host()) {
    s.route_host.resize(static_cast<size_t>(n_logits));
    backend_.copy(s.route_host.data(), logits, n_logits * 4);
    backend_.synchronize();
    host = s.route_host.data();
  }
  route_top_k(host, rows, ne, ne, c.n_experts_used, c.moe_norm_topk, s.routing);
  return host;
}

void DecoderModel::routed_experts(const Layout& L, const uint8_t* base, const float* hidden,
                                  int64_t rows, DecoderScratch& s,
                                  std::vector<int64_t>& experts) const {
  const ModelConfig& c = config_;
  s.reserve(backend_, c, rows);
  // The MLP unit's input as run_unit forms it (RMSNorm before the MLP: ModelConfig::validate).
  const auto* norm = reinterpret_cast<const float*>(base + L.norm);
  backend_.rms_norm(hidden, norm, rows, c.d_model, c.norm_eps, s.x.data());
  moe_route(L, base, s.x.data(), rows, s);
  for (int64_t e = 0; e < c.n_experts; ++e)
    if (!s.routing.rows[static_cast<size_t>(e)].empty()) experts.push_back(e);
}

void DecoderModel::route_unit(int64_t unit, const void* blob, const float* hidden, int64_t rows,
                              DecoderScratch& s, std::vector<int64_t>& experts) const {
  experts.clear();
  const Layout& L = layout(unit);
  if (L.experts.empty()) return;
  routed_experts(L, static_cast<const uint8_t*>(blob), hidden, rows, s, experts);
}

bool DecoderModel::predict_experts(int64_t unit, const float* hidden, int64_t rows,
                                   DecoderScratch& s, std::vector<int64_t>& experts) const {
  experts.clear();
  if (unit < 0 || unit >= static_cast<int64_t>(routers_.size())) return false;
  const RouterCopy& r = routers_[static_cast<size_t>(unit)];
  if (r.bytes.data() == nullptr) return false;
  routed_experts(r.layout, static_cast<const uint8_t*>(r.bytes.data()), hidden, rows, s, experts);
  return true;
}

std::pair<int64_t, int64_t> DecoderModel::expert_range(int64_t unit, int64_t e) const {
  const Expert& x = layout(unit).experts.at(static_cast<size_t>(e));
  return {x.at, x.bytes};
}

void DecoderModel::moe_mlp(const Layout& L, const uint8_t* base, const float* in, int64_t rows,
                           DecoderScratch& s) const {
  const ModelConfig& c = config_;
  const int64_t d = c.d_model, f = c.ffn_dim, ne = c.n_experts;
  const bool shared = c.shared_ffn_dim > 0;
  const float* host = moe_route(L, base, in, rows, s);
  if (routing_counts_) routing_counts_->add(L.layer, s.routing, rows);
  // Each expert over its rows, its outputs added into theirs in expert order, the shared
  // expert's last: a row's sum does not depend on the other rows of the batch.
  backend_.zero(s.proj.data(), rows * d);
  for (int64_t e = 0; e < ne; ++e) {
    const std::vector<int64_t>& r = s.routing.rows[static_cast<size_t>(e)];
    if (r.empty()) continue;
    const auto n = static_cast<int64_t>(r.size());
    const Expert& x = L.experts[static_cast<size_t>(e)];
    backend_.gather_rows(s.moe_x.data(), in, r, d);
    matmul(s.moe_x.data(), n, x.w0, base, s.gate_up.data());
    backend_.swiglu(s.gate_up.data(), s.gate_up.data() + f, n, f, 2 * f, s.act.data());
    matmul(s.act.data(), n, x.w1, base, s.moe_y.data());
    backend_.add_rows_scaled(s.proj.data(), s.moe_y.data(), r,
                             s.routing.weights[static_cast<size_t>(e)], d);
  }
  if (!shared) return;
  const int64_t fs = c.shared_ffn_dim;
  matmul(in, rows, L.w0, base, s.gate_up.data());
  backend_.swiglu(s.gate_up.data(), s.gate_up.data() + fs, rows, fs, 2 * fs, s.act.data());
  matmul(s.act.data(), rows, L.w1, base, s.moe_y.data());
  std::vector<int64_t> all(static_cast<size_t>(rows));
  std::vector<float> gate(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    all[r] = r;
    gate[r] = 1.0f / (1.0f + std::exp(-host[rows * ne + r]));
  }
  backend_.add_rows_scaled(s.proj.data(), s.moe_y.data(), all, gate, d);
}

}  // namespace offgen
