// Converters from PubMedQA, MedMCQA and MedQA-USMLE rows to chat messages (docs/spec.md §Corpus). The layouts,
// file names and fields are documented in docs/data-corpus.md; keep the two in step.
#include "tandem/data/corpus_sources.h"
#include "tandem/strict_json.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <set>

namespace fs = std::filesystem;

namespace tandem::data {

namespace {

using ordered_json = nlohmann::ordered_json;

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// "file: line N: field F: problem" — the one shape of a malformed-input message.
[[noreturn]] void fail_field(const std::string& file, const std::string& where, const std::string& field,
                             const std::string& problem) {
    throw Error(file + ": " + where + ": field \"" + field + "\": " + problem);
}

std::string line_where(size_t line) { return "line " + std::to_string(line); }

// A required string field; null is allowed only when `nullable` (returns "").
std::string string_field(const ordered_json& row, const std::string& field, const std::string& file,
                         const std::string& where, bool nullable = false) {
    auto it = row.find(field);
    if (it == row.end()) fail_field(file, where, field, "missing");
    if (it->is_null() && nullable) return {};
    if (!it->is_string()) fail_field(file, where, field, std::string("expected a string, got ") + it->type_name());
    return it->get<std::string>();
}

// Each non-blank line of a JSON Lines file, parsed, with its 1-based line number.
template <typename Fn>
void for_each_json_line(const fs::path& path, const std::string& file_label, Fn&& fn) {
    const std::string text = read_file(path);
    size_t line_no = 0;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        std::string_view line(text.data() + pos, eol - pos);
        ++line_no;
        pos = eol + 1;
        if (std::all_of(line.begin(), line.end(), is_ascii_space)) continue;  // blank lines are not rows
        ordered_json row;
        try {
            row = ordered_json::parse(line);
        } catch (const nlohmann::json::parse_error& e) {
            throw Error(file_label + ": " + line_where(line_no) + ": malformed JSON: " + tandem::json_error_text(e));
        }
        if (!row.is_object())
            throw Error(file_label + ": " + line_where(line_no) + ": expected a JSON object, got " + row.type_name());
        fn(row, line_no);
    }
}

// "train" / "validation" / "test" from a file name, else the file's stem (up to the first dot).
std::string split_tag(const std::string& filename) {
    std::string stem = filename.substr(0, filename.find('.'));
    std::string lower = stem;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
    if (lower.find("train") != std::string::npos) return "train";
    if (lower.find("validation") != std::string::npos || lower.find("dev") != std::string::npos) return "validation";
    if (lower.find("test") != std::string::npos) return "test";
    return stem;
}

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, std::string_view prefix) {
    return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

// Plain files in `dir` whose name satisfies `accept`, sorted by name (byte order).
template <typename Accept>
std::vector<std::string> list_files(const fs::path& dir, Accept&& accept) {
    std::vector<std::string> names;
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return names;
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (!entry.is_regular_file()) continue;
        std::string name = entry.path().filename().string();
        if (accept(name)) names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    return names;
}

bool pubmedqa_file(const std::string& name) {
    return name == "ori_pqal.json" || (starts_with(name, "pqa_labeled") && ends_with(name, ".jsonl"));
}
// Our parsed copies, the official release (train.json / dev.json, JSON Lines despite the name) and a
// HuggingFace export as JSON Lines. Not the verbatim flattened copies (examples.jsonl, *.jsonl.gz).
bool medmcqa_file(const std::string& name) {
    return ends_with(name, ".parsed.jsonl") || name == "train.json" || name == "dev.json" || name == "train.jsonl" ||
           name == "dev.jsonl" || name == "validation.jsonl";
}
bool medqa_file(const std::string& name) { return ends_with(name, ".jsonl"); }

std::vector<Message> user_assistant(std::string user, std::string assistant) {
    std::vector<Message> messages(2);
    messages[0].role = "user";
    messages[0].content = std::move(user);
    messages[1].role = "assistant";
    messages[1].content = std::move(assistant);
    return messages;
}

// Fills messages or the rejection reason from the already-trimmed question / target.
void finish_row(SourceRow& row, const std::string& user_text, const std::string& empty_target_reason) {
    if (row.question.empty()) {
        row.rejected = "empty question";
    } else if (row.target.empty()) {
        row.rejected = empty_target_reason;
    } else {
        row.messages = user_assistant(user_text, row.target);
    }
}

// --- PubMedQA --------------------------------------------------------------------------------------

std::vector<std::string> string_list(const ordered_json& row, const std::string& field, const std::string& file,
                                     const std::string& where, bool required) {
    std::vector<std::string> out;
    auto it = row.find(field);
    if (it == row.end()) {
        if (required) fail_field(file, where, field, "missing");
        return out;
    }
    if (!it->is_array()) fail_field(file, where, field, std::string("expected a list of strings, got ") + it->type_name());
    for (size_t i = 0; i < it->size(); ++i) {
        const auto& v = (*it)[i];
        if (!v.is_string())
            fail_field(file, where, field + "[" + std::to_string(i) + "]", std::string("expected a string, got ") + v.type_name());
        out.push_back(v.get<std::string>());
    }
    return out;
}

SourceRow pubmedqa_row(const ordered_json& entry, const std::string& pmid, const std::string& file,
                       const std::string& where, size_t line, bool hf_layout) {
    if (!entry.is_object()) throw Error(file + ": " + where + ": expected a JSON object, got " + entry.type_name());
    SourceRow row;
    row.source = std::string(kPubMedQA);
    row.file = file;
    row.line = line;
    row.id = row.source + ":" + pmid;
    std::vector<std::string> contexts, labels;
    if (hf_layout) {
        // HuggingFace pubmed_qa (pqa_labeled) exported as JSON Lines: pubid, question,
        // context {contexts, labels, ...}, long_answer.
        row.question = trim_ascii(string_field(entry, "question", file, where));
        row.target = trim_ascii(string_field(entry, "long_answer", file, where));
        auto ctx = entry.find("context");
        if (ctx == entry.end()) fail_field(file, where, "context", "missing");
        if (!ctx->is_object()) fail_field(file, where, "context", std::string("expected an object, got ") + ctx->type_name());
        contexts = string_list(*ctx, "contexts", file, where, true);
        labels = string_list(*ctx, "labels", file, where, false);
    } else {
        row.question = trim_ascii(string_field(entry, "QUESTION", file, where));
        row.target = trim_ascii(string_field(entry, "LONG_ANSWER", file, where));
        contexts = string_list(entry, "CONTEXTS", file, where, true);
        labels = string_list(entry, "LABELS", file, where, false);
    }
    if (!labels.empty() && labels.size() != contexts.size())
        fail_field(file, where, hf_layout ? "context.labels" : "LABELS",
                   std::to_string(labels.size()) + " labels for " + std::to_string(contexts.size()) + " contexts");
    finish_row(row, pubmedqa_user_text(row.question, labels, contexts), "no long answer");
    return row;
}

// --- MedMCQA ---------------------------------------------------------------------------------------

SourceRow medmcqa_row(const ordered_json& entry, const std::string& file, const std::string& split, size_t line) {
    const std::string where = line_where(line);
    SourceRow row;
    row.source = std::string(kMedMCQA);
    row.file = file;
    row.line = line;
    // Row key: `row_id` (our parsed files) else `id` (the official release's UUID).
    std::string key;
    if (entry.contains("row_id")) key = string_field(entry, "row_id", file, where);
    else key = string_field(entry, "id", file, where);
    if (key.empty()) fail_field(file, where, entry.contains("row_id") ? "row_id" : "id", "empty");
    row.id = row.source + ":" + split + "/" + key;
    row.question = trim_ascii(string_field(entry, "question", file, where));
    std::vector<std::pair<std::string, std::string>> options;
    const char* fields[] = {"opa", "opb", "opc", "opd"};
    const char* letters[] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i) options.emplace_back(letters[i], trim_ascii(string_field(entry, fields[i], file, where)));
    // `exp` may be null or absent: such a row has no explanation to train on.
    std::string exp;
    if (entry.contains("exp")) exp = string_field(entry, "exp", file, where, /*nullable=*/true);
    row.target = trim_ascii(exp);
    finish_row(row, multiple_choice_user_text(row.question, options), "no explanation");
    return row;
}

// --- MedQA-USMLE -----------------------------------------------------------------------------------

SourceRow medqa_row(const ordered_json& entry, const std::string& file, const std::string& split, size_t line,
                    size_t row_number) {
    const std::string where = line_where(line);
    SourceRow row;
    row.source = std::string(kMedQA);
    row.file = file;
    row.line = line;
    // Row key: `realidx` (MedAgentsBench copy) else the 0-based row number in the file.
    std::string key = std::to_string(row_number);
    if (auto it = entry.find("realidx"); it != entry.end()) {
        if (it->is_number_unsigned()) key = std::to_string(it->get<uint64_t>());
        else if (it->is_string()) key = it->get<std::string>();
        else fail_field(file, where, "realidx", std::string("expected an integer, got ") + it->type_name());
    }
    row.id = row.source + ":" + split + "/" + key;
    row.question = trim_ascii(string_field(entry, "question", file, where));
    auto opts = entry.find("options");
    if (opts == entry.end()) fail_field(file, where, "options", "missing");
    if (!opts->is_object()) fail_field(file, where, "options", std::string("expected an object, got ") + opts->type_name());
    std::vector<std::pair<std::string, std::string>> options;
    for (auto it = opts->begin(); it != opts->end(); ++it) {
        if (!it->is_string()) fail_field(file, where, "options." + it.key(), std::string("expected a string, got ") + it->type_name());
        options.emplace_back(it.key(), trim_ascii(it->get<std::string>()));
    }
    std::sort(options.begin(), options.end());  // A, B, C, D whatever the key order in the file
    const std::string letter = string_field(entry, "answer_idx", file, where);
    auto chosen = std::find_if(options.begin(), options.end(), [&](const auto& o) { return o.first == letter; });
    if (chosen == options.end()) {
        row.rejected = "answer_idx \"" + letter + "\" is not an option";
        return row;
    }
    if (entry.contains("answer")) {
        const std::string answer = trim_ascii(string_field(entry, "answer", file, where));
        if (answer != chosen->second) {
            row.rejected = "answer text differs from options[answer_idx]";
            return row;
        }
    }
    row.target = chosen->second.empty() ? std::string() : medqa_answer_sentence(chosen->second);
    finish_row(row, multiple_choice_user_text(row.question, options), "empty correct option");
    return row;
}

}  // namespace

std::string trim_ascii(std::string_view s) {
    size_t b = 0, e = s.size();
    while (b < e && is_ascii_space(s[b])) ++b;
    while (e > b && is_ascii_space(s[e - 1])) --e;
    return std::string(s.substr(b, e - b));
}

std::string normalise_for_dedup(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    bool pending_space = false;
    for (char c : s) {
        if (is_ascii_space(c)) {
            pending_space = !out.empty();
            continue;
        }
        if (pending_space) out.push_back(' ');
        pending_space = false;
        out.push_back((c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c);
    }
    return out;
}

std::string dedup_key(const SourceRow& row) {
    return normalise_for_dedup(row.question) + '\x1f' + normalise_for_dedup(row.target);
}

std::string pubmedqa_user_text(const std::string& question, const std::vector<std::string>& labels,
                               const std::vector<std::string>& contexts) {
    std::string text = question;
    if (contexts.empty()) return text;
    text += "\n\nContext:";
    for (size_t i = 0; i < contexts.size(); ++i) {
        text += "\n";
        const std::string label = i < labels.size() ? trim_ascii(labels[i]) : std::string();
        if (!label.empty()) text += label + ": ";
        text += trim_ascii(contexts[i]);
    }
    return text;
}

std::string multiple_choice_user_text(const std::string& question,
                                      const std::vector<std::pair<std::string, std::string>>& options) {
    std::string text = question + "\n";
    for (const auto& [letter, option] : options) {
        text += "\n" + letter + ".";
        if (!option.empty()) text += " " + option;
    }
    return text;
}

std::string medqa_answer_sentence(const std::string& option_text) {
    std::string sentence = "The correct answer is: " + option_text;
    const char last = option_text.empty() ? '\0' : option_text.back();
    if (last != '.' && last != '!' && last != '?') sentence += '.';
    return sentence;
}

std::vector<std::string> source_files(const fs::path& sources, std::string_view source) {
    std::vector<std::string> names;
    std::string dir;
    if (source == kPubMedQA) {
        dir = std::string(kPubMedQADir);
        names = list_files(sources / dir, pubmedqa_file);
    } else if (source == kMedMCQA) {
        dir = std::string(kMedMCQADir);
        names = list_files(sources / dir, medmcqa_file);
    } else if (source == kMedQA) {
        dir = std::string(kMedQADir);
        names = list_files(sources / dir, medqa_file);
    } else {
        throw Error("unknown corpus source \"" + std::string(source) + "\"");
    }
    for (auto& n : names) n = dir + "/" + n;
    return names;
}

std::vector<SourceRow> read_pubmedqa(const fs::path& sources) {
    std::vector<SourceRow> rows;
    for (const std::string& file : source_files(sources, kPubMedQA)) {
        const fs::path path = sources / file;
        if (ends_with(file, ".jsonl")) {
            for_each_json_line(path, file, [&](const ordered_json& entry, size_t line) {
                const std::string where = line_where(line);
                auto it = entry.find("pubid");
                if (it == entry.end()) fail_field(file, where, "pubid", "missing");
                std::string pmid;
                if (it->is_number_unsigned()) pmid = std::to_string(it->get<uint64_t>());
                else if (it->is_string()) pmid = it->get<std::string>();
                else fail_field(file, where, "pubid", std::string("expected an integer, got ") + it->type_name());
                rows.push_back(pubmedqa_row(entry, pmid, file, where, line, /*hf_layout=*/true));
            });
            continue;
        }
        // The official ori_pqal.json: one object keyed by PMID, read in file order.
        ordered_json all;
        try {
            all = ordered_json::parse(read_file(path));
        } catch (const nlohmann::json::parse_error& e) {
            throw Error(file + ": malformed JSON: " + tandem::json_error_text(e));
        }
        if (!all.is_object()) throw Error(file + ": expected one JSON object keyed by PubMed id, got " + std::string(all.type_name()));
        size_t n = 0;
        for (auto it = all.begin(); it != all.end(); ++it) {
            ++n;
            rows.push_back(pubmedqa_row(it.value(), it.key(), file, "entry \"" + it.key() + "\"", n, /*hf_layout=*/false));
        }
    }
    return rows;
}

std::vector<SourceRow> read_medmcqa(const fs::path& sources) {
    std::vector<SourceRow> rows;
    for (const std::string& file : source_files(sources, kMedMCQA)) {
        const std::string split = split_tag(fs::path(file).filename().string());
        for_each_json_line(sources / file, file, [&](const ordered_json& entry, size_t line) {
            rows.push_back(medmcqa_row(entry, file, split, line));
        });
    }
    return rows;
}

std::vector<SourceRow> read_medqa(const fs::path& sources) {
    std::vector<SourceRow> rows;
    for (const std::string& file : source_files(sources, kMedQA)) {
        const std::string split = split_tag(fs::path(file).filename().string());
        size_t row_number = 0;
        for_each_json_line(sources / file, file, [&](const ordered_json& entry, size_t line) {
            rows.push_back(medqa_row(entry, file, split, line, row_number++));
        });
    }
    return rows;
}

}  // namespace tandem::data
