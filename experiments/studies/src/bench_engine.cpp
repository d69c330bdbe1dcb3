// `tandem bench engine`: shapes, requests, the engine worker, the interleaved runs and the table
// (tandem/studies/bench_engine.h).
#include "tandem/studies/bench_engine.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tandem/atomic_file.h"
#include "tandem/engine/gemm_library.h"
#include "tandem/engine/generate.h"
#include "tandem/engine/trainer.h"
#include "tandem/error.h"
#include "tandem/number_text.h"
#include "tandem/measure/host_info.h"
#include "tandem/measure/probe.h"
#include "tandem/version.h"

extern char** environ;

namespace tandem::experiments {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

double cpu_seconds() {
    rusage r{};
    getrusage(RUSAGE_SELF, &r);
    return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * double(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

// Runs argv with `env` added, stdout to out_path, stderr to err_path; returns the exit status.
int run_to_files(const std::vector<std::string>& argv, const std::vector<std::string>& env, const fs::path& out_path,
                 const fs::path& err_path) {
    const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0 || err_fd < 0) throw Error("bench: cannot write " + out_path.string() + ": " + std::strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    std::vector<std::string> env_strings = env;
    for (char** e = environ; *e; ++e) {
        const std::string s = *e;
        const std::string name = s.substr(0, s.find('='));
        if (std::none_of(env.begin(), env.end(), [&](const std::string& x) { return x.rfind(name + "=", 0) == 0; }))
            env_strings.push_back(s);
    }
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t pid = -1;
    const int rc = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(out_fd);
    ::close(err_fd);
    if (rc != 0) throw Error("bench: cannot start " + argv[0] + ": " + std::strerror(rc));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string tail_of(const fs::path& p, size_t lines) {
    std::ifstream in(p);
    std::vector<std::string> all;
    std::string line;
    while (std::getline(in, line)) all.push_back(line);
    std::string out;
    for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) out += "\n    " + all[i];
    return out;
}

// One worker run: its JSON (the last line of stdout that is an object).
json run_worker(const std::vector<std::string>& argv_prefix, const fs::path& request, int threads, const fs::path& log_base,
                const std::string& what) {
    std::vector<std::string> argv = argv_prefix;
    argv.push_back(request.string());
    const std::string t = std::to_string(threads);
    const fs::path out = log_base.string() + ".out", err = log_base.string() + ".err";
    const int rc = run_to_files(argv, {"OPENBLAS_NUM_THREADS=" + t, "OMP_NUM_THREADS=" + t, "MKL_NUM_THREADS=" + t}, out, err);
    std::ifstream in(out);
    std::string line, last;
    while (std::getline(in, line))
        if (!line.empty() && line[0] == '{') last = line;
    if (rc != 0 || last.empty())
        throw Error("bench: the " + what + " worker failed (exit " + std::to_string(rc) + "), log " + err.string() + ":" +
                    tail_of(err, 8));
    try {
        return json::parse(last);
    } catch (const json::exception& e) {
        throw Error("bench: the " + what + " worker's output is not JSON (" + out.string() + "): " + e.what());
    }
}

double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return v.empty() ? std::nan("") : s / double(v.size());
}

// tests/engine/bench_engine's output (an engine build that predates --worker) in the workers' form.
json from_bench_engine(const json& r, int warmup) {
    json out{{"seconds", json::array()}, {"cpu_seconds", json::array()}, {"tokens", json::array()}};
    const auto& updates = r.at("updates");
    const size_t timed = updates.size() > size_t(warmup) ? updates.size() - size_t(warmup) : 0;
    for (size_t u = size_t(warmup); u < updates.size(); ++u) {
        out["seconds"].push_back(updates[u].at("seconds"));
        out["cpu_seconds"].push_back(r.at("timed_cpu_seconds").get<double>() / double(timed));
        out["tokens"].push_back(r.at("timed_tokens").get<double>() / double(timed));
    }
    out["setup_seconds"] = r.at("setup_seconds");
    out["peak_rss_bytes"] = int64_t(r.at("peak_rss_mb").get<double>() * 1024 * 1024);
    out["versions"] = "another engine build (bench_engine)";
    return out;
}

void add_repeat(BenchSideResult& side, const json& r) {
    side.s_per_update.push_back(mean(r.at("seconds").get<std::vector<double>>()));
    side.cpu_s_per_update.push_back(mean(r.at("cpu_seconds").get<std::vector<double>>()));
    side.peak_rss_bytes.push_back(r.at("peak_rss_bytes").get<int64_t>());
    side.setup_s.push_back(r.at("setup_seconds").get<double>());
    std::vector<double> tokens;
    for (const auto& t : r.at("tokens")) tokens.push_back(t.get<double>());
    side.tokens_per_update = mean(tokens);
    if (r.contains("versions")) side.versions = r.at("versions").get<std::string>();
}

}  // namespace

const std::vector<BenchShape>& bench_shapes() {
    static const std::vector<BenchShape> shapes = [] {
        std::vector<BenchShape> s;
        // Qwen3's vocabulary, rope theta and eps (the config's defaults) in every shape
        using C = engine::Qwen3Config;
        s.push_back({"clinical-tiny", "the main job's model: hidden 128, 4 layers, 4/2 heads x 32, intermediate 384, tied",
                     C{.hidden_size = 128, .intermediate_size = 384, .num_hidden_layers = 4, .num_attention_heads = 4,
                       .num_key_value_heads = 2, .head_dim = 32, .max_position_embeddings = 4096},
                     256, 2, 2});
        s.push_back({"qwen3-0.6b-2l", "two Qwen3-0.6B layers: hidden 1024, 16/8 heads x 128, intermediate 3072, tied",
                     C{.hidden_size = 1024, .intermediate_size = 3072, .num_hidden_layers = 2, .num_attention_heads = 16,
                       .num_key_value_heads = 8, .head_dim = 128, .max_position_embeddings = 4096},
                     512, 2, 2});
        s.push_back({"odd", "untied, 3 query heads per kv head, heads x head_dim != hidden: hidden 320, 3 layers, 6/2 heads x 48, "
                            "intermediate 1000",
                     C{.hidden_size = 320, .intermediate_size = 1000, .num_hidden_layers = 3, .num_attention_heads = 6,
                       .num_key_value_heads = 2, .head_dim = 48, .max_position_embeddings = 4096,
                       .tie_word_embeddings = false},
                     384, 2, 2});
        return s;
    }();
    return shapes;
}

const BenchShape& bench_shape(const std::string& name) {
    std::string known;
    for (const auto& s : bench_shapes()) {
        if (s.name == name) return s;
        known += (known.empty() ? "" : ", ") + s.name;
    }
    throw Error("unknown bench shape '" + name + "' (known: " + known + ")");
}

engine::LoraConfig bench_lora() {
    engine::LoraConfig l;  // r 16, alpha 32, rsLoRA, dropout 0.05, all seven projections
    return l;
}

json bench_request(const BenchShape& shape, int threads, int updates, int warmup, uint64_t seed) {
    const uint64_t key = engine::generator_key(seed, "tandem.bench", shape.name);
    uint64_t k = 0;
    auto uniform = [&] { return double(engine::generator_value(key, k++) >> 11) * 0x1.0p-53; };
    const int64_t V = shape.config.vocab_size, T = shape.seq, B = shape.micro_batch;
    const int64_t pad = std::min<int64_t>(151643, V - 1), id_range = std::min<int64_t>(151643, V - 1);
    json mbs = json::array(), plan = json::array();
    for (int u = 0; u < warmup + updates; ++u) {
        json upd = json::array();
        for (int64_t m = 0; m < shape.accumulation; ++m) {
            std::vector<int32_t> ids(size_t(B * T), int32_t(pad)), lengths;
            std::vector<uint8_t> sup(size_t(B * T), 0);
            for (int64_t b = 0; b < B; ++b) {
                const int64_t len = b == 0 ? T : int64_t(std::floor(0.6 * double(T) + uniform() * 0.4 * double(T)));
                const int64_t prompt = int64_t(double(len) * (0.2 + 0.2 * uniform()));
                for (int64_t t = 0; t < len; ++t) {
                    ids[size_t(b * T + t)] = int32_t(uniform() * double(id_range));
                    sup[size_t(b * T + t)] = t >= prompt ? 1 : 0;
                }
                lengths.push_back(int32_t(len));
            }
            upd.push_back(mbs.size());
            mbs.push_back(json{{"batch", B}, {"seq", T}, {"ids", ids}, {"supervised", sup}, {"lengths", lengths}});
        }
        plan.push_back(upd);
    }
    const engine::LoraConfig lora = bench_lora();
    return json{{"shape", shape.name},
                {"config", shape.config.to_json()},
                {"lora", {{"r", lora.rank}, {"alpha", lora.alpha}, {"dropout", lora.dropout}}},
                {"threads", threads},
                {"warmup_updates", warmup},
                {"updates", plan},
                {"micro_batches", mbs}};
}

std::vector<MicroBatchShape> request_update_shapes(const json& request, size_t update) {
    std::vector<MicroBatchShape> out;
    for (const auto& i : request.at("updates").at(update)) {
        const json& mb = request.at("micro_batches").at(i.get<size_t>());
        MicroBatchShape s;
        s.batch = mb.at("batch");
        s.seq = mb.at("seq");
        const auto sup = mb.at("supervised").get<std::vector<int>>();
        for (int64_t b = 0; b < s.batch; ++b)
            for (int64_t t = 1; t < s.seq; ++t) s.supervised += sup[size_t(b * s.seq + t)] != 0;
        out.push_back(s);
    }
    return out;
}

std::vector<engine::MicroBatch> request_micro_batches(const json& request) {
    std::vector<engine::MicroBatch> mbs;
    for (const auto& j : request.at("micro_batches")) {
        engine::MicroBatch mb;
        mb.batch = j.at("batch");
        mb.seq = j.at("seq");
        mb.ids = j.at("ids").get<std::vector<int32_t>>();
        mb.supervised = j.at("supervised").get<std::vector<uint8_t>>();
        mb.lengths = j.at("lengths").get<std::vector<int32_t>>();
        mbs.push_back(std::move(mb));
    }
    return mbs;
}

json run_engine_bench_worker(const json& req) {
    const auto t_start = std::chrono::steady_clock::now();
    const engine::Qwen3Config cfg = engine::Qwen3Config::from_json(req.at("config"), "bench request");
    engine::LoraConfig lora = bench_lora();
    lora.rank = req.at("lora").at("r");
    lora.alpha = req.at("lora").at("alpha");
    lora.dropout = req.at("lora").at("dropout");
    engine::TrainOptions opts;
    opts.threads = req.at("threads");
    opts.total_updates = int64_t(req.at("updates").size());
    opts.dropout_mode = engine::DropoutMode::Native;
    engine::Trainer trainer = engine::Trainer::create(cfg, engine::generate_base_weights(cfg, 1), lora, opts);
    trainer.load_adapter(engine::generate_initial_adapter(cfg, lora, 2));
    const std::vector<engine::MicroBatch> mbs = request_micro_batches(req);
    const double setup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    json out{{"seconds", json::array()}, {"cpu_seconds", json::array()}, {"tokens", json::array()}, {"losses", json::array()}};
    const int warmup = req.at("warmup_updates");
    int u = 0;
    for (const auto& upd : req.at("updates")) {
        std::vector<engine::MicroBatch> batch;
        int64_t tokens = 0;
        for (const auto& i : upd) {
            batch.push_back(mbs.at(i.get<size_t>()));
            for (auto l : batch.back().lengths) tokens += l;
        }
        const double c0 = cpu_seconds();
        const engine::UpdateMetrics m = trainer.train_update(batch);
        const double cpu = cpu_seconds() - c0;
        out["losses"].push_back(m.loss);
        if (u++ >= warmup) {
            out["seconds"].push_back(m.wall_seconds);
            out["cpu_seconds"].push_back(cpu);
            out["tokens"].push_back(tokens);
        }
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    out["setup_seconds"] = setup;
    out["peak_rss_bytes"] = int64_t(ru.ru_maxrss) * 1024;
    out["threads"] = opts.threads;
    out["versions"] = std::string("tandem ") + TANDEM_VERSION + " (C++20; GEMM " + engine::gemm_library_text() + " on " +
                      engine::cpu_kind() + ", row kernels " + engine::row_kernels_text() + ")";
    return out;
}

Spread spread(std::vector<double> v) {
    Spread s;
    if (v.empty()) return s;
    std::sort(v.begin(), v.end());
    s.min = v.front();
    s.max = v.back();
    const size_t n = v.size();
    s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return s;
}

std::vector<BenchCase> run_engine_bench(const BenchOptions& o, const std::function<void(const std::string&)>& progress) {
    if (o.repeats <= 0 || o.updates <= 0 || o.warmup < 0) throw Error("bench engine: repeats and updates must be positive");
    if (o.threads.empty()) throw Error("bench engine: no thread count");
    for (int t : o.threads)
        if (t <= 0) throw Error("bench engine: thread counts must be positive");
    std::vector<const BenchShape*> shapes;
    if (o.shapes.empty())
        for (const auto& s : bench_shapes()) shapes.push_back(&s);
    else
        for (const auto& n : o.shapes) shapes.push_back(&bench_shape(n));
    fs::create_directories(o.work_dir);
    std::vector<BenchCase> cases;
    for (const BenchShape* shape : shapes) {
        for (int threads : o.threads) {
            BenchCase c;
            c.shape = shape->name;
            c.threads = threads;
            const json req = bench_request(*shape, threads, o.updates, o.warmup);
            const fs::path req_path = fs::path(o.work_dir) / (shape->name + "-t" + std::to_string(threads) + ".json");
            write_file_atomic(req_path, req.dump());
            std::vector<double> flops;
            for (size_t u = size_t(o.warmup); u < req.at("updates").size(); ++u)
                flops.push_back(update_flops(shape->config, bench_lora(), request_update_shapes(req, u)).total());
            c.flops_per_update = mean(flops);
            for (int r = 0; r < o.repeats; ++r) {
                ProbeResult p;
                probe_cpu_sgemm(p, {threads});
                c.sgemm_flops_per_s.push_back(p.sgemm.front().flops_per_s);
                const std::string tag = shape->name + " t" + std::to_string(threads) + " repeat " + std::to_string(r + 1);
                const fs::path base = fs::path(o.work_dir) / (shape->name + "-t" + std::to_string(threads) + "-r" + std::to_string(r + 1));
                progress(tag + ": sgemm " + std::to_string(int(p.sgemm.front().flops_per_s / 1e9)) + " GFLOP/s; engine");
                add_repeat(c.engine, run_worker(o.engine_argv, req_path, threads, base.string() + "-engine", "engine"));
                if (!o.other_engine_argv.empty()) {
                    progress(tag + ": other engine");
                    add_repeat(c.other, from_bench_engine(run_worker(o.other_engine_argv, req_path, threads,
                                                                     base.string() + "-other", "other engine"),
                                                          o.warmup));
                }
                progress(tag + ": reference");
                add_repeat(c.reference, run_worker(o.reference_argv, req_path, threads, base.string() + "-reference", "reference"));
            }
            cases.push_back(std::move(c));
        }
    }
    return cases;
}

namespace {

std::string triple(const Spread& s, const char* f = "%.3f") { return number_or_na(s.min, f) + " / " + number_or_na(s.median, f) + " / " + number_or_na(s.max, f); }

}  // namespace

json engine_bench_json(const std::vector<BenchCase>& cases) {
    json out = json::array();
    for (const auto& c : cases) {
        auto side = [&](const BenchSideResult& s) {
            return json{{"s_per_update", s.s_per_update},   {"cpu_s_per_update", s.cpu_s_per_update},
                        {"peak_rss_bytes", s.peak_rss_bytes}, {"setup_s", s.setup_s},
                        {"tokens_per_update", s.tokens_per_update}, {"versions", s.versions}};
        };
        out.push_back(json{{"shape", c.shape},
                           {"threads", c.threads},
                           {"flops_per_update", c.flops_per_update},
                           {"sgemm_flops_per_s", c.sgemm_flops_per_s},
                           {"engine", side(c.engine)},
                           {"reference", side(c.reference)},
                           {"other_engine", side(c.other)}});
    }
    return out;
}

std::string format_engine_bench(const std::vector<BenchCase>& cases, const std::string& format) {
    const bool md = format == "md";
    std::ostringstream o;
    const std::vector<std::string> head = {"shape", "threads", "leg", "s/update min / median / max", "tokens/s", "CPU-s/update",
                                           "GFLOP/update", "GFLOP/s", "of sgemm peak", "peak host"};
    std::vector<std::vector<std::string>> rows;
    for (const auto& c : cases) {
        const Spread peak = spread(c.sgemm_flops_per_s);
        for (int k = 0; k < 3; ++k) {
            if (k == 2 && c.other.s_per_update.empty()) continue;
            const BenchSideResult& s = k == 0 ? c.engine : k == 1 ? c.reference : c.other;
            const Spread t = spread(s.s_per_update), cpu = spread(s.cpu_s_per_update);
            std::vector<double> rss(s.peak_rss_bytes.begin(), s.peak_rss_bytes.end());
            const double achieved = c.flops_per_update / t.median;
            rows.push_back({c.shape, std::to_string(c.threads), k == 0 ? "engine" : k == 1 ? "reference" : "other engine", triple(t),
                            number_or_na(s.tokens_per_update / t.median, "%.1f"), number_or_na(cpu.median, "%.3f"), number_or_na(c.flops_per_update / 1e9, "%.1f"),
                            number_or_na(achieved / 1e9, "%.1f"), number_or_na(100.0 * achieved / peak.median, "%.0f") + " %",
                            format_bytes(int64_t(spread(rss).median))});
        }
        const double speed = spread(c.reference.s_per_update).median / spread(c.engine.s_per_update).median;
        const double cpu_ratio = spread(c.reference.cpu_s_per_update).median / spread(c.engine.cpu_s_per_update).median;
        std::vector<double> er(c.engine.peak_rss_bytes.begin(), c.engine.peak_rss_bytes.end()),
            rr(c.reference.peak_rss_bytes.begin(), c.reference.peak_rss_bytes.end());
        // per repeat pair: reference s/update / engine s/update (the pairs ran back to back)
        std::vector<double> pair;
        for (size_t i = 0; i < std::min(c.engine.s_per_update.size(), c.reference.s_per_update.size()); ++i)
            pair.push_back(c.reference.s_per_update[i] / c.engine.s_per_update[i]);
        rows.push_back({c.shape, std::to_string(c.threads), "ratio", "engine " + number_or_na(speed, "%.2f") + "x faster (pairs " + triple(spread(pair), "%.2f") + ")",
                        number_or_na(speed, "%.2f") + "x", number_or_na(cpu_ratio, "%.2f") + "x", "", "", "",
                        number_or_na(spread(er).median / spread(rr).median, "%.2f") + "x"});
        if (!c.other.s_per_update.empty()) {
            const double vs = spread(c.other.s_per_update).median / spread(c.engine.s_per_update).median;
            const double vs_cpu = spread(c.other.cpu_s_per_update).median / spread(c.engine.cpu_s_per_update).median;
            rows.push_back({c.shape, std::to_string(c.threads), "engine vs other", "engine " + number_or_na(vs, "%.2f") + "x faster",
                            number_or_na(vs, "%.2f") + "x", number_or_na(vs_cpu, "%.2f") + "x", "", "", "", ""});
        }
    }
    if (md) {
        o << "|";
        for (const auto& h : head) o << " " << h << " |";
        o << "\n|";
        for (size_t i = 0; i < head.size(); ++i) o << " --- |";
        o << "\n";
        for (const auto& r : rows) {
            o << "|";
            for (const auto& cell : r) o << " " << cell << " |";
            o << "\n";
        }
    } else {
        std::vector<size_t> w(head.size());
        for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
        for (const auto& r : rows)
            for (size_t i = 0; i < r.size(); ++i) w[i] = std::max(w[i], r[i].size());
        auto line = [&](const std::vector<std::string>& r) {
            for (size_t i = 0; i < r.size(); ++i) o << r[i] << std::string(w[i] - r[i].size() + 2, ' ');
            o << "\n";
        };
        line(head);
        for (const auto& r : rows) line(r);
    }
    for (const auto& c : cases) {
        const Spread p = spread(c.sgemm_flops_per_s);
        o << (md ? "\n" : "") << "sgemm peak " << c.shape << " t" << c.threads << ": " << number_or_na(p.min / 1e9, "%.1f") << " / "
          << number_or_na(p.median / 1e9, "%.1f") << " / " << number_or_na(p.max / 1e9, "%.1f") << " GFLOP/s (min / median / max over the repeats)\n";
    }
    return o.str();
}

}  // namespace tandem::experiments
