#pragma once
// The leg-name rule. A leg's name is a path component twice over — legs/<leg>/ in the run folder and
// /legs/<leg> in run.h5 — so the experiment parser (spec), the run file (store), the runner and the
// imports all check names with this one rule: [A-Za-z0-9_.+-], 1..64 characters, not "." or "..".
// Seed-envelope stacks and member run ids follow it too (docs/hdf5-layout.md).
#include <string>

namespace tandem {

// Throws tandem::Error naming the leg when `leg` breaks the rule.
void validate_leg_name(const std::string& leg);

}  // namespace tandem
