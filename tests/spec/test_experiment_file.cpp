// Experiment files: the shipped ones parse; invalid fields are named in the error.
#include "tandem/error.h"
#include "tandem/spec/experiment.h"

#include <gtest/gtest.h>

#include "test_support.h"

using namespace tandem::experiments;
using nlohmann::json;

namespace {
json minimal() { return json{{"name", "x"}, {"model", {{"config", "tiny"}}}}; }

// The message of the error parsing gives, "" when it parses.
std::string parse_error(const std::function<void()>& parse) {
    const std::string e = tandem::test::error_of(parse);
    return e == "<no error>" ? "" : e;
}

std::string error_of(const json& j) {
    return parse_error([&] { parse_experiment(j, "experiments/x.json"); });
}

std::string text_error_of(const std::string& text) {
    return parse_error([&] { parse_experiment_text(text, "experiments/x.json"); });
}
}  // namespace

TEST(ExperimentFile, ShippedFilesParseAndResolve) {
    for (const char* f : {"clinical-tiny.json", "clinical-tiny-random.json", "clinical-qwen3-0.6b.json"}) {
        ExperimentSpec s = load_experiment(std::string(TANDEM_TEST_SOURCE_DIR) + "/experiments/" + f);
        EXPECT_FALSE(s.name.empty());
        EXPECT_EQ(s.lora_targets.size(), 7u);
        // Resolving twice gives the same spec and hash.
        ExperimentSpec again = parse_experiment(s.to_json(), "resolved");
        EXPECT_EQ(again.sha256(), s.sha256());
    }
    ExperimentSpec paper = load_experiment(std::string(TANDEM_TEST_SOURCE_DIR) + "/experiments/clinical-qwen3-0.6b.json");
    EXPECT_EQ(paper.lora_rank, 16);
    EXPECT_DOUBLE_EQ(paper.lora_alpha, 32.0);
    EXPECT_TRUE(paper.lora_use_rslora);
    EXPECT_EQ(paper.micro_batch * paper.accumulation, 16);
    EXPECT_EQ(paper.max_len, 512);
    EXPECT_EQ(paper.eval_interval, 250);
    EXPECT_EQ(paper.eval_prefix, 512);
}

TEST(ExperimentFile, DefaultsFillTheRecipe) {
    ExperimentSpec s = parse_experiment(minimal(), "x");
    EXPECT_DOUBLE_EQ(s.lr, 1e-4);
    EXPECT_DOUBLE_EQ(s.clip, 1.0);
    EXPECT_EQ(s.dropout_masks, "shared");
    EXPECT_EQ(s.leg_setting("engine", "template"), "qwen3");
}

TEST(ExperimentFile, ErrorsNameTheField) {
    json j = minimal();
    j["lora"] = {{"rank", 0}};
    EXPECT_EQ(error_of(j), "experiments/x.json: field lora.rank: must be a positive integer");
    j = minimal();
    j["lora"] = {{"rank", "16"}};
    EXPECT_EQ(error_of(j), "experiments/x.json: field lora.rank: must be a positive integer");
    j = minimal();
    j["lora"] = {{"targets", {"q_proj", "qq_proj"}}};
    EXPECT_NE(error_of(j).find("field lora.targets: unknown entry 'qq_proj'"), std::string::npos);
    j = minimal();
    j["dropout_masks"] = "random";
    EXPECT_EQ(error_of(j), "experiments/x.json: field dropout_masks: must be one of native|shared, not 'random'");
    j = minimal();
    j["batch"] = {{"micro_batch", 2}, {"acumulation", 8}};
    EXPECT_EQ(error_of(j), "experiments/x.json: field batch.acumulation: unknown field");
    j = minimal();
    j.erase("model");
    EXPECT_EQ(error_of(j), "experiments/x.json: field model: is required");
    j = minimal();
    j["model"] = {{"config", "tiny"}, {"base", "/x"}};
    EXPECT_NE(error_of(j).find("field model: needs exactly one of"), std::string::npos);
    j = minimal();
    j["overrides"] = {{"engine", {{"template", "llama"}}}};
    EXPECT_NE(error_of(j).find("field overrides.engine.template: must be one of qwen3|chatml"), std::string::npos);
    j = minimal();
    j["corpus"] = {{"heldout_fraction", 1.5}};
    EXPECT_EQ(error_of(j), "experiments/x.json: field corpus.heldout_fraction: must be in (0, 1)");
}

TEST(ExperimentFile, OverridesApplyPerLeg) {
    json j = minimal();
    j["overrides"] = {{"engine", {{"template", "chatml"}}}};
    ExperimentSpec s = parse_experiment(j, "x");
    EXPECT_EQ(s.leg_setting("engine", "template"), "chatml");
    EXPECT_EQ(s.leg_setting("reference", "template"), "qwen3");
}

// Checks that need only the experiment run when it is read, before any run folder (docs/decisions.md
// "Validation before a run folder").
TEST(ExperimentFile, LimitsTheRunImposesAreCheckedWhenRead) {
    json j = minimal();
    j["overrides"] = {{"engin", {{"template", "chatml"}}}};
    EXPECT_EQ(error_of(j).rfind("experiments/x.json: field overrides.engin: 'engin' is not a leg the experiment defines nor a leg kind (", 0), 0u)
        << error_of(j);
    j["legs"] = {{"engin", {{"implementation", "engine"}}}};
    EXPECT_EQ(error_of(j), "");  // a leg the experiment defines may have overrides
    j = minimal();
    j["batch"] = {{"max_updates", 3}};
    j["observe"] = {{"updates", {0, 3}}};
    EXPECT_EQ(error_of(j), "experiments/x.json: field observe.updates: update 3 is beyond the plan (batch.max_updates 3: updates 0-2)");
    j["observe"] = {{"updates", {2}}};
    EXPECT_EQ(error_of(j), "");
    j = minimal();
    j["description"] = std::string(kMaxSpecJsonBytes, 'd');
    EXPECT_EQ(error_of(j).rfind("experiments/x.json: field description: the experiment is ", 0), 0u) << error_of(j);
    j["description"] = std::string(kMaxSpecJsonBytes - 2000, 'd');
    EXPECT_EQ(error_of(j), "");
}

// docs/run-folder.md: a null must not fall back to the default, a repeated key must not keep its
// last value silently.
TEST(ExperimentFile, NullIsAnErrorNotTheDefault) {
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "optimizer": {"lr": null}})"),
              "experiments/x.json: field optimizer.lr: is null (give a value, or leave the field out to use its default)");
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "lora": null})"),
              "experiments/x.json: field lora: is null (give a value, or leave the field out to use its default)");
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "clip": null})"),
              "experiments/x.json: field clip: is null (give a value, or leave the field out to use its default)");
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "overrides": {"engine": {"plan": null}}})"),
              "experiments/x.json: field overrides.engine.plan: is null (give a value, or leave the field out to use its default)");
    EXPECT_EQ(text_error_of(R"({"name": null, "model": {"config": "tiny"}})"),
              "experiments/x.json: field name: is null (give a value, or leave the field out to use its default)");
}

TEST(ExperimentFile, DuplicateKeysAreNamed) {
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "optimizer": {"lr": 1e-4, "lr": 5}})"),
              "experiments/x.json: field optimizer.lr: duplicate key (an object may name a field once)");
    EXPECT_EQ(text_error_of(R"({"name": "x", "name": "y", "model": {"config": "tiny"}})"),
              "experiments/x.json: field name: duplicate key (an object may name a field once)");
    // Inside an inline model config (an object inside the model object) and after an array.
    EXPECT_EQ(text_error_of(R"({"name": "x", "lora": {"targets": ["q_proj", "v_proj"], "rank": 4},
                              "model": {"config": {"hidden_size": 64, "hidden_size": 128}}})"),
              "experiments/x.json: field model.config.hidden_size: duplicate key (an object may name a field once)");
    // The same key in two different objects is fine.
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "eval": {"interval": 5},
                              "checkpoint": {"interval": 5}})"),
              "");
}

TEST(ExperimentFile, NumbersBeyondRangeNameTheField) {
    // nlohmann-json throws a bare out_of_range for 1e400; it must name the file and the field.
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "optimizer": {"lr": 1e400}})"),
              "experiments/x.json: field optimizer.lr: number out of range (1e400 does not fit a double)");
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "lora": {"targets": ["q_proj"], "alpha": -1e999}})"),
              "experiments/x.json: field lora.alpha: number out of range (-1e999 does not fit a double)");
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "seed": 18446744073709551615})"),
              "experiments/x.json: field seed: is too large (at most 9223372036854775807)");
    // A syntax error says where it happened.
    EXPECT_EQ(text_error_of(R"({"name": "x", "model": {"config": "tiny"}, "batch": {"epochs": 1,}})").rfind(
                  "experiments/x.json: not valid JSON (near field batch.epochs): parse error at line 1", 0),
              0u);
}

TEST(ExperimentFile, LegSlurmOptionsAndDataParallelDevices) {
    json j = minimal();
    j["legs"] = {{"engine", {{"implementation", "engine"}}},
                 {"reference", {{"implementation", "reference"},
                                {"devices", {"cuda:0", "cuda:1"}},
                                {"slurm", {{"partition", "gpu"}, {"gres", "gpu:2"}, {"time", "02:00:00"}, {"account", "lab"},
                                           {"extra", {"--qos=short"}}, {"setup", {"module load cuda/12.4"}}}}}}};
    ExperimentSpec s = parse_experiment(j, "x");
    const auto* ref = s.leg_definition("reference");
    ASSERT_NE(ref, nullptr);
    EXPECT_EQ(ref->devices, (std::vector<std::string>{"cuda:0", "cuda:1"}));
    EXPECT_EQ(ref->slurm.partition, "gpu");
    EXPECT_EQ(ref->slurm.gres, "gpu:2");
    EXPECT_EQ(ref->slurm.time, "02:00:00");
    EXPECT_EQ(ref->slurm.account, "lab");
    EXPECT_EQ(ref->slurm.extra, (std::vector<std::string>{"--qos=short"}));
    EXPECT_EQ(ref->slurm.setup, (std::vector<std::string>{"module load cuda/12.4"}));
    EXPECT_TRUE(s.leg_definition("engine")->slurm.empty());
    // The resolved spec keeps them (and resolves to itself).
    EXPECT_EQ(parse_experiment(s.to_json(), "resolved").sha256(), s.sha256());
    EXPECT_EQ(s.to_json()["legs"]["reference"]["slurm"]["gres"], "gpu:2");
    // A leg without them resolves as before they existed, so its spec hash is unchanged.
    EXPECT_EQ(s.to_json()["legs"]["engine"], (json{{"implementation", "engine"}}));
    json plain = minimal();
    plain["legs"] = {{"engine", {{"implementation", "engine"}}}};
    EXPECT_EQ(parse_experiment(plain, "x").to_json()["legs"].dump(), R"({"engine":{"implementation":"engine"}})");
}

TEST(ExperimentFile, BadDevicesAndSlurmFieldsAreNamed) {
    auto with_leg = [](json leg) {
        json j = minimal();
        j["legs"] = {{"ref", leg}};
        return error_of(j);
    };
    EXPECT_NE(with_leg({{"implementation", "engine"}, {"devices", {"cpu", "cpu"}}})
                  .find("field legs.ref.devices: is only for implementation reference"), std::string::npos);
    EXPECT_NE(with_leg({{"implementation", "reference"}, {"devices", {"cpu"}}}).find("field legs.ref.devices: must be a list of at least two"),
              std::string::npos);
    EXPECT_NE(with_leg({{"implementation", "reference"}, {"devices", {"cpu", "cuda:0"}}}).find("mixes cpu and cuda"), std::string::npos);
    EXPECT_NE(with_leg({{"implementation", "reference"}, {"devices", {"cuda:1", "cuda:1"}}}).find("'cuda:1' given twice"),
              std::string::npos);
    EXPECT_NE(with_leg({{"implementation", "reference"}, {"devices", {"cpu", "tpu"}}}).find("'tpu' is not cpu or cuda:N"),
              std::string::npos);
    EXPECT_NE(with_leg({{"implementation", "reference"}, {"device", "cpu"}, {"devices", {"cpu", "cpu"}}})
                  .find("give device or devices, not both"), std::string::npos);
    EXPECT_EQ(with_leg({{"implementation", "reference"}, {"slurm", {{"partiton", "gpu"}}}}),
              "experiments/x.json: field legs.ref.slurm.partiton: unknown field");
    EXPECT_NE(with_leg({{"implementation", "reference"}, {"slurm", {{"extra", "--qos=short"}}}})
                  .find("field legs.ref.slurm.extra: must be a list of strings"), std::string::npos);
    EXPECT_NE(with_leg({{"implementation", "reference"}, {"slurm", {{"time", "1:00\n#SBATCH --x"}}}})
                  .find("field legs.ref.slurm.time: must be one line"), std::string::npos);
}

// docs/decisions.md: the main job names the shipped pretrained base; the random-base copy keeps everything else.
TEST(ExperimentFile, ShippedBaseByAssetName) {
    const std::string dir = std::string(TANDEM_TEST_SOURCE_DIR) + "/experiments/";
    ExperimentSpec tiny = load_experiment(dir + "clinical-tiny.json");
    ExperimentSpec random = load_experiment(dir + "clinical-tiny-random.json");
    EXPECT_EQ(tiny.model_base, "assets:qwen3-tiny-clinical");
    EXPECT_EQ(random.model_config, "tiny");
    EXPECT_TRUE(random.model_base.empty());
    // The same run otherwise: equal resolved specs once name, description and model are aligned.
    json a = tiny.to_json(), b = random.to_json();
    for (json* j : {&a, &b}) {
        j->erase("name");
        j->erase("description");
        j->erase("model");
    }
    EXPECT_EQ(a, b);

    json j = minimal();
    j["model"] = {{"base", "assets:qwen3-tiny-clinical"}};
    EXPECT_EQ(parse_experiment(j, "x").model_base, "assets:qwen3-tiny-clinical");
    j["model"] = {{"base", "assets:../../etc"}};
    EXPECT_NE(error_of(j).find("experiments/x.json: field model.base: asset name '../../etc' must use only"),
              std::string::npos)
        << error_of(j);
    j["model"] = {{"base", "assets:"}};
    EXPECT_EQ(error_of(j), "experiments/x.json: field model.base: names no asset after 'assets:'");
}

TEST(ExperimentFile, SeedsDefaultToTheSeedAndKeepTheHashUnlessOneDiffers) {
    json j = minimal();
    j["seed"] = 7;
    ExperimentSpec plain = parse_experiment(j, "x");
    for (const auto& n : ExperimentSpec::seed_names()) EXPECT_EQ(plain.seed_of(n), 7u) << n;
    EXPECT_FALSE(plain.to_json().contains("seeds"));  // specs written before `seeds` keep their hash
    // Seeds given, all equal to `seed`: the same resolved spec, the same hash.
    j["seeds"] = {{"split", 7}, {"dropout", 7}};
    ExperimentSpec same = parse_experiment(j, "x");
    EXPECT_EQ(same.to_json().dump(), plain.to_json().dump());
    EXPECT_EQ(same.sha256(), plain.sha256());
    // One differs: every seed is written, the hash changes, the envelope key does not.
    j["seeds"] = {{"dropout", 8}};
    ExperimentSpec varied = parse_experiment(j, "x");
    EXPECT_EQ(varied.seeds.dropout, 8u);
    EXPECT_EQ(varied.seeds.plan, 7u);
    EXPECT_EQ(varied.to_json()["seeds"], (json{{"split", 7}, {"base", 7}, {"adapter", 7}, {"plan", 7}, {"dropout", 8}}));
    EXPECT_NE(varied.sha256(), plain.sha256());
    EXPECT_EQ(varied.sha256_without_seeds(), plain.sha256_without_seeds());
    ExperimentSpec again = parse_experiment(varied.to_json(), "resolved");
    EXPECT_EQ(again.sha256(), varied.sha256());
    // What does not change the distribution of the numbers keeps the envelope key: the name, the
    // gate, checkpoints, the mask generator (shared or native: the same Bernoulli masks).
    json k = j;
    k["name"] = "y";
    k["gate"] = {{"envelope", "stop"}};
    k["checkpoint"] = {{"interval", 5}};
    k["dropout_masks"] = "native";
    k["overrides"] = {{"engine", {{"dropout_masks", "native"}}}};
    EXPECT_EQ(parse_experiment(k, "x").sha256_without_seeds(), plain.sha256_without_seeds());
    // What changes them changes it.
    for (auto change : {json{{"lora", {{"rank", 8}}}}, json{{"plan", "native"}}, json{{"optimizer", {{"lr", 2e-4}}}},
                        json{{"overrides", {{"engine", {{"template", "chatml"}}}}}}}) {
        json c = j;
        c.update(change);
        EXPECT_NE(parse_experiment(c, "x").sha256_without_seeds(), plain.sha256_without_seeds()) << change.dump();
    }
    // Bad seeds are named.
    j = minimal();
    j["seeds"] = {{"dropout", -1}};
    EXPECT_EQ(error_of(j), "experiments/x.json: field seeds.dropout: must be a non-negative integer");
    j["seeds"] = {{"mask", 1}};
    EXPECT_EQ(error_of(j), "experiments/x.json: field seeds.mask: unknown field");
    j["seeds"] = 5;
    EXPECT_EQ(error_of(j), "experiments/x.json: field seeds: must be an object");
}
