// Test helper for the run file (tests/store): the C++ side of the h5py cross-check and the
// writer that the kill-mid-append test SIGKILLs.
//
//   storage_tool write-from-json IN.json OUT.h5   write every value of IN.json through RunFileWriter
//   storage_tool read-to-json IN.h5                print what RunFileReader reads, as JSON
//   storage_tool append-forever OUT.h5 LEG BATCH   append BATCH steps at a time until killed; after
//                                                  each flushed batch print the row count on stdout
//   storage_tool catalog-forever DB                add probe rows until killed; print the count after
//                                                  each commit
#include "tandem/error.h"
#include "tandem/store/catalog.h"
#include "tandem/measure/host_info.h"
#include "tandem/store/run_file.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

namespace ex = tandem::experiments;
using nlohmann::json;

// The records' JSON forms (the h5py cross-check's IN.json and the printed read-back), one field list
// each through nlohmann's macros; `extra` attributes and the SGEMM figures are not part of the check.
namespace tandem::experiments {
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ExperimentInfo, name, spec_json, spec_sha256, tandem_version, run_id)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ProbeDirection, name, bytes_counted, best_seconds, median_seconds, gbps)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ProbeResult, device, device_name, bytes, repeats, warmup, method, timestamp, pcie_link,
                                   pcie_source, directions)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LegTiming, model_load_s, tokenize_s, median_update_s, window_first, window_last,
                                   tokens_per_s, total_s)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(LegMemory, peak_device_bytes, peak_host_bytes)
// built_with_cuda is 0/1 in the JSON (an HDF5 integer attribute): set apart.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(HostInfo, cpu_model, logical_cores, physical_cores, memory_total_bytes,
                                   memory_available_bytes, llc_bytes, os, kernel, machine, hostname, tandem_version)
}  // namespace tandem::experiments

namespace {

ex::Attributes attributes_from(const json& j) {
    ex::Attributes out;
    for (const auto& [key, value] : j.items()) {
        if (value.is_number_integer())
            out[key] = value.get<std::int64_t>();
        else if (value.is_number())
            out[key] = value.get<double>();
        else
            out[key] = value.get<std::string>();
    }
    return out;
}

json attributes_to(const ex::Attributes& attributes) {
    json out = json::object();
    for (const auto& [key, value] : attributes) std::visit([&](const auto& v) { out[key] = v; }, value);
    return out;
}

// A step row as the JSON array of its members in the list's order (tandem/store/row_columns.h), so a
// column added to the list is written and read back here without naming it. A short array (older test
// data: no cpu_s) or a null leaves the member's default; a non-finite value prints as null.
ex::StepRow step_from_json(const json& s) {
    ex::StepRow row;
    std::size_t i = 0;
#define STEP_FROM_JSON(member, ...)                                                          \
    if (i < s.size() && !s[i].is_null()) row.member = s[i].get<decltype(row.member)>(); \
    ++i;
    TANDEM_STEP_ROW(STEP_FROM_JSON, STEP_FROM_JSON, STEP_FROM_JSON)
#undef STEP_FROM_JSON
    return row;
}
json step_to_json(const ex::StepRow& row) {
    json out = json::array();
#define STEP_TO_JSON(member, ...) out.push_back(row.member);
    TANDEM_STEP_ROW(STEP_TO_JSON, STEP_TO_JSON, STEP_TO_JSON)
#undef STEP_TO_JSON
    return out;
}

ex::CheckLevel level_from(const std::string& name) {
    if (name == "l1") return ex::CheckLevel::L1;
    if (name == "l2") return ex::CheckLevel::L2;
    if (name == "l3") return ex::CheckLevel::L3;
    if (name == "settings") return ex::CheckLevel::Settings;
    if (name == "optimizer") return ex::CheckLevel::Optimizer;
    throw tandem::Error("unknown check level " + name);
}

int write_from_json(const std::string& in_path, const std::string& out_path) {
    std::ifstream in(in_path);
    const json j = json::parse(in);
    ex::RunFileWriter writer(out_path);
    const json& h = j.at("host");
    auto host = h.get<ex::HostInfo>();
    host.built_with_cuda = h.at("built_with_cuda").get<int>() != 0;
    writer.write_host(host);
    writer.write_experiment(j.at("experiment").get<ex::ExperimentInfo>());
    for (const json& p : j.at("probes")) writer.write_probe(p.get<ex::ProbeResult>());
    for (const auto& [leg, l] : j.at("legs").items()) {
        writer.create_leg(leg, attributes_from(l.at("attributes")));
        // Several appends, to exercise growing the table.
        std::vector<ex::StepRow> batch;
        for (const json& s : l.at("steps")) {
            batch.push_back(step_from_json(s));
            if (batch.size() == 7) {
                writer.append_steps(leg, batch);
                batch.clear();
            }
        }
        writer.append_steps(leg, batch);
        std::vector<ex::EvalRow> eval;
        for (const json& row : l.at("eval")) eval.push_back({row[0], row[1]});
        writer.append_eval(leg, eval);
        writer.write_timing(leg, l.at("timing").get<ex::LegTiming>());
        writer.write_memory(leg, l.at("memory").get<ex::LegMemory>());
        for (const auto& [level, text] : l.at("checks").items()) writer.write_check(leg, level_from(level), text);
    }
    for (const json& c : j.at("comparisons")) {
        ex::ComparisonSeries series;
        series.series = c.at("series");
        for (const json& p : c.at("points")) series.points.push_back({p[0], p[1], p[2], p[3]});
        series.summary = attributes_from(c.at("summary"));
        writer.write_comparison(c.at("a"), c.at("b"), series);
        writer.set_comparison_attributes(c.at("a"), c.at("b"), attributes_from(c.at("attributes")));
    }
    return 0;
}

int read_to_json(const std::string& path) {
    ex::RunFileReader reader(path);
    json out;
    out["host"] = attributes_to(reader.attributes("/host"));
    if (auto e = reader.experiment()) out["experiment"] = *e;
    out["probes"] = reader.probes();
    out["legs"] = json::object();
    for (const auto& leg : reader.legs()) {
        json l;
        l["attributes"] = attributes_to(reader.leg_attributes(leg));
        l["steps"] = json::array();
        for (const auto& s : reader.steps(leg)) l["steps"].push_back(step_to_json(s));
        l["eval"] = json::array();
        for (const auto& e : reader.eval(leg)) l["eval"].push_back({e.update, e.heldout_ce});
        if (auto t = reader.timing(leg)) l["timing"] = *t;
        if (auto m = reader.memory(leg)) l["memory"] = *m;
        l["checks"] = json::object();
        for (auto level : {ex::CheckLevel::L1, ex::CheckLevel::L2, ex::CheckLevel::L3})
            if (auto text = reader.check(leg, level)) l["checks"][ex::check_level_name(level)] = *text;
        out["legs"][leg] = l;
    }
    out["comparisons"] = json::array();
    for (const auto& [a, b] : reader.comparisons()) {
        for (const auto& series : reader.comparison_series(a, b)) {
            json points = json::array();
            for (const auto& p : series.points) points.push_back({p.update, p.a, p.b, p.diff});
            out["comparisons"].push_back({{"a", a}, {"b", b}, {"series", series.series}, {"points", points},
                                          {"summary", attributes_to(series.summary)},
                                          {"attributes", attributes_to(reader.comparison_attributes(a, b))}});
        }
    }
    std::cout << out.dump() << "\n";
    return 0;
}

// Row k of the kill test has update k, loss k/8, grad_norm 2k, lr 1e-4 k, tokens 3k, wall_s k/16:
// the reader can check every surviving row without knowing how far the writer got.
// Even batches go through one long-lived writer (commit() per batch), odd ones through a fresh writer
// per batch (the runner's pattern), so both paths are killed mid-way.
int append_forever(const std::string& path, const std::string& leg, int batch) {
    ex::RunFileWriter writer(path);
    writer.create_leg(leg, {{"implementation", std::string("kill-test")}});
    writer.commit();
    std::int64_t next = 0;
    for (;;) {
        std::vector<ex::StepRow> rows;
        for (int i = 0; i < batch; ++i, ++next) {
            const double k = static_cast<double>(next);
            rows.push_back({next, k / 8, 2 * k, 1e-4 * k, 3 * next, k / 16});
        }
        if ((next / batch) % 2 == 0) {
            writer.append_steps(leg, rows);
            writer.commit();
        } else {
            ex::RunFileWriter per_batch(path);
            per_batch.append_steps(leg, rows);
        }  // committed: published with rename + fsync
        std::printf("%lld\n", static_cast<long long>(next));
        std::fflush(stdout);
    }
}

// Probe row k has bytes k + 1 and repeats 1: the reader checks every surviving row.
int catalog_forever(const std::string& path) {
    ex::Catalog catalog(path);
    ex::ProbeResult probe;
    probe.device = "cpu";
    probe.repeats = 1;
    probe.timestamp = "2026-11-29T10:00:00Z";
    for (std::int64_t k = 0;; ++k) {
        probe.bytes = k + 1;
        probe.directions = {{"memcpy", 2 * (k + 1), 1.0, 1.0, static_cast<double>(k)}};
        catalog.add_probe(probe, "kill-test.h5", "kill-test");
        std::printf("%lld\n", static_cast<long long>(k + 1));
        std::fflush(stdout);
    }
}

}  // namespace

int main(int argc, char** argv) {
    try {
        const std::string command = argc > 1 ? argv[1] : "";
        if (command == "write-from-json" && argc == 4) return write_from_json(argv[2], argv[3]);
        if (command == "read-to-json" && argc == 3) return read_to_json(argv[2]);
        if (command == "catalog-forever" && argc == 3) return catalog_forever(argv[2]);
        if (command == "append-forever" && argc == 5) return append_forever(argv[2], argv[3], std::stoi(argv[4]));
        std::fprintf(stderr, "usage: storage_tool write-from-json IN.json OUT.h5 | read-to-json IN.h5 | "
                             "append-forever OUT.h5 LEG BATCH\n");
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "storage_tool: error: %s\n", e.what());
        return 1;
    }
}
