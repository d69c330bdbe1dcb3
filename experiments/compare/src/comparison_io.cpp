// Reading and writing comparisons: the legs of a run file (read_legs) and a comparison's
// /comparisons and /distances groups (write_comparisons). A run file judged (compare_run_file) is in
// compare_run_file.cpp: it looks for seed envelopes in catalogs, which the parsers' fuzz build leaves out. Kept in tandem_compare, not in
// tandem_store: the legs' check records are read with the leg protocol's parsers and the gate's
// flags, which the store may not use (docs/decisions.md, "experiments/ is six libraries").
#include "tandem/compare/comparison_io.h"

#include "tandem/error.h"
#include "tandem/strict_json.h"

#include <cmath>

namespace tandem::experiments {
using nlohmann::json;

std::vector<LegData> read_legs(const RunFileReader& reader) {
    std::vector<LegData> out;
    auto str = [](const Attributes& a, const char* k) -> std::string {
        auto it = a.find(k);
        if (it == a.end()) return "";
        if (auto s = std::get_if<std::string>(&it->second)) return *s;
        return "";
    };
    auto i64 = [](const Attributes& a, const char* k, int64_t def) -> int64_t {
        auto it = a.find(k);
        if (it == a.end()) return def;
        if (auto v = std::get_if<std::int64_t>(&it->second)) return *v;
        return def;
    };
    for (const auto& name : reader.legs()) {
        LegData l;
        l.name = name;
        Attributes attrs = reader.leg_attributes(name);
        l.implementation = str(attrs, "implementation");
        l.device = str(attrs, "device");
        l.status = str(attrs, "status");
        l.exit_status = i64(attrs, "exit_status", 0);
        l.non_finite_kept_out = str(attrs, "non_finite_kept_out");
        LegTrace& t = l.trace;
        t.steps = reader.steps(name);
        t.evals = reader.eval(name);
        // The stored check records, read strictly: a damaged record is an error naming it.
        auto record = [&](CheckLevel level) -> std::optional<json> {
            auto text = reader.check(name, level);
            if (!text) return std::nullopt;
            const std::string where = reader.path().string() + ": /legs/" + name + "/checks/" + check_level_name(level);
            json j = parse_json_strict(*text, where);
            if (!j.is_object()) throw Error(where + ": not a JSON object");
            return j;
        };
        if (auto j = record(CheckLevel::L1)) l1_from_json(t, *j);
        if (auto j = record(CheckLevel::L2)) l2_from_json(t, *j);
        if (auto j = record(CheckLevel::L3)) l3_from_json(t, *j);
        if (auto j = record(CheckLevel::Settings)) t.settings = std::move(*j);
        if (auto text = reader.check(name, CheckLevel::Optimizer)) {
            const std::string where = reader.path().string() + ": /legs/" + name + "/checks/optimizer";
            json j = parse_json_strict(*text, where);
            if (!j.is_array()) throw Error(where + ": not a JSON list");
            t.optimizer_checks = std::move(j);
        }
        if (auto tm = reader.timing(name)) {
            t.model_load_s = tm->model_load_s;
            t.tokenize_s = tm->tokenize_s;
            t.total_s = tm->total_s;
            if (auto it = tm->extra.find("setup_s"); it != tm->extra.end())
                if (auto v = std::get_if<double>(&it->second)) t.setup_s = *v;
            auto number = [&](const char* key) {
                auto it = tm->extra.find(key);
                const double* v = it == tm->extra.end() ? nullptr : std::get_if<double>(&it->second);
                return v && std::isfinite(*v) ? *v : -1.0;
            };
            l.flops = {number("flops_per_update"), number("flops_per_s"), number("peak_flops_per_s"), number("utilisation")};
            if (auto it = tm->extra.find("device_shared_with"); it != tm->extra.end())
                if (auto v = std::get_if<std::string>(&it->second)) l.device_shared_with = *v;
        }
        if (auto m = reader.memory(name)) {
            t.peak_device_bytes = m->peak_device_bytes;
            t.peak_host_bytes = m->peak_host_bytes;
        }
        if (auto j = reader.flags(name)) l.flags = flags_from_json(json::parse(*j));
        std::string err = str(attrs, "error");
        if (!err.empty()) t.error = err;
        l.faults = str(attrs, "faults");
        // The hello event (its `versions` make the report's Stacks table); a file without one has no table.
        if (const std::string hello = str(attrs, "hello"); !hello.empty()) {
            try {
                t.hello = json::parse(hello);
            } catch (const json::exception&) {
                t.hello = json::object();
            }
        }
        t.done = l.status == "finished";
        out.push_back(std::move(l));
    }
    return out;
}

namespace {

// The one summary of a paired series (diff_stats) as the attributes of its dataset.
Attributes summary_attributes(const DiffStats& d, const PercentSeries& percent) {
    return {{"mean_signed_diff", d.mean_signed}, {"mean_abs_diff", d.mean_abs},    {"std_diff", d.std},
            {"max_abs_diff", d.max_abs},        {"max_abs_diff_update", d.max_abs_update}, {"sign_changes", d.sign_changes},
            {"mean_abs_rel", d.mean_abs_rel},   {"paired", d.n},                   {"max_abs_percent", percent.max_abs}};
}

}  // namespace

void write_comparisons(RunFileWriter& writer, const Comparison& c) {
    for (const auto& e : c.l4) {
        writer.write_comparison(e.leg_a, e.leg_b, {"heldout_ce", e.eval_points, summary_attributes(e.eval, e.eval_percent)});
        writer.write_comparison(e.leg_a, e.leg_b, {"loss", e.loss_points, summary_attributes(e.loss, e.loss_percent)});
        writer.write_comparison(e.leg_a, e.leg_b, {"grad_norm", e.grad_points, summary_attributes(e.grad, e.grad_percent)});
    }
    for (size_t i = 0; i < c.l1.size(); ++i) {
        const auto& l1 = c.l1[i];
        Attributes a{{"l1_rel_diff", l1.rel_diff}, {"l1_pass", int64_t{l1.pass}},
                     {"l2_pass", int64_t{c.l2[i].pass}}, {"l2_mismatches", static_cast<int64_t>(c.l2[i].mismatches.size())},
                     {"l3_pass", int64_t{c.l3[i].pass}}, {"l3_compared", c.l3[i].compared},
                     {"l3_identical", c.l3[i].identical}, {"l4_gated", int64_t{c.l4[i].gated}},
                     {"l4_pass", int64_t{c.l4[i].pass}}, {"verdict", std::string(pair_verdict_name(c.l4[i].verdict))},
                     {"verdict_reason", c.l4[i].verdict_reason}};
        writer.set_comparison_attributes(l1.leg_a, l1.leg_b, a);
    }
    // The two distances, side by side (docs/hdf5-layout.md /distances).
    for (const auto& e : c.l4) {
        const PairedDistance& n = e.numerics;
        const EnvelopeDistance& v = e.envelope;
        Attributes g{{"verdict", std::string(pair_verdict_name(e.verdict))}, {"verdict_reason", e.verdict_reason},
                     {"leg", e.residual_leg}, {"reference", e.residual_reference}, {"paired", int64_t{n.applies}},
                     {"error_model", c.error_model.describe()}, {"error_model_k", c.error_model.k},
                     {"error_model_c", c.error_model.c}, {"error_model_layers", c.error_model.layers},
                     {"error_model_seq_len", c.error_model.seq_len}, {"envelope_available", int64_t{v.available}}};
        writer.set_distance_attributes(e.leg_a, e.leg_b, g);
        if (n.applies)
            writer.write_distance(e.leg_a, e.leg_b, "numerics", n.points,
                                  {{"max_ratio", n.max_ratio}, {"max_ratio_update", n.max_ratio_update},
                                   {"within", int64_t{n.within()}}});
        if (v.available) {
            std::string outside;
            for (int64_t u : v.outside_band) outside += (outside.empty() ? "" : ",") + std::to_string(u);
            writer.write_distance(e.leg_a, e.leg_b, "envelope", v.points,
                                  {{"stack", v.stack}, {"leg", v.leg}, {"members", v.members}, {"max_abs_z", v.max_abs_z},
                                   {"max_abs_z_update", v.max_abs_z_update}, {"outside_band", outside},
                                   {"leg_mean_ce", v.leg_mean}, {"members_mean_ce", v.members_mean},
                                   {"members_std_ce", v.members_std}, {"t", v.t}, {"df", v.df}, {"p", v.p},
                                   {"alpha", v.alpha}, {"within", int64_t{v.within()}}});
        }
        // The per-update series (docs/thresholds.md "Per-update series"): paired against their own
        // bounds (numerics_loss, numerics_grad_norm) or the envelope (envelope_loss, envelope_grad_norm).
        for (const auto& [name, d] : {std::pair<const char*, const PairedDistance*>{"numerics_loss", &e.loss_numerics},
                                      {"numerics_grad_norm", &e.grad_numerics}})
            if (d->applies)
                writer.write_distance(e.leg_a, e.leg_b, name, d->points,
                                      {{"max_ratio", d->max_ratio}, {"max_ratio_update", d->max_ratio_update},
                                       {"first_beyond_update", d->first_beyond_update}, {"within", int64_t{d->within()}}});
        for (const auto& [name, d] : {std::pair<const char*, const EnvelopeDistance*>{"envelope_loss", &e.loss_envelope},
                                      {"envelope_grad_norm", &e.grad_envelope}})
            if (d->available) {
                std::string outside;
                for (int64_t u : d->outside_band) outside += (outside.empty() ? "" : ",") + std::to_string(u);
                writer.write_distance(e.leg_a, e.leg_b, name, d->points,
                                      {{"stack", d->stack}, {"leg", d->leg}, {"members", d->members}, {"max_abs_z", d->max_abs_z},
                                       {"outside_band", outside}, {"t", d->t}, {"df", d->df}, {"p", d->p},
                                       {"alpha", d->alpha}, {"within", int64_t{d->within()}}});
            }
        std::string lr_off;
        for (const auto& s : e.schedule)
            if (s.off()) lr_off += (lr_off.empty() ? "" : "; ") + s.describe();
        writer.set_distance_attributes(e.leg_a, e.leg_b, {{"first_different_update", e.first_different_update},
                                                          {"lr_off_schedule", lr_off}});
    }
}

}  // namespace tandem::experiments
