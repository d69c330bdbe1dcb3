// The fault catalogue (docs/faults.md), fault switches as text and JSON, the mapping onto the engine's
// FaultConfig and the data path's DataFaults, and the engine leg's data path with its faults.
#include "tandem/spec/faults.h"

#include "tandem/error.h"
#include "tandem/number_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include <nlohmann/json.hpp>

namespace tandem::experiments {
using nlohmann::json;

namespace {

FaultSize count_size(const std::string& unit, double def) { return FaultSize{unit, def, 1, true, false}; }


// ---- not applicable: the settings under which a fault's switch changes nothing or is refused
bool targets(const FaultSettings& s, const char* projection) {
    return std::find(s.lora_targets.begin(), s.lora_targets.end(), projection) != s.lora_targets.end();
}
std::string needs_k_and_v(const FaultSettings& s) {
    if (targets(s, "k_proj") && targets(s, "v_proj")) return "";
    std::string t;
    for (const auto& x : s.lora_targets) t += (t.empty() ? "" : ", ") + x;
    return "needs LoRA on both k_proj and v_proj (lora.targets: " + t + ")";
}
std::string needs_rslora(const FaultSettings& s) {
    if (!s.lora_use_rslora) return "the experiment scales by alpha/r already (lora.use_rslora false)";
    return s.lora_rank == 1 ? "alpha/r equals alpha/sqrt(r) at lora.rank 1" : "";
}
std::string needs_rank_above_one(const FaultSettings& s) {
    return s.lora_rank == 1 ? "alpha equals the scaling at lora.rank 1" : "";
}
std::string needs_dropout(const FaultSettings& s) { return s.lora_dropout > 0 ? "" : "lora.dropout is 0: no mask to draw"; }
std::string needs_accumulation(const FaultSettings& s) {
    return s.accumulation > 1 ? "" : "one micro-batch per update (batch.accumulation 1): the switch changes nothing";
}
std::string needs_dropout_and_accumulation(const FaultSettings& s) {
    const std::string d = needs_dropout(s);
    return d.empty() ? needs_accumulation(s) : d;
}
std::string needs_clip(const FaultSettings& s) { return s.clip > 0 ? "" : "clip is 0: the gradient is never clipped"; }
std::string needs_clip_and_accumulation(const FaultSettings& s) {
    const std::string c = needs_clip(s);
    return c.empty() ? needs_accumulation(s) : c;
}
std::string needs_qwen3_template(const FaultSettings& s) {
    return s.template_name == "qwen3" ? "" : "the experiment's template is " + s.template_name + ", not qwen3";
}

}  // namespace

std::string fault_not_applicable(const FaultInfo& fault, const FaultSettings& spec) {
    return fault.not_applicable ? fault.not_applicable(spec) : std::string();
}

const std::vector<FaultInfo>& fault_catalogue() {
    // `expected`: the levels that catch the fault on clinical-tiny (docs/faults.md, measured and
    // asserted by tests/studies/test_fault_matrix.py). LoRA's B starts at zero, so a fault in the
    // adapter, or in evaluation with the adapter, moves nothing at update 0: L1 cannot see it.
    static const std::vector<FaultInfo> c = {
        // ---- data / template (the engine leg's data path)
        {"template-chatml", "data/template", "the generic ChatML layout instead of the model's Qwen3 template",
         {"L1", "L3", "L4"}, std::nullopt, "1",
         [](LegFaults& f, double) { f.data.chatml = true; },
         needs_qwen3_template},
        {"boundary-early", "data/template", "supervision starts N tokens early (the assistant header is supervised)",
         {"L1", "L3", "L4"}, count_size("tokens", 1), "",
         [](LegFaults& f, double size) { f.data.boundary_shift = -static_cast<int64_t>(size); }},
        {"boundary-late", "data/template", "supervision starts N tokens late (the answer's first tokens are not labels)",
         {"L1", "L3", "L4"}, count_size("tokens", 1), "",
         [](LegFaults& f, double size) { f.data.boundary_shift = static_cast<int64_t>(size); }},
        {"im-end-unsupervised", "data/template", "the closing <|im_end|> of the answer is not a label",
         {"L1", "L3", "L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.data.im_end_unsupervised = true; }},
        {"truncate-left", "data/template", "records longer than max_len lose their first tokens instead of their last",
         {"L1", "L3", "L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.data.truncate_left = true; }},
        {"think-dropped", "data/template", "the empty <think></think> block is left out of the rendered prompt and answer",
         {"L1", "L3", "L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.data.think_dropped = true; },
         needs_qwen3_template},
        // ---- loading / config
        {"rmsnorm-eps", "loading/config", "every RMSNorm uses eps x F (F 10: 1e-5 instead of Qwen3's 1e-6)",
         {"L1", "L4"}, FaultSize{"x the config's eps", 10, 1.001, false, true}, "",
         [](LegFaults& f, double size) { f.engine.rms_norm_eps_factor = size; }},
        {"rope-theta", "loading/config", "RoPE uses theta / F (F 100: 1e4 instead of Qwen3's 1e6)", {"L1", "L4"},
         FaultSize{"theta divided by", 100, 1.001, false, true}, "",
         [](LegFaults& f, double size) { f.engine.rope_theta_divisor = size; }},
        {"rope-interleaved", "loading/config", "RoPE rotates interleaved pairs (2i, 2i+1) instead of halves (i, i+D/2)",
         {"L1", "L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.rope_pairing = engine::RopePairing::Interleaved; }},
        {"qk-norm-skipped", "loading/config", "q_norm and k_norm are not applied before RoPE", {"L1", "L4"},
         std::nullopt, "",
         [](LegFaults& f, double) { f.engine.skip_qk_norm = true; }},
        {"gqa-modulo", "loading/config", "query head h reads kv head h % KV instead of h / (H/KV) (differs when 1 < KV < H)",
         {"L1", "L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.kv_heads = engine::KvHeadMapping::Modulo; }},
        {"bf16-truncation", "loading/config",
         "the low N mantissa bits of one base tensor (layer 0 q_proj) are zeroed at load (16: F32->BF16 by truncation)",
         {"L2", "L4"}, FaultSize{"mantissa bits", 16, 1, true, false}, "",
         [](LegFaults& f, double size) { f.engine.truncated_mantissa_bits = static_cast<int>(size); }},
        // ---- adapter
        {"adapter-wrong-projection", "adapter",
         "k_proj runs with v_proj's adapter (the same shape under GQA; q's adapter has another shape)", {"L4"},
         std::nullopt, "2",
         [](LegFaults& f, double) { f.engine.k_proj_uses_v_adapter = true; },
         needs_k_and_v},
        {"rslora-ignored", "adapter", "LoRA scaling alpha/r instead of rsLoRA's alpha/sqrt(r)", {"L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.lora_scaling = engine::LoraScaling::AlphaOverRank; },
         needs_rslora},
        {"raw-alpha", "adapter", "LoRA scaling alpha instead of alpha/sqrt(r)", {"L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.lora_scaling = engine::LoraScaling::RawAlpha; },
         needs_rank_above_one},
        {"lora-b-grad-transposed", "adapter", "LoRA B's gradient reads A·x's storage as its transpose's", {"L4"},
         std::nullopt, "3",
         [](LegFaults& f, double) { f.engine.lora_b_grad = engine::LoraBGrad::TransposedOperand; }},
        // ---- loss / optimizer
        {"labels-unshifted", "loss/optimizer", "the hidden state at t predicts the token at t (labels not shifted)",
         {"L1", "L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.label_shift = engine::LabelShift::None; }},
        {"labels-shifted-twice", "loss/optimizer", "the hidden state at t-2 predicts the token at t (shifted twice)",
         {"L1", "L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.label_shift = engine::LabelShift::Two; }},
        {"grad-accum-mean-of-means", "loss/optimizer",
         "gradient accumulation as the mean of per-micro-batch means, not sum over the update / its tokens", {"L4"},
         std::nullopt, "",
         [](LegFaults& f, double) { f.engine.mean_of_micro_batch_means = true; },
         needs_accumulation},
        {"clip-skipped", "loss/optimizer", "the gradient is not clipped", {"L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.clipping = engine::Clipping::Skipped; },
         needs_clip},
        {"clip-per-micro-batch", "loss/optimizer", "each micro-batch's gradient is clipped on its own, the sum is not",
         {"L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.clipping = engine::Clipping::PerMicroBatch; },
         needs_clip_and_accumulation},
        {"adamw-no-bias-correction", "loss/optimizer", "AdamW without its bias corrections", {"L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.adamw_no_bias_correction = true; }},
        {"adamw-eps-inside-sqrt", "loss/optimizer", "AdamW's eps inside the square root: sqrt(v_hat + eps)", {"L4"},
         std::nullopt, "",
         [](LegFaults& f, double) { f.engine.adamw_eps_inside_sqrt = true; }},
        {"warmup-off-by-one", "loss/optimizer", "update t runs with the schedule's lr of update t + N", {"L4"},
         count_size("updates", 1), "",
         [](LegFaults& f, double size) { f.engine.warmup_offset = static_cast<int64_t>(size); }},
        // ---- training loop
        {"dropout-in-eval", "training loop", "evaluation draws LoRA dropout masks with probability p", {"L4"},
         FaultSize{"dropout probability", 0.05, 0.0005, false, true}, "",
         [](LegFaults& f, double size) { f.engine.eval_dropout = size; },
         needs_dropout},
        {"eval-without-adapter", "training loop", "evaluation runs the base model without the adapter", {"L4"},
         std::nullopt, "17",
         [](LegFaults& f, double) { f.engine.eval_without_adapter = true; }},
        {"dropout-mask-reused", "training loop", "every micro-batch of an update reuses micro-batch 0's dropout masks",
         {"L4"}, std::nullopt, "",
         [](LegFaults& f, double) { f.engine.same_mask_every_micro_batch = true; },
         needs_dropout_and_accumulation},
        // ---- runtime
        {"slow-after-eval", "runtime", "the first update after each evaluation takes F times as long; no number changes",
         {"gate"}, FaultSize{"x the update's time", 7, 1, false, false}, "17",
         [](LegFaults& f, double size) { f.engine.slow_after_eval = size; }},
    };
    return c;
}

const std::vector<FaultInfo>& test_faults() {
    // Numerical perturbations for the tests of the bounds and the gate (docs/thresholds.md "Injected
    // faults"): not bugs a trainer has, so not in the catalogue users see. The engine leg applies them.
    static const std::vector<FaultInfo> c = [] {
        std::vector<FaultInfo> t = {
            {"test-lr-scale", "test", "the parameter change of every update multiplied by M (lr x M, decoupled weight decay included)",
             {"L4"}, FaultSize{"x the parameter change", 2, 0, false, false}, ""},
            {"test-adapter-noise", "test", "after every update, each adapter element x (1 + R s), s = +-1 from a hash",
             {"L4"}, FaultSize{"relative size", 1e-3, 0, false, false}, ""},
            {"test-bf16-adapter", "test", "after every update, the adapter rounded to bfloat16 (nearest even)", {"L4"},
             std::nullopt, ""},
            {"test-warmup-shift", "test", "the schedule's warm-up N updates longer (an off-by-N schedule)", {"L4"},
             FaultSize{"updates", 1, 0, true, false}, ""},
            {"test-residual-noise", "test", "every residual add's result x (1 + R s), s = +-1 from a hash (an add that does not add up)",
             {"L4"}, FaultSize{"relative size", 1e-5, 0, false, false}, ""},
        };
        for (auto& f : t) f.test_only = true;
        return t;
    }();
    return c;
}

const FaultInfo& fault_info(const std::string& name) {
    for (const auto* list : {&fault_catalogue(), &test_faults()})
        for (const auto& f : *list)
            if (f.name == name) return f;
    std::string known;
    for (const auto& f : fault_catalogue()) known += (known.empty() ? "" : ", ") + f.name;
    throw Error("unknown fault '" + name + "' (known: " + known + ")");
}

std::string fault_text(const FaultSwitch& f) {
    const std::string text = f.size ? f.name + "=" + number_text(*f.size) : f.name;
    return f.from_update > 0 ? text + "@" + std::to_string(f.from_update) : text;
}

std::string faults_text(const std::vector<FaultSwitch>& faults) {
    std::string o;
    for (const auto& f : faults) o += (o.empty() ? "" : ", ") + fault_text(f);
    return o;
}

namespace {

// The size of a switch checked against its fault: present exactly when the fault has a size (the
// default filled in), whole for an integer size, within [smallest, +inf) and finite.
FaultSwitch checked(const std::string& name, std::optional<double> size, int64_t from_update, const std::string& what) {
    const FaultInfo* info = nullptr;
    try {
        info = &fault_info(name);
    } catch (const Error& e) {
        throw Error(what + ": " + e.what());
    }
    if (from_update < 0) throw Error(what + ": fault '" + name + "': the first update must be >= 0");
    if (from_update > 0 && !info->test_only)
        throw Error(what + ": fault '" + name + "' acts from update 0 (@UPDATE is for the test faults)");
    FaultSwitch f{name, std::nullopt, from_update};
    if (!info->size) {
        if (size) throw Error(what + ": fault '" + name + "' has no size");
        return f;
    }
    const FaultSize& s = *info->size;
    const double v = size.value_or(s.default_value);
    if (!std::isfinite(v) || v < s.smallest)
        throw Error(what + ": fault '" + name + "': size must be a number >= " + number_text(s.smallest) +
                    " (" + s.unit + ")");
    if (s.integer && v != std::floor(v)) throw Error(what + ": fault '" + name + "': size must be a whole number (" + s.unit + ")");
    if (name == "bf16-truncation" && v > 23) throw Error(what + ": fault 'bf16-truncation': at most 23 mantissa bits");
    if (name == "dropout-in-eval" && v >= 1) throw Error(what + ": fault 'dropout-in-eval': p must be below 1");
    f.size = v;
    return f;
}

}  // namespace

FaultSwitch parse_fault_switch(const std::string& whole, const std::string& what) {
    const auto at = whole.find('@');
    int64_t from_update = 0;
    if (at != std::string::npos) {
        const std::string k = whole.substr(at + 1);
        size_t used = 0;
        try {
            from_update = std::stoll(k, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (k.empty() || used != k.size())
            throw Error(what + ": fault '" + whole.substr(0, whole.find_first_of("=@")) + "': update '" + k + "' is not a whole number");
    }
    const std::string text = whole.substr(0, at);
    const auto eq = text.find('=');
    const std::string name = text.substr(0, eq);
    std::optional<double> size;
    if (eq != std::string::npos) {
        const std::string v = text.substr(eq + 1);
        size_t used = 0;
        double d = 0;
        try {
            d = std::stod(v, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        if (v.empty() || used != v.size()) throw Error(what + ": fault '" + name + "': size '" + v + "' is not a number");
        size = d;
    }
    return checked(name, size, from_update, what);
}

std::vector<FaultSwitch> parse_fault_list(const std::string& text, const std::string& what) {
    std::vector<FaultSwitch> out;
    size_t start = 0;
    while (start <= text.size()) {
        size_t end = text.find(',', start);
        if (end == std::string::npos) end = text.size();
        std::string item = text.substr(start, end - start);
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        if (!item.empty()) {
            FaultSwitch f = parse_fault_switch(item, what);
            for (const auto& o : out)
                if (o.name == f.name) throw Error(what + ": fault '" + f.name + "' given twice");
            out.push_back(std::move(f));
        }
        start = end + 1;
    }
    return out;
}

std::vector<FaultSwitch> faults_from_json(const json& j, const std::string& what) {
    if (!j.is_array()) throw Error(what + ": must be a list of faults (\"name\", \"name=size\" or {\"name\", \"size\"})");
    std::vector<FaultSwitch> out;
    for (const auto& e : j) {
        FaultSwitch f;
        if (e.is_string()) {
            f = parse_fault_switch(e.get<std::string>(), what);
        } else if (e.is_object()) {
            for (auto it = e.begin(); it != e.end(); ++it)
                if (it.key() != "name" && it.key() != "size" && it.key() != "from_update")
                    throw Error(what + ": unknown field '" + it.key() + "' in a fault (name, size, from_update)");
            if (!e.contains("name") || !e["name"].is_string()) throw Error(what + ": a fault object needs a string name");
            std::optional<double> size;
            if (e.contains("size") && !e["size"].is_null()) {
                if (!e["size"].is_number()) throw Error(what + ": fault '" + e["name"].get<std::string>() + "': size must be a number");
                size = e["size"].get<double>();
            }
            int64_t from_update = 0;
            if (e.contains("from_update")) {
                if (!e["from_update"].is_number_integer())
                    throw Error(what + ": fault '" + e["name"].get<std::string>() + "': from_update must be a whole number");
                from_update = e["from_update"].get<int64_t>();
            }
            f = checked(e["name"].get<std::string>(), size, from_update, what);
        } else {
            throw Error(what + ": must be a list of faults (\"name\", \"name=size\" or {\"name\", \"size\"})");
        }
        for (const auto& o : out)
            if (o.name == f.name) throw Error(what + ": fault '" + f.name + "' given twice");
        out.push_back(std::move(f));
    }
    return out;
}

json faults_to_json(const std::vector<FaultSwitch>& faults) {
    json a = json::array();
    for (const auto& f : faults) {
        json o{{"name", f.name}};
        if (f.size) o["size"] = *f.size;
        if (f.from_update > 0) o["from_update"] = f.from_update;
        a.push_back(std::move(o));
    }
    return a;
}

LegFaults leg_faults(const std::vector<FaultSwitch>& faults) {
    LegFaults lf;
    for (const FaultSwitch& f : faults) {
        const FaultInfo& info = fault_info(f.name);
        const double size = f.size.value_or(info.size ? info.size->default_value : 0);
        if (info.test_only) lf.test.push_back(TestFault{f.name, size, f.from_update});
        else info.set(lf, size);
    }
    return lf;
}

namespace {

// The empty think block the Qwen3 template puts after the generation prompt with thinking off, and
// before the last assistant answer.
constexpr const char* kEmptyThink = "<think>\n\n</think>\n\n";

// Removes the empty think block that ends prompt_text, at the same offset of full_text (which starts
// with prompt_text), so the prefix property holds. Nothing happens when the prompt has none (ChatML).
void drop_empty_think(data::RenderedRecord& r) {
    const std::string block = kEmptyThink;
    if (r.prompt_text.size() < block.size() ||
        r.prompt_text.compare(r.prompt_text.size() - block.size(), block.size(), block) != 0)
        return;
    const size_t at = r.prompt_text.size() - block.size();
    r.prompt_text.erase(at);
    if (r.full_text.compare(at, block.size(), block) == 0) r.full_text.erase(at, block.size());
}

}  // namespace

data::TokenizedRecord encode_record(const data::Tokenizer& tokenizer, data::TemplateKind kind,
                                    const std::vector<data::Message>& messages, size_t max_len, const DataFaults& f) {
    data::RenderedRecord rendered = data::render_record(f.chatml ? data::TemplateKind::ChatML : kind, messages);
    if (f.think_dropped) drop_empty_think(rendered);
    if (f.boundary_shift == 0 && !f.im_end_unsupervised && !f.truncate_left)
        return data::tokenize_rendered(tokenizer, std::move(rendered), max_len);

    // Supervision and truncation faults: from the untruncated record.
    data::TokenizedRecord r = data::tokenize_rendered(tokenizer, std::move(rendered), 0);
    const int64_t n = static_cast<int64_t>(r.full_length);
    int64_t boundary = static_cast<int64_t>(r.boundary) + f.boundary_shift;
    int64_t end = static_cast<int64_t>(r.supervised_end) - (f.im_end_unsupervised ? 1 : 0);
    boundary = std::clamp<int64_t>(boundary, 1, n);  // token 0 is never a label
    end = std::clamp<int64_t>(end, boundary, n);
    r.boundary = static_cast<size_t>(boundary);
    r.supervised_end = static_cast<size_t>(end);
    r.supervised_full = static_cast<size_t>(end - boundary);

    const int64_t keep = max_len == 0 ? n : std::min<int64_t>(n, static_cast<int64_t>(max_len));
    const int64_t first = f.truncate_left ? n - keep : 0;  // the first token kept
    auto cut = [&](auto& v) { v = std::decay_t<decltype(v)>(v.begin() + first, v.begin() + first + keep); };
    cut(r.ids);
    cut(r.begin);
    cut(r.end);
    r.truncated_length = static_cast<size_t>(keep);
    r.supervised.assign(static_cast<size_t>(keep), 0);
    r.supervised_count = 0;
    for (int64_t i = std::max(boundary, first); i < std::min(end, first + keep); ++i) {
        r.supervised[static_cast<size_t>(i - first)] = 1;
        ++r.supervised_count;
    }
    return r;
}

std::string fault_banner(const std::vector<std::pair<std::string, std::string>>& leg_faults) {
    std::string o;
    for (const auto& [leg, faults] : leg_faults)
        if (!faults.empty()) o += (o.empty() ? "" : "; ") + leg + ": " + faults;
    return o.empty() ? "" : "FAULT INJECTED: " + o;
}

}  // namespace tandem::experiments
