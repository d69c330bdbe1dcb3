#pragma once
// Strict JSON for files a person writes (experiment files, run-folder records): nlohmann-json's
// parser keeps the LAST of two equal keys silently and reports a number too large for a double
// (1e400) as a bare "number overflow" exception; both must be one-line errors that name the file
// and the field. parse_json_strict parses with a callback that tracks the path of the value being
// read ("optimizer.lr", "lora.targets[2]"), refuses a key repeated in one object, and turns every
// nlohmann exception into tandem::Error.
#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace tandem {

// Throws tandem::Error:
//   "<source>: field optimizer.lr: duplicate key (an object may name a field once)"
//   "<source>: field optimizer.lr: number out of range (1e400 does not fit a double)"
//   "<source>: not valid JSON (near field model.config): <parser message>"
nlohmann::json parse_json_strict(std::string_view text, const std::string& source);

// nlohmann's exception text without its "[json.exception.parse_error.101] " prefix (a library's
// bookkeeping, not a user's message): every place that shows a JSON error goes through this.
std::string json_error_text(const nlohmann::json::exception& e);

}  // namespace tandem
