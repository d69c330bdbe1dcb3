#include "tandem/views/report_tables.h"

#include "tandem/experiments/leg_protocol.h"
#include "tandem/experiments/run_file.h"
#include "tandem/views/run_source.h"

#include <cmath>
#include <cstdio>

namespace tandem::views {

namespace ex = tandem::experiments;

namespace {

std::string fixed(double v, int decimals) {
    if (!std::isfinite(v) || v < 0) return "—";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

std::string general(double v) {
    if (!std::isfinite(v)) return "—";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

std::string mib(std::int64_t bytes) { return bytes < 0 ? "—" : fixed(static_cast<double>(bytes) / (1024.0 * 1024.0), 1); }

std::string attr_text(const ex::AttrValue& v) {
    if (auto s = std::get_if<std::string>(&v)) return *s;
    if (auto i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
    return general(std::get<double>(v));
}

}  // namespace

ReportTables load_report_tables(const std::filesystem::path& path) {
    const auto file = resolve_run_file(path);
    ex::RunFileReader reader(file);
    ReportTables out;
    out.note = "Values as recorded in " + file.string() + " (the runner and experiments/ wrote them).";

    StringTable checks{"L1 and L3 per leg", "Initial held-out loss (L1) and token records (L3) per leg.",
                       {"leg", "L1 held-out CE", "L1 tokens", "L3 records", "L3 template"}, {}};
    StringTable timing{"Timing and memory", "Setup, update time, throughput and peak memory per leg.",
                       {"leg", "model load (s)", "tokenize (s)", "median s/update", "window", "tokens/s", "total (s)",
                        "peak device (MiB)", "peak host (MiB)"},
                       {}};
    for (const auto& leg : reader.legs()) {
        ex::LegTrace trace;
        if (auto j = reader.check(leg, ex::CheckLevel::L1)) ex::l1_from_json(trace, nlohmann::json::parse(*j));
        if (auto j = reader.check(leg, ex::CheckLevel::L3)) ex::l3_from_json(trace, nlohmann::json::parse(*j));
        checks.rows.push_back({leg, trace.l1_ce ? general(*trace.l1_ce) : "—",
                               trace.l1_tokens > 0 ? std::to_string(trace.l1_tokens) : "—",
                               trace.has_l3 ? std::to_string(trace.l3.size()) : "—", trace.l3_template});
        const auto t = reader.timing(leg).value_or(ex::LegTiming{});
        const auto m = reader.memory(leg).value_or(ex::LegMemory{});
        const std::string window = t.window_first >= 0 ? std::to_string(t.window_first) + "–" + std::to_string(t.window_last) : "—";
        timing.rows.push_back({leg, fixed(t.model_load_s, 3), fixed(t.tokenize_s, 3), fixed(t.median_update_s, 4), window,
                               fixed(t.tokens_per_s, 0), fixed(t.total_s, 1), mib(m.peak_device_bytes), mib(m.peak_host_bytes)});
    }
    out.tables.push_back(std::move(checks));

    StringTable comparisons{"L4 comparisons", "Paired-series summaries (legA − legB) as experiments/ computed them.",
                            {"pair", "series", "points", "statistic", "value"}, {}};
    for (const auto& [a, b] : reader.comparisons()) {
        for (const auto& series : reader.comparison_series(a, b)) {
            if (series.summary.empty())
                comparisons.rows.push_back({a + " − " + b, series.series, std::to_string(series.points.size()), "—", "—"});
            for (const auto& [key, value] : series.summary)
                comparisons.rows.push_back({a + " − " + b, series.series, std::to_string(series.points.size()), key, attr_text(value)});
        }
    }
    out.tables.push_back(std::move(comparisons));
    out.tables.push_back(std::move(timing));

    StringTable probes{"Bandwidth probes", "Copy bandwidth per device (best of N).",
                       {"device", "name", "direction", "GB/s", "buffer (MiB)", "repeats", "PCIe link"}, {}};
    for (const auto& p : reader.probes())
        for (const auto& d : p.directions)
            probes.rows.push_back({p.device, p.device_name, d.name, fixed(d.gbps, 2), mib(p.bytes), std::to_string(p.repeats), p.pcie_link});
    out.tables.push_back(std::move(probes));
    return out;
}

}  // namespace tandem::views
