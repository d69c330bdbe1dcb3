// tandem tokens: encode, show, diff (docs/data-text.md, docs/data-corpus.md).
//   tokens encode [--tokenizer DIR] [--offsets] [--keep-going]   JSON Lines {"text"} -> {"ids"[, "offsets"]}
//   tokens show  --corpus DIR (--id ID | --index N | --all) [--max-len N] [--template qwen3|chatml] [--json]
//   tokens diff  --corpus DIR (--id ID | --index N) [--max-len N] [--template T]
//                (--reference | --ids-b FILE | --template-b T | --max-len-b N) [--window W]
// Exit codes: 0 ok (diff: identical), 1 error (encode: a malformed line), 2 usage, 3 diff found a mismatch.
#include "commands.h"

#include "cli_inputs.h"
#include "tandem/atomic_file.h"
#include "tandem/data/corpus.h"
#include "tandem/data/supervision.h"
#include "tandem/data/token_diff.h"
#include "tandem/data/tokenizer.h"
#include "tandem/error.h"
#include "tandem/strict_json.h"

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

namespace tandem::cli {
namespace {

namespace fs = std::filesystem;
namespace td = tandem::data;
using nlohmann::json;

const td::Record& pick_record(const std::vector<td::Record>& records, const std::string& id,
                              const std::optional<size_t>& index, const fs::path& corpus) {
    if (index) {
        if (*index >= records.size())
            throw Error(corpus.string() + "/records.jsonl: index " + std::to_string(*index) + " is out of range (" +
                        std::to_string(records.size()) + " records)");
        return records[*index];
    }
    for (const auto& r : records)
        if (r.id == id) return r;
    throw Error(corpus.string() + "/records.jsonl: no record with id \"" + id + "\"");
}

// A token's text for display: its span of the rendered text with control characters escaped.
std::string escape_piece(std::string_view s) {
    std::string out;
    for (char c : s) {
        switch (c) {
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\\': out += "\\\\"; break;
            default:
                if (static_cast<unsigned char>(c) < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
                    out += buf;
                } else {
                    out += c;
                }
        }
    }
    return out;
}

struct Style {
    bool on = false;
    std::string operator()(const char* code, const std::string& s) const {
        return on ? std::string("\033[") + code + "m" + s + "\033[0m" : s;
    }
};
constexpr const char* kDim = "2";
constexpr const char* kGreen = "32";
constexpr const char* kRed = "31";
constexpr const char* kBold = "1";
constexpr const char* kYellow = "33";

std::vector<std::string> pieces_of(const td::TokenizedRecord& t) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < t.ids.size(); ++i) pieces.push_back(t.full_text.substr(t.begin[i], t.end[i] - t.begin[i]));
    return pieces;
}

json tokenized_json(const td::Record& r, const td::TokenizedRecord& t, const std::string& template_name, size_t max_len) {
    json j;
    j["index"] = r.index;
    j["id"] = r.id;
    j["template"] = template_name;
    j["max_len"] = max_len;
    j["ids"] = t.ids;
    j["supervised"] = t.supervised;
    j["boundary"] = t.boundary;
    j["full_length"] = t.full_length;
    j["truncated_length"] = t.truncated_length;
    j["supervised_count"] = t.supervised_count;
    j["prompt_bytes"] = t.prompt_bytes;
    j["full_text"] = t.full_text;
    return j;
}

// --- tokens show ---------------------------------------------------------------------------------------

void print_show(const td::Record& r, const td::TokenizedRecord& t, const std::string& template_name, size_t max_len,
                const Style& st) {
    std::printf("%s\n", st(kBold, "record " + std::to_string(r.index) + "  " + r.id + "  (" + r.split + ")").c_str());
    std::printf("template %s   max_len %zu   tokens %zu of %zu%s   boundary %zu   supervised %zu (%zu before truncation)\n",
                template_name.c_str(), max_len, t.truncated_length, t.full_length,
                t.truncated() ? " (truncated)" : "", t.boundary, t.supervised_count, t.supervised_full);
    std::printf("prompt_text: %zu bytes; supervision = tokens starting at byte >= %zu through the first <|im_end|>\n\n",
                t.prompt_bytes, t.prompt_bytes);

    // The rendered text: prompt dim, supervised part green, cut-off part red; without colours the
    // boundary is marked with [[SUPERVISED>> and the truncation point with [[TRUNCATED>>.
    const size_t sup_begin = t.prompt_bytes;
    const size_t cut = t.truncated_length < t.full_length
                           ? (t.truncated_length == 0 ? 0 : t.end[t.truncated_length - 1])
                           : t.full_text.size();
    std::string text;
    const std::string& f = t.full_text;
    if (st.on) {
        text = st(kDim, f.substr(0, std::min(sup_begin, cut)));
        if (cut > sup_begin) text += st(kGreen, f.substr(sup_begin, cut - sup_begin));
        if (cut < f.size()) text += st(kRed, f.substr(cut));
    } else {
        if (cut <= sup_begin) {
            text = f.substr(0, cut) + "[[TRUNCATED>>" + f.substr(cut);
        } else {
            text = f.substr(0, sup_begin) + "[[SUPERVISED>>" + f.substr(sup_begin, cut - sup_begin);
            if (cut < f.size()) text += "[[TRUNCATED>>" + f.substr(cut);
        }
    }
    std::printf("--- rendered text ---\n%s\n--- tokens ---\n", text.c_str());
    std::printf("%6s  %7s  %3s  %s\n", "#", "id", "sup", "text");
    for (size_t i = 0; i < t.ids.size(); ++i) {
        if (i == t.boundary) std::printf("%s\n", st(kYellow, "------  supervision starts (boundary " + std::to_string(i) + ") ------").c_str());
        if (i == t.supervised_end && i > 0)
            std::printf("%s\n", st(kYellow, "------  supervision ends after <|im_end|> ------").c_str());
        const std::string piece = "\"" + escape_piece(f.substr(t.begin[i], t.end[i] - t.begin[i])) + "\"";
        std::printf("%6zu  %7d  %3s  %s\n", i, t.ids[i], t.supervised[i] ? "S" : ".",
                    (t.supervised[i] ? st(kGreen, piece) : st(kDim, piece)).c_str());
    }
    if (t.truncated())
        std::printf("%s\n", st(kRed, "------  truncated at " + std::to_string(t.truncated_length) + " (max_len " +
                                         std::to_string(max_len) + "): " + std::to_string(t.full_length - t.truncated_length) +
                                         " tokens dropped ------").c_str());
}

// --- tokens diff: the other side ---------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string reference_python(const std::string& flag) {
    if (!flag.empty()) return flag;
    if (const char* p = std::getenv("TANDEM_REFENV_PYTHON"); p && *p) return p;
    std::string env = std::getenv("TANDEM_REFENV") ? std::getenv("TANDEM_REFENV") : "";
    if (env.empty()) env = std::string(std::getenv("HOME") ? std::getenv("HOME") : "") + "/.cache/tandem/refenv";
    return env + "/bin/python";
}

// The reference side: HuggingFace's template (apply_chat_template) and tokenizer (tokenizers' offsets),
// supervision computed from character offsets — no tandem code involved.
constexpr const char* kReferenceScript = R"PY(
import json, sys
from transformers import AutoTokenizer
req = json.load(open(sys.argv[1], encoding="utf-8"))
tok = AutoTokenizer.from_pretrained(req["tokenizer"], local_files_only=True)
if req["template"] == "chatml":
    tok.chat_template = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
                         "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
msgs = req["messages"]
prompt = tok.apply_chat_template(msgs[:-1], tokenize=False, add_generation_prompt=True, enable_thinking=False)
full = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
ids = list(enc["input_ids"]); im_end = tok.convert_tokens_to_ids("<|im_end|>")
sup = [0] * len(ids); boundary = -1
for i, (s, _e) in enumerate(enc["offset_mapping"]):
    if s >= len(prompt):
        if boundary < 0: boundary = i
        sup[i] = 1
        if ids[i] == im_end: break
pieces = [full[s:e] for (s, e) in enc["offset_mapping"]]
n = req["max_len"] or len(ids)
print(json.dumps({"ids": ids[:n], "supervised": sup[:n], "pieces": pieces[:n], "full_length": len(ids),
                  "boundary": boundary, "prefix_ok": full.startswith(prompt)}))
)PY";

td::TokenSequence reference_sequence(const td::Record& r, const fs::path& tokenizer, const std::string& template_name,
                                     size_t max_len, const std::string& python) {
    json req = {{"tokenizer", tokenizer.string()},
                {"template", template_name},
                {"messages", td::messages_to_json(r.messages)},
                {"max_len", max_len}};
    const fs::path tmp = fs::temp_directory_path() / ("tandem-diff-" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    write_file_atomic(tmp / "request.json", req.dump());
    write_file_atomic(tmp / "reference.py", kReferenceScript);
    const std::string cmd = shell_quote(python) + " " + shell_quote((tmp / "reference.py").string()) + " " +
                            shell_quote((tmp / "request.json").string());
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
    if (!pipe) throw Error("cannot run the reference python " + python);
    std::string out;
    std::array<char, 65536> buf{};
    while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
    const int status = pclose(pipe.release());
    fs::remove_all(tmp);
    if (status != 0)
        throw Error("the reference python (" + python + ") failed on record " + r.id +
                    "; is the reference environment set up? (scripts/setup, or --python PATH)");
    json j;
    try {
        j = json::parse(out);
    } catch (const json::exception& e) {
        throw Error("reference python output for record " + r.id + " is not JSON: " + tandem::json_error_text(e));
    }
    td::TokenSequence s;
    s.label = "reference (HF " + template_name + ")";
    s.ids = j["ids"].get<std::vector<int32_t>>();
    s.supervised = j["supervised"].get<std::vector<uint8_t>>();
    s.pieces = j["pieces"].get<std::vector<std::string>>();
    return s;
}

// --ids-b FILE: a JSON list of ids, or an object with "ids" and optionally "supervised" / "pieces".
td::TokenSequence sequence_from_file(const fs::path& path) {
    const json j = parse_json_strict(read_file(path), path.string());
    td::TokenSequence s;
    s.label = path.filename().string();
    const json* ids = &j;
    if (j.is_object()) {
        if (!j.contains("ids")) throw Error(path.string() + ": field \"ids\": missing");
        ids = &j["ids"];
        if (j.contains("supervised")) {
            if (!j["supervised"].is_array()) throw Error(path.string() + ": field \"supervised\": expected a list");
            for (const auto& v : j["supervised"]) {
                if (!v.is_boolean() && !v.is_number_integer())
                    throw Error(path.string() + ": field \"supervised\": expected a list of booleans or 0/1");
                s.supervised.push_back(v.is_boolean() ? v.get<bool>() : v.get<int64_t>() != 0);
            }
        }
        if (j.contains("pieces") && j["pieces"].is_array())
            for (const auto& v : j["pieces"]) {
                if (!v.is_string()) throw Error(path.string() + ": field \"pieces\": expected a list of strings");
                s.pieces.push_back(v.get<std::string>());
            }
    }
    if (!ids->is_array()) throw Error(path.string() + ": field \"ids\": expected a list of integers");
    for (size_t i = 0; i < ids->size(); ++i) {
        const json& v = (*ids)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX ||
            (v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX))
            throw Error(path.string() + ": field \"ids[" + std::to_string(i) + "]\": expected a token id (an integer in [0, 2^31))");
        s.ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    return s;
}

td::TokenSequence tandem_sequence(const td::Tokenizer& tok, const td::Record& r, td::TemplateKind kind, size_t max_len) {
    const td::TokenizedRecord t = td::tokenize_record(tok, kind, r.messages, max_len);
    td::TokenSequence s;
    s.label = std::string("tandem ") + td::template_kind_name(kind) + " max_len " + std::to_string(max_len);
    s.ids = t.ids;
    s.supervised = t.supervised;
    s.pieces = pieces_of(t);
    return s;
}

void print_diff(const td::TokenSequence& a, const td::TokenSequence& b, const td::TokenDiff& d, const Style& st) {
    auto count = [](const td::TokenSequence& s) {
        size_t n = 0;
        for (auto v : s.supervised) n += v;
        return n;
    };
    std::printf("A: %-34s %6zu tokens, %zu supervised\n", a.label.c_str(), d.length_a, count(a));
    std::printf("B: %-34s %6zu tokens, %zu supervised\n", b.label.c_str(), d.length_b, count(b));
    if (d.identical) {
        std::printf("%s\n", st(kGreen, "identical: ids" + std::string(a.supervised.empty() || b.supervised.empty() ? "" : " and supervision") +
                                           " agree on all " + std::to_string(d.length_a) + " tokens").c_str());
        return;
    }
    std::printf("%s\n", st(kRed, "first mismatch at token " + std::to_string(*d.first_mismatch) + " (" + d.what + "); " +
                                     std::to_string(d.common_prefix) + " tokens agree before it; " +
                                     std::to_string(d.id_mismatches) + " differing ids over the common length").c_str());
    std::printf("\n%6s  %7s %3s %-28s | %7s %3s %-28s\n", "#", "A id", "sup", "A text", "B id", "sup", "B text");
    auto cell = [](const td::TokenSequence& s, size_t i, std::string& id, std::string& sup, std::string& text) {
        if (i >= s.ids.size()) {
            id = "-";
            sup = "";
            text = "(end)";
            return;
        }
        id = std::to_string(s.ids[i]);
        sup = s.supervised.size() == s.ids.size() ? (s.supervised[i] ? "S" : ".") : "?";
        text = i < s.pieces.size() ? "\"" + escape_piece(s.pieces[i]) + "\"" : "";
        if (text.size() > 28) text = text.substr(0, 25) + "...";
    };
    for (size_t i = d.window_begin; i < d.window_end; ++i) {
        std::string ia, sa, ta, ib, sb, tb;
        cell(a, i, ia, sa, ta);
        cell(b, i, ib, sb, tb);
        char line[256];
        std::snprintf(line, sizeof line, "%6zu  %7s %3s %-28s | %7s %3s %-28s", i, ia.c_str(), sa.c_str(), ta.c_str(),
                      ib.c_str(), sb.c_str(), tb.c_str());
        const bool differs = ia != ib || sa != sb;
        std::printf("%s%s\n", (i == *d.first_mismatch ? st(kRed, line) : differs ? st(kYellow, line) : std::string(line)).c_str(),
                    i == *d.first_mismatch ? "   <== first mismatch" : "");
    }
}

}  // namespace

void add_tokens_commands(CLI::App& app, int& exit_code) {
    auto* tokens = group(app, "tokens", "Tokenize and inspect token sequences");
    auto* cmd = tokens->add_subcommand("encode", "Encode JSON Lines {\"text\": ...} from stdin to {\"ids\": [...]} with tandem's tokenizer");
    auto dir = std::make_shared<std::string>();
    auto keep_going = std::make_shared<bool>(false);
    auto offsets = std::make_shared<bool>(false);
    cmd->add_option("--tokenizer", *dir, "Folder with tokenizer.json (default: the shared assets)");
    cmd->add_flag("--keep-going", *keep_going, "After a malformed line, report it and go on");
    cmd->add_flag("--offsets", *offsets, "Also write \"offsets\": [[begin, end], ...] (byte offsets into the text)");
    cmd->callback([&exit_code, dir, keep_going, offsets] {
        const auto tok = data::Tokenizer::load(tokenizer_folder(*dir));
        exit_code = process_jsonl(*keep_going, [&](const ordered_json& in) {
            const std::string& text = field<ordered_json>(in, "text", &ordered_json::is_string, "a string").get_ref<const std::string&>();
            ordered_json out;
            std::vector<data::Token> toks;
            try {
                toks = tok.encode_with_offsets(text);
            } catch (const Error& e) {
                throw LineError{"text", e.what()};
            }
            ordered_json ids = ordered_json::array();
            for (const auto& t : toks) ids.push_back(t.id);
            out["ids"] = std::move(ids);
            if (*offsets) {
                ordered_json offs = ordered_json::array();
                for (const auto& t : toks) offs.push_back({t.begin, t.end});
                out["offsets"] = std::move(offs);
            }
            return out;
        });
    });

    // ---- tokens show / tokens diff
    struct RecordArgs {
        std::string corpus, id, tokenizer, template_name = "qwen3";
        std::optional<size_t> index;
        std::optional<size_t> max_len;
    };

    auto* show = tokens->add_subcommand("show", "Show a record's rendered text, tokens, supervision boundary and truncation point");
    auto s = std::make_shared<RecordArgs>();
    auto show_json = std::make_shared<bool>(false);
    auto show_all = std::make_shared<bool>(false);
    show->add_option("--corpus", s->corpus, "corpus folder (or a run folder holding corpus/)")->required();
    auto* sid = show->add_option("--id", s->id, "record id, e.g. pubmedqa:21645374");
    auto* sidx = show->add_option("--index", s->index, "record index (line of records.jsonl, 0-based)");
    auto* sall = show->add_flag("--all", *show_all, "every record (with --json: one line per record)");
    sid->excludes(sidx)->excludes(sall);
    sidx->excludes(sall);
    show->add_option("--max-len", s->max_len, "truncation length (default: the corpus build's)");
    show->add_option("--template", s->template_name, "qwen3|chatml")->capture_default_str();
    show->add_option("--tokenizer", s->tokenizer, "tokenizer folder (default: the shared Qwen3 tokenizer)");
    show->add_flag("--json", *show_json, "JSON Lines output: ids, supervised, boundary, lengths, full_text");
    show->callback([s, show_json, show_all, &exit_code] {
        if (s->id.empty() && !s->index && !*show_all) throw CLI::RequiredError("--id, --index or --all");
        const fs::path corpus = corpus_folder(s->corpus);
        const auto records = td::read_records(corpus / "records.jsonl");
        const size_t max_len = s->max_len.value_or(corpus_max_len(corpus));
        const td::TemplateKind kind = td::parse_template_kind(s->template_name);
        const td::Tokenizer tok = td::Tokenizer::load(tokenizer_folder(s->tokenizer));
        const Style st{!*show_json && ::isatty(STDOUT_FILENO) != 0};
        std::vector<const td::Record*> chosen;
        if (*show_all) {
            for (const auto& r : records) chosen.push_back(&r);
        } else {
            chosen.push_back(&pick_record(records, s->id, s->index, corpus));
        }
        std::string out;
        for (const td::Record* r : chosen) {
            td::TokenizedRecord t;
            try {
                t = td::tokenize_record(tok, kind, r->messages, max_len);
            } catch (const td::RecordRejected& e) {
                throw Error(corpus.string() + "/records.jsonl: record " + r->id + ": " + e.what());
            }
            if (*show_json) {
                out += tokenized_json(*r, t, s->template_name, max_len).dump() + "\n";
                if (out.size() > (1u << 20)) {
                    std::fputs(out.c_str(), stdout);
                    out.clear();
                }
            } else {
                print_show(*r, t, s->template_name, max_len, st);
                if (chosen.size() > 1) std::printf("\n");
            }
        }
        std::fputs(out.c_str(), stdout);
        exit_code = kOk;
    });

    auto* diff = tokens->add_subcommand("diff", "Compare two tokenisations of one record and show the first mismatch");
    auto d = std::make_shared<RecordArgs>();
    struct DiffArgs {
        bool reference = false;
        std::string ids_b, template_b, python;
        std::optional<size_t> max_len_b;
        size_t window = 8;
    };
    auto db = std::make_shared<DiffArgs>();
    diff->add_option("--corpus", d->corpus, "corpus folder (or a run folder holding corpus/)")->required();
    auto* did = diff->add_option("--id", d->id, "record id");
    auto* didx = diff->add_option("--index", d->index, "record index");
    did->excludes(didx);
    diff->add_option("--max-len", d->max_len, "side A truncation length (default: the corpus build's)");
    diff->add_option("--template", d->template_name, "side A template: qwen3|chatml")->capture_default_str();
    diff->add_option("--tokenizer", d->tokenizer, "tokenizer folder (default: the shared Qwen3 tokenizer)");
    auto* o_ref = diff->add_flag("--reference", db->reference,
                                 "side B: HuggingFace's template and tokenizer, run in the reference environment");
    auto* o_ids = diff->add_option("--ids-b", db->ids_b, "side B: ids from a JSON file (a list, or {\"ids\", \"supervised\"})");
    auto* o_tpl = diff->add_option("--template-b", db->template_b, "side B: tandem with this template (qwen3|chatml)");
    auto* o_len = diff->add_option("--max-len-b", db->max_len_b, "side B: tandem with this truncation length");
    o_ref->excludes(o_ids)->excludes(o_tpl)->excludes(o_len);
    o_ids->excludes(o_tpl)->excludes(o_len);
    o_tpl->excludes(o_len);
    diff->add_option("--python", db->python, "python of the reference environment (default: $TANDEM_REFENV_PYTHON or ~/.cache/tandem/refenv)");
    diff->add_option("--window", db->window, "tokens shown on each side of the first mismatch")->capture_default_str();
    diff->callback([d, db, &exit_code] {
        if (d->id.empty() && !d->index) throw CLI::RequiredError("--id or --index");
        if (!db->reference && db->ids_b.empty() && db->template_b.empty() && !db->max_len_b)
            throw CLI::RequiredError("one of --reference, --ids-b, --template-b, --max-len-b");
        const fs::path corpus = corpus_folder(d->corpus);
        const auto records = td::read_records(corpus / "records.jsonl");
        const td::Record& r = pick_record(records, d->id, d->index, corpus);
        const size_t max_len = d->max_len.value_or(corpus_max_len(corpus));
        const fs::path tok_dir = tokenizer_folder(d->tokenizer);
        const td::Tokenizer tok = td::Tokenizer::load(tok_dir);
        const td::TemplateKind kind = td::parse_template_kind(d->template_name);
        const td::TokenSequence a = tandem_sequence(tok, r, kind, max_len);
        td::TokenSequence b;
        if (db->reference) b = reference_sequence(r, tok_dir, d->template_name, max_len, reference_python(db->python));
        else if (!db->ids_b.empty()) b = sequence_from_file(db->ids_b);
        else if (!db->template_b.empty()) b = tandem_sequence(tok, r, td::parse_template_kind(db->template_b), max_len);
        else b = tandem_sequence(tok, r, kind, *db->max_len_b);
        const td::TokenDiff result = td::diff_tokens(a, b, db->window);
        std::printf("record %zu  %s\n", r.index, r.id.c_str());
        print_diff(a, b, result, Style{::isatty(STDOUT_FILENO) != 0});
        exit_code = result.identical ? kOk : kCheckFailed;
    });
}

}  // namespace tandem::cli
