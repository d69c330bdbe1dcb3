#pragma once
// What a per-leg elementwise check (the optimizer step's replay, judge/series.h; the residual adds,
// judge/elementwise.h) keeps of the ratios it sees in update order: the first one off its bound and the
// largest. Internal to judge/.
#include <cstdint>

namespace tandem::experiments {

// `check` has first_off_update, max_ratio and max_update; `take` records the details of the ratio just
// seen. The details kept are those of the first check off the bound, else of the largest ratio so far.
template <class Check, class Take>
void note_ratio(Check& check, int64_t update, double ratio, bool off, Take&& take) {
    if (off && check.first_off_update < 0) {
        check.first_off_update = update;
        take();
    }
    if (check.max_update < 0 || !(ratio <= check.max_ratio)) {  // a NaN ratio is the largest
        check.max_ratio = ratio;
        check.max_update = update;
        if (check.first_off_update < 0) take();
    }
}

}  // namespace tandem::experiments
