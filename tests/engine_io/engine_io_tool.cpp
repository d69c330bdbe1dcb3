// Test driver: runs tandem_engine_io's readers, writers and generators on files so the reference
// tests (test_reference_io.py) can check them against safetensors / transformers / peft.
//   engine_io_tool read IN.safetensors OUT.safetensors      re-write as F32 (prints metadata JSON)
//   engine_io_tool load-hf DIR OUT.safetensors              load_hf_checkpoint (prints config JSON)
//   engine_io_tool parse-config CONFIG.json                 Qwen3Config::from_json -> to_json
//   engine_io_tool gen-base DIR CONFIG SEED                 CONFIG: a name or a config.json path
//   engine_io_tool gen-adapter DIR CONFIG SEED RANK ALPHA [TARGETS,...]
//   engine_io_tool load-adapter DIR CONFIG OUT.safetensors  load_peft_adapter (prints config JSON)
//   engine_io_tool time-load DIR REPEATS                    best wall seconds of load_hf_checkpoint (benchmark)
#include "tandem/join.h"  // split_list
#include "tandem/atomic_file.h"
#include "tandem/engine/generate.h"
#include "tandem/engine/io.h"
#include "tandem/engine/safetensors.h"
#include "tandem/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

using namespace tandem::engine;
using nlohmann::json;

namespace {

Qwen3Config config_arg(const std::string& s) {
    if (std::filesystem::exists(s)) return Qwen3Config::from_json(json::parse(tandem::read_file(s)), s);
    return Qwen3Config::named(s);
}

int run(const std::vector<std::string>& a) {
    const auto need = [&](size_t n) {
        if (a.size() < n) throw tandem::Error("usage: see the comment at the top of engine_io_tool.cpp");
    };
    need(1);
    const std::string& cmd = a[0];
    if (cmd == "read") {
        need(3);
        std::map<std::string, std::string> meta;
        const TensorMap m = read_safetensors(a[1], &meta);
        write_safetensors(a[2], m, meta);
        std::cout << json(meta).dump() << "\n";
    } else if (cmd == "load-hf") {
        need(3);
        const HfCheckpoint ck = load_hf_checkpoint(a[1]);
        write_safetensors(a[2], ck.tensors);
        std::cout << ck.config.to_json().dump() << "\n";
    } else if (cmd == "parse-config") {
        need(2);
        std::cout << config_arg(a[1]).to_json().dump() << "\n";
    } else if (cmd == "gen-base") {
        need(4);
        write_generated_base(a[1], config_arg(a[2]), std::stoull(a[3]));
    } else if (cmd == "gen-adapter") {
        need(6);
        LoraConfig l;
        l.rank = std::stoll(a[4]);
        l.alpha = std::stod(a[5]);
        if (a.size() > 6) l.targets = tandem::split_list(a[6]);
        write_initial_adapter(a[1], config_arg(a[2]), l, std::stoull(a[3]), "base");
    } else if (cmd == "load-adapter") {
        need(4);
        const LoraAdapter ad = load_peft_adapter(a[1], config_arg(a[2]));
        write_safetensors(a[3], ad.tensors);
        std::cout << ad.config.to_peft_json("").dump() << "\n";
    } else if (cmd == "time-load") {
        need(3);
        double best = 1e300;
        int64_t values = 0;
        for (int i = 0; i < std::stoi(a[2]); ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            const HfCheckpoint ck = load_hf_checkpoint(a[1]);
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            values = 0;
            for (const auto& [n, t] : ck.tensors) values += t.numel();
        }
        std::cout << json{{"seconds", best}, {"values", values}}.dump() << "\n";
    } else {
        throw tandem::Error("unknown command '" + cmd + "'");
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "engine_io_tool: error: %s\n", e.what());
        return 1;
    }
}
