#pragma once
// The ONE list of the numbers a leg reports per evaluation (the `eval` event, run.h5
// /legs/<leg>/eval) and per optimizer update (the `step` event, /legs/<leg>/steps), written as
// X-macros so that each number is named once. Every list is expanded where its rows are needed:
//   tandem/store/run_file.h          the members of EvalRow / StepRow (in this order),
//   experiments/store/src/run_schema.cpp  the rows' field lists (run.h5 compound types, the resume check),
//   experiments/legs/src/leg_protocol.cpp the event fields read from a leg's JSON line (docs/leg-protocol.md),
//   tandem/compare/metrics.h / metrics.cpp the `Metric` enumerator and metric-table row of every METRIC
//                                    entry (label, unit, run.h5 series, TensorBoard tag, panel).
// Adding an observable is one entry here plus the legs that report it (docs/architecture.md
// "Add an observable").
//
// A list is called with three macros, one per kind of entry:
//   INT(member, initial, absent)  an std::int64_t column; `initial` is the member's default and
//                                 `absent` what the parser stores when the event lacks the field;
//   REAL(member, initial)         a double column; an absent field is read as NaN ("not reported");
//   METRIC(member, initial, Enumerator, label, short_label, unit, tensorboard, smoothed, shown)
//                                 a double column that is also a trajectory metric (a panel of the
//                                 workbench, a figure, a CSV series): see MetricInfo in metrics.h for
//                                 the meaning of the other arguments. Metrics are numbered (and their
//                                 panels drawn) in the order they appear here, eval list first.
// A new entry goes at the END of its list: rows are also written as aggregate literals
// ({update, loss, grad_norm, ...} in tests and fixtures), which keep their meaning only when the
// members before the new one stay where they are. A run.h5 written before it lacks the column, and
// its rows read back with the member's `initial` value: give a new REAL or METRIC column
// ::tandem::experiments::kNotReported there (as cpu_s), so old files read as "not reported", not 0.
// The member's name is also its event field, its run.h5 column and its metric's series name, so a
// quantity has one name from the leg's JSON line to the screen.
#include <limits>

namespace tandem::experiments {
// The value of a real column its leg did not report.
inline constexpr double kNotReported = std::numeric_limits<double>::quiet_NaN();
}  // namespace tandem::experiments

// /legs/<leg>/eval — one row per evaluation.
#define TANDEM_EVAL_ROW(INT, REAL, METRIC)                                                                 \
    /* the evaluation before update `update` (0 = before training) */                                    \
    INT(update, 0, -1)                                                                                    \
    /* token-weighted held-out cross-entropy */                                                           \
    METRIC(heldout_ce, 0, HeldoutCe, "held-out CE", "held-out CE", "nats", "eval/loss", false, true)

// /legs/<leg>/steps — one row per optimizer update.
#define TANDEM_STEP_ROW(INT, REAL, METRIC)                                                                 \
    /* 0-based update index */                                                                            \
    INT(update, 0, -1)                                                                                    \
    /* training loss of the update (token-weighted mean cross-entropy) */                                 \
    METRIC(loss, 0, TrainLoss, "training loss", "train loss", "nats", "train/loss", true, true)           \
    /* pre-clip global L2 norm of the gradient ("pre-clip" in its label: after clipping it would read */  \
    /* the clip value, and the verdicts that cite it must say which norm they mean) */                    \
    METRIC(grad_norm, 0, GradNorm, "pre-clip grad norm", "pre-clip grad norm", "", "train/grad_norm", true, true) \
    /* the learning rate the update used */                                                               \
    METRIC(lr, 0, LearningRate, "learning rate", "lr", "", "train/learning_rate", false, false)           \
    /* supervised tokens in the update */                                                                 \
    INT(tokens, 0, 0)                                                                                     \
    /* wall time of the update in seconds */                                                              \
    REAL(wall_s, 0)                                                                                       \
    /* CPU time of the leg's process during the update, every thread (NaN when the leg does not report */ \
    /* it, and in run files written before it was kept): the step-time flag's measure (docs/gate.md) */  \
    REAL(cpu_s, ::tandem::experiments::kNotReported)

// An expansion that names nothing, for the kinds a use of a list does not need.
#define TANDEM_ROW_SKIP(...)
