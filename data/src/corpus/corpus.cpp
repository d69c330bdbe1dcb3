// Corpus build: converters -> dedup -> supervision check -> accounting -> split (corpus.h).
#include "tandem/data/corpus.h"
#include "tandem/strict_json.h"

#include "tandem/atomic_file.h"
#include "tandem/data/corpus_sources.h"
#include "tandem/data/supervision.h"
#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace fs = std::filesystem;
using nlohmann::json;

namespace tandem::data {

size_t SourceAccounting::rejected_total() const {
    size_t n = 0;
    for (const auto& [reason, count] : rejected) n += count;
    return n;
}

size_t CorpusBuild::input_total() const {
    size_t n = 0;
    for (const auto& a : accounting) n += a.input;
    return n;
}

namespace {
std::optional<std::string> chat_marker_in(const std::vector<Message>& messages) {
    for (const Message& m : messages)
        for (const char* marker : {"<|im_start|>", "<|im_end|>"})
            if (m.content.find(marker) != std::string::npos) return std::string(marker);
    return std::nullopt;
}
}  // namespace

CorpusBuild build_corpus(const fs::path& sources, const Tokenizer& tokenizer, const CorpusOptions& options) {
    std::error_code ec;
    if (!fs::is_directory(sources, ec)) throw Error(sources.string() + ": sources folder not found");
    CorpusBuild build;
    build.options = options;
    build.sources = sources.string();

    struct SourceReader {
        std::string_view name;
        std::vector<SourceRow> (*read)(const fs::path&);
    };
    const SourceReader readers[] = {{kPubMedQA, read_pubmedqa}, {kMedMCQA, read_medmcqa}, {kMedQA, read_medqa}};

    std::unordered_map<std::string, std::string> first_with_key;      // dedup key -> record id kept
    std::unordered_map<std::string, std::string> where_id_was_seen;  // record id -> "file line N"
    size_t files_found = 0;
    for (const auto& reader : readers) {
        SourceAccounting acc;
        acc.source = std::string(reader.name);
        acc.files = source_files(sources, reader.name);
        files_found += acc.files.size();
        std::vector<SourceRow> rows = reader.read(sources);
        acc.input = rows.size();
        for (SourceRow& row : rows) {
            const std::string here = row.file + " line " + std::to_string(row.line);
            auto [seen_at, fresh] = where_id_was_seen.emplace(row.id, here);
            if (!fresh) throw Error(here + ": record id \"" + row.id + "\" already used at " + seen_at->second);
            auto reject = [&](const std::string& reason) {
                ++acc.rejected[reason];
                build.not_converted.push_back({row.id, row.file, row.line, "rejected", reason});
            };
            if (row.rejected) {
                reject(*row.rejected);
                continue;
            }
            const std::string key = dedup_key(row);
            if (auto it = first_with_key.find(key); it != first_with_key.end()) {
                ++acc.duplicate;
                build.not_converted.push_back({row.id, row.file, row.line, "duplicate", "duplicate of " + it->second});
                continue;
            }
            // A chat marker inside a text would end or open a turn in the middle of it (the
            // tokenizer recognises it as the special token), so the record's structure would be wrong.
            if (auto marker = chat_marker_in(row.messages)) {
                reject("text contains the chat marker " + *marker);
                continue;
            }
            TokenizedRecord tokenized;
            try {
                tokenized = tokenize_record(tokenizer, options.template_kind, row.messages, options.max_len);
            } catch (const RecordRejected& e) {
                reject(e.what());
                continue;
            }
            if (tokenized.supervised_count == 0) {
                // A record without a supervised token inside max_len trains nothing, and an update made
                // only of such records would divide by zero supervised tokens.
                reject("no supervised token within max_len " + std::to_string(options.max_len));
                continue;
            }
            first_with_key.emplace(key, row.id);
            ++acc.converted;
            Record rec;
            rec.index = build.records.size();
            rec.id = row.id;
            rec.source = row.source;
            rec.messages = std::move(row.messages);
            rec.full_length = tokenized.full_length;
            rec.length = tokenized.truncated_length;
            rec.boundary = tokenized.boundary;
            rec.supervised = tokenized.supervised_count;
            build.records.push_back(std::move(rec));
        }
        build.accounting.push_back(std::move(acc));
    }
    if (files_found == 0)
        throw Error(sources.string() + ": no corpus files found (expected pubmedqa/, medmcqa/ or medqa_usmle/; "
                                       "see docs/data-corpus.md)");
    build.split = split_records(build.records, options.seed, options.heldout_fraction);
    for (size_t i : build.split.train) build.records[i].split = "train";
    for (size_t i : build.split.heldout) build.records[i].split = "heldout";
    return build;
}

// --- JSON ------------------------------------------------------------------------------------------

json messages_to_json(const std::vector<Message>& messages) {
    json out = json::array();
    for (const Message& m : messages) {
        json j = {{"role", m.role}, {"content", m.content}};
        if (m.reasoning_content) j["reasoning_content"] = *m.reasoning_content;
        out.push_back(std::move(j));
    }
    return out;
}

std::vector<Message> messages_from_json(const json& j, const std::string& where) {
    if (!j.is_array()) throw Error(where + ": field \"messages\": expected a list");
    std::vector<Message> messages;
    for (size_t i = 0; i < j.size(); ++i) {
        const json& m = j[i];
        const std::string field = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) throw Error(where + ": field \"" + field + "\": expected an object");
        Message msg;
        for (const char* key : {"role", "content"}) {
            auto it = m.find(key);
            if (it == m.end() || !it->is_string())
                throw Error(where + ": field \"" + field + "." + key + "\": missing or not a string");
        }
        msg.role = m["role"].get<std::string>();
        msg.content = m["content"].get<std::string>();
        if (auto it = m.find("reasoning_content"); it != m.end() && !it->is_null()) {
            if (!it->is_string()) throw Error(where + ": field \"" + field + ".reasoning_content\": not a string");
            msg.reasoning_content = it->get<std::string>();
        }
        messages.push_back(std::move(msg));
    }
    return messages;
}

json record_to_json(const Record& r) {
    json j;
    j["index"] = r.index;
    j["id"] = r.id;
    j["source"] = r.source;
    j["split"] = r.split;
    j["messages"] = messages_to_json(r.messages);
    j["tokens"] = {{"full_length", r.full_length},
                   {"length", r.length},
                   {"boundary", r.boundary},
                   {"supervised", r.supervised}};
    return j;
}

namespace {
std::string string_of(const json& j, const char* field, const std::string& where) {
    auto it = j.find(field);
    if (it == j.end() || !it->is_string()) throw Error(where + ": field \"" + field + "\": missing or not a string");
    return it->get<std::string>();
}
size_t size_of(const json& j, const char* field, const std::string& where) {
    auto it = j.find(field);
    if (it == j.end() || !it->is_number_unsigned())
        throw Error(where + ": field \"" + std::string(field) + "\": missing or not a non-negative integer");
    return it->get<size_t>();
}
}  // namespace

Record record_from_json(const json& j, const std::string& where) {
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    Record r;
    r.index = size_of(j, "index", where);
    r.id = string_of(j, "id", where);
    r.source = string_of(j, "source", where);
    r.split = string_of(j, "split", where);
    auto m = j.find("messages");
    if (m == j.end()) throw Error(where + ": field \"messages\": missing");
    r.messages = messages_from_json(*m, where);
    if (auto t = j.find("tokens"); t != j.end()) {  // optional: written by tandem, not required of others
        if (!t->is_object()) throw Error(where + ": field \"tokens\": expected an object");
        r.full_length = size_of(*t, "full_length", where + ": tokens");
        r.length = size_of(*t, "length", where + ": tokens");
        r.boundary = size_of(*t, "boundary", where + ": tokens");
        r.supervised = size_of(*t, "supervised", where + ": tokens");
    }
    return r;
}

std::vector<Record> read_records(const fs::path& path) {
    const std::string text = read_file(path);
    std::vector<Record> records;
    size_t pos = 0, line_no = 0;
    while (pos < text.size()) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) eol = text.size();
        const std::string_view line(text.data() + pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
        const std::string where = path.string() + ": line " + std::to_string(line_no);
        json j;
        try {
            j = json::parse(line);
        } catch (const json::exception& e) {
            throw Error(where + ": malformed JSON: " + tandem::json_error_text(e));
        }
        Record r = record_from_json(j, where);
        if (r.index != records.size())
            throw Error(where + ": field \"index\": " + std::to_string(r.index) + ", expected " + std::to_string(records.size()));
        records.push_back(std::move(r));
    }
    return records;
}

Split read_split(const fs::path& path) {
    json j;
    try {
        j = json::parse(read_file(path));
    } catch (const json::exception& e) {
        throw Error(path.string() + ": malformed JSON: " + tandem::json_error_text(e));
    }
    const std::string where = path.string();
    if (!j.is_object()) throw Error(where + ": expected a JSON object");
    Split s;
    s.seed = size_of(j, "seed", where);
    auto f = j.find("heldout_fraction");
    if (f == j.end() || !f->is_number()) throw Error(where + ": field \"heldout_fraction\": missing or not a number");
    s.heldout_fraction = f->get<double>();
    for (const char* field : {"train", "heldout"}) {
        auto it = j.find(field);
        if (it == j.end() || !it->is_array()) throw Error(where + ": field \"" + std::string(field) + "\": missing or not a list");
        auto& out = std::string(field) == "train" ? s.train : s.heldout;
        for (const auto& v : *it) {
            if (!v.is_number_unsigned()) throw Error(where + ": field \"" + std::string(field) + "\": expected record indices");
            out.push_back(v.get<size_t>());
        }
    }
    return s;
}

// --- accounting ------------------------------------------------------------------------------------

json accounting_json(const CorpusBuild& build) {
    json j;
    j["version"] = 1;
    j["sources_dir"] = build.sources;
    j["seed"] = build.options.seed;
    j["heldout_fraction"] = build.options.heldout_fraction;
    j["max_len"] = build.options.max_len;
    j["template"] = template_kind_name(build.options.template_kind);
    size_t input = 0, converted = 0, duplicate = 0, rejected = 0;
    json sources = json::array();
    for (const SourceAccounting& a : build.accounting) {
        json s;
        s["source"] = a.source;
        s["files"] = a.files;
        s["input"] = a.input;
        s["converted"] = a.converted;
        s["duplicate"] = a.duplicate;
        s["rejected"] = a.rejected_total();
        s["rejected_by_reason"] = a.rejected;
        sources.push_back(std::move(s));
        input += a.input;
        converted += a.converted;
        duplicate += a.duplicate;
        rejected += a.rejected_total();
    }
    j["sources"] = std::move(sources);
    j["total"] = {{"input", input}, {"converted", converted}, {"duplicate", duplicate}, {"rejected", rejected}};
    j["split"] = {{"train", build.split.train.size()}, {"heldout", build.split.heldout.size()}};
    return j;
}

namespace {
std::string percent(size_t part, size_t whole) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f%%", whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
    return buf;
}
std::string padded(const std::string& s, size_t width, bool right = true) {
    if (s.size() >= width) return s;
    return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}
}  // namespace

std::string accounting_summary(const CorpusBuild& build) {
    std::string out;
    out += "corpus built from " + build.sources + " (seed " + std::to_string(build.options.seed) + ", max_len " +
           std::to_string(build.options.max_len) + ", template " + template_kind_name(build.options.template_kind) + ")\n\n";
    out += padded("source", 10, false) + padded("input", 8) + padded("converted", 18) + padded("duplicate", 16) +
           padded("rejected", 16) + "\n";
    size_t input = 0, converted = 0, duplicate = 0, rejected = 0;
    auto row = [&](const std::string& name, size_t in, size_t c, size_t d, size_t r) {
        out += padded(name, 10, false) + padded(std::to_string(in), 8) +
               padded(std::to_string(c) + " (" + percent(c, in) + ")", 18) +
               padded(std::to_string(d) + " (" + percent(d, in) + ")", 16) +
               padded(std::to_string(r) + " (" + percent(r, in) + ")", 16) + "\n";
    };
    for (const SourceAccounting& a : build.accounting) {
        row(a.source, a.input, a.converted, a.duplicate, a.rejected_total());
        input += a.input;
        converted += a.converted;
        duplicate += a.duplicate;
        rejected += a.rejected_total();
    }
    row("total", input, converted, duplicate, rejected);
    out += "accounted for: " + std::to_string(converted + duplicate + rejected) + " of " + std::to_string(input) +
           " input rows (" + percent(converted + duplicate + rejected, input) + ")\n";
    bool any_reason = false;
    for (const SourceAccounting& a : build.accounting) {
        for (const auto& [reason, count] : a.rejected) {
            if (!any_reason) out += "\nrejected, by reason:\n";
            any_reason = true;
            out += "  " + padded(a.source, 9, false) + padded(std::to_string(count), 6) + "  " + reason + "\n";
        }
    }
    for (const SourceAccounting& a : build.accounting)
        if (a.files.empty()) out += "\nnote: no " + a.source + " files found\n";
    out += "\nsplit: " + std::to_string(build.split.train.size()) + " train, " +
           std::to_string(build.split.heldout.size()) + " held out (fraction " +
           std::to_string(build.options.heldout_fraction).substr(0, 6) + ", by SHA-256 of seed and record id)\n";
    return out;
}

void write_corpus(const CorpusBuild& build, const fs::path& out_dir) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) throw Error(out_dir.string() + ": cannot create folder: " + ec.message());
    std::string records;
    for (const Record& r : build.records) records += record_to_json(r).dump() + "\n";
    write_file_atomic(out_dir / "records.jsonl", records);
    write_file_atomic(out_dir / "accounting.json", accounting_json(build).dump(2) + "\n");
    write_file_atomic(out_dir / "accounting.txt", accounting_summary(build));
    json split = {{"seed", build.split.seed},
                  {"heldout_fraction", build.split.heldout_fraction},
                  {"train", build.split.train},
                  {"heldout", build.split.heldout}};
    write_file_atomic(out_dir / "split.json", split.dump() + "\n");
    std::string notes;
    for (const NotConverted& n : build.not_converted)
        notes += json({{"id", n.id}, {"file", n.file}, {"line", n.line}, {"outcome", n.outcome}, {"reason", n.reason}}).dump() + "\n";
    write_file_atomic(out_dir / "not_converted.jsonl", notes);
}

}  // namespace tandem::data
