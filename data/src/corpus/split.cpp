// The train / held-out split and the eval prefix (corpus.h).
#include "tandem/data/corpus.h"

#include "tandem/error.h"
#include "tandem/sha256.h"

#include <cmath>
#include <string>

namespace tandem::data {

bool is_heldout(const std::string& record_id, uint64_t seed, double heldout_fraction) {
    const std::string digest = sha256_hex(std::to_string(seed) + ":" + record_id);
    // First 16 hex digits = first 8 bytes, big-endian.
    const uint64_t u = std::stoull(digest.substr(0, 16), nullptr, 16);
    // Held out when u / 2^64 < fraction, compared exactly in integers: fraction * 2^64 is an exact
    // double (a power-of-two scaling), below 2^64 it is at most 2^64 - 2048, and for an integer u,
    // u < d  <=>  u < ceil(d). (Python: int(h[:16], 16) < fraction * 2**64, also exact.)
    if (!(heldout_fraction > 0.0)) return false;  // also NaN
    if (heldout_fraction >= 1.0) return true;
    const double scaled = std::ceil(std::ldexp(heldout_fraction, 64));
    return u < static_cast<uint64_t>(scaled);
}

Split split_records(const std::vector<Record>& records, uint64_t seed, double heldout_fraction) {
    if (!(heldout_fraction >= 0.0 && heldout_fraction <= 1.0))
        throw Error("held-out fraction " + std::to_string(heldout_fraction) + " is not within [0, 1]");
    Split s;
    s.seed = seed;
    s.heldout_fraction = heldout_fraction;
    for (size_t i = 0; i < records.size(); ++i)
        (is_heldout(records[i].id, seed, heldout_fraction) ? s.heldout : s.train).push_back(i);
    return s;
}

std::vector<size_t> eval_prefix(const Split& split, size_t n) {
    if (split.heldout.size() < n)
        throw Error("eval prefix of " + std::to_string(n) + " records asked for, but only " +
                    std::to_string(split.heldout.size()) + " records are held out");
    return std::vector<size_t>(split.heldout.begin(), split.heldout.begin() + static_cast<std::ptrdiff_t>(n));
}

}  // namespace tandem::data
