// The C ABI computes exactly what the C++ Trainer computes: same files, same batches, same options
// -> bit-identical per-update metrics, evaluation and final adapter.
#include "c_abi_files.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

namespace fs = std::filesystem;
using namespace tandem::engine;

TEST(CAbi, MatchesTheCppTrainerBitForBit) {
    const tandem::test::CAbiFiles files("cabi-cpp");
    const auto& [root, cfg, lora, mbs, sup32, cb] = files;

    const TrainOptions opts = tandem::test::CAbiFiles::train_options(5);
    HfCheckpoint base = load_hf_checkpoint(root / "base");
    const LoraAdapter init = load_peft_adapter(root / "init", base.config);
    Trainer direct = Trainer::create(base.config, std::move(base.tensors), init.config, opts);
    direct.load_adapter(init.tensors);

    tandem_train_options o;
    tandem_train_options_default(&o);
    o.lr = opts.lr;
    o.total_updates = opts.total_updates;
    o.dropout_mode = TANDEM_DROPOUT_SHARED;
    o.seed = opts.seed;
    o.threads = opts.threads;
    tandem_trainer* t = nullptr;
    ASSERT_EQ(tandem_trainer_create((root / "base").c_str(), (root / "init").c_str(), &o, &t), TANDEM_OK)
        << tandem_last_error();

    for (int u = 0; u < 5; ++u) {
        const UpdateMetrics want = direct.train_update(mbs);
        tandem_update_metrics got{};
        ASSERT_EQ(tandem_trainer_step(t, cb.data(), cb.size(), &got), TANDEM_OK) << tandem_last_error();
        EXPECT_EQ(got.update, want.update);
        EXPECT_EQ(0, std::memcmp(&got.loss, &want.loss, sizeof(double))) << u << ": " << got.loss << " vs " << want.loss;
        EXPECT_EQ(0, std::memcmp(&got.grad_norm, &want.grad_norm, sizeof(double))) << u;
        EXPECT_EQ(got.lr, want.lr) << u;
        EXPECT_EQ(got.supervised_tokens, want.supervised_tokens) << u;
    }
    const EvalResult want_eval = direct.evaluate(mbs);
    double got_eval = 0;
    int64_t got_tokens = 0;
    ASSERT_EQ(tandem_trainer_eval(t, cb.data(), cb.size(), &got_eval, &got_tokens), TANDEM_OK);
    EXPECT_EQ(0, std::memcmp(&got_eval, &want_eval.loss, sizeof(double)));
    EXPECT_EQ(got_tokens, want_eval.supervised_tokens);

    ASSERT_EQ(tandem_trainer_save_adapter(t, (root / "final").c_str()), TANDEM_OK) << tandem_last_error();
    const LoraAdapter saved = load_peft_adapter(root / "final", cfg);
    EXPECT_EQ(saved.config.targets, lora.targets);
    EXPECT_EQ(saved.config.rank, 8);
    const TensorMap want_adapter = direct.adapter_tensors();
    ASSERT_EQ(saved.tensors.size(), want_adapter.size());
    bool changed = false;
    for (const auto& [n, w] : want_adapter) {
        const Tensor& g = saved.tensors.at(n);
        ASSERT_EQ(g.shape, w.shape) << n;
        EXPECT_EQ(0, std::memcmp(g.ptr(), w.ptr(), w.data.size() * sizeof(float))) << n;
        if (g.data != init.tensors.at(n).data) changed = true;
    }
    EXPECT_TRUE(changed) << "training must have moved the adapter";
    tandem_trainer_destroy(t);
}
