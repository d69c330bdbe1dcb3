#pragma once
// What several subcommands read the same way: the tokenizer folder (--tokenizer, else the shared
// assets), a corpus folder (--corpus: the folder or a run folder holding corpus/) and the max_len it
// was built with; JSON Lines from stdin, one output line per input line (tokens encode, template
// render).
#include <nlohmann/json.hpp>

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>

namespace tandem::cli {

std::filesystem::path tokenizer_folder(const std::string& flag);
std::filesystem::path corpus_folder(const std::filesystem::path& given);
// The max_len the corpus was built with (accounting.json), else docs/spec.md's 512.
size_t corpus_max_len(const std::filesystem::path& corpus);

// A per-line failure: names the field at fault.
struct LineError {
    std::string field;
    std::string message;
};

using nlohmann::ordered_json;

// The field `name` of `obj` when it has the type is_type checks, else a LineError naming it.
template <typename T>
const ordered_json& field(const ordered_json& obj, const std::string& name, bool (ordered_json::*is_type)() const noexcept,
                          const char* type_name) {
    auto it = obj.find(name);
    if (it == obj.end()) throw LineError{name, "missing"};
    if (!((*it).*is_type)()) throw LineError{name, std::string("must be ") + type_name};
    return *it;
}

// Reads JSON Lines from stdin, writes handle(line) for each; a malformed line is reported on stderr
// with its line number and field, and with keep_going its output is {"error": "..."}. Returns the
// exit status (1 if any line failed).
int process_jsonl(bool keep_going, const std::function<nlohmann::ordered_json(const nlohmann::ordered_json&)>& handle);

}  // namespace tandem::cli
