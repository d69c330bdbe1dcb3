// Named assets ("assets:NAME", docs/decisions.md): lookup order, no fallback past an explicit folder, and
// one-line errors naming every folder tried.
#include "tandem/assets.h"
#include "tandem/error.h"

#include "test_support.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

namespace fs = std::filesystem;

namespace {

fs::path make_asset(const fs::path& root, const std::string& name) {
    const fs::path d = root / "assets" / name;
    fs::create_directories(d);
    std::ofstream(d / "config.json") << "{}";
    return d;
}

std::string error_of(const std::string& ref, const std::optional<fs::path>& flag) {
    try {
        tandem::resolve_asset_reference(ref, flag, "config.json");
    } catch (const tandem::Error& e) {
        return e.what();
    }
    return "";
}

struct NoAssetsEnv : ::testing::Test {
    void SetUp() override {
        if (const char* v = std::getenv("TANDEM_ASSETS")) saved = v;
        unsetenv("TANDEM_ASSETS");
    }
    void TearDown() override {
        if (saved) setenv("TANDEM_ASSETS", saved->c_str(), 1);
        else unsetenv("TANDEM_ASSETS");
    }
    std::optional<std::string> saved;
};

}  // namespace

TEST(AssetReference, WellFormedNames) {
    EXPECT_TRUE(tandem::is_asset_reference("assets:qwen3-tiny-clinical"));
    EXPECT_FALSE(tandem::is_asset_reference("/data/assets:x"));
    EXPECT_EQ(tandem::asset_reference_problem("assets:qwen3-tiny-clinical"), "");
    EXPECT_EQ(tandem::asset_reference_problem("assets:a_b.c-1"), "");
    EXPECT_NE(tandem::asset_reference_problem("assets:"), "");
    EXPECT_NE(tandem::asset_reference_problem("assets:../etc"), "");
    EXPECT_NE(tandem::asset_reference_problem("assets:a/b"), "");
    EXPECT_NE(tandem::asset_reference_problem("assets:.hidden"), "");
    EXPECT_NE(tandem::asset_reference_problem("assets:a b"), "");
}

TEST_F(NoAssetsEnv, FlagThenEnvironmentThenNoFallbackPastAnExplicitFolder) {
    const fs::path d = tandem::test::fresh_dir("assets");
    const fs::path flag_root = d / "flag", env_root = d / "env", empty_root = d / "empty";
    make_asset(flag_root, "base-a");
    make_asset(env_root, "base-a");
    make_asset(env_root, "base-b");
    fs::create_directories(empty_root);

    EXPECT_EQ(tandem::resolve_asset_reference("assets:base-a", flag_root, "config.json"), flag_root / "assets/base-a");
    setenv("TANDEM_ASSETS", env_root.c_str(), 1);
    EXPECT_EQ(tandem::resolve_asset_reference("assets:base-a", std::nullopt, "config.json"), env_root / "assets/base-a");
    // --assets wins over the environment, and a folder it names that lacks the asset is an error
    // (not a reason to take TANDEM_ASSETS' copy).
    const std::string e = error_of("assets:base-b", flag_root);
    EXPECT_NE(e.find((flag_root / "assets/base-b").string() + " (--assets)"), std::string::npos) << e;
    EXPECT_EQ(e.find(env_root.string()), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
    EXPECT_NE(e.find("assets:base-b"), std::string::npos) << e;
    // Same for TANDEM_ASSETS without a flag.
    setenv("TANDEM_ASSETS", empty_root.c_str(), 1);
    const std::string e2 = error_of("assets:base-a", std::nullopt);
    EXPECT_NE(e2.find((empty_root / "assets/base-a").string() + " (TANDEM_ASSETS)"), std::string::npos) << e2;
    // A folder without the required file does not count.
    fs::create_directories(empty_root / "assets/half");
    EXPECT_NE(error_of("assets:half", std::nullopt), "");
    // A malformed name never touches the file system.
    EXPECT_NE(error_of("assets:../flag/assets/base-a", flag_root).find("must use only"), std::string::npos);
    fs::remove_all(d);
}

TEST_F(NoAssetsEnv, WithoutAnExplicitFolderEveryDefaultPlaceIsNamed) {
    const std::string e = error_of("assets:no-such-base-xyz", std::nullopt);
    EXPECT_NE(e.find("../shared next to the checkout"), std::string::npos) << e;
    EXPECT_NE(e.find("installed package"), std::string::npos) << e;
    EXPECT_NE(e.find("--assets DIR"), std::string::npos) << e;
}
