// `tandem localise` on a run folder (tandem/studies/localise_run.h).
#include "tandem/studies/localise_run.h"

#include "tandem/error.h"
#include "tandem/store/run_file.h"

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
                    throw Error(file.string() + ": leg '" + name + "' has no fingerprints (set `observe` in the experiment file)");
        } else {
            std::vector<std::string> with;
            for (const auto& l : all)
                if (!reader.fingerprints(l).empty()) with.push_back(l);
            if (with.size() < 2)
                throw Error(file.string() + ": fewer than two legs hold fingerprints (set `observe: {updates: [...]}` in the "
                                            "experiment file)");
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
