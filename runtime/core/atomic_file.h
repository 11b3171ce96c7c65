// Whole-file replacement that readers never see half-done: a temporary file beside the target,
// written with checked writes, fsynced, renamed into place, and the directory fsynced.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace offgen {

// Replaces `path` with `text` atomically. On any failure (ENOSPC, EIO, a missing directory)
// throws Error(kIo) naming the file and the cause, and leaves no temporary file behind.
void write_file_atomically(const std::string& path, std::string_view text);

// `doc` (indented, invalid UTF-8 replaced) through write_file_atomically.
void write_json_atomically(const std::string& path, const nlohmann::json& doc);

// Throws Error(kConfig) unless a file can be created in `path`'s directory (checked by creating
// and removing a temporary file there), so that a job refuses a bad --report path at once.
void check_writable_location(const std::string& path, const std::string& what);

}  // namespace offgen
