#pragma once
// What `tandem run` and `tandem leg resume` print while a run's legs train, and the exit status of a
// run (docs/cli.md "Exit codes").
#include "commands.h"
#include "tandem/runner/runner.h"

#include <chrono>
#include <cstddef>
#include <vector>

namespace tandem::cli {

// One line per leg: redrawn in place on a terminal, else every 10 s and when a leg ends.
class ProgressPrinter {
public:
    ProgressPrinter();
    void operator()(const std::vector<experiments::LegProgress>& legs, bool final);

private:
    bool tty_;
    size_t drawn_ = 0;
    std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// kInterrupted, kError (a leg failed), kCheckFailed (a level did not pass) or kOk.
int run_exit_code(const experiments::RunOutcome& r);

}  // namespace tandem::cli
