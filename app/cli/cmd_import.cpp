// `tandem import tensorboard|csv|events SOURCE --into RUN --as LEG`: a run made elsewhere becomes a
// read-only leg of a tandem run (experiments/studies/include/tandem/studies/import.h, docs/legs.md).
#include "commands.h"

#include "tandem/studies/import.h"

#include <cstdio>
#include <functional>
#include <memory>

namespace tandem::cli {
namespace ex = tandem::experiments;

namespace {

struct ImportArgs {
    std::string source, into, as, catalog = "tandem.db", step_counts = "done";
    ex::SeriesMapping mapping;
};

void add_common(CLI::App* cmd, const std::shared_ptr<ImportArgs>& a, const char* what) {
    cmd->add_option("source", a->source, what)->required();
    cmd->add_option("--into", a->into, "the run folder (or its run.h5) to add the leg to")->required();
    cmd->add_option("--as", a->as, "the new leg's name ([A-Za-z0-9_.+-], not one the run has)")->required();
    cmd->add_option("--catalog", a->catalog, "SQLite catalog to add the leg to when it lists the run")->capture_default_str();
}

void add_mapping(CLI::App* cmd, const std::shared_ptr<ImportArgs>& a, const char* kind) {
    const std::string k = kind;
    cmd->add_option("--loss", a->mapping.loss, k + " of the training loss (default: train/loss, loss, train_loss)");
    cmd->add_option("--eval-loss", a->mapping.eval_loss,
                    k + " of the held-out loss (default: eval/loss, eval_loss, eval/heldout_ce, heldout_ce)");
    cmd->add_option("--grad-norm", a->mapping.grad_norm, k + " of the pre-clip gradient norm (default: train/grad_norm, grad_norm)");
    cmd->add_option("--lr", a->mapping.lr, k + " of the learning rate (default: train/learning_rate, learning_rate, lr)");
    cmd->add_option("--step-counts", a->step_counts,
                    "done: a step counts updates done (HF Trainer's global_step; the loss at step s is update s-1); "
                    "index: steps are 0-based update indices")
        ->check(CLI::IsMember({"done", "index"}))
        ->capture_default_str();
}

void finish(const ex::ImportedTrace& t, const ImportArgs& a, const std::string& implementation) {
    ex::import_leg(a.into, a.as, t, implementation, a.catalog.empty() ? std::nullopt : std::optional<std::filesystem::path>(a.catalog));
    std::printf("imported leg '%s' (%s) into %s from %s\n", a.as.c_str(), implementation.c_str(), a.into.c_str(),
                t.source.c_str());
    for (const auto& s : t.series) std::printf("  %s\n", s.c_str());
    if (const std::string note = ex::non_finite_note(t); !note.empty())
        std::printf("WARNING: %s: %s; a verdict over this run says \"incomplete\"\n", t.source.c_str(), note.c_str());
    std::printf("compare: tandem report %s\n", a.into.c_str());
}

// tensorboard and csv: named series (`kind`: tag, column) read by `read` under the --loss/--eval-loss/...
// mapping into an imported leg.
CLI::App* add_series_import(CLI::App* imp, int& exit_code, const std::shared_ptr<ImportArgs>& a, const std::string& name,
                            const std::string& description, const char* what, const char* kind,
                            std::function<ex::ImportedTrace(const ImportArgs&)> read) {
    auto* cmd = imp->add_subcommand(name, description);
    add_common(cmd, a, what);
    add_mapping(cmd, a, kind);
    cmd->callback([a, read = std::move(read), &exit_code] {
        a->mapping.steps_count_done = a->step_counts == "done";
        finish(read(*a), *a, ex::kImportedImplementation);
        exit_code = kOk;
    });
    return cmd;
}

}  // namespace

void add_import_commands(CLI::App& app, int& exit_code) {
    auto* imp = group(app, "import", "Add a run made elsewhere (TensorBoard, CSV, leg events) to a tandem run as a read-only leg");

    auto tb = std::make_shared<ImportArgs>();
    add_series_import(imp, exit_code, tb, "tensorboard",
                      "TensorBoard event files (a folder or one file), read with TensorBoard's own reader",
                      "event file or folder of event files", "tag",
                      [](const ImportArgs& a) { return ex::trace_from_tensorboard(a.source, a.mapping); });

    auto csv = std::make_shared<ImportArgs>();
    auto* csvc = add_series_import(imp, exit_code, csv, "csv", "a CSV file with a header line (a W&B or MLflow export, a spreadsheet)",
                                   "CSV file", "column", [](const ImportArgs& a) { return ex::trace_from_csv(a.source, a.mapping); });
    csvc->add_option("--step", csv->mapping.step, "column of the step")->capture_default_str();

    auto ev = std::make_shared<ImportArgs>();
    auto* evc = imp->add_subcommand("events", "a leg's protocol events (JSON Lines, docs/leg-protocol.md), e.g. a leg run by hand");
    add_common(evc, ev, "events file (legs/<leg>/events.jsonl or a copy of a leg's stdout)");
    evc->callback([ev, &exit_code] {
        ex::ImportedTrace t = ex::trace_from_events(ev->source);
        finish(t, *ev, t.trace.implementation());
        exit_code = kOk;
    });
}

}  // namespace tandem::cli
