#pragma once
// What several subcommands read the same way: the tokenizer folder (--tokenizer, else the shared
// assets), a corpus folder (--corpus: the folder or a run folder holding corpus/) and the max_len it
// was built with; JSON Lines from stdin, one output line per input line (tokens encode, template
// render).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "tandem/table.h"

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace tandem::cli {

std::filesystem::path tokenizer_folder(const std::string& flag);
std::filesystem::path corpus_folder(const std::filesystem::path& given);
// The max_len the corpus was built with (accounting.json), else docs/spec.md's 512.
size_t corpus_max_len(const std::filesystem::path& corpus);

// Outputs never replace a run (docs/cli.md "Outputs"). A file --out that names a run folder's
// file, an HDF5 file or a catalog is refused unless --force: a usage error (exit 2) naming the path
// and what it is, before anything is computed or written.
void refuse_protected_out(const std::string& option, const std::string& path, bool force);
// A folder --out (new folders are made inside it: run, envelope, faults): an existing file there is
// a usage error; corpus build, whose folder's files it replaces, also refuses a run folder's
// (`replaces_files`) unless --force.
void require_out_folder(const std::string& option, const std::string& path, bool replaces_files = false, bool force = false);
// The --force flag of a command with a file --out.
CLI::Option* add_force_flag(CLI::App* cmd, bool& force);

// A command that prints a report (report, compare; docs/report.md): --format, --out FILE (stdout when
// not given; never over a run's file unless --force) and the catalogs whose seed envelopes judge it
// (--catalog, repeatable: looked in in order after the run file).
struct ReportOutput {
    std::string format = "text";
    std::string out;
    std::vector<std::string> catalogs = {"tandem.db"};
    bool force = false;
    CLI::Option* catalog_option = nullptr;  // set by add_report_output: whether --catalog was given
    std::vector<std::filesystem::path> catalog_paths() const { return {catalogs.begin(), catalogs.end()}; }
};
void add_report_output(CLI::App* cmd, ReportOutput& o, const std::string& catalog_help);
// Refuses a protected --out (refuse_protected_out) and returns the parsed --format, before anything
// is read or written.
ReportFormat checked_report_format(const ReportOutput& o);
// "note: catalog X does not exist: no seed envelope was read from it" on stderr for every --catalog
// given that is not there (a mistyped path: the verdict then names only the places looked in).
void note_missing_catalogs(const ReportOutput& o);
// The rendered report to --out (atomically), else stdout.
void write_report_output(const ReportOutput& o, const std::string& text);

// A RUN argument (a run folder or its run.h5) that a `tandem run` is running now: "RUN is live: a
// `tandem run` (pid N on HOST) holds its lock RUN/.runner.lock"; "" when no runner holds it.
std::string live_run_text(const std::string& run);
// Prints "note: <live_run_text>; <what>" on stderr when the run is live (readers of a live run say so).
void note_live_run(const std::string& run, const std::string& what);

// A command that runs legs (run, faults, envelope): the folder its run folders go into (--out), the
// catalog, the assets folder and the CPU threads its legs share. Returns --threads' option.
// With `more_catalogs` (tandem run) --catalog may be repeated: the run is recorded in the first, and
// the others are looked in too, in order, for the experiment's seed envelopes.
struct RunPlaces {
    std::string out = "runs";
    std::string catalog = "tandem.db";
    std::vector<std::string> more_catalogs;  // the --catalog after the first (tandem run)
    std::string assets;  // "": the shared assets (tandem/assets.h)
    int threads = 0;
};
CLI::Option* add_run_places(CLI::App* cmd, RunPlaces& p, const std::string& out_help, const std::string& threads_help,
                            bool more_catalogs = false);
// Into RunnerOptions or EnvelopeOptions (the same four fields).
template <typename Options>
void apply_run_places(const RunPlaces& p, Options& o) {
    o.out_dir = p.out;
    o.catalog = p.catalog;
    if (!p.assets.empty()) o.assets = p.assets;
    o.cpu_threads = p.threads;
}

// A command that starts the runner (run, faults): its run places (--out: run folders), the format of
// the tables it prints and --no-probe. Returns --threads' option.
struct RunnerArgs : RunPlaces {
    std::string format = "text";
    bool no_probe = false;
    bool share_devices = false;
};
CLI::Option* add_runner_args(CLI::App* cmd, RunnerArgs& a, const std::string& threads_help, const std::string& format_help,
                             bool more_catalogs = false);
// Into RunnerOptions.
template <typename RunnerOptions>
void apply_runner_args(const RunnerArgs& a, RunnerOptions& o) {
    apply_run_places(a, o);
    o.envelope_catalogs.assign(a.more_catalogs.begin(), a.more_catalogs.end());
    o.probe = !a.no_probe;
    o.share_devices = a.share_devices;
    o.report_format = a.format;
}

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
