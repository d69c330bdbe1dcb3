#include "tandem/compare/run_overview.h"

#include "tandem/compare/compare_runs.h"  // diff_specs
#include "tandem/number_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

namespace tandem::experiments {

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<SettingColumn>& default_setting_columns() {
    static const std::vector<SettingColumn> columns{{"lr", "optimizer.lr"}, {"rank", "lora.rank"},          {"alpha", "lora.alpha"},
                                                    {"seed", "seed"},       {"max_updates", "batch.max_updates"}, {"base", "model.base"}};
    return columns;
}

std::optional<json> read_run_spec(const fs::path& run_folder) {
    std::ifstream in(run_folder / "experiment.json");
    if (!in) return std::nullopt;
    try {
        json j = json::parse(in);
        if (j.is_object() && j.contains("spec") && j["spec"].is_object()) return j["spec"];
    } catch (const std::exception&) {
    }
    return std::nullopt;
}

namespace {

const json* at_key(const json& spec, const std::string& key) {
    const json* node = &spec;
    std::size_t start = 0;
    while (start <= key.size()) {
        const auto dot = key.find('.', start);
        const std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        if (!node->is_object() || !node->contains(part)) return nullptr;
        node = &(*node)[part];
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return node;
}

// 1e-4, 2.5e-4 for small and large values (shorter than 0.0001 and what a sweep's lr reads like),
// "%.6g" otherwise.
std::string sweep_number_text(double v) {
    if (v == 0 || !(std::fabs(v) < 1e-2 || std::fabs(v) >= 1e6)) return number_text(v, "%.6g");
    const std::string s = number_text(v, "%.5e");
    const auto e = s.find('e');
    if (e == std::string::npos) return s;  // nan, inf
    std::string mantissa = s.substr(0, e), exponent = s.substr(e + 1);
    while (mantissa.back() == '0') mantissa.pop_back();
    if (mantissa.back() == '.') mantissa.pop_back();
    const char sign = exponent[0];
    exponent.erase(0, 1);
    while (exponent.size() > 1 && exponent[0] == '0') exponent.erase(0, 1);
    return mantissa + "e" + (sign == '-' ? "-" : "") + exponent;
}

std::string value_text(const json& v) {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
    if (v.is_number_float()) return sweep_number_text(v.get<double>());
    if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
    return v.dump();
}

std::string last_part(const std::string& key) {
    const auto dot = key.rfind('.');
    return dot == std::string::npos ? key : key.substr(dot + 1);
}

}  // namespace

std::string setting_text(const json& spec, const std::string& key) {
    if (const json* v = at_key(spec, key)) return value_text(*v);
    if (key == "model.base")
        if (const json* c = at_key(spec, "model.config")) return "config " + value_text(*c);
    return {};
}

VerdictWord verdict_word(const std::string& line) {
    if (line.empty()) return {"", VerdictClass::None};
    // The words and what passes come from the verdict itself (verdict_words, verdict_line_passes): the
    // runs table never keeps its own list. `not judged` is neither a pass nor a detected difference.
    for (const std::string& word : verdict_words())
        if (line.rfind(word, 0) == 0) {
            if (verdict_line_passes(line)) return {word, VerdictClass::Pass};
            return {word, word == "not judged" ? VerdictClass::Neutral : VerdictClass::Fail};
        }
    if (line.rfind("complete; one leg", 0) == 0) return {"one leg", VerdictClass::Neutral};
    // Anything else (a line from a newer runner): its text up to the first colon, judged by nobody.
    return {line.substr(0, line.find(':')), VerdictClass::Neutral};
}

std::optional<fs::path> envelope_folder_of(const fs::path& run_folder) {
    const fs::path folder = run_folder.filename() == "run.h5" ? run_folder.parent_path() : run_folder;
    const fs::path members = folder.parent_path();
    if (members.filename() != "members") return std::nullopt;
    std::error_code ec;
    if (!fs::exists(members.parent_path() / "envelope.json", ec) && !fs::exists(members.parent_path() / "run.h5", ec)) return std::nullopt;
    return members.parent_path();
}

std::vector<std::string> differing_settings(const std::vector<json>& specs) {
    std::set<std::string> keys;
    const json* first = nullptr;
    for (const auto& s : specs) {
        if (!s.is_object()) continue;
        if (!first) {
            first = &s;
            continue;
        }
        // A key differs among the specs exactly when it differs from the first one somewhere.
        for (const auto& d : diff_specs(*first, s)) keys.insert(d.key);
    }
    // The runs page's default columns first, in their order (lr before rank), then the rest by key.
    std::vector<std::string> out, labels;
    for (const auto& c : default_setting_columns())
        if (keys.erase(c.key)) out.push_back(c.key);
    for (const auto& k : keys) (k == "name" || k == "description" ? labels : out).push_back(k);
    if (out.empty()) {
        for (const auto& k : labels)
            if (k == "name") out.push_back(k);  // only the names differ: they are what tells runs apart
    }
    return out;
}

std::vector<std::string> run_labels(const std::vector<std::string>& run_ids, const std::vector<json>& specs,
                                    const std::vector<std::vector<std::string>>& tags, std::size_t max_settings) {
    const std::size_t n = run_ids.size();
    std::vector<std::string> labels(n);
    // Tags that tell a run apart: the ones not every run carries.
    std::map<std::string, std::size_t> tag_count;
    for (const auto& t : tags)
        for (const auto& tag : std::set<std::string>(t.begin(), t.end())) ++tag_count[tag];
    std::vector<bool> by_tag(n, false);
    for (std::size_t i = 0; i < n && i < tags.size(); ++i) {
        std::string text;
        for (const auto& tag : tags[i])
            if (tag_count[tag] < n || n == 1) text += (text.empty() ? "" : ", ") + tag;
        if (!text.empty()) {
            labels[i] = text;
            by_tag[i] = true;
        }
    }
    // Settings that differ, by their last key part unless two share it.
    std::vector<json> padded(specs.begin(), specs.end());
    padded.resize(n);
    const auto keys = differing_settings(padded);
    std::map<std::string, int> part_count;
    for (const auto& k : keys) ++part_count[last_part(k)];
    auto settings_label = [&](std::size_t i, std::size_t count) {
        std::string text;
        for (std::size_t k = 0; k < std::min(count, keys.size()); ++k) {
            const std::string name = part_count[last_part(keys[k])] > 1 ? keys[k] : last_part(keys[k]);
            std::string value = padded[i].is_object() ? setting_text(padded[i], keys[k]) : std::string();
            text += (text.empty() ? "" : " · ") + name + " " + (value.empty() ? "–" : value);
        }
        return text;
    };
    auto unique = [&](const std::vector<std::string>& l) { return std::set<std::string>(l.begin(), l.end()).size() == l.size(); };
    std::size_t count = std::min(max_settings, keys.size());
    for (;; ++count) {
        for (std::size_t i = 0; i < n; ++i)
            if (!by_tag[i]) labels[i] = settings_label(i, count);
        if (unique(labels) || count >= keys.size()) break;
    }
    if (unique(labels) && std::none_of(labels.begin(), labels.end(), [](const std::string& l) { return l.empty(); })) return labels;
    // Identical settings: the part of the run id after what every id shares (the timestamp).
    std::size_t common = run_ids.empty() ? 0 : run_ids.front().size();
    for (const auto& id : run_ids) {
        std::size_t c = 0;
        while (c < common && c < id.size() && id[c] == run_ids.front()[c]) ++c;
        common = c;
    }
    // Back to a separator, so "…-20261201-204038" keeps its whole date.
    while (common > 0 && run_ids.front()[common - 1] != '-' && run_ids.front()[common - 1] != '_') --common;
    std::map<std::string, int> seen;
    for (const auto& l : labels) ++seen[l];
    for (std::size_t i = 0; i < n; ++i) {
        if (seen[labels[i]] < 2 && !labels[i].empty()) continue;
        const std::string tail = run_ids[i].size() > common ? run_ids[i].substr(common) : run_ids[i];
        labels[i] = labels[i].empty() ? tail : labels[i] + " · " + tail;
    }
    // Still equal (the same run id twice): number them.
    std::map<std::string, int> again;
    for (auto& l : labels)
        if (++again[l] > 1) l += " (" + std::to_string(again[l]) + ")";
    return labels;
}

}  // namespace tandem::experiments
