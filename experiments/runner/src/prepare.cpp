// Preparing the run folder's shared artifacts (docs/run-folder.md).
#include "tandem/runner/prepare.h"

#include "tandem/spec/model.h"

#include "tandem/assets.h"
#include "tandem/atomic_file.h"
#include "tandem/data/batch_plan.h"
#include "tandem/data/corpus.h"
#include "tandem/data/tokenizer.h"
#include "tandem/engine/config.h"
#include "tandem/engine/generate.h"
#include "tandem/engine/io.h"
#include "tandem/error.h"
#include "tandem/strict_json.h"
#include "tandem/sha256.h"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

void say(const PrepareOptions& opt, const std::string& line) {
    if (opt.log) opt.log(line);
}

void copy_file_into(const fs::path& from, const fs::path& dir) {
    std::error_code ec;
    fs::copy_file(from, dir / from.filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) throw Error("copying " + from.string() + " into " + dir.string() + ": " + ec.message());
}

// The sha256 of every asset (tokenizer files as copied into the run, every corpora file read), and
// the one check they allow: is the tokenizer the shipped Qwen3 one? L3 compares both legs over the
// same tokenizer file, so a changed vocabulary (two ids swapped) passes every level; its digest is
// the detection, and it is said loudly.
void record_asset_digests(PreparedRun& run, const fs::path& tok_dir, const fs::path& corpora, const PrepareOptions& opt) {
    std::map<std::string, std::string> tok;
    const std::vector<std::string> differences = tokenizer_differences(tok_dir, &tok);
    run.assets = json{{"tokenizer", tok}, {"corpora", folder_digests(corpora)},
                      {"tokenizer_is_shipped_qwen3", differences.empty()},
                      {"corpora_dir", corpora.string()}};
    write_file_atomic(run.folder / "assets.json", run.assets.dump(2) + "\n");
    if (!differences.empty()) {
        std::string text;
        for (const auto& d : differences) text += (text.empty() ? "" : "; ") + d;
        run.warnings.push_back("WARNING: this run's tokenizer is not the shipped Qwen3 tokenizer (" + text +
                               "); L3 compares the legs over this same file and cannot detect a changed vocabulary");
        say(opt, run.warnings.back());
    }
}

}  // namespace

std::map<std::string, std::variant<int64_t, double, std::string>> PreparedRun::run_attributes() const {
    std::string warning_text;
    for (const auto& w : warnings) warning_text += (warning_text.empty() ? "" : "; ") + w;
    std::string tok_sha;
    if (assets.contains("tokenizer") && assets["tokenizer"].contains("tokenizer.json") &&
        assets["tokenizer"]["tokenizer.json"].is_string())
        tok_sha = assets["tokenizer"]["tokenizer.json"].get<std::string>();
    const bool shipped = assets.value("tokenizer_is_shipped_qwen3", false);
    std::map<std::string, std::variant<int64_t, double, std::string>> out{
        {"tokenizer_sha256", tok_sha},
        {"tokenizer_is_shipped_qwen3", static_cast<int64_t>(shipped ? 1 : 0)},
        {"input_warnings", warning_text},
        {"assets_json", assets.dump()}};
    if (summary.is_object() && summary.contains("prepared_sha256")) out["prepared_sha256_json"] = summary["prepared_sha256"].dump();
    return out;
}

json prepared_files_sha256(const fs::path& folder) {
    json out = json::object();
    std::error_code ec;
    if (fs::is_regular_file(folder / "plan.json", ec)) out["plan.json"] = sha256_file_hex(folder / "plan.json");
    for (const char* dir : {"corpus", "init"})
        if (fs::is_directory(folder / dir, ec))
            for (const auto& [rel, sha] : folder_digests(folder / dir)) out[std::string(dir) + "/" + rel] = sha;
    return out;
}

json base_files_sha256(const fs::path& base_dir) {
    json out = json::object();
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(base_dir))
        if (e.is_regular_file()) files.push_back(e.path());  // follows the links to a given checkpoint
    std::sort(files.begin(), files.end());
    for (const auto& f : files) out[f.filename().string()] = sha256_file_hex(f);
    return out;
}

PreparedRun prepare_run(const ExperimentSpec& spec, const fs::path& folder, const PrepareOptions& opt) {
    // A base that cannot be found fails before anything is written.
    const fs::path base_folder = base_folder_of(spec, opt.assets);
    // The tokenizer is read from its asset folder, before the run folder exists: a missing or damaged file
    // is named by its source path, not by a copy that leaves with the folder (docs/run-folder.md).
    AssetRoot assets = require_asset_root(opt.assets);
    data::Tokenizer tokenizer = data::Tokenizer::load(tokenizer_dir(assets));
    if (const fs::path config = tokenizer_dir(assets) / "tokenizer_config.json"; !fs::is_regular_file(config))
        throw Error(config.string() + ": missing (the run folder carries the tokenizer's config; the reference leg's "
                                      "AutoTokenizer reads its chat template from it)");
    PreparedRun run;
    run.folder = fs::absolute(folder);
    run.run_id = run.folder.filename().string();
    fs::create_directories(run.folder);

    // 1. The resolved spec and its hash.
    json spec_json = spec.to_json();
    write_file_atomic(run.folder / "experiment.json",
                      json{{"spec", spec_json}, {"spec_sha256", spec.sha256()}}.dump(2) + "\n");

    // 2. The tokenizer every leg uses (copied, so the run folder is self-contained).
    fs::path tok_dir = run.folder / "tokenizer";
    fs::create_directories(tok_dir);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) copy_file_into(tokenizer_dir(assets) / f, tok_dir);
    say(opt, "tokenizer: " + tokenizer_dir(assets).string());
    record_asset_digests(run, tok_dir, corpora_dir(assets), opt);

    // 3. Corpus: the full build (accounting over every source row), then the experiment's selection.
    auto t0 = std::chrono::steady_clock::now();
    data::CorpusOptions copt;
    copt.seed = spec.seeds.split;
    copt.heldout_fraction = spec.heldout_fraction;
    copt.max_len = static_cast<size_t>(spec.max_len);
    copt.template_kind = data::TemplateKind::Qwen3;
    data::CorpusBuild build = data::build_corpus(corpora_dir(assets), tokenizer, copt);
    const size_t built = build.records.size();
    std::vector<data::Record> selected;
    std::map<std::string, int64_t> per_source;
    for (const auto& src : spec.sources) {
        for (const auto& r : build.records) {
            if (r.source != src) continue;
            if (spec.max_records_per_source > 0 && per_source[src] >= spec.max_records_per_source) break;
            data::Record copy = r;
            copy.index = selected.size();
            selected.push_back(std::move(copy));
            ++per_source[src];
        }
    }
    if (selected.empty()) {
        // Rows dropped because no answer token fits are sequence.max_len's doing, not the sources'.
        size_t too_short = 0;
        for (const auto& n : build.not_converted)
            if (n.reason.rfind("no supervised token within max_len", 0) == 0) ++too_short;
        if (too_short > 0)
            throw Error("field sequence.max_len: " + std::to_string(spec.max_len) + " leaves no supervised token in any record (" +
                        std::to_string(too_short) + " rows dropped for it; see the corpus accounting); give a larger sequence.max_len");
        throw Error("corpus: the experiment's selection (corpus.sources) holds no record");
    }
    build.split = data::split_records(selected, spec.seeds.split, spec.heldout_fraction);
    for (size_t i : build.split.train) selected[i].split = "train";
    for (size_t i : build.split.heldout) selected[i].split = "heldout";
    build.records = std::move(selected);
    fs::path corpus_dir = run.folder / "corpus";
    data::write_corpus(build, corpus_dir);
    json selection{{"built_records", built}, {"sources", spec.sources},
                   {"max_records_per_source", spec.max_records_per_source},
                   {"selected_per_source", per_source}, {"selected", build.records.size()},
                   {"note", "accounting.* cover every source row; records.jsonl holds the experiment's selection, "
                            "re-indexed, with the split recomputed from (seed, record id)"}};
    write_file_atomic(corpus_dir / "selection.json", selection.dump(2) + "\n");
    auto prefix = data::eval_prefix(build.split, static_cast<size_t>(spec.eval_prefix));
    write_file_atomic(corpus_dir / "eval_prefix.json", json{{"size", prefix.size()}, {"indices", prefix}}.dump() + "\n");
    double corpus_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    say(opt, "corpus: " + std::to_string(build.records.size()) + " records (" + std::to_string(build.split.train.size()) +
                 " train, " + std::to_string(build.split.heldout.size()) + " held out) of " + std::to_string(built) +
                 " converted");

    // 4. The shared batch plan, cut to max_updates.
    std::vector<size_t> lengths;
    for (size_t i : build.split.train) lengths.push_back(build.records[i].length);
    data::BatchPlan plan = data::make_batch_plan(build.split.train, lengths, batch_plan_options(spec));
    if (spec.max_updates > 0 && plan.updates.size() > static_cast<size_t>(spec.max_updates))
        plan.updates.resize(static_cast<size_t>(spec.max_updates));
    if (plan.updates.empty()) throw Error("batch plan: no update (train split empty?)");
    // An update accumulates batch.accumulation micro-batches; an epoch holding fewer would make every update
    // smaller than the experiment says (docs/decisions.md "accumulation larger than the records"): refused.
    const size_t train = build.split.train.size();
    const size_t per_epoch = (train + static_cast<size_t>(spec.micro_batch) - 1) / static_cast<size_t>(spec.micro_batch);
    if (static_cast<size_t>(spec.accumulation) > per_epoch)
        throw Error("field batch.accumulation: " + std::to_string(spec.accumulation) +
                    " micro-batches per update, but the train split holds " + std::to_string(train) +
                    " records (batch.micro_batch " + std::to_string(spec.micro_batch) + ": " + std::to_string(per_epoch) +
                    " micro-batches an epoch), so the plan would make " + std::to_string(plan.updates.size()) +
                    " update(s) of at most " + std::to_string(per_epoch) + " micro-batches; give at most " +
                    std::to_string(per_epoch) + " or more records (corpus.max_records_per_source)");
    // Observed updates are 0-based plan indices (docs/observables.md).
    if (!spec.observe_updates.empty() && static_cast<size_t>(spec.observe_updates.back()) >= plan.updates.size())
        throw Error("field observe.updates: update " + std::to_string(spec.observe_updates.back()) +
                    " is beyond the plan (" + std::to_string(plan.updates.size()) + " updates: 0-" +
                    std::to_string(plan.updates.size() - 1) + ")");
    data::write_plan(plan, run.folder / "plan.json");
    say(opt, "plan: " + std::to_string(plan.updates.size()) + " updates");

    // 5. Base weights: the given checkpoint (linked), or generated from the seed.
    auto t1 = std::chrono::steady_clock::now();
    fs::path base_dir = run.folder / "base";
    engine::Qwen3Config config = model_config_of(spec, opt.assets);
    std::string base_source;
    if (!spec.model_base.empty()) {
        fs::create_directories(base_dir);
        for (const auto& e : fs::directory_iterator(base_folder)) {
            if (!e.is_regular_file()) continue;
            std::error_code ec;
            fs::create_symlink(fs::absolute(e.path()), base_dir / e.path().filename(), ec);
            if (ec) copy_file_into(e.path(), base_dir);
        }
        base_source = is_asset_reference(spec.model_base) ? spec.model_base + " (" + base_folder.string() + ")"
                                                          : base_folder.string();
    } else {
        engine::write_generated_base(base_dir, config, spec.seeds.base);
        base_source = std::string("generated (") + engine::kGeneratorName + ", seed " + std::to_string(spec.seeds.base) + ")";
    }
    // What the legs will load, by content: SHA-256 of every file in base/ (links followed).
    const json base_sha256 = base_files_sha256(base_dir);
    // 6. The initial adapter, in peft's layout.
    engine::write_initial_adapter(run.folder / "init", config, lora_config_of(spec), spec.seeds.adapter, "");
    double weights_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::string weights_hash;
    if (base_sha256.contains("model.safetensors"))
        weights_hash = ", model.safetensors sha256 " + base_sha256["model.safetensors"].get<std::string>().substr(0, 12) + "…";
    say(opt, "base: " + base_source + weights_hash + "; initial adapter written");

    run.total_updates = static_cast<int64_t>(plan.updates.size());
    run.train_records = static_cast<int64_t>(build.split.train.size());
    run.heldout_records = static_cast<int64_t>(build.split.heldout.size());
    run.eval_examples = static_cast<int64_t>(prefix.size());
    run.summary = json{{"run_id", run.run_id}, {"total_updates", run.total_updates},
                       {"train_records", run.train_records}, {"heldout_records", run.heldout_records},
                       {"eval_examples", run.eval_examples}, {"base", base_source}, {"base_sha256", base_sha256},
                       {"corpus_s", corpus_s}, {"weights_s", weights_s},
                       {"assets", run.assets}, {"warnings", run.warnings},
                       // what a resume checks the folder against (verify_run_folder)
                       {"prepared_sha256", prepared_files_sha256(run.folder)}};
    write_file_atomic(run.folder / "prepare.json", run.summary.dump(2) + "\n");
    return run;
}

PreparedRun read_prepared_run(const fs::path& folder) {
    PreparedRun run;
    run.folder = fs::absolute(folder);
    run.run_id = run.folder.filename().string();
    fs::path p = run.folder / "prepare.json";
    if (!fs::exists(p)) throw Error(run.folder.string() + ": not a prepared run folder (no prepare.json)");
    run.summary = parse_json_strict(read_file(p), p.string());
    if (!run.summary.is_object()) throw Error(p.string() + ": must be a JSON object (what prepare_run wrote)");
    auto count = [&](const char* key) -> int64_t {
        auto it = run.summary.find(key);
        if (it == run.summary.end()) return 0;
        if (!it->is_number_integer() || it->get<int64_t>() < 0)
            throw Error(p.string() + ": field " + key + " must be a non-negative integer");
        return it->get<int64_t>();
    };
    run.total_updates = count("total_updates");
    run.train_records = count("train_records");
    run.heldout_records = count("heldout_records");
    run.eval_examples = count("eval_examples");
    // Asset digests and warnings (absent in folders prepared before they were recorded).
    if (auto a = run.summary.find("assets"); a != run.summary.end() && a->is_object()) run.assets = *a;
    if (auto w = run.summary.find("warnings"); w != run.summary.end() && w->is_array())
        for (const auto& x : *w)
            if (x.is_string()) run.warnings.push_back(x.get<std::string>());
    return run;
}

}  // namespace tandem::experiments
