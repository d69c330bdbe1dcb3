// `tandem localise` on a run folder (tandem/studies/localise_run.h).
#include "tandem/studies/localise_run.h"

#include "tandem/error.h"
#include "tandem/store/run_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace tandem::experiments {
namespace fs = std::filesystem;

Localisation localise_run(const fs::path& run, std::optional<std::pair<std::string, std::string>> legs,
                          std::optional<std::int64_t> update, bool store) {
    const fs::path file = fs::is_directory(run) ? run / "run.h5" : run;
    if (!fs::exists(file)) throw Error(file.string() + ": no run file");
    std::vector<FingerprintRow> fa, fb;
    std::string a, b;
    {
        RunFileReader reader(file);
        const std::vector<std::string> all = reader.legs();
        // Why a leg has no fingerprints: the experiment observes no update (set `observe`), or it does
        // and the leg records none itself.
        std::string observes;
        if (auto info = reader.experiment()) {
            const auto spec = nlohmann::json::parse(info->spec_json, nullptr, false);
            if (spec.is_object() && spec.contains("observe") && spec["observe"].is_object()) {
                const auto& o = spec["observe"];
                if (o.contains("updates") && o["updates"].is_array() && !o["updates"].empty()) observes = "updates " + o["updates"].dump();
                if (o.value("every", 0) > 0) observes += std::string(observes.empty() ? "" : " and ") + "every " + std::to_string(o.value("every", 0)) + " updates";
            }
        }
        auto no_fingerprints = [&](const std::string& name) {
            if (observes.empty()) return "leg '" + name + "' has no fingerprints: the experiment observes no update (set `observe` in the experiment file)";
            return "leg '" + name + "' has no fingerprints although the experiment observes " + observes +
                   ": this leg records none (TandemCallback(pair=False), a loop without tandem_leg.torch.pair, a data-parallel "
                   "leg, or an imported TensorBoard/CSV leg)";
        };
        if (legs) {
            for (const std::string* name : {&legs->first, &legs->second})
                if (std::find(all.begin(), all.end(), *name) == all.end())
                    throw Error(file.string() + ": no leg '" + *name + "'");
            a = legs->first;
            b = legs->second;
            fa = reader.fingerprints(a);
            fb = reader.fingerprints(b);
            for (const auto& [name, rows] : {std::pair{a, &fa}, std::pair{b, &fb}})
                if (rows->empty())
                    throw Error(file.string() + ": " + no_fingerprints(name));
        } else {
            std::vector<std::string> with;
            for (const auto& l : all)
                if (!reader.fingerprints(l).empty()) with.push_back(l);
            if (with.size() < 2) {
                std::string why = "fewer than two legs hold fingerprints";
                for (const auto& l : all)
                    if (std::find(with.begin(), with.end(), l) == with.end()) {
                        why += "; " + no_fingerprints(l);
                        break;
                    }
                throw Error(file.string() + ": " + why);
            }
            // the reference-implementation leg second: differences are relative to it
            auto is_reference = [&](const std::string& l) {
                const Attributes at = reader.leg_attributes(l);
                auto it = at.find("implementation");
                return it != at.end() && std::holds_alternative<std::string>(it->second) &&
                       std::get<std::string>(it->second) == "reference";
            };
            std::stable_partition(with.begin(), with.end(), [&](const std::string& l) { return !is_reference(l); });
            a = with[0];
            b = with[1];
            fa = reader.fingerprints(a);
            fb = reader.fingerprints(b);
        }
    }
    if (update) {
        auto has = [&](const std::vector<FingerprintRow>& rows) {
            return std::any_of(rows.begin(), rows.end(), [&](const FingerprintRow& r) { return r.update == *update; });
        };
        if (!has(fa) || !has(fb))
            throw Error(file.string() + ": update " + std::to_string(*update) + " was not fingerprinted by both " + a + " and " + b);
    }
    Localisation l = localise(fa, fb, a, b, update);
    if (store) {
        RunFileWriter w(file);
        w.write_localisation(a, b, l.points, localisation_attributes(l));
        w.commit();
    }
    return l;
}

}  // namespace tandem::experiments
