// Per-leg figures beside the levels: grad-norm distribution, median s/update over the timing
// window, tokens/s, memory high-water marks (docs/report.md "Timing").
#include "tandem/compare/timing.h"

#include "tandem/compare/statistics.h"

#include <algorithm>
#include <cmath>

namespace tandem::experiments {

GradStats grad_stats(const LegData& l, double clip) {
    GradStats g;
    g.leg = l.name;
    std::vector<double> x;
    for (const auto& s : l.trace.steps)
        if (std::isfinite(s.grad_norm)) x.push_back(s.grad_norm);
    g.n = static_cast<int64_t>(x.size());
    if (x.empty()) return g;
    g.median = percentile(x, 50);
    g.p99 = percentile(x, 99);
    g.max = *std::max_element(x.begin(), x.end());
    g.frac_above_clip = static_cast<double>(std::count_if(x.begin(), x.end(), [&](double v) { return v > clip; })) /
                        static_cast<double>(x.size());
    return g;
}

TimingRow timing_row(const LegData& l) {
    TimingRow r = timing_of(l.trace);
    r.leg = l.name;
    r.implementation = l.implementation;
    r.device = l.device;
    r.status = l.status;
    r.flops = l.flops;
    r.device_shared_with = l.device_shared_with;
    return r;
}

TimingRow timing_of(const LegTrace& t) {
    TimingRow r;
    r.setup_s = t.setup_s;
    r.model_load_s = t.model_load_s;
    r.tokenize_s = t.tokenize_s;
    r.updates = static_cast<int64_t>(t.steps.size());
    auto [first, last] = timing_window(r.updates);
    r.window_first = first;
    r.window_last = last;
    std::vector<double> w;
    double tokens = 0, wall = 0;
    for (const auto& s : t.steps) {
        if (s.update >= first && s.update <= last && std::isfinite(s.wall_s)) w.push_back(s.wall_s);
        tokens += static_cast<double>(s.tokens);
        wall += std::isfinite(s.wall_s) ? s.wall_s : 0;
    }
    if (!w.empty()) r.median_update_s = percentile(w, 50);
    if (wall > 0) r.tokens_per_s = tokens / wall;
    r.peak_device_bytes = t.peak_device_bytes;
    r.peak_host_bytes = t.peak_host_bytes;
    return r;
}

LegTiming timing_record(const LegTrace& t) {
    const TimingRow figures = timing_of(t);
    LegTiming tm;
    tm.model_load_s = t.model_load_s;
    tm.tokenize_s = t.tokenize_s;
    tm.total_s = t.total_s;
    tm.window_first = figures.window_first;
    tm.window_last = figures.window_last;
    tm.median_update_s = figures.median_update_s;
    tm.tokens_per_s = figures.tokens_per_s;
    tm.extra["setup_s"] = t.setup_s;
    tm.extra["train_s"] = t.train_s;
    return tm;
}

LegMemory memory_record(const LegTrace& t) {
    LegMemory m;
    m.peak_device_bytes = t.peak_device_bytes;
    m.peak_host_bytes = t.peak_host_bytes;
    return m;
}

}  // namespace tandem::experiments
