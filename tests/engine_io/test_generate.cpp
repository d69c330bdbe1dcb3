// Seeded generators: the published SplitMix64 sequence, determinism, independence of threading,
// and the distributions' moments.
#include "tandem/engine/generate.h"
#include "tandem/engine/io.h"
#include "tandem/error.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

using namespace tandem::engine;

TEST(Generator, MatchesTheReferenceSplitMix64Sequence) {
    // SplitMix64 seeded with 1234567 (Vigna's splitmix64.c): the first five outputs.
    const uint64_t expected[] = {6457827717110365317ULL, 3203168211198807973ULL, 9817491932198370423ULL,
                                 4593380528125082431ULL, 16408922859458223821ULL};
    for (uint64_t k = 0; k < 5; ++k) EXPECT_EQ(generator_value(1234567, k), expected[k]) << k;
    EXPECT_EQ(fnv1a64(""), 0xCBF29CE484222325ULL);
    EXPECT_EQ(fnv1a64("a"), 0xAF63DC4C8601EC8CULL);  // FNV-1a 64 test vector
}

TEST(Generator, NormalIsIndependentOfLengthAndThreadSplit) {
    std::vector<float> big(3'000'001), small(1001);
    fill_normal(big.data(), big.size(), 0.02, 42);
    fill_normal(small.data(), small.size(), 0.02, 42);
    EXPECT_EQ(0, std::memcmp(big.data(), small.data(), small.size() * 4));
    double sum = 0, sq = 0;
    for (float v : big) {
        sum += v;
        sq += static_cast<double>(v) * v;
    }
    const double mean = sum / big.size(), sd = std::sqrt(sq / big.size() - mean * mean);
    EXPECT_NEAR(mean, 0.0, 5 * 0.02 / std::sqrt(big.size()));
    EXPECT_NEAR(sd, 0.02, 0.02 * 5 / std::sqrt(2.0 * big.size()));
}

TEST(Generator, UniformStaysInItsBoundsWithTheRightVariance) {
    std::vector<float> v(1'000'000);
    const double b = 1.0 / std::sqrt(1024.0);
    fill_uniform(v.data(), v.size(), -b, b, 7);
    double sq = 0;
    for (float x : v) {
        ASSERT_GE(x, -b);
        ASSERT_LE(x, b);
        sq += static_cast<double>(x) * x;
    }
    EXPECT_NEAR(sq / v.size(), b * b / 3, 0.01 * b * b / 3);
}

TEST(Generator, BaseAndAdapterAreDeterministicAndSeedDependent) {
    Qwen3Config c = Qwen3Config::named("tiny");
    c.vocab_size = 512;  // keep the test small
    const auto a = generate_base_weights(c, 1), b = generate_base_weights(c, 1), d = generate_base_weights(c, 2);
    check_tensor_set(a, expected_base_shapes(c), "generated");
    for (const auto& [n, t] : a) {
        ASSERT_EQ(t.data, b.at(n).data) << n;
        if (t.shape.size() == 1) {
            for (float x : t.data) ASSERT_EQ(x, 1.0f) << n;
        } else {
            ASSERT_NE(t.data, d.at(n).data) << n;
        }
    }
    // Two projections of the same shape get different streams.
    EXPECT_NE(a.at("model.layers.0.self_attn.k_proj.weight").data, a.at("model.layers.0.self_attn.v_proj.weight").data);

    LoraConfig l;
    l.rank = 4;
    const auto ad = generate_initial_adapter(c, l, 9);
    check_tensor_set(ad, expected_adapter_shapes(c, l), "adapter");
    for (const auto& [n, t] : ad) {
        if (n.find("lora_B") != std::string::npos) {
            for (float x : t.data) ASSERT_EQ(x, 0.0f) << n;
        } else {
            const double bound = 1.0 / std::sqrt(static_cast<double>(t.shape[1]));
            double mx = 0;
            for (float x : t.data) mx = std::max(mx, std::abs(static_cast<double>(x)));
            ASSERT_LE(mx, bound) << n;
            ASSERT_GT(mx, 0.5 * bound) << n;
        }
    }
    EXPECT_EQ(ad.at(peft_lora_name(1, "down_proj", 'A')).data, generate_initial_adapter(c, l, 9).at(peft_lora_name(1, "down_proj", 'A')).data);
}

// docs/leg-protocol.md, non-finite numbers: a NaN or an infinity in a base or adapter file is named at load, with the file
// and the tensor, instead of turning into a NaN loss (or an L2 digest no parser reads).
TEST(Generator, NonFiniteWeightsAreNamedAtLoad) {
    Qwen3Config c = Qwen3Config::named("tiny");
    c.vocab_size = 512;
    auto base = generate_base_weights(c, 1);
    base.at("model.layers.1.mlp.up_proj.weight").data[17] = std::nanf("");
    base.at("model.layers.1.mlp.up_proj.weight").data[40] = std::nanf("");
    base.at("model.norm.weight").data[3] = -std::numeric_limits<float>::infinity();
    const auto dir = tandem::test::fresh_dir("nonfinite-base");
    save_hf_checkpoint(dir / "base", c, base);
    try {
        load_hf_checkpoint(dir / "base");
        FAIL() << "a base holding NaN loaded";
    } catch (const tandem::Error& e) {
        // The first offending tensor in name order (the order both legs check in).
        EXPECT_EQ(std::string(e.what()), (dir / "base" / "model.safetensors").string() +
                                             ": tensor 'model.layers.1.mlp.up_proj.weight' holds non-finite values "
                                             "(2 NaN, 0 infinite of " +
                                             std::to_string(c.intermediate_size * c.hidden_size) + "; first at flat index 17)");
    }
    base.at("model.layers.1.mlp.up_proj.weight").data[17] = 0.5f;
    base.at("model.layers.1.mlp.up_proj.weight").data[40] = 0.5f;
    save_hf_checkpoint(dir / "base", c, base);
    try {
        load_hf_checkpoint(dir / "base");
        FAIL() << "a base holding -inf loaded";
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find("tensor 'model.norm.weight' holds non-finite values (0 NaN, 1 infinite of 128; "
                                             "first at flat index 3)"),
                  std::string::npos)
            << e.what();
    }
    LoraConfig l;
    l.rank = 2;
    auto adapter = generate_initial_adapter(c, l, 9);
    adapter.begin()->second.data[0] = std::numeric_limits<float>::infinity();
    save_peft_adapter(dir / "init", l, adapter, c);
    try {
        load_peft_adapter(dir / "init", c);
        FAIL() << "an adapter holding inf loaded";
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find("adapter_model.safetensors: tensor '" + adapter.begin()->first + "' holds non-finite"),
                  std::string::npos)
            << e.what();
    }
    std::filesystem::remove_all(dir);
}
