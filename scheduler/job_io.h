// Batch job files: parses request JSONL (simple {"id","prompt"} form or OpenAI Batch API lines)
// into Requests with per-line errors, and renders Results as output JSONL records.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/request.h"

namespace offgen {

struct JobLine {
  int64_t line_no = 0;              // 1-based line in the input file
  std::string id;                   // request id (custom_id for OpenAI lines)
  bool openai = false;              // input used the OpenAI Batch API shape
  std::optional<Request> request;   // absent when the line is invalid
  std::string error;                // why the line is invalid: names the line and field
  std::string error_kind;           // machine-readable class of the error (see below)
  std::string error_field;          // JSON path of the offending field; empty when none applies
};

// Error kinds of error records: invalid_json, invalid_utf8, not_an_object, missing_field,
// unknown_field, wrong_type, invalid_value, conflicting_fields, duplicate_key, duplicate_id (from
// parsing) and prompt_too_long, does_not_fit, request_failed (from generation).

// Parses one line. `defaults` supplies sampling values the line does not override.
JobLine parse_request_line(const std::string& line, int64_t line_no, const SamplingParams& defaults,
                           bool chat_default);

// Reads a whole JSONL file: blank (whitespace-only) lines are skipped but keep their line numbers,
// a UTF-8 byte-order mark on the first line and a CR before each LF are ignored; duplicate ids
// become per-line errors (the later line's record gets the id "ID#line-N").
// Throws offgen::Error(kIo) when the file cannot be read.
std::vector<JobLine> read_request_file(const std::string& path, const SamplingParams& defaults,
                                       bool chat_default);

// Turns every line whose id an earlier line already has into a per-line error (duplicate_id; its
// record gets the id "ID#line-N"). read_request_file does this; callers that parse lines
// themselves (the Python API) call it over their lines.
void mark_duplicate_ids(std::vector<JobLine>& lines);

// Error records counted by kind and by field (records without a field are counted by kind only).
struct ErrorCounts {
  int64_t total = 0;
  std::map<std::string, int64_t> by_kind, by_field;
  // Counts `record` when it is an error record (either output shape); false otherwise. Records
  // written before kinds existed count as kind "unknown".
  bool add(const nlohmann::json& record);
};

// The output record of a finished request, in the shape of its input line.
nlohmann::json result_record(const JobLine& line, const Result& r, const std::string& model_name);
// The output record of an input line that could not be parsed: "error" holds the message, the
// line number, the kind and the field (null when none applies).
nlohmann::json error_record(const JobLine& line);

}  // namespace offgen
