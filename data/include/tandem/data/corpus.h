#pragma once
// Corpus build (docs/spec.md §Corpus): converters -> dedup -> supervision check -> accounting -> split.
// Files (docs/run-folder.md, docs/data-corpus.md): corpus/records.jsonl, corpus/accounting.json,
// corpus/accounting.txt, corpus/split.json, corpus/not_converted.jsonl.
#include "tandem/data/chat_template.h"
#include "tandem/data/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tandem::data {

struct Record {
    size_t index = 0;       // line number in records.jsonl (0-based)
    std::string id;         // "<source>:<row id>"
    std::string source;     // "pubmedqa" | "medmcqa" | "medqa"
    std::string split;      // "train" | "heldout"
    std::vector<Message> messages;
    // Measured at build time with tandem's tokenizer and the Qwen3 template, truncated to max_len.
    // Informational (legs tokenize themselves); `length` is what the batch plan buckets by.
    size_t full_length = 0;  // tokens before truncation
    size_t length = 0;       // tokens after truncation
    size_t boundary = 0;     // first supervised token
    size_t supervised = 0;   // supervised tokens after truncation
};

struct SourceAccounting {
    std::string source;
    std::vector<std::string> files;          // read, relative to the sources folder
    size_t input = 0;
    size_t converted = 0;
    size_t duplicate = 0;
    std::map<std::string, size_t> rejected;  // reason -> rows
    size_t rejected_total() const;
};

// A row that did not become a record (written to corpus/not_converted.jsonl).
struct NotConverted {
    std::string id;
    std::string file;
    size_t line = 0;
    std::string outcome;       // "duplicate" | "rejected"
    std::string reason;        // rejection reason, or "duplicate of <id>"
};

struct Split {
    uint64_t seed = 0;
    double heldout_fraction = 0;
    std::vector<size_t> train;    // record indices, ascending
    std::vector<size_t> heldout;  // record indices, ascending (records.jsonl order)
};

struct CorpusOptions {
    uint64_t seed = 1234;
    double heldout_fraction = 0.15;
    size_t max_len = 512;                         // 0 = no truncation
    TemplateKind template_kind = TemplateKind::Qwen3;  // for the build-time supervision check
};

struct CorpusBuild {
    CorpusOptions options;
    std::string sources;                  // the folder read (as given)
    std::vector<Record> records;
    std::vector<SourceAccounting> accounting;  // pubmedqa, medmcqa, medqa
    std::vector<NotConverted> not_converted;
    Split split;
    size_t input_total() const;
};

// The split decision: h = SHA-256("<seed>:<record id>") (decimal seed, UTF-8); u = first 8 bytes of
// h as a big-endian integer / 2^64; held out when u < fraction. Depends only on (seed, id), so a
// record keeps its side when others are added or removed.
bool is_heldout(const std::string& record_id, uint64_t seed, double heldout_fraction);
Split split_records(const std::vector<Record>& records, uint64_t seed, double heldout_fraction);

// The fixed eval prefix: the first n held-out indices in records.jsonl order. Throws tandem::Error
// when fewer than n records are held out.
std::vector<size_t> eval_prefix(const Split& split, size_t n);

CorpusBuild build_corpus(const std::filesystem::path& sources, const Tokenizer& tokenizer,
                         const CorpusOptions& options);
void write_corpus(const CorpusBuild& build, const std::filesystem::path& out_dir);

std::string accounting_summary(const CorpusBuild& build);  // the text of accounting.txt
nlohmann::json accounting_json(const CorpusBuild& build);

nlohmann::json record_to_json(const Record& record);
Record record_from_json(const nlohmann::json& j, const std::string& where);  // `where`: "file:line"
std::vector<Record> read_records(const std::filesystem::path& records_jsonl);
Split read_split(const std::filesystem::path& split_json);

nlohmann::json messages_to_json(const std::vector<Message>& messages);
std::vector<Message> messages_from_json(const nlohmann::json& j, const std::string& where);

}  // namespace tandem::data
