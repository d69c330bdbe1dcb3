// The inputs several subcommands read the same way (cli_inputs.h).
#include "cli_inputs.h"

#include "commands.h"

#include "tandem/assets.h"
#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/overwrite_guard.h"
#include "tandem/strict_json.h"
#include "tandem/runner/runner.h"

#include <cstdio>
#include <iostream>
#include <optional>

namespace tandem::cli {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string one_line(std::string s) {
    for (char& c : s)
        if (c == '\n' || c == '\r') c = ' ';
    return s;
}

}  // namespace

void refuse_protected_out(const std::string& option, const std::string& path, bool force) {
    if (force || path.empty()) return;
    if (const std::string what = protected_file_reason(path); !what.empty())
        throw CLI::ValidationError(option + " " + path, "refusing to overwrite " + what + " (give --force to replace it)");
}

void require_out_folder(const std::string& option, const std::string& path, bool replaces_files, bool force) {
    std::error_code ec;
    if (fs::exists(path, ec) && !fs::is_directory(path, ec)) {
        const std::string what = protected_file_reason(path);
        throw CLI::ValidationError(option + " " + path, "is a file" + (what.empty() ? std::string() : " (" + what + ")") +
                                                            ", not a folder; nothing was written");
    }
    if (!replaces_files || force) return;
    if (const fs::path run = enclosing_run_folder(path); !run.empty())
        throw CLI::ValidationError(option + " " + path, "is inside the run folder " + run.string() +
                                                            ", whose files it would replace (give --force to replace them)");
}

CLI::Option* add_force_flag(CLI::App* cmd, bool& force) {
    return cmd->add_flag("--force", force, "replace an existing --out file even when it is a run's file, an HDF5 file or a catalog");
}

void add_report_output(CLI::App* cmd, ReportOutput& o, const std::string& catalog_help) {
    cmd->add_option("--format", o.format, "text, md, csv or tex (LaTeX, booktabs)")->capture_default_str();
    cmd->add_option("--out", o.out, "write to this file instead of stdout (never over a run's file unless --force)");
    add_force_flag(cmd, o.force);
    o.catalog_option = cmd->add_option("--catalog", o.catalogs, catalog_help)
        ->default_str(o.catalogs.front())
        ->type_name("DB")
        ->expected(1)  // one per --catalog: `--catalog a.db RUN` leaves RUN to the positional
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void note_missing_catalogs(const ReportOutput& o) {
    if (!o.catalog_option || o.catalog_option->count() == 0) return;  // the default may well be absent
    std::error_code ec;
    for (const auto& c : o.catalogs)
        if (!fs::exists(c, ec)) std::fprintf(stderr, "note: catalog %s does not exist: no seed envelope was read from it\n", c.c_str());
}

ReportFormat checked_report_format(const ReportOutput& o) {
    refuse_protected_out("--out", o.out, o.force);
    return parse_report_format(o.format);
}

std::string live_run_text(const std::string& run) {
    std::error_code ec;
    const fs::path p(run);
    const fs::path folder = fs::is_directory(p, ec) ? p : p.parent_path();
    const auto who = experiments::live_runner(folder.empty() ? fs::path(".") : folder);
    return who ? run + " is live: " + *who : std::string();
}

void note_live_run(const std::string& run, const std::string& what) {
    const std::string live = live_run_text(run);
    if (!live.empty()) std::fprintf(stderr, "note: %s; %s\n", live.c_str(), what.c_str());
}

void write_report_output(const ReportOutput& o, const std::string& text) {
    if (o.out.empty()) std::fwrite(text.data(), 1, text.size(), stdout);
    else write_file_atomic(o.out, text);
}

CLI::Option* add_run_places(CLI::App* cmd, RunPlaces& p, const std::string& out_help, const std::string& threads_help,
                            bool more_catalogs) {
    cmd->add_option("--out", p.out, out_help)->capture_default_str();
    if (!more_catalogs) cmd->add_option("--catalog", p.catalog, "SQLite catalog")->capture_default_str();
    else
        cmd->add_option_function<std::vector<std::string>>(
               "--catalog",
               [&p](const std::vector<std::string>& v) {
                   p.catalog = v.front();
                   p.more_catalogs.assign(v.begin() + 1, v.end());
               },
               "SQLite catalog the run is recorded in; repeat it to look in more catalogs, in order, for the experiment's seed "
               "envelopes")
            ->default_str(p.catalog)
            ->type_name("DB")
            ->expected(1)  // one per --catalog
            ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    cmd->add_option("--assets", p.assets, "folder holding assets/qwen3-tokenizer and data/corpora");
    return cmd->add_option("--threads", p.threads, threads_help);
}

CLI::Option* add_runner_args(CLI::App* cmd, RunnerArgs& a, const std::string& threads_help, const std::string& format_help,
                             bool more_catalogs) {
    auto* threads = add_run_places(cmd, a, "folder for run folders", threads_help, more_catalogs);
    cmd->add_option("--format", a.format, format_help)->capture_default_str();
    cmd->add_flag("--no-probe", a.no_probe, "skip the bandwidth probes");
    cmd->add_flag("--share-devices", a.share_devices,
                  "legs on one GPU run at the same time (their timings marked shared) instead of one after the other");
    return threads;
}

fs::path tokenizer_folder(const std::string& flag) {
    if (!flag.empty()) return flag;
    return tokenizer_dir(require_asset_root());
}

// --corpus may name the corpus folder itself or a run folder holding corpus/.
fs::path corpus_folder(const fs::path& given) {
    if (fs::exists(given / "records.jsonl")) return given;
    if (fs::exists(given / "corpus" / "records.jsonl")) return given / "corpus";
    throw Error(given.string() + ": no records.jsonl here or in corpus/ (build one with `tandem corpus build`)");
}

size_t corpus_max_len(const fs::path& corpus) {
    const fs::path acc = corpus / "accounting.json";
    if (!fs::exists(acc)) return 512;
    try {
        const json j = json::parse(read_file(acc));
        if (j.contains("max_len") && j["max_len"].is_number_unsigned()) return j["max_len"].get<size_t>();
    } catch (const json::exception&) {
    }
    return 512;
}

// Runs `handle` on every stdin line; returns the exit status.
int process_jsonl(bool keep_going, const std::function<ordered_json(const ordered_json&)>& handle) {
    std::ios::sync_with_stdio(false);
    std::string line;
    size_t line_no = 0;
    bool failed = false;
    std::string out;
    while (std::getline(std::cin, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        std::optional<LineError> error;
        try {
            ordered_json in = ordered_json::parse(line);
            if (!in.is_object()) throw LineError{"(line)", "must be a JSON object"};
            out = handle(in).dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
        } catch (const LineError& e) {
            error = e;
        } catch (const ordered_json::parse_error& e) {
            error = LineError{"(line)", "not valid JSON: " + json_error_text(e)};
        } catch (const ordered_json::exception& e) {
            error = LineError{"(line)", json_error_text(e)};
        } catch (const Error& e) {
            error = LineError{"(value)", e.what()};
        }
        if (error) {
            failed = true;
            // The message may quote the offending bytes (invalid UTF-8 among them): written with
            // U+FFFD in their place, so the error line and the {"error"} output stay valid UTF-8.
            const std::string message = "line " + std::to_string(line_no) + ": field '" + error->field + "': " + error->message;
            const std::string as_json = ordered_json(message).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
            const std::string printable = ordered_json::parse(as_json).get<std::string>();
            std::fprintf(stderr, "tandem: error: stdin %s\n", one_line(printable).c_str());
            if (!keep_going) {
                std::fflush(stdout);
                return kError;
            }
            out = "{\"error\":" + as_json + "}";
        }
        out += '\n';
        std::fwrite(out.data(), 1, out.size(), stdout);
    }
    std::fflush(stdout);
    return failed ? kError : kOk;
}

}  // namespace tandem::cli
