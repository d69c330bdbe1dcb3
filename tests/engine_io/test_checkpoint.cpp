// Checkpoint folders: bit-exact round trip, fallback past corrupted / uncommitted / truncated ones,
// clear errors when nothing verifies or the spec differs.
#include "tandem/engine/checkpoint.h"
#include "tandem/engine/generate.h"
#include "tandem/error.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace tandem::engine;
using nlohmann::json;

namespace {

const std::string kSpec = "aaaa1111";


Checkpoint make(int64_t update, uint64_t seed) {
    Checkpoint ck;
    ck.update = update;
    for (const char* proj : {"q_proj", "down_proj"}) {
        const std::string base = std::string("base_model.model.model.layers.0.x.") + proj;
        Tensor a({4, 8}), b({8, 4});
        fill_normal(a.ptr(), a.data.size(), 1.0, seed + 1);
        fill_normal(b.ptr(), b.data.size(), 1e-3, seed + 2);
        ck.optimizer["exp_avg." + base + ".lora_A.weight"] = a;
        ck.optimizer["exp_avg_sq." + base + ".lora_A.weight"] = b;
        ck.adapter[base + ".lora_A.weight"] = std::move(a);
        ck.adapter[base + ".lora_B.weight"] = std::move(b);
    }
    // Values whose bits must survive: signed zero, a subnormal, a NaN with a payload, infinity.
    ck.adapter.begin()->second.data[0] = -0.0f;
    ck.adapter.begin()->second.data[1] = std::numeric_limits<float>::denorm_min();
    ck.adapter.begin()->second.data[2] = std::bit_cast<float>(0x7FC01234u);
    ck.adapter.begin()->second.data[3] = -std::numeric_limits<float>::infinity();
    ck.state = {{"step", update}, {"spec_sha256", kSpec}, {"rng", {{"native_counter", "18446744073709551615"}}},
                {"data_cursor", {{"update", update}, {"micro_batch", 0}}}, {"device", "cpu"}};
    ck.adapter_config = json{{"peft_type", "LORA"}, {"r", 4}};
    return ck;
}

bool same_bits(const TensorMap& a, const TensorMap& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [n, t] : a) {
        const auto it = b.find(n);
        if (it == b.end() || it->second.shape != t.shape ||
            std::memcmp(it->second.ptr(), t.ptr(), t.data.size() * sizeof(float)) != 0)
            return false;
    }
    return true;
}

void flip_byte(const fs::path& f, uint64_t offset) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    io.read(&c, 1);
    c ^= 0x10;
    io.seekp(static_cast<std::streamoff>(offset));
    io.write(&c, 1);
}

using tandem::test::error_of;

}  // namespace

TEST(Checkpoint, RoundTripIsBitExact) {
    const fs::path leg = tandem::test::fresh_dir("roundtrip");
    const Checkpoint ck = make(7, 1);
    const fs::path dir = write_checkpoint(leg, ck);
    EXPECT_EQ(dir.filename(), "ckpt-000007");
    EXPECT_FALSE(fs::exists(leg / "ckpt-000007.tmp"));
    const LoadedCheckpoint got = load_latest_checkpoint(leg, kSpec);
    EXPECT_EQ(got.dir, dir);
    EXPECT_TRUE(got.skipped.empty());
    EXPECT_EQ(got.checkpoint.update, 7);
    EXPECT_TRUE(same_bits(got.checkpoint.adapter, ck.adapter));
    EXPECT_TRUE(same_bits(got.checkpoint.optimizer, ck.optimizer));
    EXPECT_EQ(got.checkpoint.state, ck.state);
    EXPECT_EQ(got.checkpoint.adapter_config, ck.adapter_config);
    EXPECT_EQ(got.manifest["format"], kCheckpointFormat);
    EXPECT_EQ(got.manifest["files"].size(), 4u);
}

TEST(Checkpoint, BriefFormSplitsAdapterFromOptimizerTensors) {
    const fs::path leg = tandem::test::fresh_dir("brief");
    const Checkpoint ck = make(3, 2);
    TensorMap all = ck.adapter;
    all.insert(ck.optimizer.begin(), ck.optimizer.end());
    write_checkpoint(leg, 3, all, ck.state);
    const auto got = load_latest_checkpoint(leg, kSpec).checkpoint;
    EXPECT_TRUE(same_bits(got.adapter, ck.adapter));
    EXPECT_TRUE(same_bits(got.optimizer, ck.optimizer));
}

TEST(Checkpoint, CorruptedFileFallsBackToThePreviousOne) {
    const fs::path leg = tandem::test::fresh_dir("corrupt");
    write_checkpoint(leg, make(1, 1));
    const fs::path newer = write_checkpoint(leg, make(2, 2));
    flip_byte(newer / "optimizer.safetensors", fs::file_size(newer / "optimizer.safetensors") - 3);
    const auto got = load_latest_checkpoint(leg, kSpec);
    EXPECT_EQ(got.checkpoint.update, 1);
    EXPECT_TRUE(same_bits(got.checkpoint.adapter, make(1, 1).adapter));
    ASSERT_EQ(got.skipped.size(), 1u);
    EXPECT_NE(got.skipped[0].find("ckpt-000002: file optimizer.safetensors fails its SHA-256"), std::string::npos)
        << got.skipped[0];
}

TEST(Checkpoint, TruncatedManifestFallsBack) {
    const fs::path leg = tandem::test::fresh_dir("truncated");
    write_checkpoint(leg, make(10, 1));
    const fs::path newer = write_checkpoint(leg, make(20, 2));
    fs::resize_file(newer / "manifest.json", fs::file_size(newer / "manifest.json") / 2);
    const auto got = load_latest_checkpoint(leg, kSpec);
    EXPECT_EQ(got.checkpoint.update, 10);
    ASSERT_EQ(got.skipped.size(), 1u);
    EXPECT_NE(got.skipped[0].find("manifest.json unreadable"), std::string::npos) << got.skipped[0];
}

TEST(Checkpoint, UncommittedAndTruncatedDataFallBack) {
    const fs::path leg = tandem::test::fresh_dir("uncommitted");
    write_checkpoint(leg, make(5, 1));
    // A crash before the manifest: the folder exists under its final name without manifest.json
    // (cannot happen with write_checkpoint, but a copy or a foreign tool could leave one).
    const fs::path torn = write_checkpoint(leg, make(6, 2));
    fs::remove(torn / "manifest.json");
    // A crash during writing: only the .tmp folder exists.
    fs::create_directories(leg / "ckpt-000009.tmp");
    const fs::path cut = write_checkpoint(leg, make(8, 3));
    fs::resize_file(cut / "adapter_model.safetensors", 100);
    const auto got = load_latest_checkpoint(leg, kSpec);
    EXPECT_EQ(got.checkpoint.update, 5);
    ASSERT_EQ(got.skipped.size(), 2u);
    EXPECT_NE(got.skipped[0].find("ckpt-000008: file adapter_model.safetensors has 100 bytes"), std::string::npos)
        << got.skipped[0];
    EXPECT_NE(got.skipped[1].find("ckpt-000006: no manifest.json"), std::string::npos) << got.skipped[1];
}

TEST(Checkpoint, NoCheckpointIsAClearError) {
    const fs::path leg = tandem::test::fresh_dir("none");
    EXPECT_EQ(error_of([&] { load_latest_checkpoint(leg, kSpec); }),
              leg.string() + ": no checkpoint to resume from (no ckpt-<update> folder)");
    EXPECT_FALSE(find_latest_checkpoint(leg / "absent", kSpec).has_value());
    const fs::path only = write_checkpoint(leg, make(4, 1));
    fs::remove(only / "state.json");
    const std::string msg = error_of([&] { load_latest_checkpoint(leg, kSpec); });
    EXPECT_NE(msg.find("no checkpoint to resume from; skipped "), std::string::npos) << msg;
    EXPECT_NE(msg.find("file state.json missing"), std::string::npos) << msg;
}

TEST(Checkpoint, RefusesACheckpointOfAnotherSpec) {
    const fs::path leg = tandem::test::fresh_dir("spec");
    write_checkpoint(leg, make(1, 1));
    const std::string msg = error_of([&] { load_latest_checkpoint(leg, "bbbb2222"); });
    EXPECT_NE(msg.find("ckpt-000001: checkpoint was written for experiment spec aaaa1111, not bbbb2222"), std::string::npos)
        << msg;
    Checkpoint no_spec = make(2, 1);
    no_spec.state.erase("spec_sha256");
    EXPECT_NE(error_of([&] { write_checkpoint(leg, no_spec); }).find("spec_sha256"), std::string::npos);
}

TEST(Checkpoint, RewritingAnUpdateReplacesIt) {
    const fs::path leg = tandem::test::fresh_dir("rewrite");
    write_checkpoint(leg, make(3, 1));
    write_checkpoint(leg, make(3, 9));
    const auto got = load_latest_checkpoint(leg, kSpec);
    EXPECT_TRUE(same_bits(got.checkpoint.adapter, make(3, 9).adapter));
    EXPECT_EQ(list_checkpoints(leg).size(), 1u);
    EXPECT_FALSE(fs::exists(leg / "ckpt-000003.old"));
}

TEST(Checkpoint, NewestIsByUpdateNumber) {
    const fs::path leg = tandem::test::fresh_dir("order");
    for (int64_t u : {2, 100, 30}) write_checkpoint(leg, make(u, static_cast<uint64_t>(u)));
    const auto l = list_checkpoints(leg);
    ASSERT_EQ(l.size(), 3u);
    EXPECT_EQ(l[0].filename(), "ckpt-000100");
    EXPECT_EQ(l[2].filename(), "ckpt-000002");
    EXPECT_EQ(load_latest_checkpoint(leg, kSpec).checkpoint.update, 100);
}
