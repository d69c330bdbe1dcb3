#include "tandem/views/run_source.h"

#include "tandem/error.h"
#include "tandem/store/catalog.h"
#include "tandem/compare/comparison.h"
#include "tandem/compare/comparison_io.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/spec/leg_kinds.h"
#include "tandem/store/run_file.h"
#include "tandem/compare/run_overview.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

namespace tandem::views {

namespace ex = tandem::experiments;

namespace {

std::string attr_text(const ex::Attributes& attributes, const std::string& key) {
    auto it = attributes.find(key);
    if (it == attributes.end()) return {};
    if (auto s = std::get_if<std::string>(&it->second)) return *s;
    if (auto i = std::get_if<std::int64_t>(&it->second)) return std::to_string(*i);
    if (auto d = std::get_if<double>(&it->second)) return std::to_string(*d);
    return {};
}

bool has_hdf5_signature(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    char header[8] = {};
    in.read(header, sizeof header);
    return in.gcount() == 8 && std::memcmp(header, "\x89HDF\r\n\x1a\n", 8) == 0;
}

void append_percent(Series& out, const std::vector<ex::PercentPoint>& points) {
    for (const auto& p : points)
        if (std::isfinite(p.percent)) out.push_back({static_cast<double>(p.update), p.percent});
}

// The panel a flag belongs on: the metric its value is of (experiments' flag_series: a metric
// table series, or an update's wall or CPU time for a step-time flag, drawn with throughput, the
// metric made of it).
Metric flag_metric(const ex::GateFlag& f) {
    const std::string series = ex::flag_series(f);
    if (auto m = ex::metric_of_series(series)) return *m;
    if (series == "wall_s" || series == "cpu_s") return Metric::Throughput;
    return Metric::TrainLoss;
}

// The seed envelope's band behind each metric it holds points of (held-out CE, training loss, grad norm).
std::vector<EnvelopeBand> envelope_bands(const ex::SeedEnvelope& envelope) {
    std::vector<EnvelopeBand> bands;
    for (Metric m : {Metric::HeldoutCe, Metric::TrainLoss, Metric::GradNorm}) {
        EnvelopeBand band;
        band.stack = envelope.implementation;
        band.members = envelope.members;
        band.metric = m;
        for (const auto& p : ex::envelope_band_points(envelope, ex::metric_info(m).series)) {
            const auto u = static_cast<double>(p.update);
            band.min.push_back({u, p.min});
            band.max.push_back({u, p.max});
            band.lo.push_back({u, p.lo});
            band.hi.push_back({u, p.hi});
        }
        if (!band.min.empty()) bands.push_back(std::move(band));
    }
    return bands;
}

// Every metric's points of the new rows, through the metric table's of_step / of_eval.
void fill_metric_series(LegTrajectory& leg, const std::vector<ex::StepRow>& steps, const std::vector<ex::EvalRow>& evals) {
    for (const auto& m : ex::metric_table()) {
        auto& series = leg.series(m.metric);
        if (m.of_eval)
            for (const auto& row : evals) series.push_back({static_cast<double>(row.update), m.of_eval(row)});
        if (m.of_step)
            for (const auto& row : steps) series.push_back({static_cast<double>(row.update), m.of_step(row)});
    }
}

// A gate flag as a marker: on the panel of what it is about, sitting on the leg's curve at that
// update (the metric's value in the leg's row there, through the metric table).
FlagMarker flag_marker(const ex::GateFlag& f, const std::vector<ex::StepRow>& steps, const std::vector<ex::EvalRow>& evals) {
    FlagMarker m{f.leg, f.kind, ex::gate_action_name(f.action), f.message, flag_metric(f), static_cast<double>(f.update), f.value};
    const auto& info = ex::metric_info(m.metric);
    if (info.of_eval) {
        for (const auto& e : evals)
            if (e.update == f.update) m.y = info.of_eval(e);
    } else if (info.of_step) {
        for (const auto& r : steps)
            if (r.update == f.update) m.y = info.of_step(r);
    }
    if (!std::isfinite(m.y)) m.y = 0;  // a non-finite value has no place on the axis: at zero
    return m;
}

bool leg_has_ended(const std::string& status) { return !status.empty() && status != "running" && status != "pending"; }

}  // namespace

void rebuild_flag_points(RunSnapshot& s) {
    s.flag_points.clear();
    for (const auto& f : s.flags) {
        auto it = std::find_if(s.flag_points.begin(), s.flag_points.end(), [&](const auto& p) { return p.first == f.metric; });
        if (it == s.flag_points.end()) {
            s.flag_points.push_back({f.metric, {}});
            it = std::prev(s.flag_points.end());
        }
        it->second.push_back({f.update, f.y});
    }
    for (auto& [m, points] : s.flag_points)
        std::sort(points.begin(), points.end(), [](const SeriesPoint& a, const SeriesPoint& b) { return a.update < b.update; });
}

std::filesystem::path resolve_run_file(const std::filesystem::path& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
        auto file = path / "run.h5";
        if (!std::filesystem::exists(file, ec)) throw Error("run folder " + path.string() + " holds no run.h5");
        return file;
    }
    if (!std::filesystem::exists(path, ec)) throw Error("run file " + path.string() + " does not exist");
    return path;
}

std::optional<std::string> run_path_problem(const std::filesystem::path& path, bool allow_pending) {
    std::error_code ec;
    if (path.empty()) return std::string("no run path given");
    if (!std::filesystem::exists(path, ec)) return path.string() + " does not exist";
    if (std::filesystem::is_directory(path, ec)) {
        const auto file = path / "run.h5";
        if (std::filesystem::exists(file, ec)) return run_path_problem(file, false);
        if (allow_pending) return std::nullopt;  // the runner's own new folder: run.h5 comes later
        return path.string() + " is not a tandem run folder (it holds no run.h5)";
    }
    if (!std::filesystem::is_regular_file(path, ec)) return path.string() + " is not a file or a folder";
    if (!has_hdf5_signature(path)) return path.string() + " is not an HDF5 file (not a tandem run file)";
    // A truncated or damaged file has the signature but HDF5 cannot open it: refuse it now, in the
    // window, rather than on the follower's thread (opening reads the superblock only: fast).
    try {
        ex::RunFileReader reader(path, 0.5);
    } catch (const std::exception& e) {
        std::string why = e.what();
        if (why.find(path.string()) != std::string::npos) return why;
        return path.string() + " cannot be read as a run file: " + why;
    }
    return std::nullopt;
}

bool IncrementalRunReader::Delta::empty() const {
    if (reset || flags_changed || !added.verdict.empty()) return false;
    for (const auto& z : added.z_scores)
        if (!z.z.empty()) return false;
    for (const auto& leg : added.legs)
        for (const auto& [metric, series] : leg.metrics)
            if (!series.empty()) return false;
    for (const auto& r : added.residuals)
        if (!r.percent.empty()) return false;
    return true;
}

void IncrementalRunReader::clear() {
    run_id_.clear();
    legs_.clear();
    pairs_.clear();
    envelope_.reset();
    model_.reset();
    flags_seen_ = 0;
    verdict_statuses_.clear();
}

IncrementalRunReader::Delta IncrementalRunReader::read(const std::filesystem::path& path, double wait_s) {
    const auto file = resolve_run_file(path);
    Delta delta;
    delta.added.path = file.string();
    {
        ex::RunFileReader reader(file, wait_s);
        const auto names = start_reading(reader, file, delta);
        for (std::size_t i = 0; i < names.size(); ++i)
            if (!read_leg(reader, i, names[i], delta)) {
                // A leg's table was rewritten (a resume rebuilds run.h5 from events.jsonl): read afresh.
                clear();
                return read(path, wait_s);
            }
        read_flags(reader, delta);
    }  // the reader closes here: a live writer waits as little as possible
    add_verdict(file, delta.added);
    add_residuals(delta.added);
    return delta;
}

std::vector<std::string> IncrementalRunReader::start_reading(const ex::RunFileReader& reader, const std::filesystem::path& file,
                                                             Delta& delta) {
    RunSnapshot& out = delta.added;
    const auto experiment = reader.experiment();
    out.experiment = experiment ? experiment->name : std::string();
    out.run_id = experiment && !experiment->run_id.empty() ? experiment->run_id : file.parent_path().filename().string();
    out.spec_json = experiment ? experiment->spec_json : std::string();
    auto names = reader.legs();
    // Another run in the same place, legs gone, or tables that shrank: start over.
    bool reset = out.run_id != run_id_ || names.size() < legs_.size();
    for (std::size_t i = 0; !reset && i < legs_.size(); ++i) reset = names[i] != legs_[i].name;
    if (reset) clear();
    delta.reset = reset;
    run_id_ = out.run_id;
    if (reset && experiment) {
        read_envelope(reader, experiment->spec_json, names, file);
        if (envelope_) out.bands = envelope_bands(*envelope_);
    }
    return names;
}

void IncrementalRunReader::read_envelope(const ex::RunFileReader& reader, const std::string& spec_json, const std::vector<std::string>& names,
                                         const std::filesystem::path& file) {
    // The seed envelope that judges the run (copied into its file by the runner), and the
    // error model that says where the envelope has a spread at all.
    try {
        const auto spec = ex::parse_experiment(nlohmann::json::parse(spec_json), file.string());
        model_ = ex::error_model_or_none(spec, file.parent_path());
        const auto envelopes = ex::read_envelopes(reader);
        const std::string first_impl = names.empty() ? std::string() : attr_text(reader.leg_attributes(names.front()), "implementation");
        if (const auto* e = ex::pick_envelope(envelopes, first_impl)) envelope_ = *e;
        else if (!envelopes.empty()) envelope_ = envelopes.front();
    } catch (const std::exception&) {
        envelope_.reset();  // a run file without a readable spec or envelope draws no band
    }
}

bool IncrementalRunReader::read_leg(const ex::RunFileReader& reader, std::size_t i, const std::string& name, Delta& delta) {
    if (i == legs_.size()) legs_.push_back({name, {}, {}, {}});
    LegState& state = legs_[i];
    const auto attributes = reader.leg_attributes(state.name);
    state.implementation = attr_text(attributes, "implementation");
    // Read from the last row we hold (one row of overlap): it must still be there and the same,
    // else the table was rewritten and the run is read afresh.
    auto steps = reader.steps(state.name, state.steps.empty() ? 0 : state.steps.size() - 1);
    auto evals = reader.eval(state.name, state.evals.empty() ? 0 : state.evals.size() - 1);
    rows_read_ += steps.size() + evals.size();
    if (!delta.reset && !continues(state, steps, evals)) return false;
    if (!state.steps.empty()) steps.erase(steps.begin());
    if (!state.evals.empty()) evals.erase(evals.begin());
    LegTrajectory leg;
    leg.leg = state.name;
    leg.implementation = state.implementation;
    leg.device = attr_text(attributes, "device");
    leg.status = attr_text(attributes, "status");
    fill_metric_series(leg, steps, evals);
    for (const auto& c : ex::update_clock(steps, state.clock)) {
        leg.tokens_seen.push_back({static_cast<double>(c.update), c.tokens_seen});
        leg.wall_time.push_back({static_cast<double>(c.update), c.wall_s});
        state.clock = c;
    }
    if (envelope_ && model_ && !evals.empty()) {
        ZTrajectory z{state.name, envelope_->implementation, {}};
        for (const auto& q : ex::envelope_z_points(evals, *envelope_, *model_))
            z.z.push_back({static_cast<double>(q.update), q.distance});
        delta.added.z_scores.push_back(std::move(z));
    }
    state.steps.insert(state.steps.end(), steps.begin(), steps.end());
    state.evals.insert(state.evals.end(), evals.begin(), evals.end());
    delta.added.legs.push_back(std::move(leg));
    return true;
}

bool IncrementalRunReader::continues(const LegState& state, const std::vector<ex::StepRow>& steps, const std::vector<ex::EvalRow>& evals) {
    auto same_step = [](const ex::StepRow& a, const ex::StepRow& b) {
        return a.update == b.update && a.loss == b.loss && a.grad_norm == b.grad_norm;
    };
    auto same_eval = [](const ex::EvalRow& a, const ex::EvalRow& b) { return a.update == b.update && a.heldout_ce == b.heldout_ce; };
    const bool steps_continue = state.steps.empty() || (!steps.empty() && same_step(steps.front(), state.steps.back()));
    const bool evals_continue = state.evals.empty() || (!evals.empty() && same_eval(evals.front(), state.evals.back()));
    return steps_continue && evals_continue;
}

void IncrementalRunReader::read_flags(const ex::RunFileReader& reader, Delta& delta) {
    // Gate flags: a small JSON array per leg, taken whole when their number changed.
    std::vector<FlagMarker> flags;
    for (const auto& state : legs_) {
        const auto text = reader.flags(state.name);
        if (!text) continue;
        try {
            for (const auto& f : ex::flags_from_json(nlohmann::json::parse(*text))) flags.push_back(flag_marker(f, state.steps, state.evals));
        } catch (const std::exception&) {
        }
    }
    if (flags.size() != flags_seen_ || delta.reset) {
        flags_seen_ = flags.size();
        delta.flags_changed = true;
        delta.added.flags = std::move(flags);
        rebuild_flag_points(delta.added);
    }
}

void IncrementalRunReader::add_verdict(const std::filesystem::path& file, RunSnapshot& out) {
    // The verdict once every leg has ended (the whole comparison, once per run).
    bool ended = !out.legs.empty();
    std::string statuses;
    for (const auto& leg : out.legs) {
        ended = ended && leg_has_ended(leg.status);
        statuses += leg.leg + "=" + leg.status + ";";
    }
    if (ended && statuses != verdict_statuses_) {  // again when a resumed run ends anew
        try {
            out.verdict = ex::compare_run_file(file).verdict();
        } catch (const std::exception& e) {
            out.verdict = std::string("no verdict: ") + e.what();
        }
        verdict_statuses_ = statuses;
    }
}

void IncrementalRunReader::add_residuals(RunSnapshot& out) {
    // Residuals of every pair (compare_legs' order and sides), only at newly paired updates.
    std::size_t pair = 0;
    for (std::size_t i = 0; i < legs_.size(); ++i)
        for (std::size_t j = i + 1; j < legs_.size(); ++j, ++pair) {
            if (pair == pairs_.size()) pairs_.push_back({});
            PairState& state = pairs_[pair];
            const auto& a = legs_[i];
            const auto& b = legs_[j];
            const bool ref_first = ex::reference_is_first(a.implementation, b.implementation);
            const auto points = ex::residual_points_after(a.steps, a.evals, b.steps, b.evals, ref_first, state.eval_after, state.step_after);
            if (!points.eval.empty()) state.eval_after = points.eval.back().update;
            if (!points.loss.empty()) state.step_after = points.loss.back().update;
            const std::string leg = ref_first ? b.name : a.name, reference = ref_first ? a.name : b.name;
            ResidualTrajectory eval{leg, reference, Metric::HeldoutCe, {}}, loss{leg, reference, Metric::TrainLoss, {}},
                grad{leg, reference, Metric::GradNorm, {}};
            append_percent(eval.percent, points.eval);
            append_percent(loss.percent, points.loss);
            append_percent(grad.percent, points.grad);
            out.residuals.push_back(std::move(eval));
            out.residuals.push_back(std::move(loss));
            out.residuals.push_back(std::move(grad));
        }
}

void apply_delta(RunSnapshot& target, const IncrementalRunReader::Delta& delta) {
    if (delta.reset) {
        target = delta.added;
        return;
    }
    target.path = delta.added.path;
    target.run_id = delta.added.run_id;
    target.experiment = delta.added.experiment;
    if (!delta.added.spec_json.empty()) target.spec_json = delta.added.spec_json;
    for (const auto& leg : delta.added.legs) {
        auto it = std::find_if(target.legs.begin(), target.legs.end(), [&](const LegTrajectory& l) { return l.leg == leg.leg; });
        if (it == target.legs.end()) {
            target.legs.push_back(leg);
            continue;
        }
        it->device = leg.device;
        it->status = leg.status;
        it->implementation = leg.implementation;
        for (const auto& [metric, added] : leg.metrics) {
            auto& series = it->series(metric);
            series.insert(series.end(), added.begin(), added.end());
        }
        it->tokens_seen.insert(it->tokens_seen.end(), leg.tokens_seen.begin(), leg.tokens_seen.end());
        it->wall_time.insert(it->wall_time.end(), leg.wall_time.begin(), leg.wall_time.end());
    }
    for (const auto& r : delta.added.residuals) {
        auto it = std::find_if(target.residuals.begin(), target.residuals.end(), [&](const ResidualTrajectory& t) {
            return t.leg == r.leg && t.reference == r.reference && t.metric == r.metric;
        });
        if (it == target.residuals.end()) target.residuals.push_back(r);
        else it->percent.insert(it->percent.end(), r.percent.begin(), r.percent.end());
    }
    for (const auto& z : delta.added.z_scores) {
        auto it = std::find_if(target.z_scores.begin(), target.z_scores.end(), [&](const ZTrajectory& t) { return t.leg == z.leg; });
        if (it == target.z_scores.end()) target.z_scores.push_back(z);
        else it->z.insert(it->z.end(), z.z.begin(), z.z.end());
    }
    if (!delta.added.bands.empty()) target.bands = delta.added.bands;
    if (delta.flags_changed) {
        target.flags = delta.added.flags;
        target.flag_points = delta.added.flag_points;
    }
    if (!delta.added.verdict.empty()) target.verdict = delta.added.verdict;
}

RunSnapshot load_run_snapshot(const std::filesystem::path& path, double wait_s) {
    IncrementalRunReader reader;
    return reader.read(path, wait_s).added;
}

std::vector<CatalogLegRow> load_catalog_rows(const std::filesystem::path& catalog_path) {
    std::error_code ec;
    if (!std::filesystem::exists(catalog_path, ec)) throw Error("catalog " + catalog_path.string() + " does not exist");
    ex::Catalog catalog(catalog_path);
    const auto annotations = catalog.annotations();
    std::vector<CatalogLegRow> rows;
    for (const auto& run : catalog.runs()) {
        CatalogLegRow base;
        if (auto it = annotations.find(run.id); it != annotations.end()) {
            base.tags = it->second.tags;
            base.note = it->second.note;
        }
        base.run_id = run.id;
        base.run_status = run.status;
        base.experiment = run.experiment;
        base.run_path = run.folder;
        base.run_file = run.run_file;
        base.started = run.started_at;
        base.verdict = run.note;  // the runner writes the verdict line there (docs/catalog.md)
        if (auto spec = ex::read_run_spec(run.folder)) base.spec = std::make_shared<const nlohmann::json>(std::move(*spec));
        if (auto e = ex::envelope_folder_of(run.folder)) base.envelope = e->string();
        const auto legs = catalog.legs(run.id);
        if (legs.empty()) {
            rows.push_back(base);
            continue;
        }
        for (const auto& leg : legs) {
            CatalogLegRow row = base;
            row.leg = leg.name;
            row.implementation = leg.implementation;
            row.status = leg.status;
            row.faults = leg.faults;
            row.device = leg.device;
            row.updates_done = leg.updates_done;
            row.updates_total = leg.updates_total;
            row.final_loss = leg.final_loss;
            row.tokens_per_s = leg.tokens_per_s;
            // Peak memory of the device the leg ran on (host memory for a CPU leg).
            if (leg.peak_device_bytes && *leg.peak_device_bytes >= 0 && leg.device != "cpu")
                row.peak_memory_bytes = static_cast<double>(*leg.peak_device_bytes);
            else if (leg.peak_host_bytes && *leg.peak_host_bytes >= 0)
                row.peak_memory_bytes = static_cast<double>(*leg.peak_host_bytes);
            rows.push_back(std::move(row));
        }
    }
    return rows;
}

void set_catalog_annotation(const std::filesystem::path& catalog_path, const std::string& run_id,
                            const std::vector<std::string>& tags, const std::string& note) {
    ex::Catalog catalog(catalog_path);
    catalog.set_run_tags(run_id, tags);
    catalog.set_run_user_note(run_id, note);
}

bool delete_catalog_run(const std::filesystem::path& catalog_path, const std::string& run_id) {
    ex::Catalog catalog(catalog_path);
    return catalog.delete_run(run_id);
}

std::vector<std::vector<LegTokenRecord>> load_token_records(const std::filesystem::path& path) {
    const auto file = resolve_run_file(path);
    ex::RunFileReader reader(file);
    std::vector<std::vector<LegTokenRecord>> result;
    for (const auto& leg : reader.legs()) {
        auto text = reader.check(leg, ex::CheckLevel::L3);
        if (!text) continue;
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(*text);
        } catch (const std::exception& e) {
            throw Error(file.string() + ": /legs/" + leg + "/checks/l3 is not JSON: " + e.what());
        }
        ex::LegTrace trace;
        ex::l3_from_json(trace, j);  // the runner stored it with l3_to_json
        std::vector<LegTokenRecord> records;
        for (const auto& r : trace.l3) {
            LegTokenRecord rec;
            rec.leg = leg;
            rec.template_name = trace.l3_template;
            rec.label = trace.l3_template.empty() ? leg : leg + " (" + trace.l3_template + ")";
            rec.index = r.index;
            rec.id = r.id;
            rec.ids = r.ids;
            rec.boundary = r.boundary;
            rec.supervised_count = r.supervised_count;
            rec.full_length = r.full_length;
            rec.truncated_at = r.truncated_at;
            rec.text = r.text;
            records.push_back(std::move(rec));
        }
        result.push_back(std::move(records));
    }
    return result;
}

}  // namespace tandem::views
