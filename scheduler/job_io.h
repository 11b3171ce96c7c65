// Batch job files: parses request JSONL (simple {"id","prompt"} form or OpenAI Batch API lines)
// into Requests with per-line errors, and renders Results as output JSONL records.
#pragma once

#include <cstdint>
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
};

// Parses one line. `defaults` supplies sampling values the line does not override.
JobLine parse_request_line(const std::string& line, int64_t line_no, const SamplingParams& defaults,
                           bool chat_default);

// Reads a whole JSONL file (blank lines skipped); duplicate ids become per-line errors.
// Throws offgen::Error(kIo) when the file cannot be read.
std::vector<JobLine> read_request_file(const std::string& path, const SamplingParams& defaults,
                                       bool chat_default);

// The output record of a finished request, in the shape of its input line.
nlohmann::json result_record(const JobLine& line, const Result& r, const std::string& model_name);
// The output record of an input line that could not be parsed.
nlohmann::json error_record(const JobLine& line);

}  // namespace offgen
