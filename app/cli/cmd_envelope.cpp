// tandem envelope EXPERIMENT --seeds N [--legs reference,engine] [--vary dropout,plan,adapter]: a
// same-stack seed envelope (docs/envelope.md); by default it varies what the experiment's legs do not
// share (experiments' default_vary).
#include "commands.h"

#include "cli_inputs.h"

#include "tandem/join.h"
#include "tandem/studies/envelope_run.h"

#include <cstdio>
#include <memory>
#include <string>

namespace tandem::cli {

namespace {

struct EnvelopeArgs {
    std::string experiment;
    int64_t seeds = 8;
    std::string legs = "reference";
    std::string vary;  // "": what the experiment's legs do not share (default_vary)
    RunPlaces places;
    int parallel = 0;
};

}  // namespace

void add_envelope_command(CLI::App& app, int& exit_code) {
    auto env = std::make_shared<EnvelopeArgs>();
    auto* envelope = app.add_subcommand("envelope", "Build a same-stack seed envelope: N runs of the experiment that differ only in "
                                                    "the varied seeds; stored in run.h5 (/envelope) and the catalog for later runs");
    envelope->add_option("experiment", env->experiment, "experiment file (experiments/*.json)")->required();
    envelope->add_option("--seeds", env->seeds, "runs in the envelope (at least 2)")->capture_default_str();
    envelope->add_option("--legs", env->legs, "stacks, comma-separated (one envelope each): reference, engine, ...")
        ->capture_default_str();
    envelope->add_option("--vary", env->vary,
                         "seeds that differ between the runs: split, base, adapter, plan, dropout, or none (default: what the "
                         "experiment's legs do not share — dropout for a leg on its own masks, plan too for one on its own "
                         "plan; dropout,plan,adapter when every leg is paired)");
    add_run_places(envelope, env->places, "folder for the envelope's folder (<name>-envelope-<stamp>)",
                   "CPU threads for all runs together (0: all cores)");
    envelope->add_option("--parallel", env->parallel, "runs at once (0: threads / legs per run)");
    envelope->callback([env, &exit_code] {
        require_out_folder("--out", env->places.out);  // new folders go inside it
        experiments::EnvelopeOptions o;
        o.experiment = env->experiment;
        o.seeds = env->seeds;
        o.legs = env->legs;
        if (!env->vary.empty()) o.vary = env->vary == "none" ? std::vector<std::string>{} : split_list(env->vary);
        apply_run_places(env->places, o);
        o.parallel = env->parallel;
        experiments::EnvelopeOutcome r = experiments::run_envelope(o);
        for (const auto& e : r.envelopes) {
            std::string varied;
            for (const auto& v : e.vary) varied += (varied.empty() ? "" : ",") + v;
            std::printf("%s: %lld runs, varying %s\n", e.implementation.c_str(), static_cast<long long>(e.members),
                        varied.empty() ? "no seed" : varied.c_str());
            std::printf("  %-8s %-4s %-12s %-12s %-12s %-12s\n", "update", "n", "mean CE", "std", "min", "max");
            for (const auto& p : e.heldout_ce)
                std::printf("  %-8lld %-4lld %-12.7f %-12.3e %-12.7f %-12.7f\n", static_cast<long long>(p.update),
                            static_cast<long long>(p.n), p.mean, p.std, p.min, p.max);
        }
        std::printf("envelope: %s (%.0f s); catalog %s\n", (r.folder / "run.h5").string().c_str(), r.wall_s, env->places.catalog.c_str());
        exit_code = kOk;
    });
}

}  // namespace tandem::cli
