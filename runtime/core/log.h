// Leveled logging to stderr (thread-safe line writes). OFFGEN_LOG=debug|info|warn|error.
#pragma once

#include <fmt/format.h>

#include <string>

namespace offgen {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

LogLevel log_level();
void set_log_level(LogLevel level);
void log_line(LogLevel level, const std::string& message);

template <class... Args>
void log_info(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::kInfo) log_line(LogLevel::kInfo, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void log_warn(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::kWarn) log_line(LogLevel::kWarn, fmt::format(f, std::forward<Args>(args)...));
}
template <class... Args>
void log_debug(fmt::format_string<Args...> f, Args&&... args) {
  if (log_level() <= LogLevel::kDebug) log_line(LogLevel::kDebug, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace offgen
