#pragma once
// JSON written the way Python's json.dumps(x, ensure_ascii=False) writes it (", " and ": "
// separators, key order kept, non-ASCII characters as-is). The Qwen3 template serialises tool-call
// arguments with transformers' `tojson` filter, which is exactly that.
#include <nlohmann/json.hpp>

#include <string>

namespace tandem::data {

std::string to_python_json(const nlohmann::ordered_json& value);

}  // namespace tandem::data
