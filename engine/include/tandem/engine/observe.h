#pragma once
// Fingerprints (docs/observables.md): a compact summary of every tensor the wiring passes between ops, recorded
// at named points so that two independent stacks can be compared op by op without storing tensors.
//
// A point is (layer, op, pass). The op names and the order of the chain are ONE table, shared with the
// reference leg (experiments/legs/fingerprint.py) and documented in docs/observables.md:
//   - layer -1: the ops outside the decoder layers (tokens, labels, embed before them; final_norm, ce
//     after them); 0..L-1: a decoder layer;
//   - pass Forward: the op's output; Backward: the gradient of the loss w.r.t. that output (for the
//     LoRA parameters q_proj.lora_A ...: their gradient, accumulated over the update's micro-batches
//     so far); Optimizer: the LoRA parameters after the update's AdamW step.
//
// The summary of a tensor X (viewed as rows x width, row-major; for token tensors only the real,
// non-padding tokens are rows, in (sequence, position) order) is its element count, L2 norm, mean,
// largest |x| (all accumulated in double) and a sketch of 16 values,
//     sketch[k] = sum_r sum_c g(k, r) * g(16 + k, c) * X[r, c]          (k = 0..15, double)
// with g the counter-based standard normal below: a fixed random projection (a Kronecker-structured
// Gaussian sketch, E[sketch[k]^2] = |X|^2) that two legs evaluate identically, so
// |sketch_a - sketch_b| / (4 |X_b|) estimates |X_a - X_b| / |X_b| without either leg storing X.
//
//     g(stream, i):  h  = mix64(mix64(0x736B65746368 ^ stream) ^ i)       (mix64: dropout.h)
//                    u1 = ((h >> 32) + 0.5) * 2^-32,  u2 = ((h & 0xFFFFFFFF) + 0.5) * 2^-32
//                    g  = sqrt(-2 ln u1) * cos(2 pi u2)                      (Box-Muller, double)
//
// The wiring (model.cpp) calls an Observer after each named step when one is set (a null pointer
// test otherwise: nothing else runs, nothing is allocated). FingerprintRecorder is the observer
// that downloads the step's buffer and summarises it on the host.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/engine/batch.h"

namespace tandem::engine {

class Backend;

inline constexpr int kSketchSize = 16;
inline constexpr uint64_t kSketchSeed = 0x736B65746368ULL;  // "sketch"

// The counter-based standard normal of the sketch (header comment).
double sketch_gaussian(uint64_t stream, uint64_t index);

// The ops that are observed, in no particular order (the chain order is chain_position()). The
// seven projections each have six ops: PROJ.base (x W^T, the frozen projection alone),
// PROJ.lora_A.out (A dropout(x), peft's lora_A output), PROJ (the LoRA linear's output, base +
// adapter), PROJ.lora_A and PROJ.lora_B (the parameters), PROJ.lora_B.out (B A dropout(x), peft's
// lora_B output before the scaling: PROJ = PROJ.base + scaling x PROJ.lora_B.out).
enum class ObservedOp : int16_t {
    Tokens, Labels, Embed,
    InputNorm, QNorm, KNorm, QRope, KRope, Attention, AttnResidual, PostNorm, MlpAct, MlpResidual,
    FinalNorm, Ce,
    ProjectionFirst  // + kProjectionParts * projection + ProjectionPart
};
enum class ProjectionPart : int16_t { Base = 0, LoraAOut = 1, Out = 2, LoraA = 3, LoraB = 4, LoraBOut = 5 };
inline constexpr int kProjectionParts = 6;
inline constexpr int kObservedOpCount = static_cast<int>(ObservedOp::ProjectionFirst) + 7 * kProjectionParts;

ObservedOp projection_op(int projection, ProjectionPart part);
std::string observed_op_name(ObservedOp op);                          // "q_proj.lora_A.out", "attention", ...
std::optional<ObservedOp> observed_op_from_name(std::string_view name);  // nullopt for an unknown name

enum class Pass : int8_t { Forward = 0, Backward = 1, Optimizer = 2 };
const char* pass_name(Pass p);                            // "forward", "backward", "optimizer"
std::optional<Pass> pass_from_name(std::string_view name);

// Where a point sits in the chain of one update: points sort by (micro-batch, then Optimizer after
// every micro-batch), pass (forward before backward), then this position; num_layers is L.
// Forward: tokens, labels, embed, layers 0..L-1 (each in execution order), final_norm, ce.
// Backward: final_norm, layers L-1..0 (each in execution order of the backward), embed.
// Optimizer: layers 0..L-1, projections in order, A then B. -1 when (op, pass) is not a point.
int64_t chain_position(int64_t layer, ObservedOp op, Pass pass, int64_t num_layers);
// Layers between the point and the start of its pass's chain (the "depth" of docs/observables.md):
// forward: 0 for tokens/labels/embed, l + 1 in layer l, L + 1 for the head; backward continues
// from there (L + 2 at the head, L + 2 + (L - 1 - l) in layer l, 2L + 2 at embed); optimizer 2L + 3.
int64_t chain_depth(int64_t layer, ObservedOp op, Pass pass, int64_t num_layers);

// The summary of one tensor (header comment). Non-finite elements make norm/mean/sketch non-finite.
struct TensorSummary {
    int64_t count = 0;
    double norm = 0, mean = 0, maxabs = 0;
    std::array<double, kSketchSize> sketch{};
};

// Summarises host float32 data of rows x width (row-major). valid_rows (nullable, `rows` entries):
// only rows with a non-zero entry count, and they are renumbered 0, 1, ... for the sketch's row
// index. Caches the Gaussian tables (grown to the largest rows / width seen).
class Sketcher {
public:
    TensorSummary summarize(const float* x, int64_t rows, int64_t width, const uint8_t* valid_rows = nullptr);
    // The same of a host double tensor (token ids, the loss): used for the data points.
    TensorSummary summarize(const double* x, int64_t rows, int64_t width);

private:
    void ensure(int64_t rows, int64_t width);
    std::vector<double> row_g_, col_g_;  // [i][k] = g(k, i) and g(16 + k, i)
    int64_t rows_cached_ = 0, cols_cached_ = 0;
};

// |Delta W|_F = |B A|_F * scaling of a LoRA pair (A [r, in], B [out, r], row-major float32), via the
// r x r Gram matrices: |B A|_F^2 = sum_ij (B^T B)_ij (A A^T)_ij, in double (O((in + out) r^2), no
// out x in product). The update norm of docs/observables.md.
double lora_update_norm(const float* a, const float* b, int64_t r, int64_t in, int64_t out, double scaling);
// |x|_F in double.
double frobenius_norm(const float* x, int64_t n);

// What the rows of an observed buffer are.
enum class Rows : int8_t {
    Tokens,  // the micro-batch's batch*seq positions (padding included): only real tokens are summarised
    All,     // every row (supervised rows of the head, parameters, scalars)
};

// Called by the wiring (Qwen3LoraModel) and the trainer core when set. Data is BACKEND memory.
class Observer {
public:
    virtual ~Observer() = default;
    // A micro-batch's forward starts (index within the update): its host copy.
    virtual void begin_micro_batch(size_t index, const MicroBatch& mb) = 0;
    virtual void observe(int64_t layer, ObservedOp op, Pass pass, const float* data, int64_t rows, int64_t width,
                         Rows kind) = 0;
    // A host scalar (the micro-batch's sum of token losses).
    virtual void observe_value(int64_t layer, ObservedOp op, Pass pass, double value) = 0;
};

// One recorded point.
struct Fingerprint {
    int64_t update = 0;
    int64_t micro_batch = 0;  // -1 for the optimizer pass
    int64_t layer = -1;
    ObservedOp op = ObservedOp::Tokens;
    Pass pass = Pass::Forward;
    TensorSummary summary;
};

// The observer that records fingerprints: downloads each buffer from the backend and summarises it.
// begin_update() before a train_update(); points() then holds that update's points (in the order
// they were recorded). Records tokens and labels itself at begin_micro_batch.
class FingerprintRecorder final : public Observer {
public:
    explicit FingerprintRecorder(Backend& backend) : backend_(backend) {}
    void begin_update(int64_t update);
    const std::vector<Fingerprint>& points() const { return points_; }
    std::vector<Fingerprint> take_points();
    // Host seconds spent inside the observer since construction (downloads + summaries).
    double seconds() const { return seconds_; }

    void begin_micro_batch(size_t index, const MicroBatch& mb) override;
    void observe(int64_t layer, ObservedOp op, Pass pass, const float* data, int64_t rows, int64_t width,
                 Rows kind) override;
    void observe_value(int64_t layer, ObservedOp op, Pass pass, double value) override;

private:
    void record(int64_t layer, ObservedOp op, Pass pass, const TensorSummary& s);
    Backend& backend_;
    Sketcher sketcher_;
    std::vector<float> host_;
    std::vector<uint8_t> valid_;  // [batch*seq] of the micro-batch in flight: 1 = a real token
    int64_t update_ = 0, micro_batch_ = 0;
    std::vector<Fingerprint> points_;
    double seconds_ = 0;
};

}  // namespace tandem::engine
