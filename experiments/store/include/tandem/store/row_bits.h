#pragma once
// Whether two rows of a run.h5 table hold the same bits, compared through the row type's field list
// (experiments/store/src/run_schema.cpp), so a field added to the list is compared without naming it
// here. The runner's resume check keeps a journalled row only when the file holds exactly it.
#include "tandem/store/run_file.h"

namespace tandem::experiments {

bool same_bits(const StepRow& a, const StepRow& b);
bool same_bits(const EvalRow& a, const EvalRow& b);

}  // namespace tandem::experiments
