// Leveled stderr logging.
#include "runtime/core/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace offgen {
namespace {

LogLevel initial_level() {
  const char* e = std::getenv("OFFGEN_LOG");
  if (!e) return LogLevel::kInfo;
  if (!std::strcmp(e, "debug")) return LogLevel::kDebug;
  if (!std::strcmp(e, "warn")) return LogLevel::kWarn;
  if (!std::strcmp(e, "error")) return LogLevel::kError;
  return LogLevel::kInfo;
}

std::atomic<LogLevel> g_level{initial_level()};
std::mutex g_mu;

}  // namespace

LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }
void set_log_level(LogLevel level) { g_level.store(level); }

void log_line(LogLevel level, const std::string& message) {
  static const char* kTags[] = {"debug", "info", "warn", "error"};
  std::lock_guard lock(g_mu);
  std::fprintf(stderr, "offgen: %s: %s\n", kTags[static_cast<int>(level)], message.c_str());
}

}  // namespace offgen
