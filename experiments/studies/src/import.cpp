// Imported legs (docs/legs.md, "Imported runs"): TensorBoard, CSV and protocol-event sources turned
// into a LegTrace and written into a run file as one more leg.
#include "tandem/studies/import.h"
#include "tandem/strict_json.h"

#include "tandem/compare/timing.h"

#include "tandem/atomic_file.h"
#include "tandem/error.h"
#include "tandem/store/catalog.h"
#include "tandem/spec/leg_paths.h"
#include "tandem/store/run_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <set>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::vector<std::string> kLossNames{"train/loss", "loss", "train_loss"};
const std::vector<std::string> kEvalNames{"eval/loss", "eval_loss", "eval/heldout_ce", "heldout_ce"};
const std::vector<std::string> kGradNames{"train/grad_norm", "grad_norm"};
const std::vector<std::string> kLrNames{"train/learning_rate", "learning_rate", "lr"};

std::string available(const ScalarSeries& s) {
    std::string out;
    for (const auto& [k, _] : s) out += (out.empty() ? "" : ", ") + k;
    return out.empty() ? "none" : out;
}

// The series `given` names, else the first usual name present; nullptr when none (and none asked).
const std::vector<std::pair<int64_t, double>>* pick(const ScalarSeries& s, const std::string& given,
                                                     const std::vector<std::string>& usual, const std::string& what,
                                                     const std::string& source, std::string* taken) {
    if (!given.empty()) {
        auto it = s.find(given);
        if (it == s.end())
            throw Error(source + ": no series '" + given + "' for " + what + " (present: " + available(s) + ")");
        *taken = given;
        return &it->second;
    }
    for (const auto& name : usual)
        if (auto it = s.find(name); it != s.end()) {
            *taken = name;
            return &it->second;
        }
    return nullptr;
}

// Runs argv; returns (exit status, stdout). stderr's last line goes into `err`.
int run_capture(const std::vector<std::string>& argv, std::string* out, std::string* err) {
    char out_path[] = "/tmp/tandem-import-out-XXXXXX";
    char err_path[] = "/tmp/tandem-import-err-XXXXXX";
    const int out_fd = mkstemp(out_path), err_fd = mkstemp(err_path);
    if (out_fd < 0 || err_fd < 0) throw Error(std::string("temporary file: ") + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    int status = 0;
    if (rc == 0)
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    close(out_fd);
    close(err_fd);
    *out = read_file(out_path);
    *err = read_file(err_path);
    unlink(out_path);
    unlink(err_path);
    if (rc != 0) throw Error("cannot start " + argv[0] + ": " + std::strerror(rc));
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string last_line(const std::string& s) {
    std::istringstream in(s);
    std::string line, last;
    while (std::getline(in, line))
        if (!line.empty()) last = line;
    return last;
}

// One CSV record (RFC 4180: quoted fields with "" for a quote; CR LF or LF line ends). false at EOF.
bool csv_record(std::istream& in, std::vector<std::string>& fields, int64_t& line_no, const std::string& source) {
    fields.clear();
    std::string line;
    if (!std::getline(in, line)) return false;
    ++line_no;
    std::string field;
    bool quoted = false, was_quoted = false;
    for (size_t i = 0;; ++i) {
        if (i == line.size()) {
            if (quoted) {  // a newline inside quotes
                field += '\n';
                if (!std::getline(in, line)) throw Error(source + ": line " + std::to_string(line_no) + ": unterminated quote");
                ++line_no;
                i = static_cast<size_t>(-1);
                continue;
            }
            break;
        }
        const char c = line[i];
        if (quoted) {
            if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
                field += '"';
                ++i;
            } else if (c == '"') {
                quoted = false;
            } else {
                field += c;
            }
        } else if (c == '"' && field.empty() && !was_quoted) {
            quoted = was_quoted = true;
        } else if (c == ',') {
            fields.push_back(field);
            field.clear();
            was_quoted = false;
        } else if (c == '\r' && i + 1 == line.size()) {
        } else {
            field += c;
        }
    }
    fields.push_back(field);
    return true;
}

}  // namespace

ImportedTrace trace_from_scalars(const ScalarSeries& scalars, const SeriesMapping& m, const std::string& source) {
    ImportedTrace r;
    r.source = source;
    std::string loss_name, eval_name, grad_name, lr_name;
    const auto* loss = pick(scalars, m.loss, kLossNames, "the training loss", source, &loss_name);
    const auto* eval = pick(scalars, m.eval_loss, kEvalNames, "the held-out loss", source, &eval_name);
    const auto* grad = pick(scalars, m.grad_norm, kGradNames, "the gradient norm", source, &grad_name);
    const auto* lr = pick(scalars, m.lr, kLrNames, "the learning rate", source, &lr_name);
    if (!loss && !eval && !grad)
        throw Error(source + ": none of the series tandem compares (training loss, held-out loss, gradient norm) is "
                             "there (present: " + available(scalars) + "); name them with --loss/--eval-loss/--grad-norm");
    const int64_t shift = m.steps_count_done ? 1 : 0;
    std::map<int64_t, StepRow> steps;
    // A non-finite value (a diverged run's nan, an inf) is kept out of the series and named: the statistics
    // never see it, and the leg's note makes every verdict over the run "incomplete" (comparison.cpp).
    auto kept_out = [&](const std::string& name, int64_t step, double value) {
        if (std::isfinite(value)) return false;
        r.non_finite.push_back(name + " at step " + std::to_string(step));
        return true;
    };
    auto points_text = [](size_t all, size_t before, size_t after) {
        const size_t dropped = after - before;
        return "(" + std::to_string(all - dropped) + " points" +
               (dropped ? ", " + std::to_string(dropped) + " non-finite kept out" : std::string()) + ")";
    };
    auto add = [&](const std::vector<std::pair<int64_t, double>>* s, const std::string& name, double StepRow::*field,
                   const char* what) {
        if (!s) return;
        const size_t before = r.non_finite.size();
        for (const auto& [step, value] : *s) {
            if (kept_out(name, step, value)) continue;
            const int64_t u = step - shift;
            if (u < 0)
                throw Error(source + ": series '" + name + "' has a point at step " + std::to_string(step) +
                            ", before the first update (steps count updates done; pass --step-counts index?)");
            auto [it, fresh] = steps.try_emplace(u);
            if (fresh) {
                it->second.update = u;
                it->second.loss = it->second.grad_norm = it->second.lr = std::nan("");
                it->second.tokens = 0;
                it->second.wall_s = std::nan("");  // not recorded: tokens/s and s/update stay "n/a"
            }
            it->second.*field = value;
        }
        r.series.push_back(std::string(what) + " <- " + name + " " + points_text(s->size(), before, r.non_finite.size()));
    };
    add(loss, loss_name, &StepRow::loss, "loss");
    add(grad, grad_name, &StepRow::grad_norm, "grad_norm");
    add(lr, lr_name, &StepRow::lr, "lr");
    for (auto& [u, row] : steps) r.trace.steps.push_back(row);
    if (eval) {
        const size_t before = r.non_finite.size();
        for (const auto& [step, value] : *eval) {
            if (step < 0) throw Error(source + ": series '" + eval_name + "' has a negative step " + std::to_string(step));
            if (kept_out(eval_name, step, value)) continue;
            r.trace.evals.push_back({step, value});
        }
        r.series.push_back("heldout_ce <- " + eval_name + " " + points_text(eval->size(), before, r.non_finite.size()));
        // No L1 from an evaluation at step 0: nothing says it ran on this run's held-out prefix.
    }
    r.trace.done = true;
    return r;
}

ImportedTrace trace_from_tensorboard(const fs::path& dir_or_file, const SeriesMapping& mapping, const std::string& python) {
    if (!fs::exists(dir_or_file)) throw Error(dir_or_file.string() + ": no such file or folder");
    const std::string py = python.empty() ? reference_python() : python;
    const fs::path script = legs_dir() / "tensorboard_scalars.py";
    if (!fs::exists(script)) throw Error(script.string() + ": missing (the TensorBoard reader of `tandem import`)");
    std::string out, err;
    const int rc = run_capture({py, script.string(), fs::absolute(dir_or_file).string()}, &out, &err);
    if (rc != 0) {
        std::string why = last_line(err);
        if (why.find("No module named 'tensorboard'") != std::string::npos)
            why = "the reference environment (" + py + ") has no tensorboard package; run scripts/setup";
        throw Error("reading TensorBoard events in " + dir_or_file.string() + ": " + (why.empty() ? "exit " + std::to_string(rc) : why));
    }
    json j;
    try {
        j = json::parse(out);
    } catch (const json::exception& e) {
        throw Error("reading TensorBoard events in " + dir_or_file.string() + ": the reader's output is not JSON (" + tandem::json_error_text(e) + ")");
    }
    ScalarSeries s;
    for (const auto& [tag, points] : j.at("scalars").items())
        for (const auto& p : points)
            s[tag].emplace_back(p.at(0).get<int64_t>(), p.at(1).is_null() ? std::nan("") : p.at(1).get<double>());
    return trace_from_scalars(s, mapping, "tensorboard:" + fs::absolute(dir_or_file).string());
}

ImportedTrace trace_from_csv(const fs::path& file, const SeriesMapping& m) {
    const std::string source = file.string();
    std::ifstream in(file, std::ios::binary);
    if (!in) throw Error(source + ": cannot open");
    {
        // A CSV saved as UTF-16 or UTF-32 (Excel's "Unicode text") would otherwise read as one garbled
        // column and be blamed on a missing column: name the encoding instead.
        char head[4096];
        in.read(head, sizeof head);
        const std::string b(head, static_cast<size_t>(in.gcount()));
        in.clear();
        in.seekg(0);
        const char* convert = "; tandem reads UTF-8: convert it (e.g. `iconv -f UTF-16 -t UTF-8`)";
        if (b.rfind(std::string("\xFF\xFE\0\0", 4), 0) == 0 || b.rfind(std::string("\0\0\xFE\xFF", 4), 0) == 0)
            throw Error(source + ": the file is UTF-32 (it starts with a UTF-32 byte-order mark); tandem reads UTF-8: convert it "
                                 "(e.g. `iconv -f UTF-32 -t UTF-8`)");
        if (b.rfind("\xFF\xFE", 0) == 0) throw Error(source + ": the file is UTF-16 little-endian (byte-order mark FF FE)" + convert);
        if (b.rfind("\xFE\xFF", 0) == 0) throw Error(source + ": the file is UTF-16 big-endian (byte-order mark FE FF)" + convert);
        if (b.find('\0') != std::string::npos)
            throw Error(source + ": the file holds NUL bytes (UTF-16 or UTF-32 without a byte-order mark?)" + convert);
    }
    std::vector<std::string> header, row;
    int64_t line = 0;
    if (!csv_record(in, header, line, source)) throw Error(source + ": empty (no header line)");
    if (!header.empty() && header[0].rfind("\xEF\xBB\xBF", 0) == 0) header[0] = header[0].substr(3);  // UTF-8 BOM
    std::map<std::string, size_t> col;
    for (size_t i = 0; i < header.size(); ++i) col.emplace(header[i], i);
    auto step_it = col.find(m.step);
    if (step_it == col.end())
        throw Error(source + ": no column '" + m.step + "' for the step (header: " + [&] {
            std::string h;
            for (const auto& x : header) h += (h.empty() ? "" : ", ") + x;
            return h;
        }() + "); name it with --step");
    ScalarSeries s;
    while (csv_record(in, row, line, source)) {
        if (row.size() == 1 && row[0].empty()) continue;  // blank line
        if (row.size() != header.size())
            throw Error(source + ": line " + std::to_string(line) + ": " + std::to_string(row.size()) + " fields, the header has " +
                        std::to_string(header.size()));
        const std::string& st = row[step_it->second];
        char* end = nullptr;
        errno = 0;
        const double stepd = std::strtod(st.c_str(), &end);
        if (st.empty() || *end != '\0' || errno != 0 || stepd != std::floor(stepd) || std::fabs(stepd) > 9e15)
            throw Error(source + ": line " + std::to_string(line) + ": column " + m.step + ": '" + st + "' is not an integer step");
        const auto step = static_cast<int64_t>(stepd);
        for (size_t c = 0; c < row.size(); ++c) {
            if (c == step_it->second || row[c].empty()) continue;  // an empty cell: no value at this step
            errno = 0;
            const double v = std::strtod(row[c].c_str(), &end);
            if (*end != '\0' || errno == EINVAL) {
                // Text columns (run names, timestamps) are not series; a named series must be numeric.
                for (const std::string* named : {&m.loss, &m.eval_loss, &m.grad_norm, &m.lr})
                    if (*named == header[c])
                        throw Error(source + ": line " + std::to_string(line) + ": column " + header[c] + ": '" + row[c] +
                                    "' is not a number");
                continue;
            }
            // A compared series (docs/decisions.md "Imported series: non-finite values and repeated steps") has
            // increasing steps: of two values at one step, or steps going back, no rule can say which row is
            // the run's. A nan/inf is read as such and kept out by trace_from_scalars, which names it.
            const std::string& name = header[c];
            const bool compared = (!name.empty() && (name == m.loss || name == m.eval_loss || name == m.grad_norm || name == m.lr)) ||
                                  [&] {
                                      for (const auto* names : {&kLossNames, &kEvalNames, &kGradNames, &kLrNames})
                                          if (std::find(names->begin(), names->end(), name) != names->end()) return true;
                                      return false;
                                  }();
            if (compared) {
                auto& points = s[name];
                if (!points.empty() && step <= points.back().first)
                    throw Error(source + ": line " + std::to_string(line) + ": column " + name + ": step " + std::to_string(step) +
                                (step == points.back().first ? " repeats the step of an earlier row" : " comes after step " +
                                                                                                        std::to_string(points.back().first)) +
                                " (a compared series' steps must increase down the file, one value per step)");
            }
            s[name].emplace_back(step, v);
        }
    }
    for (auto& [_, points] : s) {
        std::stable_sort(points.begin(), points.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        std::vector<std::pair<int64_t, double>> last;  // other columns: a step given twice keeps its last value
        for (const auto& p : points) {
            if (!last.empty() && last.back().first == p.first) last.back() = p;
            else last.push_back(p);
        }
        points = std::move(last);
    }
    return trace_from_scalars(s, m, "csv:" + fs::absolute(file).string());
}

ImportedTrace trace_from_events(const fs::path& file) {
    if (!fs::is_regular_file(file)) throw Error(file.string() + ": no such file");
    ImportedTrace r;
    r.trace = read_events_file(file);
    r.source = "events:" + fs::absolute(file).string();
    if (r.trace.lines == 0) throw Error(file.string() + ": no event in it");
    if (r.trace.hello.empty() || !r.trace.hello.contains("implementation"))
        throw Error(file.string() + ": no hello event (not a leg's protocol events?)");
    if (!r.trace.malformed.empty()) throw Error(file.string() + ": " + r.trace.malformed.front());
    r.series.push_back(std::to_string(r.trace.steps.size()) + " steps, " + std::to_string(r.trace.evals.size()) +
                       " evaluations, L1 " + (r.trace.l1_ce ? "yes" : "no") + ", L2 " + (r.trace.has_l2 ? "yes" : "no") +
                       ", L3 " + (r.trace.has_l3 ? "yes" : "no") + (r.trace.done ? "" : ", no done event"));
    return r;
}

std::string non_finite_note(const ImportedTrace& imported) {
    const auto& v = imported.non_finite;
    if (v.empty()) return "";
    std::string text = std::to_string(v.size()) + " non-finite value" + (v.size() == 1 ? "" : "s") + " kept out of statistics: ";
    const size_t shown = std::min<size_t>(v.size(), 5);
    for (size_t i = 0; i < shown; ++i) text += (i ? ", " : "") + v[i];
    if (v.size() > shown) text += ", ... (" + std::to_string(v.size() - shown) + " more)";
    return text;
}

void import_leg(const fs::path& run, const std::string& leg, const ImportedTrace& imported,
                const std::string& implementation, const std::optional<fs::path>& catalog) {
    validate_leg_name(leg);
    const fs::path h5 = fs::is_directory(run) ? run / "run.h5" : run;
    if (!fs::exists(h5)) throw Error(h5.string() + ": no run file (import into a run made by `tandem run`)");
    std::string run_id;
    {
        RunFileReader reader(h5);
        auto exp = reader.experiment();
        if (!exp) throw Error(h5.string() + ": no /experiment (not a tandem run file?)");
        run_id = exp->run_id;
        const auto legs = reader.legs();
        if (std::find(legs.begin(), legs.end(), leg) != legs.end())
            throw Error(h5.string() + ": the run already has a leg '" + leg + "'; import it --as another name");
    }
    const LegTrace& t = imported.trace;
    {
        RunFileWriter w(h5);
        const std::string device = t.hello.contains("device") && t.hello["device"].is_string()
                                       ? t.hello["device"].get<std::string>() : std::string("n/a");
        w.create_leg(leg, {{"implementation", implementation}, {"device", device},
                           {"threads", int64_t{0}}, {"status", std::string("finished")},
                           {"imported_from", imported.source}});
        if (!t.steps.empty()) w.append_steps(leg, t.steps);
        if (!t.evals.empty()) w.append_eval(leg, t.evals);
        if (t.l1_ce) w.write_check(leg, CheckLevel::L1, l1_to_json(t).dump());
        if (t.has_l2) w.write_check(leg, CheckLevel::L2, l2_to_json(t).dump());
        if (t.has_l3) w.write_check(leg, CheckLevel::L3, l3_to_json(t).dump());
        if (t.settings) w.write_check(leg, CheckLevel::Settings, t.settings->dump());
        if (!t.optimizer_checks.empty()) w.write_check(leg, CheckLevel::Optimizer, t.optimizer_checks.dump());
        if (t.observation_events > 0) {  // fingerprints and observables too: an imported leg can be localised
            w.replace_fingerprints(leg, t.fingerprints);
            w.replace_adapter_norms(leg, t.adapter_norms);
            w.replace_next_token(leg, t.probes);
        }
        w.write_timing(leg, timing_record(t));  // the runner's records of a leg (tandem/compare/timing.h)
        w.write_memory(leg, memory_record(t));
        Attributes a{{"updates_done", static_cast<int64_t>(t.steps.size())}, {"hello", t.hello.dump()},
                     {"exit_status", int64_t{0}}, {"resumes", static_cast<int64_t>(t.resumes)},
                     {"malformed_lines", static_cast<int64_t>(t.malformed.size())}};
        if (t.error) a["error"] = *t.error;
        if (const std::string note = non_finite_note(imported); !note.empty()) a["non_finite_kept_out"] = note;
        w.set_leg_attributes(leg, a);
    }
    if (catalog && fs::exists(*catalog) && !run_id.empty()) {
        Catalog c(*catalog);
        if (c.run(run_id)) {
            LegRecord r;
            r.run_id = run_id;
            r.name = leg;
            r.implementation = implementation;
            r.device = t.hello.value("device", std::string("n/a"));
            r.status = "finished";
            r.updates_done = static_cast<int64_t>(t.steps.size());
            if (!t.steps.empty() && std::isfinite(t.steps.back().loss)) r.final_loss = t.steps.back().loss;
            if (!t.evals.empty()) {
                r.last_eval_update = t.evals.back().update;
                r.last_eval_ce = t.evals.back().heldout_ce;
            }
            c.upsert_leg(r);
        }
    }
}

}  // namespace tandem::experiments
