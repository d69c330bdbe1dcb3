#include "tandem/views/run_source.h"

#include "tandem/error.h"
#include "tandem/experiments/catalog.h"
#include "tandem/experiments/compare.h"
#include "tandem/experiments/report.h"
#include "tandem/experiments/leg_protocol.h"
#include "tandem/experiments/run_file.h"

#include <nlohmann/json.hpp>

#include <cmath>

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

ResidualTrajectory residual_of(const ex::L4Entry& entry, Metric metric, const ex::PercentSeries& percent) {
    ResidualTrajectory r{entry.residual_leg, entry.residual_reference, metric, {}};
    for (const auto& p : percent.points)
        if (std::isfinite(p.percent)) r.percent.push_back({static_cast<double>(p.update), p.percent});
    return r;
}

// Residual series from experiments' L4 comparison: leg minus reference in percent at every paired
// update, exactly as compare_legs computed them. A run still missing what the comparison needs
// (spec, a second leg) simply has none yet.
void add_residuals(RunSnapshot& snapshot, const std::filesystem::path& file) {
    try {
        const auto comparison = ex::compare_run_file(file);
        for (const auto& entry : comparison.l4) {
            snapshot.residuals.push_back(residual_of(entry, Metric::HeldoutLoss, entry.eval_percent));
            snapshot.residuals.push_back(residual_of(entry, Metric::TrainLoss, entry.loss_percent));
            snapshot.residuals.push_back(residual_of(entry, Metric::GradNorm, entry.grad_percent));
        }
    } catch (const std::exception&) {
        snapshot.residuals.clear();
    }
}

}  // namespace

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

RunSnapshot load_run_snapshot(const std::filesystem::path& path, double wait_s) {
    const auto file = resolve_run_file(path);
    RunSnapshot snapshot;
    {
    ex::RunFileReader reader(file, wait_s);
    snapshot.path = file.string();
    if (auto experiment = reader.experiment()) snapshot.experiment = experiment->name;
    for (const auto& name : reader.legs()) {
        LegTrajectory leg;
        leg.leg = name;
        const auto attributes = reader.leg_attributes(name);
        leg.device = attr_text(attributes, "device");
        leg.status = attr_text(attributes, "status");
        for (const auto& row : reader.steps(name)) {
            const auto u = static_cast<double>(row.update);
            leg.train_loss.push_back({u, row.loss});
            leg.grad_norm.push_back({u, row.grad_norm});
        }
        for (const auto& row : reader.eval(name)) leg.heldout_loss.push_back({static_cast<double>(row.update), row.heldout_ce});
        snapshot.legs.push_back(std::move(leg));
    }
    }  // the reader closes here: a live writer waits as little as possible
    add_residuals(snapshot, file);
    return snapshot;
}

std::vector<CatalogLegRow> load_catalog_rows(const std::filesystem::path& catalog_path) {
    std::error_code ec;
    if (!std::filesystem::exists(catalog_path, ec)) throw Error("catalog " + catalog_path.string() + " does not exist");
    ex::Catalog catalog(catalog_path);
    std::vector<CatalogLegRow> rows;
    for (const auto& run : catalog.runs()) {
        CatalogLegRow base;
        base.run_id = run.id;
        base.run_status = run.status;
        base.experiment = run.experiment;
        base.run_path = run.folder;
        base.run_file = run.run_file;
        base.started = run.started_at;
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
