// The KV-policy registry's entries and lookups.
#include "policies/kv/kv_registry.h"

#include <fmt/format.h>

#include "policies/kv/eviction_policies.h"
#include "runtime/core/error.h"

namespace offgen {
namespace {

constexpr uint32_t operator|(KvParam a, KvParam b) {
  return static_cast<uint32_t>(a) | static_cast<uint32_t>(b);
}
constexpr uint32_t operator|(uint32_t a, KvParam b) { return a | static_cast<uint32_t>(b); }

// The eviction policies read the budget and what it bounds; each adds its own settings.
constexpr uint32_t kEvicting = KvParam::kBudget | KvParam::kScope;

std::vector<KvPolicyInfo> make_registry() {
  using K = KvPolicyKind;
  using C = ContextSelection;
  using S = ContextScores;
  return {
      {K::kFull, "full",
       [](const KvPolicyConfig&) -> std::unique_ptr<KvPolicy> {
         return std::make_unique<FullPolicy>();
       },
       false, C::kKeepAll, S::kNone, 0},
      {K::kWindow, "window",
       [](const KvPolicyConfig&) -> std::unique_ptr<KvPolicy> {
         return std::make_unique<WindowPolicy>();
       },
       true, C::kNone, S::kNone, kEvicting},
      {K::kSinks, "sinks",
       [](const KvPolicyConfig& c) -> std::unique_ptr<KvPolicy> {
         return std::make_unique<SinksPolicy>(c.sinks);
       },
       true, C::kSlotPolicy, S::kNone, kEvicting | KvParam::kSinks},
      {K::kH2o, "h2o",
       [](const KvPolicyConfig& c) -> std::unique_ptr<KvPolicy> {
         return std::make_unique<H2oPolicy>(c.recent_fraction);
       },
       true, C::kSlotPolicy, S::kPrefillAttention, kEvicting | KvParam::kRecentFraction},
      {K::kTova, "tova",
       [](const KvPolicyConfig&) -> std::unique_ptr<KvPolicy> {
         return std::make_unique<TovaPolicy>();
       },
       true, C::kNone, S::kNone, kEvicting},
      {K::kSnapKv, "snapkv",
       [](const KvPolicyConfig& c) -> std::unique_ptr<KvPolicy> {
         return std::make_unique<SnapKvPolicy>(c.window, c.kernel);
       },
       true, C::kSlotPolicy, S::kFirstQuestion, kEvicting | KvParam::kWindow | KvParam::kKernel},
      // KVzip compresses shared contexts only: the budget is the context's retained ratio.
      {K::kKvzip, "kvzip", nullptr, false, C::kKvzipGlobal, S::kNone,
       static_cast<uint32_t>(KvParam::kBudget)},
      {K::kKvzipUniform, "kvzip-uniform", nullptr, false, C::kKvzipUniformHead, S::kNone,
       static_cast<uint32_t>(KvParam::kBudget)},
  };
}

std::vector<std::string> names_where(bool (*pred)(const KvPolicyInfo&)) {
  std::vector<std::string> out;
  for (const KvPolicyInfo& p : kv_policies())
    if (pred(p)) out.emplace_back(p.name);
  return out;
}

}  // namespace

const std::vector<KvPolicyInfo>& kv_policies() {
  static const std::vector<KvPolicyInfo> registry = [] {
    std::vector<KvPolicyInfo> r = make_registry();
    // Entries are indexed by kind.
    for (size_t i = 0; i < r.size(); ++i)
      OFFGEN_CHECK(static_cast<size_t>(r[i].kind) == i, kInternal,
                   "kv policy registry: entry {} ({}) is out of order", i, r[i].name);
    return r;
  }();
  return registry;
}

const KvPolicyInfo& kv_policy_info(KvPolicyKind kind) {
  const auto& r = kv_policies();
  const auto i = static_cast<size_t>(kind);
  OFFGEN_CHECK(i < r.size(), kInternal, "kv policy kind {} is not registered", i);
  return r[i];
}

std::string_view kv_policy_name(KvPolicyKind kind) { return kv_policy_info(kind).name; }

const KvPolicyInfo* find_kv_policy(std::string_view name) {
  for (const KvPolicyInfo& p : kv_policies())
    if (p.name == name) return &p;
  return nullptr;
}

KvPolicyKind parse_kv_policy(std::string_view name) {
  const KvPolicyInfo* p = find_kv_policy(name);
  OFFGEN_CHECK(p != nullptr, kConfig, "--kv-policy {}: unknown (known: {})", name,
               fmt::join(kv_policy_names(), ", "));
  return p->kind;
}

std::vector<std::string> kv_policy_names() {
  return names_where([](const KvPolicyInfo&) { return true; });
}

std::vector<std::string> context_policy_names() {
  return names_where([](const KvPolicyInfo& p) { return p.compresses_context(); });
}

std::vector<std::string> context_only_policy_names() {
  return names_where([](const KvPolicyInfo& p) { return p.make == nullptr; });
}

std::string_view kv_scope_name(KvScope scope) {
  switch (scope) {
    case KvScope::kAll:
      return "all";
    case KvScope::kPrompt:
      return "prompt";
  }
  OFFGEN_THROW(kInternal, "kv scope {} is not known", static_cast<int>(scope));
}

KvScope parse_kv_scope(std::string_view name) {
  for (KvScope s : {KvScope::kAll, KvScope::kPrompt})
    if (kv_scope_name(s) == name) return s;
  OFFGEN_THROW(kConfig, "kv scope '{}': expected all or prompt", name);
}

}  // namespace offgen
