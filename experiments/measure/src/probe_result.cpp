// The probe record's lookups (probe_result.h).
#include "tandem/measure/probe_result.h"

namespace tandem::experiments {

std::string sgemm_where(const SgemmFigure& s) {
    if (s.threads == 0) return "device (cuBLAS)";
    return std::to_string(s.threads) + (s.threads == 1 ? " thread" : " threads");
}

const SgemmFigure* ProbeResult::sgemm_at(int threads) const {
    for (const auto& s : sgemm)
        if (s.threads == threads) return &s;
    return nullptr;
}

const ProbeDirection* ProbeResult::direction(const std::string& name) const {
    for (const auto& d : directions)
        if (d.name == name) return &d;
    return nullptr;
}

}  // namespace tandem::experiments
