// Deterministic fault injection over any IoEngine.
#include "offload/fault_injecting_io_engine.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <deque>
#include <string_view>
#include <unordered_map>

#include "offload/aligned_buffer.h"
#include "runtime/core/error.h"

namespace offgen {

FaultRule FaultRule::short_op(uint64_t nth, uint64_t period) {
  FaultRule r;
  r.action = FaultAction::kShort, r.first = nth, r.period = period;
  return r;
}
FaultRule FaultRule::eagain(uint64_t nth, uint64_t period) {
  FaultRule r;
  r.action = FaultAction::kEagain, r.first = nth, r.period = period;
  return r;
}
FaultRule FaultRule::fail(uint64_t nth, int error) {
  FaultRule r;
  r.action = FaultAction::kFail, r.first = nth, r.error = error;
  return r;
}
FaultRule FaultRule::enospc_past(uint64_t limit) {
  FaultRule r;
  r.action = FaultAction::kFail, r.first = 1, r.period = 1, r.reads = false,
  r.min_end_offset = limit, r.error = ENOSPC;
  return r;
}

std::vector<FaultRule> fault_rules_from_env() {
  const char* env = std::getenv("OFFGEN_DEBUG_IO_FAULT");
  std::vector<FaultRule> rules;
  if (env == nullptr || *env == '\0') return rules;
  const std::string_view all(env);
  for (size_t at = 0; at <= all.size();) {
    const size_t comma = std::min(all.find(',', at), all.size());
    const std::string_view item = all.substr(at, comma - at);
    at = comma + 1;
    const size_t sep = item.find('@');
    const std::string_view kind = item.substr(0, sep);
    uint64_t nth = 0;
    const char* end = item.data() + item.size();
    const bool number = sep != std::string_view::npos &&
                        std::from_chars(item.data() + sep + 1, end, nth).ptr == end && nth > 0;
    const int error = kind == "eio" ? EIO : kind == "enospc" ? ENOSPC : 0;
    OFFGEN_CHECK(number && error != 0, kConfig,
                 "OFFGEN_DEBUG_IO_FAULT={}: expected KIND@N[,KIND@N...] with KIND eio or enospc "
                 "and N >= 1 (got '{}')",
                 all, item);
    rules.push_back(FaultRule::fail(nth, error));
  }
  return rules;
}

struct FaultInjectingIoEngine::Impl {
  std::vector<FaultRule> rules;
  std::vector<uint64_t> seen;                       // matching ops per rule
  std::vector<uint64_t> fired;                      // times each rule fired
  std::deque<EngineCompletion> synthetic;           // completions made up without I/O
  std::unordered_map<uint64_t, int64_t> overrides;  // tag -> reported result (short ops)
  size_t inner_in_flight = 0;

  const FaultRule* match(const EngineOp& op) {
    const FaultRule* hit = nullptr;
    for (size_t i = 0; i < rules.size(); ++i) {
      const FaultRule& r = rules[i];
      if ((op.kind == IoKind::kRead && !r.reads) || (op.kind == IoKind::kWrite && !r.writes))
        continue;
      if (op.offset + op.bytes <= r.min_end_offset) continue;
      const uint64_t n = ++seen[i];
      if (hit != nullptr || fired[i] >= r.max_fires || n < r.first) continue;
      if (r.period == 0 ? n != r.first : (n - r.first) % r.period != 0) continue;
      ++fired[i];
      hit = &r;
    }
    return hit;
  }
};

FaultInjectingIoEngine::FaultInjectingIoEngine(std::unique_ptr<IoEngine> inner,
                                               std::vector<FaultRule> rules)
    : inner_(std::move(inner)), impl_(std::make_unique<Impl>()) {
  impl_->seen.assign(rules.size(), 0);
  impl_->fired.assign(rules.size(), 0);
  impl_->rules = std::move(rules);
  name_ = std::string("faulty+") + inner_->name();
}

FaultInjectingIoEngine::~FaultInjectingIoEngine() = default;

void FaultInjectingIoEngine::submit(std::span<const EngineOp> ops) {
  std::vector<EngineOp> forward;
  std::vector<EngineCompletion> made_up;  // queued only once the inner engine took its part
  forward.reserve(ops.size());
  for (const EngineOp& op : ops) {
    ++stats_.ops;
    const FaultRule* rule = impl_->match(op);
    if (rule == nullptr || (rule->action == FaultAction::kShort && op.bytes < 2)) {
      forward.push_back(op);
      continue;
    }
    switch (rule->action) {
      case FaultAction::kShort: {
        ++stats_.shorts;
        EngineOp cut = op;
        const uint32_t half = op.bytes / 2;
        cut.bytes = static_cast<uint32_t>(align_down(half));
        if (cut.bytes == 0) {
          // Too small to cut on a 4 KiB boundary (O_DIRECT would refuse): transfer everything but
          // report an odd count just over half (the reported prefix really is on disk / in
          // memory), so the store must realign the remainder itself.
          cut.bytes = op.bytes;
          impl_->overrides[op.tag] = half | 1;
        }
        forward.push_back(cut);
        break;
      }
      case FaultAction::kEagain:
        ++stats_.eagains;
        made_up.push_back({op.tag, -EAGAIN});
        break;
      case FaultAction::kFail:
        ++stats_.failures;
        made_up.push_back({op.tag, -static_cast<int64_t>(rule->error)});
        break;
    }
  }
  if (!forward.empty()) {
    inner_->submit(forward);
    impl_->inner_in_flight += forward.size();
  }
  impl_->synthetic.insert(impl_->synthetic.end(), made_up.begin(), made_up.end());
}

size_t FaultInjectingIoEngine::reap(std::span<EngineCompletion> out, size_t min_complete) {
  size_t n = 0;
  while (n < out.size() && !impl_->synthetic.empty()) {
    out[n++] = impl_->synthetic.front();
    impl_->synthetic.pop_front();
  }
  if (n < out.size() && impl_->inner_in_flight > 0) {
    const size_t want = min_complete > n ? min_complete - n : 0;
    const size_t got = inner_->reap(out.subspan(n), std::min(want, impl_->inner_in_flight));
    impl_->inner_in_flight -= got;
    for (size_t i = n; i < n + got; ++i) {
      auto it = impl_->overrides.find(out[i].tag);
      if (it == impl_->overrides.end()) continue;
      if (out[i].result >= 0) out[i].result = std::min(out[i].result, it->second);
      impl_->overrides.erase(it);
    }
    n += got;
  }
  return n;
}

}  // namespace offgen
