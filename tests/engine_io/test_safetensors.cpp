// safetensors reader/writer: round trip, dtype conversion, and a corpus of malformed files that must
// each be rejected with one clear error naming the file (and the tensor where there is one).
#include "tandem/engine/safetensors.h"
#include "tandem/error.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace tandem::engine;

namespace {

fs::path temp_dir() {
    const fs::path d = fs::temp_directory_path() / ("tandem-st-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
}

// A file made of an 8-byte length, `header` as given, then `data`.
fs::path craft(const std::string& name, const std::string& header, const std::string& data,
               std::optional<uint64_t> length = std::nullopt) {
    const fs::path p = temp_dir() / name;
    std::ofstream out(p, std::ios::binary);
    const uint64_t n = length.value_or(header.size());
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
    return p;
}

std::string bytes(size_t n) { return std::string(n, '\x01'); }

// A malformed file of the corpus: <name>.safetensors crafted from `header`, `data_bytes` bytes of
// data and the length field `length` (the header's size when none).
struct Bad {
    const char* name;
    std::string header;
    size_t data_bytes;
    const char* must_mention;  // besides the file name
    std::optional<uint64_t> length = std::nullopt;
    fs::path make() const { return craft(std::string(name) + ".safetensors", header, bytes(data_bytes), length); }
};

}  // namespace

TEST(Safetensors, RoundTripIsBitExactWithMetadata) {
    TensorMap m;
    m["b.weight"] = Tensor({2, 3});
    m["a"] = Tensor({5});
    m["empty"] = Tensor({0, 4});
    for (size_t i = 0; i < 6; ++i) m["b.weight"].data[i] = std::nextafter(static_cast<float>(i) * -1.5f, 1e9f);
    m["a"].data = {1e-38f, -0.0f, 3.4e38f, std::numeric_limits<float>::denorm_min(), 7.0f};
    const fs::path p = temp_dir() / "rt.safetensors";
    write_safetensors(p, m, {{"format", "pt"}, {"note", "x"}});
    std::map<std::string, std::string> meta;
    const TensorMap back = read_safetensors(p, &meta);
    ASSERT_EQ(back.size(), 3u);
    for (const auto& [n, t] : m) {
        ASSERT_EQ(back.at(n).shape, t.shape) << n;
        if (!t.data.empty()) {
            ASSERT_EQ(0, std::memcmp(back.at(n).ptr(), t.ptr(), t.data.size() * 4)) << n;
        }
    }
    EXPECT_EQ(meta.at("format"), "pt");
    EXPECT_EQ(meta.at("note"), "x");
    const auto h = read_safetensors_header(p);
    EXPECT_EQ(h.data_start() % 8, 0u);  // 8-byte aligned data, like the reference writer
    EXPECT_EQ(h.file_bytes, fs::file_size(p));
}

TEST(Safetensors, HalfAndBfloatConvertExactly) {
    // F16: 1.0 (0x3C00), -2.0 (0xC000), smallest subnormal 2^-24 (0x0001), largest subnormal
    // (0x03FF), 65504 (0x7BFF), +inf (0x7C00), -0 (0x8000). BF16: 1.0 (0x3F80), -pi rounded (0xC049).
    const uint16_t f16[] = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x7BFF, 0x7C00, 0x8000};
    float out[7];
    convert_to_f32(DType::F16, reinterpret_cast<const unsigned char*>(f16), 7, out);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], -2.0f);
    EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
    EXPECT_EQ(out[3], 1023.0f * std::ldexp(1.0f, -24));
    EXPECT_EQ(out[4], 65504.0f);
    EXPECT_TRUE(std::isinf(out[5]) && out[5] > 0);
    EXPECT_TRUE(out[6] == 0.0f && std::signbit(out[6]));
    const uint16_t bf16[] = {0x3F80, 0xC049};
    convert_to_f32(DType::BF16, reinterpret_cast<const unsigned char*>(bf16), 2, out);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(std::bit_cast<uint32_t>(out[1]), 0xC0490000u);
}

TEST(Safetensors, MalformedCorpusIsRejectedWithAClearError) {
    const std::string ok_entry = R"("t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
    const std::vector<Bad> corpus = {
        {"length_past_end", "{" + ok_entry + "}", 8, "past the end", 4096},
        {"length_huge", "{}", 0, "100 MB", uint64_t{1} << 62},
        {"length_zero", "", 0, "too small", 0},
        {"not_json", "{not json", 0, "not valid JSON"},
        {"not_object", "[1,2]", 0, "'{'"},
        {"entry_not_object", R"({"t": 3})", 0, "'t'"},
        {"duplicate_name", "{" + ok_entry + ", " + ok_entry + "}", 8, "duplicate key 't'"},
        {"unknown_dtype", R"({"t": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8, "unsupported dtype"},
        {"negative_shape", R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, "not a non-negative integer"},
        {"shape_overflow", R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 4]}})", 4, "overflows"},
        {"offsets_reversed", R"({"t": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8, "end before"},
        {"offsets_out_of_bounds", R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8, "run past the data buffer"},
        {"wrong_byte_count", R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, "needs 3 x 4"},
        {"overlap", R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", 8, "overlaps"},
        {"hole", R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})", 12, "hole"},
        {"trailing_bytes", R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 12, "trailing"},
        {"misaligned", R"({"h": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}, "t": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})", 6, "not aligned"},
        {"offsets_not_pair", R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", 4, "two non-negative integers"},
        {"metadata_not_strings", R"({"__metadata__": {"format": 1}})", 0, "__metadata__"},
        {"invalid_utf8", std::string("{\"t\xff\": {}}"), 0, "not valid JSON"},
        {"unknown_field", R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}})", 4, "unknown field"},
    };
    ASSERT_GE(corpus.size(), 10u);
    // each file fails both readers with one line naming the file and what is wrong with it
    const auto expect_rejected = [](const std::string& name, const fs::path& p, const std::string& must_mention) {
        for (int via_header_only = 0; via_header_only < 2; ++via_header_only) {
            try {
                if (via_header_only) read_safetensors_header(p);
                else read_safetensors(p);
                ADD_FAILURE() << name << ": accepted";
            } catch (const tandem::Error& e) {
                const std::string msg = e.what();
                EXPECT_NE(msg.find(p.string()), std::string::npos) << name << ": " << msg;
                EXPECT_NE(msg.find(must_mention), std::string::npos) << name << ": " << msg;
                EXPECT_EQ(msg.find('\n'), std::string::npos) << name << ": " << msg;
            }
        }
    };
    const fs::path short_file = temp_dir() / "short.safetensors";  // shorter than its length field
    std::ofstream(short_file, std::ios::binary) << "abc";
    expect_rejected("short", short_file, "shorter than");
    for (const Bad& bad : corpus) expect_rejected(bad.name, bad.make(), bad.must_mention);
}

TEST(Safetensors, MissingFileNamesThePath) {
    try {
        read_safetensors("/nonexistent/x.safetensors");
        FAIL();
    } catch (const tandem::Error& e) {
        EXPECT_NE(std::string(e.what()).find("/nonexistent/x.safetensors"), std::string::npos);
    }
}

TEST(Safetensors, WriteRefusesTensorWhoseDataDoesNotMatchItsShape) {
    TensorMap m;
    m["t"] = Tensor({2, 2});
    m["t"].data.pop_back();
    EXPECT_THROW(write_safetensors(temp_dir() / "bad.safetensors", m), tandem::Error);
    EXPECT_FALSE(fs::exists(temp_dir() / "bad.safetensors"));
}
