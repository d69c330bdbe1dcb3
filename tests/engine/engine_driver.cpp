// engine_driver: runs tandem's CPU engine on files written by the reference tests
// (test_engine_reference.py), so the pytest can compare our numbers with transformers + peft.
//
//   engine_driver run REQUEST.json
//
// REQUEST (JSON):
//   {"model": DIR (HF folder), "adapter": DIR (peft folder), "out": DIR, "threads": 1,
//    "ce_token_chunk": 8, "ce_vocab_chunk": 256,
//    "micro_batches": [{"batch": B, "seq": T, "ids": [...], "supervised": [0/1...], "lengths": [...]}],
//    "tasks": [...]}
// tasks (run in order):
//   {"kind": "logits", "micro_batch": i}            -> out/logits_<i>.safetensors {"logits": [B,T,V]}
//   {"kind": "grads", "micro_batches": [i, ...]}    -> out/grads.safetensors (peft names), out/grads.json
//        {"loss", "loss_sum", "supervised", "grad_norm"}: one update's accumulated gradients, normalised
//        by the supervised tokens of all listed micro-batches (docs/spec.md §Recipe), no optimizer step.
//   {"kind": "train", "updates": [[i, ...], ...], "lr", "total_updates", "warmup" (opt), "max_grad_norm",
//    "dropout_mode": "off"|"native"|"shared", "seed", "eval": [i, ...] (opt), "save_adapter": DIR (opt)}
//        -> out/train.json {"updates": [{update, loss, grad_norm, lr, supervised_tokens}], "eval": {...}}
//   {"kind": "mask", "seed", "update", "micro_batch", "layer", "projection", "n", "p"}
//        -> out/mask.json {"keep": [0/1 ...]}  (the shared dropout generator, for the Python twin)
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/atomic_file.h"
#include "tandem/engine/io.h"
#include "tandem/engine/ops.h"
#include "tandem/engine/safetensors.h"
#include "tandem/engine/trainer.h"
#include "tandem/error.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace tandem::engine;

namespace {

MicroBatch parse_mb(const json& j) {
    MicroBatch mb;
    mb.batch = j.at("batch").get<int64_t>();
    mb.seq = j.at("seq").get<int64_t>();
    mb.ids = j.at("ids").get<std::vector<int32_t>>();
    mb.supervised = j.at("supervised").get<std::vector<uint8_t>>();
    mb.lengths = j.at("lengths").get<std::vector<int32_t>>();
    return mb;
}

std::vector<MicroBatch> pick(const std::vector<MicroBatch>& all, const json& idx) {
    std::vector<MicroBatch> out;
    for (const auto& i : idx) out.push_back(all.at(i.get<size_t>()));
    return out;
}

void write_json(const fs::path& p, const json& j) { tandem::write_file_atomic(p, j.dump(1)); }

DropoutMode parse_mode(const std::string& s) {
    if (s == "off") return DropoutMode::Off;
    if (s == "native") return DropoutMode::Native;
    if (s == "shared") return DropoutMode::Shared;
    throw tandem::Error("dropout_mode '" + s + "' is not off, native or shared");
}

int run(const fs::path& request_path) {
    json req;
    {
        std::ifstream in(request_path);
        if (!in) throw tandem::Error("cannot open " + request_path.string());
        req = json::parse(in);
    }
    const fs::path out = req.at("out").get<std::string>();
    fs::create_directories(out);
    const int threads = req.value("threads", 1);
    ops::set_num_threads(threads);

    std::vector<MicroBatch> mbs;
    for (const auto& j : req.value("micro_batches", json::array())) mbs.push_back(parse_mb(j));

    for (const auto& task : req.at("tasks")) {
        const std::string kind = task.at("kind");
        if (kind == "mask") {
            const auto n = task.at("n").get<int64_t>();
            std::vector<uint8_t> keep(static_cast<size_t>(n));
            fill_dropout_keep(keep.data(), n,
                              shared_dropout_key(task.at("seed"), task.at("update"), task.at("micro_batch"),
                                                 task.at("layer"), task.at("projection")),
                              0, task.at("p").get<double>());
            write_json(out / "mask.json", json{{"keep", keep}});
            continue;
        }
        HfCheckpoint ckpt = load_hf_checkpoint(req.at("model").get<std::string>());
        LoraAdapter adapter = load_peft_adapter(req.at("adapter").get<std::string>(), ckpt.config);
        TrainOptions opts;
        opts.threads = threads;
        opts.model.ce_token_chunk = req.value("ce_token_chunk", int64_t{64});
        opts.model.ce_vocab_chunk = req.value("ce_vocab_chunk", int64_t{0});
        if (kind == "train") {
            opts.lr = task.at("lr");
            opts.total_updates = task.at("total_updates");
            opts.warmup_updates = task.value("warmup", int64_t{-1});
            opts.max_grad_norm = task.value("max_grad_norm", 1.0);
            opts.dropout_mode = parse_mode(task.value("dropout_mode", std::string("off")));
            opts.seed = task.value("seed", uint64_t{0});
        } else {
            opts.dropout_mode = DropoutMode::Off;
        }
        const Qwen3Config cfg = ckpt.config;
        const LoraConfig lcfg = adapter.config;
        Trainer trainer = Trainer::create(cfg, std::move(ckpt.tensors), lcfg, opts);
        trainer.load_adapter(adapter.tensors);
        Qwen3LoraModel& model = trainer.model();

        if (kind == "logits") {
            const auto i = task.at("micro_batch").get<size_t>();
            const MicroBatch& mb = mbs.at(i);
            Tensor t({mb.batch, mb.seq, cfg.vocab_size});
            t.data = model.logits(mb);
            write_safetensors(out / ("logits_" + std::to_string(i) + ".safetensors"), TensorMap{{"logits", t}});
        } else if (kind == "grads") {
            const auto batch = pick(mbs, task.at("micro_batches"));
            int64_t sup = 0;
            for (const auto& mb : batch) sup += mb.validate(cfg.vocab_size);
            model.zero_grads();
            double loss_sum = 0.0;
            for (const auto& mb : batch) loss_sum += model.forward_backward(mb, DropoutContext{}, 1.0 / double(sup));
            std::vector<std::pair<int64_t, int64_t>> segs;
            for (const auto& s : model.adapter_slots()) segs.emplace_back(s.offset, Tensor::count(s.shape));
            const double norm = global_grad_norm(model.grads(), segs);
            write_safetensors(out / "grads.safetensors", model.adapter_gradients());
            write_json(out / "grads.json", json{{"loss", loss_sum / double(sup)},
                                                {"loss_sum", loss_sum},
                                                {"supervised", sup},
                                                {"grad_norm", norm}});
        } else if (kind == "train") {
            json res;
            res["updates"] = json::array();
            if (task.contains("eval")) res["eval_before"] = trainer.evaluate(pick(mbs, task.at("eval"))).loss;
            for (const auto& u : task.at("updates")) {
                const UpdateMetrics m = trainer.train_update(pick(mbs, u));
                res["updates"].push_back(json{{"update", m.update},
                                              {"loss", m.loss},
                                              {"grad_norm", m.grad_norm},
                                              {"lr", m.lr},
                                              {"supervised_tokens", m.supervised_tokens},
                                              {"wall_seconds", m.wall_seconds}});
            }
            if (task.contains("eval")) {
                const EvalResult e = trainer.evaluate(pick(mbs, task.at("eval")));
                res["eval_after"] = e.loss;
                res["eval_tokens"] = e.supervised_tokens;
            }
            if (task.contains("save_adapter"))
                save_peft_adapter(task.at("save_adapter").get<std::string>(), lcfg, trainer.adapter_tensors(), cfg,
                                  req.at("model").get<std::string>());
            write_json(out / "train.json", res);
        } else {
            throw tandem::Error("unknown task kind '" + kind + "'");
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3 || std::string(argv[1]) != "run") {
        std::cerr << "usage: engine_driver run REQUEST.json\n";
        return 2;
    }
    try {
        return run(argv[2]);
    } catch (const std::exception& e) {
        std::cerr << "engine_driver: " << e.what() << "\n";
        return 1;
    }
}
