#pragma once
// A finished leg for the comparison suites (tests/compare, tests/spec): L2 digests and L3 records
// present — one digest and one record of three tokens, the first the prompt — so two such legs with
// the same digest and record pass L2 and L3; each test adds the series it judges.
#include "tandem/compare/leg_data.h"

#include <string>
#include <utility>

namespace tandem::test {

inline experiments::LegData finished_leg(const std::string& name, const std::string& implementation,
                                         experiments::TensorDigest digest, const std::string& record_id) {
    experiments::LegData l;
    l.name = name;
    l.implementation = implementation;
    l.status = "finished";
    l.trace.has_l2 = l.trace.has_l3 = true;
    l.trace.l2 = {std::move(digest)};
    experiments::L3Record r;
    r.id = record_id;
    r.ids = {1, 2, 3};
    r.boundary = 1;
    r.supervised_count = 2;
    r.full_length = 3;
    l.trace.l3 = {r};
    return l;
}

}  // namespace tandem::test
