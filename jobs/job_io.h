// Batch job files: parses request JSONL (simple {"id","prompt"} form or OpenAI Batch API lines)
// into Requests with per-line errors, and renders Results as output JSONL records.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/stop.h"
#include "scheduler/request.h"

namespace offgen {

struct JobLine {
  int64_t line_no = 0;              // 1-based line in the input file
  std::string id;                   // request id (custom_id for OpenAI lines); its digits when
                                    // the line gives a JSON integer
  bool numeric_id = false;          // the id is a JSON integer (7 and "7" are different ids)
  bool own_id = false;              // the line gives its id (else "line-N" or a variant)
  bool own_seed = false;            // the line gives its seed (else the default mixed with the id)
  bool openai = false;              // input used the OpenAI Batch API shape
  std::optional<Request> request;   // absent when the line is invalid
  std::string error;                // why the line is invalid: names the line and field
  std::string error_kind;           // machine-readable class of the error (see below)
  std::string error_field;          // JSON path of the offending field; empty when none applies

  // The id as records hold it: a JSON integer for a numeric id, else a string.
  nlohmann::json id_value() const;
  // The id's key, unique in the file: its JSON text (7 and "7" differ).
  std::string key() const { return id_key(id_value()); }
  // The key of a record's id value (a string or an integer).
  static std::string id_key(const nlohmann::json& id);
};

// Error kinds of error records: invalid_json, invalid_utf8, not_an_object, missing_field,
// unknown_field, wrong_type, invalid_value, conflicting_fields, duplicate_key, duplicate_id (from
// parsing) and prompt_too_long, does_not_fit, request_failed, non_finite_logits and
// invalid_request (a chat template that refuses or fails on the messages) from generation.

// Parses one line. `defaults` supplies sampling values the line does not override; an
// OpenAI-shaped line's temperature defaults to `openai_temperature` (--temperature when given),
// else to 1 as the API's does.
JobLine parse_request_line(const std::string& line, int64_t line_no, const SamplingParams& defaults,
                           bool chat_default,
                           std::optional<float> openai_temperature = std::nullopt);

// The bytes of a job's file, read once: a regular file, a named pipe, or "-" for standard input.
// Throws offgen::Error(kIo) naming the path and `what` ("input file", "context file") when it
// cannot be read. Checks `stop` ("input") between reads and when a signal interrupts one (EINTR:
// otherwise retried), so a pipe whose writer waits does not hold a stop request back.
std::string read_job_input(const std::string& path, const char* what = "input file",
                           const StopToken& stop = {});

// Parses a whole JSONL text: blank (whitespace-only) lines are
// skipped but keep their line numbers, a UTF-8 byte-order mark on the first line and a CR before
// each LF are ignored; duplicate ids become per-line errors (the later line's record gets the id
// "ID#line-N"). Every line's id is unique: a generated one ("line-N" for a line without an id,
// "ID#line-N") that equals an id given by some line gets "#2", "#3", ... appended.
// Checks `stop` ("prepare") every 256 lines.
std::vector<JobLine> parse_request_text(std::string_view text, const SamplingParams& defaults,
                                        bool chat_default,
                                        std::optional<float> openai_temperature = std::nullopt,
                                        const StopToken& stop = {});
// read_job_input + parse_request_text.
std::vector<JobLine> read_request_file(const std::string& path, const SamplingParams& defaults,
                                       bool chat_default);

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
// A generated text as the output records hold it: invalid UTF-8 (a generation cut inside a
// multi-byte character by max_tokens or a stop) replaced by U+FFFD exactly as the journal's JSON
// writer replaces it, so an API returning texts returns what the CLI writes.
std::string text_as_recorded(const std::string& text);

}  // namespace offgen
