// The CPU engine's numbers must not change under a refactor (docs/engine.md "The backend seam"): three small deterministic
// training runs through the public Trainer API, each number recorded as its exact float64 bit pattern
// (every update's loss, pre-clip grad norm and lr, every held-out CE) plus SHA-256 digests of the
// final adapter, the AdamW moments and the whole trajectory, compared against
// tests/engine/data/engine_digest.txt — recorded on the engine BEFORE the backend seam (commit
// 1834004, the separate CPU model and CUDA trainer).
//
// Bit identity needs the same arithmetic in the same order, so the runs fix what the numbers depend
// on besides the code: the thread count (TrainOptions::threads, per case) and the OpenBLAS kernel
// (ctest sets OPENBLAS_CORETYPE=Haswell: OpenBLAS picks its GEMM kernels per CPU model, and Haswell's
// AVX2 kernels run on any x86-64 machine with AVX2, so the file holds beyond the machine it was
// recorded on). Recording (only ever on purpose, after a change that is MEANT to change numbers):
//   TANDEM_ENGINE_DIGEST_RECORD=tests/engine/data/engine_digest.txt OPENBLAS_CORETYPE=Haswell
//       build/tests/engine/test_engine_digest   (one command line)
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tandem/engine/generate.h"
#include "tandem/engine/trainer.h"
#include "tandem/sha256.h"

extern "C" char* openblas_get_corename(void);

namespace {

using namespace tandem::engine;

struct Case {
    std::string name;
    Qwen3Config config;
    LoraConfig lora;
    TrainOptions options;
    int updates = 8;
    int resume_at = -1;        // > 0: state() after this many updates, restored into a fresh trainer
    int eval_every = 4;
    int micro_batches = 2;
    int64_t batch = 2;
    int64_t seq_min = 11, seq_max = 19;
};

Qwen3Config config(int64_t vocab, int64_t hidden, int64_t inter, int64_t layers, int64_t heads, int64_t kv,
                   int64_t head_dim, bool tied) {
    return Qwen3Config{.vocab_size = vocab, .hidden_size = hidden, .intermediate_size = inter, .num_hidden_layers = layers,
                       .num_attention_heads = heads, .num_key_value_heads = kv, .head_dim = head_dim,
                       .initializer_range = 0.08, .tie_word_embeddings = tied};
}

std::vector<Case> cases() {
    return {
        // GQA 2:1, every projection adapted, native dropout, two-pass chunked CE, clipping active
        Case{.name = "gqa-native",
             .config = config(515, 64, 160, 2, 4, 2, 16, true),
             .lora = {.rank = 4, .alpha = 8, .dropout = 0.1},
             .options = {.lr = 3e-3, .adamw = {.weight_decay = 0.01}, .total_updates = 8, .warmup_updates = 2,
                         .max_grad_norm = 0.05, .dropout_mode = DropoutMode::Native, .seed = 11, .threads = 2,
                         .model = {.ce_token_chunk = 7, .ce_vocab_chunk = 100}},
             .resume_at = 5},
        // MQA, untied LM head, three projections adapted, shared dropout masks, single-pass CE
        Case{.name = "mqa-shared-untied",
             .config = config(301, 48, 96, 3, 2, 1, 24, false),
             .lora = {.rank = 3, .alpha = 6, .use_rslora = false, .dropout = 0.2,
                      .targets = {"q_proj", "v_proj", "down_proj"}},
             .options = {.lr = 5e-3, .total_updates = 7, .warmup_ratio = 0.03, .max_grad_norm = 1.0,
                         .dropout_mode = DropoutMode::Shared, .seed = 5, .threads = 2,
                         .model = {.ce_token_chunk = 0, .ce_vocab_chunk = 0}},
             .updates = 7,
             .eval_every = 3,
             .micro_batches = 3},
        // dropout off, one thread, longer sequences (row loops split over chunks), 4 heads / 4 kv
        Case{.name = "mha-off-1thread",
             .config = config(1000, 96, 200, 2, 4, 4, 24, true),
             .lora = {.rank = 8, .alpha = 16, .dropout = 0.0},
             .options = {.lr = 1e-3, .total_updates = 5, .warmup_updates = 0, .max_grad_norm = 1.0,
                         .dropout_mode = DropoutMode::Off, .seed = 3, .threads = 1,
                         .model = {.ce_token_chunk = 64, .ce_vocab_chunk = 0}},
             .updates = 5,
             .eval_every = 5,
             .batch = 3,
             .seq_min = 40,
             .seq_max = 57},
    };
}

// Right-padded micro-batch: an unsupervised prompt of 2..4 tokens, the rest of each sequence supervised.
MicroBatch make_batch(std::mt19937_64& rng, const Case& c) {
    MicroBatch mb;
    mb.batch = c.batch;
    mb.seq = c.seq_min + int64_t(rng() % uint64_t(c.seq_max - c.seq_min + 1));
    mb.ids.resize(size_t(mb.batch * mb.seq));
    mb.supervised.assign(size_t(mb.batch * mb.seq), 0);
    for (auto& id : mb.ids) id = int32_t(rng() % uint64_t(c.config.vocab_size));
    for (int64_t b = 0; b < mb.batch; ++b) {
        const int64_t len = b == 0 ? mb.seq : mb.seq - int64_t(rng() % uint64_t(mb.seq / 2));
        mb.lengths.push_back(int32_t(len));
        const int64_t prompt = 2 + int64_t(rng() % 3);
        for (int64_t t = prompt; t < len; ++t) mb.supervised[size_t(b * mb.seq + t)] = 1;
    }
    return mb;
}

Trainer make_trainer(const Case& c) {
    TensorMap base = generate_base_weights(c.config, 21);
    // RMSNorm weights are 1 in the generated base; perturb them so every norm weight matters
    uint64_t key = 1;
    for (auto& [name, t] : base)
        if (name.find("norm") != std::string::npos) {
            std::vector<float> noise(t.data.size());
            fill_normal(noise.data(), noise.size(), 0.2, key++);
            for (size_t i = 0; i < noise.size(); ++i) t.data[i] += noise[i];
        }
    Trainer t = Trainer::create(c.config, std::move(base), c.lora, c.options);
    TensorMap adapter = generate_initial_adapter(c.config, c.lora, 22);
    key = 100;
    for (auto& [name, tensor] : adapter)  // B != 0 so every gradient is non-zero from update 0
        if (name.find("lora_B") != std::string::npos) fill_normal(tensor.ptr(), tensor.data.size(), 0.05, key++);
    t.load_adapter(adapter);
    return t;
}

std::string bits(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(std::bit_cast<uint64_t>(x)));
    return buf;
}

std::string tensors_digest(const TensorMap& m) {
    tandem::Sha256 h;
    for (const auto& [name, t] : m) {  // sorted names, then the float32 bytes
        h.update(name.data(), name.size());
        h.update(t.ptr(), t.data.size() * sizeof(float));
    }
    return h.hex_digest();
}

// key -> value lines of one case
std::map<std::string, std::string> run_case(const Case& c) {
    std::map<std::string, std::string> out;
    std::mt19937_64 rng(fnv1a64(c.name));
    std::vector<std::vector<MicroBatch>> plan(size_t(c.updates));
    for (auto& u : plan)
        for (int i = 0; i < c.micro_batches; ++i) u.push_back(make_batch(rng, c));
    const std::vector<MicroBatch> held_out = {make_batch(rng, c), make_batch(rng, c)};

    tandem::Sha256 trajectory;
    auto record = [&](const std::string& key, double v) {
        out[c.name + "." + key] = bits(v);
        const uint64_t b = std::bit_cast<uint64_t>(v);
        trajectory.update(&b, sizeof b);
    };
    Trainer t = make_trainer(c);
    record("eval.0", t.evaluate(held_out).loss);
    for (int u = 0; u < c.updates; ++u) {
        if (u == c.resume_at) {  // what a resumed process does: a fresh trainer restored from the state
            const TrainerState s = t.state();
            t = make_trainer(c);
            t.restore(s);
        }
        const UpdateMetrics m = t.train_update(plan[size_t(u)]);
        const std::string p = "update." + std::to_string(u) + ".";
        record(p + "loss", m.loss);
        record(p + "grad_norm", m.grad_norm);
        record(p + "lr", m.lr);
        if ((u + 1) % c.eval_every == 0 || u + 1 == c.updates)
            record("eval." + std::to_string(u + 1), t.evaluate(held_out).loss);
    }
    const TrainerState s = t.state();
    out[c.name + ".native_rng_counter"] = std::to_string(s.native_rng_counter);
    out[c.name + ".sha256.adapter"] = tensors_digest(s.adapter);
    out[c.name + ".sha256.adam_m"] = tensors_digest(s.adam_m);
    out[c.name + ".sha256.adam_v"] = tensors_digest(s.adam_v);
    out[c.name + ".sha256.trajectory"] = trajectory.hex_digest();
    return out;
}

const char* kDataFile = TANDEM_TEST_SOURCE_DIR "/tests/engine/data/engine_digest.txt";

std::map<std::string, std::string> read_data(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    std::map<std::string, std::string> m;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream ls(line);
        std::string k, v;
        ls >> k >> v;
        m[k] = v;
    }
    return m;
}

TEST(EngineDigest, CpuTrajectoriesAreBitIdenticalToThePreRefactorEngine) {
    // The file was recorded with OPENBLAS_CORETYPE=Haswell (ctest sets it): another GEMM kernel
    // rounds differently, which says nothing about the engine.
    const std::string core = openblas_get_corename();
    ASSERT_EQ(core, "Haswell") << "run through ctest (it sets OPENBLAS_CORETYPE=Haswell)";
    std::map<std::string, std::string> got;
    for (const Case& c : cases()) {
        auto m = run_case(c);
        got.insert(m.begin(), m.end());
    }
    if (const char* record = std::getenv("TANDEM_ENGINE_DIGEST_RECORD")) {
        std::ofstream out(record);
        out << "# tests/engine/test_engine_digest.cpp: exact float64 bit patterns (hex) and SHA-256 digests of\n"
               "# three CPU training runs. Recorded with OpenBLAS core "
            << core << ". Do not edit by hand.\n";
        for (const auto& [k, v] : got) out << k << " " << v << "\n";
        GTEST_SKIP() << "recorded " << got.size() << " values into " << record;
    }
    const auto want = read_data(kDataFile);
    ASSERT_FALSE(want.empty()) << kDataFile;
    EXPECT_EQ(want.size(), got.size());
    int shown = 0;
    for (const auto& [k, v] : want) {
        auto it = got.find(k);
        if (it == got.end()) {
            ADD_FAILURE() << "no value for " << k;
        } else if (it->second != v && shown++ < 10) {
            ADD_FAILURE() << k << ": got " << it->second << ", recorded " << v;
        }
    }
    for (const auto& [k, v] : want)
        if (k.find(".sha256.") != std::string::npos) {
            EXPECT_EQ(got[k], v) << k;
        }
}

}  // namespace
