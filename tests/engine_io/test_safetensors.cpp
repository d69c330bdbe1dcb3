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

struct Bad {
    const char* name;
    std::function<fs::path()> make;
    const char* must_mention;  // besides the file name
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
        {"short", [] {
             const fs::path p = temp_dir() / "short.safetensors";
             std::ofstream(p, std::ios::binary) << "abc";
             return p;
         }, "shorter than"},
        {"length_past_end", [&] { return craft("length_past_end.safetensors", "{" + ok_entry + "}", bytes(8), 4096); }, "past the end"},
        {"length_huge", [] { return craft("length_huge.safetensors", "{}", "", uint64_t{1} << 62); }, "100 MB"},
        {"length_zero", [] { return craft("length_zero.safetensors", "", "", 0); }, "too small"},
        {"not_json", [] { return craft("not_json.safetensors", "{not json", ""); }, "not valid JSON"},
        {"not_object", [] { return craft("not_object.safetensors", "[1,2]", ""); }, "'{'"},
        {"entry_not_object", [] { return craft("entry_not_object.safetensors", R"({"t": 3})", ""); }, "'t'"},
        {"duplicate_name", [&] {
             return craft("duplicate_name.safetensors", "{" + ok_entry + ", " + ok_entry + "}", bytes(8));
         }, "duplicate key 't'"},
        {"unknown_dtype", [] {
             return craft("unknown_dtype.safetensors", R"({"t": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", bytes(8));
         }, "unsupported dtype"},
        {"negative_shape", [] {
             return craft("negative_shape.safetensors", R"({"t": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", bytes(4));
         }, "not a non-negative integer"},
        {"shape_overflow", [] {
             return craft("shape_overflow.safetensors",
                          R"({"t": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 4]}})", bytes(4));
         }, "overflows"},
        {"offsets_reversed", [] {
             return craft("offsets_reversed.safetensors", R"({"t": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", bytes(8));
         }, "end before"},
        {"offsets_out_of_bounds", [] {
             return craft("offsets_out_of_bounds.safetensors", R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", bytes(8));
         }, "run past the data buffer"},
        {"wrong_byte_count", [] {
             return craft("wrong_byte_count.safetensors", R"({"t": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", bytes(8));
         }, "needs 3 x 4"},
        {"overlap", [] {
             return craft("overlap.safetensors",
                          R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                          bytes(8));
         }, "overlaps"},
        {"hole", [] {
             return craft("hole.safetensors",
                          R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                          bytes(12));
         }, "hole"},
        {"trailing_bytes", [] {
             return craft("trailing_bytes.safetensors", R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", bytes(12));
         }, "trailing"},
        {"misaligned", [] {
             return craft("misaligned.safetensors",
                          R"({"h": {"dtype": "F16", "shape": [1], "data_offsets": [0, 2]}, "t": {"dtype": "F32", "shape": [1], "data_offsets": [2, 6]}})",
                          bytes(6));
         }, "not aligned"},
        {"offsets_not_pair", [] {
             return craft("offsets_not_pair.safetensors", R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})", bytes(4));
         }, "two non-negative integers"},
        {"metadata_not_strings", [] {
             return craft("metadata_not_strings.safetensors", R"({"__metadata__": {"format": 1}})", "");
         }, "__metadata__"},
        {"invalid_utf8", [] {
             return craft("invalid_utf8.safetensors", std::string("{\"t\xff\": {}}"), "");
         }, "not valid JSON"},
        {"unknown_field", [] {
             return craft("unknown_field.safetensors",
                          R"({"t": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}})", bytes(4));
         }, "unknown field"},
    };
    ASSERT_GE(corpus.size(), 10u);
    for (const auto& bad : corpus) {
        const fs::path p = bad.make();
        for (int via_header_only = 0; via_header_only < 2; ++via_header_only) {
            try {
                if (via_header_only) read_safetensors_header(p);
                else read_safetensors(p);
                ADD_FAILURE() << bad.name << ": accepted";
            } catch (const tandem::Error& e) {
                const std::string msg = e.what();
                EXPECT_NE(msg.find(p.string()), std::string::npos) << bad.name << ": " << msg;
                EXPECT_NE(msg.find(bad.must_mention), std::string::npos) << bad.name << ": " << msg;
                EXPECT_EQ(msg.find('\n'), std::string::npos) << bad.name << ": " << msg;
            }
        }
    }
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
