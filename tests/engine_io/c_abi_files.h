#pragma once
// The files and batches both C ABI suites train on (test_c_abi_vs_trainer.cpp, test_c_abi_model.cpp):
// a generated tiny base and initial adapter in a fresh folder, and two micro-batches of right-padded
// sequences as the C++ MicroBatch and as the C ABI's tandem_micro_batch over the same storage.
#include "tandem_engine.h"

#include "tandem/engine/generate.h"
#include "tandem/engine/io.h"
#include "tandem/engine/trainer.h"

#include "test_support.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tandem::test {

struct CAbiFiles {
    std::filesystem::path root;
    engine::Qwen3Config cfg;
    engine::LoraConfig lora;
    std::vector<engine::MicroBatch> mbs;
    std::vector<std::vector<int32_t>> sup32;  // the C ABI's supervised flags (int32, mbs' as bytes)
    std::vector<tandem_micro_batch> cb;

    explicit CAbiFiles(const std::string& name) {
        using namespace tandem::engine;
        root = fresh_dir(name);
        cfg = Qwen3Config::named("tiny");
        cfg.vocab_size = 300;
        cfg.hidden_size = 64;
        cfg.head_dim = 16;
        cfg.intermediate_size = 96;
        write_generated_base(root / "base", cfg, 3);
        lora.rank = 8;
        lora.alpha = 16;
        lora.dropout = 0.2;
        lora.targets = {"q_proj", "v_proj", "up_proj", "down_proj"};
        write_initial_adapter(root / "init", cfg, lora, 99, "");
        mbs.resize(2);
        sup32.resize(2);
        for (int m = 0; m < 2; ++m) {
            MicroBatch& b = mbs[m];
            b.batch = 2;
            b.seq = 16;
            b.lengths = {16 - 5 * m, 11};
            for (int i = 0; i < 32; ++i) {
                const int s = i / 16, t = i % 16;
                b.ids.push_back((31 * i + 17 * m + 3) % 300);
                b.supervised.push_back(t >= 5 && t < b.lengths[s] ? 1 : 0);
            }
            sup32[m].assign(b.supervised.begin(), b.supervised.end());
        }
        for (int m = 0; m < 2; ++m) cb.push_back({mbs[m].batch, mbs[m].seq, mbs[m].ids.data(), sup32[m].data(), mbs[m].lengths.data()});
    }
    // The C++ trainer's options in both suites (their C ABI side is given the same): lr 5e-3 over
    // total_updates updates, shared dropout masks of seed 21, 2 threads.
    static engine::TrainOptions train_options(int64_t total_updates) {
        return engine::TrainOptions{.lr = 5e-3, .total_updates = total_updates,
                                    .dropout_mode = engine::DropoutMode::Shared, .seed = 21, .threads = 2};
    }
    ~CAbiFiles() { std::filesystem::remove_all(root); }
    CAbiFiles(const CAbiFiles&) = delete;
    CAbiFiles& operator=(const CAbiFiles&) = delete;
};

}  // namespace tandem::test
