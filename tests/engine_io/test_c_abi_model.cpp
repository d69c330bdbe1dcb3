// The C ABI's model calls (tandem_model_*, for callers that own the training loop) against the C++
// model and trainer on the same files: the base digests are digests of the loaded tensors; a
// micro-batch's loss sum and gradient equal Qwen3LoraModel::forward_backward's with the same dropout
// context, bit for bit; a loop that steps the engine's own AdamW over the returned gradients follows
// the Trainer's losses; every misuse is a status with a one-line message.
#include "tandem_engine.h"

#include "tandem/engine/generate.h"
#include "tandem/engine/io.h"
#include "tandem/engine/ops.h"
#include "tandem/engine/optim.h"
#include "tandem/engine/trainer.h"
#include "tandem/sha256.h"

#include "c_abi_files.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

namespace fs = std::filesystem;
using namespace tandem::engine;

namespace {

struct Fixture : tandem::test::CAbiFiles {
    Fixture() : CAbiFiles("cabi-model") {}

    tandem_model* model() const {
        tandem_model_options o;
        tandem_model_options_default(&o);
        o.rank = lora.rank;
        o.alpha = lora.alpha;
        o.dropout = lora.dropout;
        o.targets = "up_proj,q_proj,down_proj,v_proj";  // any order: the layout is canonical
        o.dropout_mode = TANDEM_DROPOUT_SHARED;
        o.seed = 21;
        o.threads = 2;
        tandem_model* m = nullptr;
        EXPECT_EQ(tandem_model_create((root / "base").c_str(), &o, &m), TANDEM_OK) << tandem_last_error();
        return m;
    }

    // The caller's flat parameters, filled by name from the initial adapter file.
    std::vector<float> initial_params(tandem_model* m) const {
        const LoraAdapter init = load_peft_adapter(root / "init", cfg);
        std::vector<float> p(static_cast<size_t>(tandem_model_num_params(m)));
        for (int64_t i = 0; i < tandem_model_num_adapter_tensors(m); ++i) {
            const char* name = nullptr;
            int64_t rows = 0, cols = 0, off = 0;
            EXPECT_EQ(tandem_model_adapter_tensor(m, i, &name, &rows, &cols, &off), TANDEM_OK);
            const Tensor& t = init.tensors.at(name);
            EXPECT_EQ(t.shape, (std::vector<int64_t>{rows, cols}));
            std::memcpy(p.data() + off, t.ptr(), t.data.size() * sizeof(float));
        }
        return p;
    }
};

}  // namespace

TEST(CAbiModel, BaseDigestsAreThoseOfTheLoadedTensors) {
    Fixture f;
    tandem_model* m = f.model();
    const HfCheckpoint base = load_hf_checkpoint(f.root / "base");
    ASSERT_EQ(tandem_model_num_base_tensors(m), static_cast<int64_t>(base.tensors.size()));
    int64_t i = 0;
    for (const auto& [name, t] : base.tensors) {
        const char *n = nullptr, *sha = nullptr;
        int32_t ndim = 0;
        int64_t shape[4];
        double sum = 0, sumsq = 0, maxabs = 0;
        ASSERT_EQ(tandem_model_base_tensor(m, i++, &n, &ndim, shape, &sum, &sumsq, &maxabs, &sha), TANDEM_OK);
        EXPECT_EQ(std::string(n), name);
        EXPECT_EQ(std::vector<int64_t>(shape, shape + ndim), t.shape);
        EXPECT_EQ(std::string(sha), tandem::sha256_hex(t.ptr(), t.data.size() * sizeof(float)));
        double s = 0;
        for (float x : t.data) s += x;
        EXPECT_EQ(sum, s);
        EXPECT_GE(sumsq, 0.0);
        EXPECT_GT(maxabs, 0.0);
    }
    tandem_model_destroy(m);
}

TEST(CAbiModel, MicroBatchLossAndGradientEqualTheModelsBitForBit) {
    Fixture f;
    tandem_model* m = f.model();
    std::vector<float> params = f.initial_params(m);
    ASSERT_EQ(tandem_model_set_params(m, params.data(), static_cast<int64_t>(params.size())), TANDEM_OK);

    HfCheckpoint base = load_hf_checkpoint(f.root / "base");
    const LoraAdapter init = load_peft_adapter(f.root / "init", base.config);
    ops::set_num_threads(2);
    Qwen3LoraModel direct(base.config, std::move(base.tensors), init.config);
    direct.load_adapter(init.tensors);
    for (int64_t u : {0, 3})
        for (int mb = 0; mb < 2; ++mb) {
            DropoutContext dc;
            dc.mode = DropoutMode::Shared;
            dc.p = 0.2;
            dc.seed = 21;
            dc.update = static_cast<uint64_t>(u);
            dc.micro_batch = static_cast<uint64_t>(mb);
            direct.zero_grads();
            const double want = direct.forward_backward(f.mbs[mb], dc, 0.125);
            const TensorMap wg = direct.adapter_gradients();
            std::vector<float> grads(params.size(), 7.0f);  // overwritten, not accumulated into
            double got = 0;
            int64_t labels = 0;
            ASSERT_EQ(tandem_model_forward_backward(m, &f.cb[mb], u, mb, 0.125, grads.data(),
                                                    static_cast<int64_t>(grads.size()), &got, &labels),
                      TANDEM_OK)
                << tandem_last_error();
            EXPECT_EQ(0, std::memcmp(&got, &want, sizeof got)) << got << " vs " << want;
            EXPECT_EQ(labels, f.mbs[mb].validate(300));
            for (int64_t i = 0; i < tandem_model_num_adapter_tensors(m); ++i) {
                const char* name = nullptr;
                int64_t rows = 0, cols = 0, off = 0;
                tandem_model_adapter_tensor(m, i, &name, &rows, &cols, &off);
                const Tensor& g = wg.at(name);
                EXPECT_EQ(0, std::memcmp(grads.data() + off, g.ptr(), g.data.size() * sizeof(float))) << name;
            }
        }
    // Evaluation: dropout off, the same as the model's loss_sum.
    double ev = 0;
    ASSERT_EQ(tandem_model_loss(m, &f.cb[0], &ev, nullptr), TANDEM_OK);
    const double want_ev = direct.loss_sum(f.mbs[0]);
    EXPECT_EQ(0, std::memcmp(&ev, &want_ev, sizeof ev));
    tandem_model_destroy(m);
}

TEST(CAbiModel, ACallersLoopFollowsTheTrainer) {
    // The caller's own loop (accumulation, clipping, AdamW — here the engine's published formulas)
    // over tandem_model_* reproduces the Trainer's losses and grad norms to float rounding.
    Fixture f;
    tandem_model* m = f.model();
    std::vector<float> params = f.initial_params(m);
    HfCheckpoint base = load_hf_checkpoint(f.root / "base");
    const LoraAdapter init = load_peft_adapter(f.root / "init", base.config);
    const TrainOptions opts = Fixture::train_options(4);
    Trainer trainer = Trainer::create(base.config, std::move(base.tensors), init.config, opts);
    trainer.load_adapter(init.tensors);
    std::vector<float> mom1(params.size()), mom2(params.size()), g(params.size());
    const int64_t warm = warmup_updates(opts.warmup_ratio, opts.total_updates);
    for (int64_t u = 0; u < opts.total_updates; ++u) {
        const UpdateMetrics want = trainer.train_update(f.mbs);
        ASSERT_EQ(tandem_model_set_params(m, params.data(), static_cast<int64_t>(params.size())), TANDEM_OK);
        int64_t n = 0;
        for (const auto& b : f.mbs) n += b.validate(300);
        std::vector<float> acc(params.size(), 0.0f);
        double loss = 0;
        for (int mb = 0; mb < 2; ++mb) {
            double s = 0;
            ASSERT_EQ(tandem_model_forward_backward(m, &f.cb[mb], u, mb, 1.0 / static_cast<double>(n), g.data(),
                                                    static_cast<int64_t>(g.size()), &s, nullptr),
                      TANDEM_OK);
            loss += s;
            for (size_t i = 0; i < g.size(); ++i) acc[i] += g[i];
        }
        double sq = 0;
        for (float x : acc) sq += static_cast<double>(x) * x;
        const double norm = std::sqrt(sq);
        EXPECT_NEAR(loss / static_cast<double>(n), want.loss, 1e-12 * want.loss) << u;
        EXPECT_NEAR(norm, want.grad_norm, 1e-5 * want.grad_norm) << u;
        clip_grad(acc.data(), static_cast<int64_t>(acc.size()), norm, opts.max_grad_norm);
        adamw_step(params.data(), acc.data(), mom1.data(), mom2.data(), static_cast<int64_t>(params.size()), u + 1,
                   cosine_with_warmup_lr(opts.lr, u, warm, opts.total_updates), opts.adamw);
    }
    tandem_model_destroy(m);
}

TEST(CAbiModel, MisuseIsAStatusWithOneLine) {
    Fixture f;
    tandem_model* m = f.model();
    std::vector<float> p(static_cast<size_t>(tandem_model_num_params(m)));
    auto one_line = [](const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; };
    EXPECT_EQ(tandem_model_set_params(m, p.data(), 3), TANDEM_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tandem_last_error()).find("3 floats given"), std::string::npos) << tandem_last_error();
    EXPECT_EQ(tandem_model_adapter_tensor(m, 999, nullptr, nullptr, nullptr, nullptr), TANDEM_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(one_line(tandem_last_error()));
    EXPECT_EQ(tandem_model_base_tensor(m, -1, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
              TANDEM_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(tandem_model_forward_backward(m, &f.cb[0], 0, 0, 1.0, p.data(), 5, nullptr, nullptr),
              TANDEM_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(tandem_model_forward_backward(m, nullptr, 0, 0, 1.0, nullptr, 0, nullptr, nullptr),
              TANDEM_ERROR_INVALID_ARGUMENT);
    tandem_micro_batch bad = f.cb[0];
    bad.seq = 0;
    EXPECT_EQ(tandem_model_loss(m, &bad, nullptr, nullptr), TANDEM_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(one_line(tandem_last_error()));
    tandem_model_options o;
    tandem_model_options_default(&o);
    o.targets = "q_proj,nope_proj";
    tandem_model* m2 = nullptr;
    EXPECT_EQ(tandem_model_create((f.root / "base").c_str(), &o, &m2), TANDEM_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(tandem_last_error()).find("nope_proj"), std::string::npos);
    EXPECT_EQ(m2, nullptr);
    EXPECT_EQ(tandem_model_create((f.root / "missing").c_str(), nullptr, &m2), TANDEM_ERROR_IO);
    EXPECT_NE(std::string(tandem_last_error()).find("missing"), std::string::npos) << tandem_last_error();
    EXPECT_EQ(tandem_model_num_params(nullptr), -1);
    tandem_model_destroy(nullptr);
    tandem_model_destroy(m);
}
