// The KV-policy registry: one entry per policy (its name, its eviction policy's factory, and its
// traits: whether it evicts from a sequence's own KV, how it compresses a shared context, which
// KvPolicyConfig parameters it reads). Every other place asks it; names are parsed only here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace offgen {

class KvPolicy;
struct KvPolicyConfig;

// Adding a policy: a value here, its entry in kv_registry.cpp, its class (eviction_policies.h).
enum class KvPolicyKind { kFull, kWindow, kSinks, kH2o, kTova, kSnapKv, kKvzip, kKvzipUniform };

// What the KV budget bounds (KvPolicyConfig::scope): the whole table at every step, or the
// prompt, compacted once (generated tokens are then added without eviction).
enum class KvScope { kAll, kPrompt };

// The KvPolicyConfig parameters a policy reads (bits of KvPolicyInfo::params).
enum class KvParam : uint32_t {
  kBudget = 1,
  kScope = 2,
  kRecentFraction = 4,
  kSinks = 8,
  kWindow = 16,
  kKernel = 32,
};

// How a policy compresses a prefilled shared context (scheduler/context_compression.h).
enum class ContextSelection {
  kNone,              // it cannot
  kKeepAll,           // every pair is kept
  kKvzipGlobal,       // KVzip's reconstruction scores, one threshold over all layers x heads
  kKvzipUniformHead,  // the same scores, the same count per (layer, head)
  kSlotPolicy,        // the eviction policy's keep() per (layer, head) over context_scores
};
// The scores a kSlotPolicy selection reads per context slot.
enum class ContextScores {
  kNone,              // none (the policy decides by position)
  kPrefillAttention,  // the attention the context's own prefill accumulated (H2O)
  kFirstQuestion,     // the attention of the first question's prompt (SnapKV's window)
};

struct KvPolicyInfo {
  KvPolicyKind kind;
  std::string_view name;
  // The slot policy of a sequence's own table; null when the policy only compresses shared
  // contexts (make_kv_policy refuses it).
  std::unique_ptr<KvPolicy> (*make)(const KvPolicyConfig& config);
  bool evicts;  // evicts from a sequence's own KV table (its tables hold the budget, not all)
  ContextSelection context;
  ContextScores context_scores;
  uint32_t params;  // KvParam bits
  bool takes(KvParam p) const { return (params & static_cast<uint32_t>(p)) != 0; }
  bool compresses_context() const { return context != ContextSelection::kNone; }
};

// Every policy, in the registry's order.
const std::vector<KvPolicyInfo>& kv_policies();
const KvPolicyInfo& kv_policy_info(KvPolicyKind kind);
std::string_view kv_policy_name(KvPolicyKind kind);
// The entry named `name`; null when there is none.
const KvPolicyInfo* find_kv_policy(std::string_view name);
// Throws offgen::Error(kConfig) "--kv-policy NAME: unknown (known: ...)".
KvPolicyKind parse_kv_policy(std::string_view name);
// All names; those that compress a shared context; those that only do that (no slot policy).
std::vector<std::string> kv_policy_names();
std::vector<std::string> context_policy_names();
std::vector<std::string> context_only_policy_names();

std::string_view kv_scope_name(KvScope scope);  // "all", "prompt"
// Throws offgen::Error(kConfig) "kv scope 'X': expected all or prompt".
KvScope parse_kv_scope(std::string_view name);

}  // namespace offgen
