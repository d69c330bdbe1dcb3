// Fingerprints: the point table, the sketch generator, summaries and the recording observer
// (tandem/engine/observe.h, docs/observables.md).
#include "tandem/engine/observe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>

#include "tandem/engine/backend.h"
#include "tandem/engine/dropout.h"
#include "tandem/error.h"

namespace tandem::engine {

double sketch_gaussian(uint64_t stream, uint64_t index) {
    const uint64_t h = mix64(mix64(kSketchSeed ^ stream) ^ index);
    const double u1 = (static_cast<double>(h >> 32) + 0.5) * 0x1p-32;
    const double u2 = (static_cast<double>(h & 0xFFFFFFFFULL) + 0.5) * 0x1p-32;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// ---- the point table --------------------------------------------------------------------------------

namespace {

constexpr const char* kProjectionNames[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
constexpr const char* kPartSuffix[kProjectionParts] = {".base", ".lora_A.out", "", ".lora_A", ".lora_B", ".lora_B.out"};

constexpr ObservedOp P(int projection, ProjectionPart part) {
    return static_cast<ObservedOp>(static_cast<int>(ObservedOp::ProjectionFirst) + kProjectionParts * projection + static_cast<int>(part));
}
constexpr int Q = 0, K = 1, V = 2, O = 3, G = 4, U = 5, D = 6;
using PP = ProjectionPart;
using XOp = ObservedOp;

// One decoder layer's forward points in execution order.
const std::vector<XOp>& layer_forward() {
    static const std::vector<XOp> v = {
        XOp::InputNorm,
        P(Q, PP::Base), P(Q, PP::LoraAOut), P(Q, PP::LoraBOut), P(Q, PP::Out),
        P(K, PP::Base), P(K, PP::LoraAOut), P(K, PP::LoraBOut), P(K, PP::Out),
        P(V, PP::Base), P(V, PP::LoraAOut), P(V, PP::LoraBOut), P(V, PP::Out),
        XOp::QNorm, XOp::KNorm, XOp::QRope, XOp::KRope, XOp::Attention,
        P(O, PP::Base), P(O, PP::LoraAOut), P(O, PP::LoraBOut), P(O, PP::Out),
        XOp::AttnResidual, XOp::PostNorm,
        P(G, PP::Base), P(G, PP::LoraAOut), P(G, PP::LoraBOut), P(G, PP::Out),
        P(U, PP::Base), P(U, PP::LoraAOut), P(U, PP::LoraBOut), P(U, PP::Out),
        XOp::MlpAct,
        P(D, PP::Base), P(D, PP::LoraAOut), P(D, PP::LoraBOut), P(D, PP::Out),
        XOp::MlpResidual};
    return v;
}
// One decoder layer's backward points in the order the backward computes them. The gradient that
// enters layer l (d of its output) is recorded as mlp_residual; the one leaving it (d of its input)
// is the next lower layer's mlp_residual, or embed for layer 0.
const std::vector<XOp>& layer_backward() {
    static const std::vector<XOp> v = {
        XOp::MlpResidual,
        P(D, PP::LoraA), P(D, PP::LoraB), XOp::MlpAct,
        P(G, PP::Out), P(U, PP::Out),
        P(G, PP::LoraA), P(G, PP::LoraB), P(U, PP::LoraA), P(U, PP::LoraB),
        XOp::PostNorm, XOp::AttnResidual,
        P(O, PP::LoraA), P(O, PP::LoraB), XOp::Attention,
        XOp::QRope, XOp::KRope, P(V, PP::Out), XOp::QNorm, XOp::KNorm, P(Q, PP::Out), P(K, PP::Out),
        P(Q, PP::LoraA), P(Q, PP::LoraB), P(K, PP::LoraA), P(K, PP::LoraB), P(V, PP::LoraA), P(V, PP::LoraB),
        XOp::InputNorm};
    return v;
}

int64_t rank_in(const std::vector<XOp>& list, XOp op) {
    auto it = std::find(list.begin(), list.end(), op);
    return it == list.end() ? -1 : static_cast<int64_t>(it - list.begin());
}

bool is_head(XOp op) { return op == XOp::FinalNorm || op == XOp::Ce; }
bool is_input(XOp op) { return op == XOp::Tokens || op == XOp::Labels || op == XOp::Embed; }

}  // namespace

ObservedOp projection_op(int projection, ProjectionPart part) {
    if (projection < 0 || projection >= 7) throw Error("fingerprint: projection index " + std::to_string(projection) + " out of range");
    return P(projection, part);
}

std::string observed_op_name(ObservedOp op) {
    switch (op) {
        case XOp::Tokens: return "tokens";
        case XOp::Labels: return "labels";
        case XOp::Embed: return "embed";
        case XOp::InputNorm: return "input_norm";
        case XOp::QNorm: return "q_norm";
        case XOp::KNorm: return "k_norm";
        case XOp::QRope: return "q_rope";
        case XOp::KRope: return "k_rope";
        case XOp::Attention: return "attention";
        case XOp::AttnResidual: return "attn_residual";
        case XOp::PostNorm: return "post_norm";
        case XOp::MlpAct: return "mlp_act";
        case XOp::MlpResidual: return "mlp_residual";
        case XOp::FinalNorm: return "final_norm";
        case XOp::Ce: return "ce";
        case XOp::ProjectionFirst: break;
    }
    const int i = static_cast<int>(op) - static_cast<int>(XOp::ProjectionFirst);
    if (i < 0 || i >= 7 * kProjectionParts) return "?";
    return std::string(kProjectionNames[i / kProjectionParts]) + kPartSuffix[i % kProjectionParts];
}

std::optional<ObservedOp> observed_op_from_name(std::string_view name) {
    for (int i = 0; i < kObservedOpCount; ++i)
        if (observed_op_name(static_cast<XOp>(i)) == name) return static_cast<XOp>(i);
    return std::nullopt;
}

const char* pass_name(Pass p) {
    switch (p) {
        case Pass::Forward: return "forward";
        case Pass::Backward: return "backward";
        case Pass::Optimizer: return "optimizer";
    }
    return "forward";
}

std::optional<Pass> pass_from_name(std::string_view name) {
    for (Pass p : {Pass::Forward, Pass::Backward, Pass::Optimizer})
        if (name == pass_name(p)) return p;
    return std::nullopt;
}

int64_t chain_position(int64_t layer, ObservedOp op, Pass pass, int64_t L) {
    constexpr int64_t kLayerStride = 100, kLayersBase = 1000;
    if (layer >= 0 && (layer >= L || is_head(op) || is_input(op))) return -1;
    if (layer < 0 && !is_head(op) && !is_input(op)) return -1;
    switch (pass) {
        case Pass::Forward: {
            if (layer >= 0) {
                const int64_t r = rank_in(layer_forward(), op);
                return r < 0 ? -1 : kLayersBase + layer * kLayerStride + r;
            }
            if (op == XOp::Tokens) return 0;
            if (op == XOp::Labels) return 1;
            if (op == XOp::Embed) return 2;
            return kLayersBase + L * kLayerStride + (op == XOp::FinalNorm ? 0 : 1);
        }
        case Pass::Backward: {
            if (layer >= 0) {
                const int64_t r = rank_in(layer_backward(), op);
                return r < 0 ? -1 : kLayersBase + (L - 1 - layer) * kLayerStride + r;
            }
            if (op == XOp::FinalNorm) return 0;
            if (op == XOp::Embed) return kLayersBase + L * kLayerStride;
            return -1;
        }
        case Pass::Optimizer: {
            const int i = static_cast<int>(op) - static_cast<int>(XOp::ProjectionFirst);
            if (layer < 0 || i < 0 || i >= 7 * kProjectionParts) return -1;
            const int part = i % kProjectionParts;
            if (part != static_cast<int>(PP::LoraA) && part != static_cast<int>(PP::LoraB)) return -1;
            return layer * kLayerStride + (i / kProjectionParts) * 2 + (part == static_cast<int>(PP::LoraB) ? 1 : 0);
        }
    }
    return -1;
}

int64_t chain_depth(int64_t layer, ObservedOp op, Pass pass, int64_t L) {
    switch (pass) {
        case Pass::Forward:
            if (layer >= 0) return layer + 1;
            return is_head(op) ? L + 1 : 0;
        case Pass::Backward:
            if (layer >= 0) return L + 2 + (L - 1 - layer);
            return op == XOp::Embed ? 2 * L + 2 : L + 2;
        case Pass::Optimizer:
            return 2 * L + 3;
    }
    return 0;
}

// ---- summaries ----------------------------------------------------------------------------------------

void Sketcher::ensure(int64_t rows, int64_t width) {
    auto grow = [](std::vector<double>& table, int64_t& cached, int64_t want, uint64_t first_stream) {
        if (want <= cached) return;
        const int64_t n = std::max<int64_t>(want, cached * 2);
        table.resize(static_cast<size_t>(n * kSketchSize));
        for (int64_t i = cached; i < n; ++i)
            for (int k = 0; k < kSketchSize; ++k)
                table[static_cast<size_t>(i * kSketchSize + k)] = sketch_gaussian(first_stream + static_cast<uint64_t>(k), static_cast<uint64_t>(i));
        cached = n;
    };
    grow(row_g_, rows_cached_, rows, 0);
    grow(col_g_, cols_cached_, width, kSketchSize);
}

namespace {
// One row's contribution: acc[k] = sum_c x[c] g(16 + k, c); the caller weights it by g(k, r).
template <class T>
inline void row_sums(const T* x, int64_t width, const double* col_g, double* acc, double& s, double& ss, double& m) {
    for (int64_t c = 0; c < width; ++c) {
        const double v = static_cast<double>(x[c]);
        s += v;
        ss += v * v;
        m = std::max(m, std::fabs(v));
        if (std::isnan(v)) m = v;
        const double* g = col_g + c * kSketchSize;
        for (int k = 0; k < kSketchSize; ++k) acc[k] += v * g[k];
    }
}

template <class T>
TensorSummary summarize_rows(const T* x, int64_t rows, int64_t width, const uint8_t* valid, const double* row_g,
                             const double* col_g) {
    TensorSummary out;
    double s = 0, ss = 0, m = 0;
    int64_t r_out = 0;
    for (int64_t r = 0; r < rows; ++r) {
        if (valid && !valid[r]) continue;
        double acc[kSketchSize] = {};
        row_sums(x + r * width, width, col_g, acc, s, ss, m);
        const double* g = row_g + r_out * kSketchSize;
        for (int k = 0; k < kSketchSize; ++k) out.sketch[static_cast<size_t>(k)] += g[k] * acc[k];
        ++r_out;
    }
    out.count = r_out * width;
    out.norm = std::sqrt(ss);
    out.mean = out.count > 0 ? s / static_cast<double>(out.count) : 0.0;
    out.maxabs = m;
    return out;
}
}  // namespace

TensorSummary Sketcher::summarize(const float* x, int64_t rows, int64_t width, const uint8_t* valid_rows) {
    int64_t n_rows = rows;
    if (valid_rows) n_rows = std::count_if(valid_rows, valid_rows + rows, [](uint8_t v) { return v != 0; });
    ensure(n_rows, width);
    return summarize_rows(x, rows, width, valid_rows, row_g_.data(), col_g_.data());
}

TensorSummary Sketcher::summarize(const double* x, int64_t rows, int64_t width) {
    ensure(rows, width);
    return summarize_rows(x, rows, width, nullptr, row_g_.data(), col_g_.data());
}

double lora_update_norm(const float* a, const float* b, int64_t r, int64_t in, int64_t out, double scaling) {
    std::vector<double> aat(static_cast<size_t>(r * r), 0.0), btb(static_cast<size_t>(r * r), 0.0);
    for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j <= i; ++j) {
            double s = 0;
            for (int64_t c = 0; c < in; ++c) s += static_cast<double>(a[i * in + c]) * static_cast<double>(a[j * in + c]);
            aat[static_cast<size_t>(i * r + j)] = aat[static_cast<size_t>(j * r + i)] = s;
        }
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < r; ++i)
            for (int64_t j = 0; j < r; ++j)
                btb[static_cast<size_t>(i * r + j)] += static_cast<double>(b[o * r + i]) * static_cast<double>(b[o * r + j]);
    double sq = 0;
    for (size_t k = 0; k < aat.size(); ++k) sq += aat[k] * btb[k];
    return std::sqrt(std::max(0.0, sq)) * scaling;
}

double frobenius_norm(const float* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return std::sqrt(s);
}

// ---- the recorder -------------------------------------------------------------------------------------

void FingerprintRecorder::begin_update(int64_t update) {
    update_ = update;
    micro_batch_ = 0;
}

std::vector<Fingerprint> FingerprintRecorder::take_points() {
    std::vector<Fingerprint> out;
    out.swap(points_);
    return out;
}

void FingerprintRecorder::record(int64_t layer, ObservedOp op, Pass pass, const TensorSummary& s) {
    Fingerprint f;
    f.update = update_;
    f.micro_batch = pass == Pass::Optimizer ? -1 : micro_batch_;
    f.layer = layer;
    f.op = op;
    f.pass = pass;
    f.summary = s;
    points_.push_back(f);
}

void FingerprintRecorder::begin_micro_batch(size_t index, const MicroBatch& mb) {
    const auto t0 = std::chrono::steady_clock::now();
    micro_batch_ = static_cast<int64_t>(index);
    valid_.assign(static_cast<size_t>(mb.batch * mb.seq), 0);
    std::vector<double> tokens, labels;
    for (int64_t b = 0; b < mb.batch; ++b)
        for (int64_t t = 0; t < mb.seq; ++t) {
            const size_t i = static_cast<size_t>(b * mb.seq + t);
            if (t < mb.lengths[static_cast<size_t>(b)]) {
                valid_[i] = 1;
                tokens.push_back(mb.ids[i]);
            }
            if (mb.supervised[i]) labels.push_back(mb.ids[i]);  // the label of the row at t - 1, in (b, t) order
        }
    record(-1, ObservedOp::Tokens, Pass::Forward, sketcher_.summarize(tokens.data(), static_cast<int64_t>(tokens.size()), 1));
    record(-1, ObservedOp::Labels, Pass::Forward, sketcher_.summarize(labels.data(), static_cast<int64_t>(labels.size()), 1));
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void FingerprintRecorder::observe(int64_t layer, ObservedOp op, Pass pass, const float* data, int64_t rows, int64_t width,
                                  Rows kind) {
    const auto t0 = std::chrono::steady_clock::now();
    if (kind == Rows::Tokens && static_cast<size_t>(rows) != valid_.size())
        throw Error("fingerprint: " + observed_op_name(op) + " has " + std::to_string(rows) +
                    " token rows, the micro-batch " + std::to_string(valid_.size()));
    host_.resize(static_cast<size_t>(rows * width));
    backend_.download(host_.data(), data, host_.size() * sizeof(float));
    record(layer, op, pass, sketcher_.summarize(host_.data(), rows, width, kind == Rows::Tokens ? valid_.data() : nullptr));
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void FingerprintRecorder::observe_value(int64_t layer, ObservedOp op, Pass pass, double value) {
    record(layer, op, pass, sketcher_.summarize(&value, 1, 1));
}

}  // namespace tandem::engine
