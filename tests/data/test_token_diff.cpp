// Token diff (first mismatch + window) and the supervision rule on hand-made token spans.
#include "tandem/data/supervision.h"
#include "tandem/data/token_diff.h"

#include <gtest/gtest.h>

using namespace tandem::data;

namespace {
TokenSequence seq(std::vector<int32_t> ids, std::vector<uint8_t> sup = {}) {
    TokenSequence s;
    s.ids = std::move(ids);
    s.supervised = std::move(sup);
    return s;
}
}  // namespace

TEST(TokenDiff, Identical) {
    const auto d = diff_tokens(seq({1, 2, 3}), seq({1, 2, 3}), 2);
    EXPECT_TRUE(d.identical);
    EXPECT_FALSE(d.first_mismatch);
    EXPECT_EQ(d.common_prefix, 3u);
    EXPECT_EQ(d.window_end, 2u);
}

TEST(TokenDiff, FirstIdMismatchAndWindow) {
    std::vector<int32_t> a(30), b(30);
    for (int i = 0; i < 30; ++i) a[i] = b[i] = i;
    b[12] = 99;
    b[20] = 98;
    const auto d = diff_tokens(seq(a), seq(b), 4);
    EXPECT_FALSE(d.identical);
    EXPECT_EQ(d.first_mismatch, 12u);
    EXPECT_EQ(d.what, "id");
    EXPECT_EQ(d.window_begin, 8u);
    EXPECT_EQ(d.window_end, 17u);
    EXPECT_EQ(d.id_mismatches, 2u);
    // Window clamped at both ends.
    b[12] = 12;
    b[20] = 20;
    b[1] = 77;
    const auto e = diff_tokens(seq(a), seq(b), 4);
    EXPECT_EQ(e.first_mismatch, 1u);
    EXPECT_EQ(e.window_begin, 0u);
    EXPECT_EQ(e.window_end, 6u);
}

TEST(TokenDiff, SupervisionAndLength) {
    const auto d = diff_tokens(seq({1, 2, 3, 4}, {0, 0, 1, 1}), seq({1, 2, 3, 4}, {0, 1, 1, 1}));
    EXPECT_EQ(d.first_mismatch, 1u);
    EXPECT_EQ(d.what, "supervision");
    // Unknown supervision on one side: only ids compared.
    EXPECT_TRUE(diff_tokens(seq({1, 2}, {0, 1}), seq({1, 2})).identical);
    const auto l = diff_tokens(seq({1, 2, 3, 4, 5}), seq({1, 2, 3}), 1);
    EXPECT_EQ(l.first_mismatch, 3u);
    EXPECT_EQ(l.what, "length");
    EXPECT_EQ(l.window_begin, 2u);
    EXPECT_EQ(l.window_end, 5u);
}

TEST(SupervisionSpan, BoundaryAndFirstImEndAfterIt) {
    // ids: 10 tokens; <|im_end|> = 7 appears in the prompt (index 2) and twice after it.
    const std::vector<int32_t> ids = {1, 2, 7, 3, 4, 5, 6, 7, 8, 7};
    const std::vector<size_t> begin = {0, 3, 6, 16, 20, 24, 30, 31, 41, 42};
    const auto s = supervision_span(ids, begin, 20, 7);
    EXPECT_EQ(s.boundary, 4u);  // first token starting at byte >= 20
    EXPECT_EQ(s.end, 8u);       // through the first <|im_end|> at/after the boundary (index 7)
    EXPECT_THROW(supervision_span(ids, begin, 50, 7), RecordRejected);
    const std::vector<int32_t> no_end = {1, 2, 3, 4};
    EXPECT_THROW(supervision_span(no_end, {0, 1, 2, 3}, 1, 7), RecordRejected);
}
