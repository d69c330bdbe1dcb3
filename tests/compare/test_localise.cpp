// Localisation of injected faults (docs/observables.md): a tiny Qwen3 + LoRA trained by the
// engine twice on the same batches — clean, and with one fault (the engine's fault switches,
// faults.h, or a test-only perturbation through a delegating backend) — with fingerprints recorded;
// localise() must name the layer, op and pass where the fault acts, and the clean pair "no divergence".
// The cross-stack half (engine vs the PyTorch reference, real run.h5, `tandem localise`) is
// tests/studies/test_localise_run.py.
#include <gtest/gtest.h>

#include "tandem/engine/forwarding_backend.h"
#include "random_batches.h"
#include "tiny_model.h"

#include <cmath>
#include <fstream>
#include <random>

#include "tandem/engine/generate.h"
#include "tandem/engine/observe.h"
#include "tandem/engine/trainer.h"
#include "tandem/error.h"
#include "tandem/spec/experiment.h"
#include "tandem/legs/leg_protocol.h"
#include "tandem/compare/judge/localise.h"
#include "tandem/legs/engine_leg.h"
#include "tandem/studies/localise_run.h"
#include "tandem/compare/observables.h"
#include "tandem/compare/report.h"
#include "tandem/store/run_file.h"
#include "test_support.h"

using namespace tandem::engine;
using tandem::test::tiny_config;
using tandem::experiments::FingerprintRow;
using tandem::experiments::Localisation;

namespace {

std::vector<std::vector<MicroBatch>> plan(int updates, int64_t vocab) { return tandem::test::random_plan(updates, vocab); }

// A backend that forwards every op to the CPU backend; tests override one op to perturb it.
class DelegatingBackend : public ForwardingBackend {
public:
    DelegatingBackend() : ForwardingBackend(make_cpu_backend(1)) {}
};

// The MLP fault (test-only): the SwiGLU output of one decoder layer, in training forwards only,
// scaled by 1 + 1e-3. Counts forward calls: layer l is call l of every forward pass of L layers.
class SwigluPerturbed final : public DelegatingBackend {
public:
    SwigluPerturbed(int64_t layer, int64_t layers) : layer_(layer), layers_(layers) {}
    void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) override {
        inner_->swiglu_forward(out, gate, up, n);
        if (calls_++ % layers_ == layer_)  // CPU backend: `out` is host memory
            for (int64_t i = 0; i < n; ++i) out[i] *= 1.001f;
    }

private:
    int64_t layer_, layers_, calls_ = 0;
};

struct Injection {
    FaultConfig faults;
    std::shared_ptr<Backend> backend;  // nullptr: the CPU backend
    int perturb_token_update = -1;     // the data fault: one token of micro-batch 1 of this update changed
};

// Trains `updates` updates with fingerprints recorded at every one, returns the rows.
std::vector<FingerprintRow> fingerprints(const Injection& s, int updates) {
    const Qwen3Config c = tiny_config(3);
    LoraConfig l;
    l.rank = 4;
    l.alpha = 8;
    l.dropout = 0.1;
    TrainOptions o;
    o.lr = 5e-3;
    o.total_updates = updates;
    o.dropout_mode = DropoutMode::Shared;
    o.seed = 17;
    o.threads = 1;
    o.model.faults = s.faults;
    Trainer t = Trainer::create(c, generate_base_weights(c, 3), l, o, s.backend ? s.backend : make_cpu_backend(1));
    TensorMap adapter = generate_initial_adapter(c, l, 4);
    for (auto& [name, tensor] : adapter)  // B non-zero: every gradient is non-trivial from update 0
        if (name.find("lora_B") != std::string::npos) fill_normal(tensor.ptr(), tensor.data.size(), 0.05, mix64(name.size()));
    t.load_adapter(adapter);
    FingerprintRecorder rec(t.backend());
    auto batches = plan(updates, c.vocab_size);
    std::vector<FingerprintRow> rows;
    for (int u = 0; u < updates; ++u) {
        if (u == s.perturb_token_update) batches[size_t(u)][1].ids[3] = (batches[size_t(u)][1].ids[3] + 1) % 300;
        rec.begin_update(u);
        t.train_update(batches[size_t(u)], &rec);
        auto r = tandem::experiments::fingerprint_rows(rec.take_points());
        rows.insert(rows.end(), r.begin(), r.end());
    }
    return rows;
}

const std::vector<FingerprintRow>& clean() {
    static const std::vector<FingerprintRow> rows = fingerprints(Injection{}, 2);
    return rows;
}

struct Expected {
    int64_t update, micro_batch, layer;
    std::string op, pass;
};

void expect_first(const Localisation& l, const Expected& e) {
    ASSERT_TRUE(l.diverged()) << l.summary();
    const auto& p = l.points[*l.first];
    EXPECT_EQ(p.update, e.update) << l.summary();
    EXPECT_EQ(p.micro_batch, e.micro_batch) << l.summary();
    EXPECT_EQ(p.layer, e.layer) << l.summary();
    EXPECT_EQ(p.op, e.op) << l.summary();
    EXPECT_EQ(p.pass, e.pass) << l.summary();
    // every point before it is within its bound: it is the first of the chain
    for (size_t i = 0; i < *l.first; ++i) EXPECT_LE(l.points[i].ratio, 1.0) << l.points[i].op;
    EXPECT_GT(p.ratio, 1.0);
}

Localisation localise_fault(const Injection& s) {
    return tandem::experiments::localise(fingerprints(s, 2), clean(), "faulty", "clean");
}

}  // namespace

TEST(Localise, CleanPairHasNoDivergence) {
    const auto again = fingerprints(Injection{}, 2);
    const Localisation l = tandem::experiments::localise(again, clean(), "a", "b");
    EXPECT_FALSE(l.diverged()) << l.summary();
    EXPECT_EQ(l.only_a + l.only_b + l.unknown, 0u);
    // 2 updates x 2 micro-batches x (3 + 3 layers x 38 + 2 forward, 1 + 3 x 29 + 1 backward) + 2 x 3 x 14 optimizer
    EXPECT_EQ(l.points.size(), size_t(2 * 2 * (3 + 3 * 38 + 2 + 1 + 3 * 29 + 1) + 2 * 3 * 14));
    EXPECT_NE(l.summary().find("no divergence"), std::string::npos);
}

// A leg that records no head points (a label smoother took the labels before the model's loss): the
// sites it lacks are named with what could not be compared, whatever the verdict on the common points.
TEST(Localise, SitesOneLegLacksAreNamed) {
    std::vector<FingerprintRow> mine;
    size_t dropped = 0;
    for (const auto& r : clean()) {
        if (r.op == "labels" || r.op == "ce" || r.op == "final_norm") {
            ++dropped;
            continue;
        }
        mine.push_back(r);
    }
    ASSERT_GT(dropped, 0u);
    const Localisation l = tandem::experiments::localise(mine, clean(), "mine", "reference");
    EXPECT_FALSE(l.diverged()) << l.summary();
    EXPECT_EQ(l.only_b, dropped);
    const std::string s = l.summary();
    EXPECT_NE(s.find("; mine records no fingerprints at "), std::string::npos) << s;
    for (const char* site : {"labels (forward)", "ce (forward)", "final_norm (forward)", "final_norm (backward)"})
        EXPECT_NE(s.find(site), std::string::npos) << site << ": " << s;
    EXPECT_NE(s.find(std::to_string(dropped) + " points reference recorded were not compared"), std::string::npos) << s;
    EXPECT_NE(s.find("a label smoother"), std::string::npos) << s;
    // both legs with the same sites: nothing said
    EXPECT_EQ(tandem::experiments::localise(clean(), clean(), "a", "b").blind_spots(), "");
}

// attention: GQA query head h reads kv head h % KV instead of h / (H / KV)
TEST(Localise, AttentionKvMapping) {
    Injection s;
    s.faults.kv_heads = KvHeadMapping::Modulo;
    expect_first(localise_fault(s), {0, 0, 0, "attention", "forward"});
}

// attention: RoPE pairs (2i, 2i+1) instead of (i, i + D/2)
TEST(Localise, AttentionRopePairing) {
    Injection s;
    s.faults.rope_pairing = RopePairing::Interleaved;
    expect_first(localise_fault(s), {0, 0, 0, "q_rope", "forward"});
}

// norm: every RMSNorm with eps x 10
TEST(Localise, NormEps) {
    Injection s;
    s.faults.rms_norm_eps_factor = 10;
    expect_first(localise_fault(s), {0, 0, 0, "input_norm", "forward"});
}

// norm: q_norm / k_norm skipped
TEST(Localise, NormQkSkipped) {
    Injection s;
    s.faults.skip_qk_norm = true;
    expect_first(localise_fault(s), {0, 0, 0, "q_norm", "forward"});
}

// MLP (test-only perturbation): the SwiGLU output of layer 1 x (1 + 1e-3)
TEST(Localise, MlpActivationInLayer1) {
    Injection s;
    s.backend = std::make_shared<SwigluPerturbed>(1, tiny_config(3).num_hidden_layers);
    expect_first(localise_fault(s), {0, 0, 1, "mlp_act", "forward"});
}

// LoRA backward: dB from t's storage read transposed; forward unchanged, so the first point is the
// first LoRA B gradient of the backward: the last layer's down_proj
TEST(Localise, LoraBackwardBGradient) {
    Injection s;
    s.faults.lora_b_grad = LoraBGrad::TransposedOperand;
    expect_first(localise_fault(s), {0, 0, 2, "down_proj.lora_B", "backward"});
}

// optimizer: AdamW without bias correction. Update 0 runs with lr 0 (the first warmup update), so
// nothing moves there; the first point is update 1's first AdamW step, after both micro-batches
TEST(Localise, OptimizerBiasCorrection) {
    Injection s;
    s.faults.adamw_no_bias_correction = true;
    expect_first(localise_fault(s), {1, -1, 0, "q_proj.lora_A", "optimizer"});
}

// data: one token of update 1's second micro-batch changed; update 0 is clean
TEST(Localise, DataTokenInUpdate1) {
    Injection s;
    s.perturb_token_update = 1;
    expect_first(localise_fault(s), {1, 1, -1, "tokens", "forward"});
}

// data: labels not shifted (hidden state t predicts token t): the head reads other rows
TEST(Localise, DataLabelShift) {
    Injection s;
    s.faults.label_shift = LabelShift::None;
    expect_first(localise_fault(s), {0, 0, -1, "final_norm", "forward"});
}

// adapter: k_proj runs with v_proj's A and B
TEST(Localise, AdapterOnWrongProjection) {
    Injection s;
    s.faults.k_proj_uses_v_adapter = true;
    expect_first(localise_fault(s), {0, 0, 0, "k_proj.lora_A.out", "forward"});
}

// LoRA scaling alpha instead of alpha / sqrt(r): base and A's output unchanged, the LoRA linear's output not
TEST(Localise, LoraScaling) {
    Injection s;
    s.faults.lora_scaling = LoraScaling::RawAlpha;
    expect_first(localise_fault(s), {0, 0, 0, "q_proj", "forward"});
}

// --update K: only that update's points; the perturbation of update 1 is invisible in update 0
TEST(Localise, OneUpdate) {
    Injection s;
    s.perturb_token_update = 1;
    const auto faulty = fingerprints(s, 2);
    const Localisation u0 = tandem::experiments::localise(faulty, clean(), "faulty", "clean", 0);
    EXPECT_FALSE(u0.diverged()) << u0.summary();
    EXPECT_EQ(u0.updates, std::vector<int64_t>{0});
    const Localisation u1 = tandem::experiments::localise(faulty, clean(), "faulty", "clean", 1);
    expect_first(u1, {1, 1, -1, "tokens", "forward"});
}

// Stored and read back through run.h5: localise_run on a file holding both legs' fingerprints
// writes /localisation/<a>~<b>, and the table names the point.
TEST(Localise, RunFileRoundTrip) {
    Injection s;
    s.backend = std::make_shared<SwigluPerturbed>(1, tiny_config(3).num_hidden_layers);
    const auto faulty = fingerprints(s, 2);
    const auto dir = tandem::test::fresh_dir("localise_run_file");
    const auto file = dir / "run.h5";
    {
        tandem::experiments::RunFileWriter w(file);
        w.create_leg("engine", {{"implementation", std::string("engine")}});
        w.create_leg("reference", {{"implementation", std::string("reference")}});
        w.replace_fingerprints("reference", clean());
        w.replace_fingerprints("engine", faulty);
        w.commit();
    }
    const Localisation l = tandem::experiments::localise_run(dir, std::nullopt, std::nullopt, true);
    EXPECT_EQ(l.leg_a, "engine");
    EXPECT_EQ(l.leg_b, "reference");
    expect_first(l, {0, 0, 1, "mlp_act", "forward"});
    tandem::experiments::RunFileReader r(file);
    const auto stored = r.localisation_points("engine", "reference");
    ASSERT_EQ(stored.size(), l.points.size());
    EXPECT_EQ(stored[*l.first].op, "mlp_act");
    EXPECT_DOUBLE_EQ(stored[*l.first].ratio, l.points[*l.first].ratio);
    const auto attrs = r.attributes("/localisation/engine~reference");
    EXPECT_EQ(std::get<std::string>(attrs.at("first_op")), "mlp_act");
    const auto table = tandem::experiments::localisation_table(l);
    bool marked = false;
    for (const auto& row : table.rows) marked = marked || (row[0].find("first over bound") != std::string::npos && row[4] == "mlp_act");
    EXPECT_TRUE(marked);
    EXPECT_THROW(tandem::experiments::localise_run(dir, std::pair<std::string, std::string>{"engine", "nope"}, std::nullopt, false),
                 tandem::Error);
}

// The evaluation observables compared: hand-built rows, differences recomputed here.
TEST(Observables, AdapterNormsAndProbesCompared) {
    using tandem::experiments::AdapterNormRow;
    using tandem::experiments::ProbeRow;
    std::vector<AdapterNormRow> a = {{2, 0, "q_proj", 1.0, 2.0, 3.0}, {2, 1, "down_proj", 1.0, 2.0, 4.0}};
    std::vector<AdapterNormRow> b = {{2, 0, "q_proj", 1.0, 2.0, 3.0}, {2, 1, "down_proj", 1.0, 2.5, 5.0}};
    ProbeRow pa, pb;
    pa.update = pb.update = 2;
    for (int k = 0; k < tandem::experiments::kProbeTopK; ++k) {
        pa.ids[size_t(k)] = k;
        pb.ids[size_t(k)] = k + 1;  // b's top-1 is a's second: top-1 differs, ids 1..31 shared
        pa.probs[size_t(k)] = 0.01 * (32 - k);
        pb.probs[size_t(k)] = 0.01 * (32 - k) + 0.001;
    }
    const auto c = tandem::experiments::compare_observables("a", a, {pa}, "b", b, {pb});
    ASSERT_EQ(c.rows.size(), 1u);
    const auto& r = c.rows[0];
    EXPECT_EQ(r.update, 2);
    EXPECT_EQ(r.slots, 2);
    EXPECT_DOUBLE_EQ(r.update_norm_a, 5.0);           // sqrt(9 + 16)
    EXPECT_DOUBLE_EQ(r.update_norm_b, std::sqrt(34.0));  // sqrt(9 + 25)
    EXPECT_DOUBLE_EQ(r.max_delta_rel, 0.2);           // |4 - 5| / 5
    EXPECT_EQ(r.max_delta_at, "layer 1 down_proj");
    EXPECT_DOUBLE_EQ(r.max_factor_rel, 0.2);          // |2 - 2.5| / 2.5
    EXPECT_EQ(r.probes, 1);
    EXPECT_EQ(r.top1_agree, 0);
    // id k (1..31): a has 0.01 (32 - k), b has it at rank k - 1: 0.01 (33 - k) + 0.001 -> |dp| = 0.011
    EXPECT_NEAR(r.max_prob_diff, 0.011, 1e-12);
}

// The fingerprints event: written by the engine leg, read back by the runner's trace; a malformed
// one is kept as a malformed line naming the field; a repeat of an update replaces it.
TEST(FingerprintsEvent, RoundTripAndMalformed) {
    using namespace tandem::experiments;
    const auto rows = fingerprints(Injection{}, 1);
    const nlohmann::json ev = fingerprints_event(0, rows);
    LegTrace t;
    nlohmann::json line = ev;
    line["v"] = 1;
    line["event"] = "fingerprints";
    EXPECT_EQ(apply_event_line(t, line.dump()), EventKind::Fingerprints);
    ASSERT_EQ(t.fingerprints.size(), rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(t.fingerprints[i].op, rows[i].op);
        EXPECT_EQ(t.fingerprints[i].norm, rows[i].norm);  // JSON keeps doubles exactly
        EXPECT_EQ(t.fingerprints[i].sketch, rows[i].sketch);
    }
    EXPECT_EQ(apply_event_line(t, line.dump()), EventKind::Fingerprints);  // repeated: replaced, not doubled
    EXPECT_EQ(t.fingerprints.size(), rows.size());
    nlohmann::json bad = line;
    bad["points"][3]["sketch"] = {1, 2, 3};
    EXPECT_EQ(apply_event_line(t, bad.dump()), EventKind::Malformed);
    ASSERT_FALSE(t.malformed.empty());
    EXPECT_NE(t.malformed.back().find("sketch"), std::string::npos) << t.malformed.back();
    EXPECT_NE(t.malformed.back().find("point 3"), std::string::npos) << t.malformed.back();
}

// The experiment file's `observe` field: which updates are observed, and clear errors.
TEST(ObserveField, UpdatesEveryAndErrors) {
    using namespace tandem::experiments;
    std::ifstream in(std::string(TANDEM_TEST_SOURCE_DIR) + "/experiments/clinical-tiny.json");
    nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_FALSE(parse_experiment(j, "x.json").observes_any());
    j["observe"] = {{"updates", {5, 1, 5}}, {"every", 10}};
    const ExperimentSpec s = parse_experiment(j, "x.json");
    EXPECT_EQ(s.observe_updates, (std::vector<int64_t>{1, 5}));
    for (int64_t u : {0, 1, 5, 10, 20}) EXPECT_TRUE(s.observes(u)) << u;
    for (int64_t u : {2, 6, 11}) EXPECT_FALSE(s.observes(u)) << u;
    EXPECT_EQ(parse_experiment(s.to_json(), "y.json").observe_updates, s.observe_updates);  // written back
    j["observe"] = {{"updates", {-1}}};
    try {
        parse_experiment(j, "x.json");
        FAIL() << "accepted a negative update";
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find("updates"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("x.json"), std::string::npos) << e.what();
    }
    j["observe"] = {{"every", 2}, {"evry", 3}};
    EXPECT_THROW(parse_experiment(j, "x.json"), tandem::Error);
}
