// tandem corpus: build, plan (docs/data-corpus.md).
//   corpus build --sources DIR --out DIR [--seed N] [--max-len N] [--heldout-fraction F]
//   corpus plan  --corpus DIR --out FILE [--seed N] [--micro-batch N] [--accumulation N] [--epochs N]
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/assets.h"
#include "tandem/atomic_file.h"
#include "tandem/data/batch_plan.h"
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

namespace fs = std::filesystem;
namespace td = tandem::data;
using nlohmann::json;

void add_corpus_commands(CLI::App& app, int& exit_code) {
    // ---- corpus build
    auto* corpus = app.add_subcommand("corpus", "Build the training corpus from the source datasets");
    corpus->require_subcommand(1);
    auto* build = corpus->add_subcommand(
        "build", "Convert PubMedQA / MedMCQA / MedQA rows to chat records; write records.jsonl, accounting and split");
    struct BuildArgs {
        std::string sources, out, tokenizer, template_name = "qwen3";
        uint64_t seed = 1234;
        size_t max_len = 512;
        double heldout = 0.15;
        bool force = false;
    };
    auto b = std::make_shared<BuildArgs>();
    build->add_option("--sources", b->sources, "folder holding pubmedqa/, medmcqa/, medqa_usmle/ (default: the shared corpora)");
    build->add_option("--out", b->out, "output folder (records.jsonl, accounting.json/.txt, split.json, not_converted.jsonl)")->required();
    add_force_flag(build, b->force);
    build->add_option("--seed", b->seed, "split seed")->capture_default_str();
    build->add_option("--max-len", b->max_len, "truncation length for the build-time supervision check (0 = none)")->capture_default_str();
    build->add_option("--heldout-fraction", b->heldout, "fraction of records held out")->capture_default_str()->check(CLI::Range(0.0, 1.0));
    build->add_option("--tokenizer", b->tokenizer, "tokenizer folder (default: the shared Qwen3 tokenizer)");
    build->add_option("--template", b->template_name, "template for the supervision check: qwen3|chatml")->capture_default_str();
    build->callback([b, &exit_code] {
        require_out_folder("--out", b->out, /*replaces_files=*/true, b->force);
        const fs::path sources = b->sources.empty() ? corpora_dir(require_asset_root()) : fs::path(b->sources);
        const td::Tokenizer tok = td::Tokenizer::load(tokenizer_folder(b->tokenizer));
        td::CorpusOptions opt;
        opt.seed = b->seed;
        opt.max_len = b->max_len;
        opt.heldout_fraction = b->heldout;
        opt.template_kind = td::parse_template_kind(b->template_name);
        const td::CorpusBuild result = td::build_corpus(sources, tok, opt);
        td::write_corpus(result, b->out);
        std::fputs(td::accounting_summary(result).c_str(), stdout);
        std::printf("\nwrote %s/{records.jsonl, accounting.json, accounting.txt, split.json, not_converted.jsonl}\n",
                    b->out.c_str());
        exit_code = kOk;
    });

    // ---- corpus plan
    auto* plan = corpus->add_subcommand("plan", "Write the length-bucketed batch plan (plan.json) for a built corpus");
    struct PlanArgs {
        std::string corpus, out;
        td::PlanOptions options;
        bool force = false;
    };
    auto p = std::make_shared<PlanArgs>();
    plan->add_option("--corpus", p->corpus, "corpus folder (or a run folder holding corpus/)")->required();
    plan->add_option("--out", p->out, "plan file to write (never over a run's file unless --force)")->required();
    add_force_flag(plan, p->force);
    plan->add_option("--seed", p->options.seed, "plan seed")->capture_default_str();
    plan->add_option("--micro-batch", p->options.micro_batch, "sequences per micro-batch")->capture_default_str();
    plan->add_option("--accumulation", p->options.accumulation, "micro-batches per update")->capture_default_str();
    plan->add_option("--epochs", p->options.epochs, "epochs")->capture_default_str();
    plan->add_option("--bucket-updates", p->options.bucket_updates, "updates' worth of records per length bucket")->capture_default_str();
    plan->callback([p, &exit_code] {
        refuse_protected_out("--out", p->out, p->force);
        const fs::path corpus = corpus_folder(p->corpus);
        const auto records = td::read_records(corpus / "records.jsonl");
        const td::Split split = td::read_split(corpus / "split.json");
        std::vector<size_t> lengths;
        for (size_t idx : split.train) {
            if (idx >= records.size())
                throw Error((corpus / "split.json").string() + ": field \"train\": index " + std::to_string(idx) + " is out of range");
            if (records[idx].length == 0)
                throw Error((corpus / "records.jsonl").string() + ": record " + records[idx].id + ": field \"tokens.length\": missing or 0");
            lengths.push_back(records[idx].length);
        }
        td::PlanOptions opt = p->options;
        opt.max_len = corpus_max_len(corpus);
        const td::BatchPlan result = td::make_batch_plan(split.train, lengths, opt);
        td::write_plan(result, p->out);
        std::printf("plan: %zu train records, %zu updates of %zu x %zu (seed %llu) -> %s\n", split.train.size(),
                    result.updates.size(), opt.micro_batch, opt.accumulation, static_cast<unsigned long long>(opt.seed),
                    p->out.c_str());
        exit_code = kOk;
    });
}

}  // namespace tandem::cli
