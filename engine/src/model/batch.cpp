// MicroBatch validation: every engine entry point checks its input once, with a message naming the
// field, so a malformed plan fails loudly instead of reading out of bounds.
#include "tandem/engine/batch.h"

#include <string>

#include "tandem/error.h"

namespace tandem::engine {

int64_t MicroBatch::validate(int64_t vocab_size) const {
    const auto where = [](int64_t b, int64_t t) {
        return "sequence " + std::to_string(b) + " position " + std::to_string(t);
    };
    if (batch <= 0 || seq <= 0)
        throw Error("micro-batch: batch and seq must be positive (got " + std::to_string(batch) + " x " +
                    std::to_string(seq) + ")");
    const auto n = static_cast<size_t>(batch * seq);
    if (ids.size() != n) throw Error("micro-batch: ids has " + std::to_string(ids.size()) + " entries, expected " + std::to_string(n));
    if (supervised.size() != n)
        throw Error("micro-batch: supervised has " + std::to_string(supervised.size()) + " entries, expected " +
                    std::to_string(n));
    if (lengths.size() != static_cast<size_t>(batch))
        throw Error("micro-batch: lengths has " + std::to_string(lengths.size()) + " entries, expected " +
                    std::to_string(batch));
    int64_t count = 0;
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = lengths[size_t(b)];
        if (len < 1 || len > seq)
            throw Error("micro-batch: lengths[" + std::to_string(b) + "] = " + std::to_string(len) + " outside [1, " +
                        std::to_string(seq) + "]");
        for (int64_t t = 0; t < seq; ++t) {
            const size_t i = size_t(b * seq + t);
            if (ids[i] < 0 || ids[i] >= vocab_size)
                throw Error("micro-batch: token id " + std::to_string(ids[i]) + " at " + where(b, t) + " outside [0, " +
                            std::to_string(vocab_size) + ")");
            if (!supervised[i]) continue;
            if (t == 0) throw Error("micro-batch: label at " + where(b, t) + " has no preceding token to predict it");
            if (t >= len) throw Error("micro-batch: label at " + where(b, t) + " lies in the padding");
            ++count;
        }
    }
    return count;
}

}  // namespace tandem::engine
