#pragma once
// One micro-batch as every engine entry point takes it: right-padded token ids plus which
// positions are supervised labels.
#include <cstdint>
#include <vector>

namespace tandem::engine {

struct MicroBatch {
    int64_t batch = 0;  // sequences
    int64_t seq = 0;    // padded length (all sequences right-padded to it)
    std::vector<int32_t> ids;          // [batch*seq]; padding ids are arbitrary valid ids
    std::vector<uint8_t> supervised;   // [batch*seq]; 1 = token t of sequence b is a label (the
                                       // logits at t-1 predict it). Never at t = 0 or t >= length.
    std::vector<int32_t> lengths;      // [batch]; real tokens per sequence, 1..seq

    // Number of supervised labels. Throws tandem::Error naming the field when the batch is malformed
    // (sizes, lengths out of range, a label at t = 0 or in the padding, an id outside [0, vocab)).
    int64_t validate(int64_t vocab_size) const;
};

}  // namespace tandem::engine
