#pragma once
// Converters from the three source corpora to chat messages (docs/spec.md §Corpus; layouts, file names and fields
// in docs/data-corpus.md). A converter reads every row of its files and returns one SourceRow per
// input row, in file order: either messages, or a rejection reason. A malformed file (bad JSON, a
// required field missing or of the wrong type) throws tandem::Error naming the file, line and field.
#include "tandem/data/chat_template.h"

#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::data {

inline constexpr std::string_view kPubMedQA = "pubmedqa";
inline constexpr std::string_view kMedMCQA = "medmcqa";
inline constexpr std::string_view kMedQA = "medqa";

struct SourceRow {
    std::string id;       // "<source>:<row id>", stable across rebuilds
    std::string source;   // kPubMedQA, kMedMCQA or kMedQA
    std::string file;     // path relative to the sources folder, e.g. "medqa_usmle/test.jsonl"
    size_t line = 0;      // 1-based line in that file (PubMedQA: 0-based entry number + 1)
    std::vector<Message> messages;         // user, assistant (empty when rejected)
    std::optional<std::string> rejected;   // the reason, e.g. "no explanation"
    std::string question;  // the raw question and target, for dedup (normalised by dedup_key)
    std::string target;
};

// Folder names inside the sources folder (the layout of ../shared/data/corpora).
inline constexpr std::string_view kPubMedQADir = "pubmedqa";
inline constexpr std::string_view kMedMCQADir = "medmcqa";
inline constexpr std::string_view kMedQADir = "medqa_usmle";

// Each reads its folder under `sources`; a missing folder yields no rows (the accounting says so).
std::vector<SourceRow> read_pubmedqa(const std::filesystem::path& sources);
std::vector<SourceRow> read_medmcqa(const std::filesystem::path& sources);
std::vector<SourceRow> read_medqa(const std::filesystem::path& sources);

// The files a converter reads, relative to `sources`, in reading order (empty when none).
std::vector<std::string> source_files(const std::filesystem::path& sources, std::string_view source);

// The message layouts (exposed for tests and docs).
std::string pubmedqa_user_text(const std::string& question, const std::vector<std::string>& labels,
                               const std::vector<std::string>& contexts);
std::string multiple_choice_user_text(const std::string& question,
                                      const std::vector<std::pair<std::string, std::string>>& options);
std::string medqa_answer_sentence(const std::string& option_text);

// Trims ASCII whitespace (space, \t, \n, \v, \f, \r) at both ends.
std::string trim_ascii(std::string_view s);

// Dedup normalisation: ASCII letters lower-cased, every run of ASCII whitespace collapsed to one
// space, leading/trailing whitespace removed. Non-ASCII bytes are kept as they are.
std::string normalise_for_dedup(std::string_view s);
// Key = normalise(question) + '\x1f' + normalise(target).
std::string dedup_key(const SourceRow& row);

}  // namespace tandem::data
