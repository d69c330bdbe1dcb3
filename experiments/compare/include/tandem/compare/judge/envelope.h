#pragma once
// The same-stack seed envelope (docs/envelope.md): N runs of one stack that differ only in what the
// varied seeds decide (dropout masks, batch plan, initial adapter, ...). Per evaluation and per
// update it holds min / max / mean / std and quantiles of held-out CE, training loss and grad norm,
// so a cross-stack difference can be judged in units of how much one stack varies with itself.
//
// Stored in the envelope's run.h5 (/envelope/<stack>/..., with every member's series) and in the
// catalog (tables envelopes, envelope_points), keyed by ExperimentSpec::sha256_without_seeds(): a
// later run of the same experiment finds it there and copies it into its own run.h5.
#include "tandem/spec/experiment.h"
#include "tandem/store/run_file.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace tandem::experiments {

class Catalog;

// One member's series as the statistics see them.
struct EnvelopeMember {
    std::string name;    // m000, m001, ... (the group under /envelope/<stack>/members)
    std::string run_id;  // the member's run (its folder's name)
    nlohmann::json seeds;  // the member's seeds {split, base, adapter, plan, dropout}
    std::vector<StepRow> steps;
    std::vector<EvalRow> evals;
};

struct SeedEnvelope {
    std::string key;             // ExperimentSpec::sha256_without_seeds() of the experiment
    std::string experiment;      // its name
    std::string implementation;  // the stack: engine, reference, ...
    std::vector<std::string> vary;  // the seeds that differ between members (may be empty)
    int64_t members = 0;
    std::string created_at;      // ISO-8601 UTC
    std::string source;          // the envelope's run.h5 (absolute path)
    std::vector<EnvelopePoint> heldout_ce, loss, grad_norm;
    // Per member: the mean held-out CE over the evaluations after update 0, the sample of the
    // two-sided test (docs/thresholds.md "Envelope distance").
    std::vector<double> member_mean_ce;
    // Per member: the mean training loss and pre-clip grad norm over every update, the samples of the
    // per-update series' tests (judge/series.h). Empty for an envelope built before they were kept.
    std::vector<double> member_mean_loss, member_mean_grad_norm;

    const std::vector<EnvelopePoint>& series(const std::string& name) const;  // heldout_ce | loss | grad_norm
    const EnvelopePoint* at(const std::string& series, int64_t update) const;  // nullptr when absent
    const std::vector<double>& member_means(const std::string& series) const;  // the test's sample of a series
    bool varies(const std::string& seed) const;  // whether `vary` holds this seed name
};

// The statistics over the members (each a complete run of the same schedule): per update present in
// every member, n, min, max, mean, sample std (ddof 1; 0 for one member), quantiles 5/25/50/75/95
// (numpy's linear method). Non-finite values are left out of a point (n counts the finite ones).
SeedEnvelope compute_envelope(const std::vector<EnvelopeMember>& members);
// Mean held-out CE over the evaluations after update 0 (NaN when there is none).
double mean_heldout_after_start(const std::vector<EvalRow>& evals);
// Mean training loss or pre-clip grad norm (`series`: loss | grad_norm) over every update (NaN when none;
// a non-finite value makes it non-finite).
double mean_step_series(const std::vector<StepRow>& steps, const std::string& series);

// What the workbench draws behind a series (docs/workbench.md): per update the envelope's min and
// max and mean -/+ sigma std (sample std).
struct BandPoint {
    int64_t update = 0;
    double min = 0, max = 0, lo = 0, hi = 0;
};
std::vector<BandPoint> envelope_band_points(const SeedEnvelope& envelope, const std::string& series, double sigma = 2.0);

// Which envelope judges a leg: the reference stack's when there is one (the yardstick), else the
// leg's own stack's, else none.
const SeedEnvelope* pick_envelope(const std::vector<SeedEnvelope>& envelopes, const std::string& implementation);

// run.h5: /envelope/<stack> (attributes, series, member_mean_ce; members when given).
void write_envelope(RunFileWriter& writer, const SeedEnvelope& envelope, const std::vector<EnvelopeMember>* members);
std::vector<SeedEnvelope> read_envelopes(const RunFileReader& reader);

// Catalog (tables envelopes, envelope_points; docs/catalog.md schema 5).
void store_envelope(Catalog& catalog, const SeedEnvelope& envelope);
// The newest envelope of every stack for this key.
std::vector<SeedEnvelope> find_envelopes(const Catalog& catalog, const std::string& key);

// The seed envelopes of one experiment (`key`), looked for in several places in order: the first place
// holding any gives them all, the places after it are not looked in. `places` names every place looked in
// ("the run file", "the catalog tandem.db"), so a pair judged without an envelope can say where none was
// found (docs/envelope.md "Where envelopes are found").
struct EnvelopeSearch {
    std::string key;
    std::vector<SeedEnvelope> envelopes;
    std::vector<std::string> places;
    // run.h5's /envelope (copied in by the runner when the run started).
    void look_in_run_file(const RunFileReader& reader);
    // A catalog file; one that does not exist is not a place looked in (and is never created).
    void look_in_catalog(const std::filesystem::path& catalog);
    // A catalog already open (the runner's own).
    void look_in_catalog(const Catalog& catalog);
};

}  // namespace tandem::experiments
