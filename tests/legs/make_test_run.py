"""Builds a small run folder the way docs/run-folder.md describes, with Python only (transformers
for a random tiny Qwen3, peft for the initial adapter), so the reference leg can be tested on its
own. The real run folder is prepared by `tandem run`; this is a test fixture, not a second runner.
"""
import hashlib
import json
import os
import shutil
import sys

SOURCE_DIR = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
SHARED = os.path.join(SOURCE_DIR, "..", "shared")

TINY_CONFIG = dict(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                   max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1000000.0,
                   tie_word_embeddings=True, attention_bias=False)


def small_spec(name="fixture", **over):
    spec = {
        "name": name, "seed": 1234, "model": {"config": "inline"},
        "lora": {"rank": 4, "alpha": 8, "use_rslora": True, "dropout": 0.0,
                 "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
        "optimizer": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
        "schedule": {"warmup_fraction": 0.03}, "clip": 1.0,
        "batch": {"micro_batch": 2, "accumulation": 2, "epochs": 1, "max_updates": 4},
        "sequence": {"max_len": 128},
        "corpus": {"sources": ["pubmedqa"], "heldout_fraction": 0.25, "max_records_per_source": 24},
        "eval": {"interval": 2, "prefix_size": 4}, "checkpoint": {"interval": 2},
        "dropout_masks": "native", "plan": "shared", "template": "qwen3", "l3_records": 8,
        "overrides": {},
    }
    for k, v in over.items():
        spec[k] = v
    return spec


def pubmedqa_records(n):
    with open(os.path.join(SHARED, "data", "corpora", "pubmedqa", "ori_pqal.json"), encoding="utf-8") as f:
        rows = json.load(f)
    records = []
    for i, (pmid, row) in enumerate(list(rows.items())[:n]):
        context = " ".join(row["CONTEXTS"])
        records.append({"index": i, "id": f"pubmedqa:{pmid}", "source": "pubmedqa",
                         "messages": [{"role": "user", "content": f"{context[:200]}\n\nQuestion: {row['QUESTION']}"},
                                      {"role": "assistant", "content": row["LONG_ANSWER"]}]})
    return records


def make_run(path, spec):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    os.makedirs(path, exist_ok=True)
    spec_dump = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    with open(os.path.join(path, "experiment.json"), "w") as f:
        json.dump({"spec": spec, "spec_sha256": hashlib.sha256(spec_dump.encode()).hexdigest()}, f)
    shutil.copytree(os.path.join(SHARED, "assets", "qwen3-tokenizer"), os.path.join(path, "tokenizer"),
                    dirs_exist_ok=True)
    os.makedirs(os.path.join(path, "corpus"), exist_ok=True)
    records = pubmedqa_records(spec["corpus"]["max_records_per_source"])
    n_held = int(len(records) * spec["corpus"]["heldout_fraction"])
    heldout = list(range(len(records) - n_held, len(records)))
    train = list(range(len(records) - n_held))
    for r in records:
        r["split"] = "heldout" if r["index"] in heldout else "train"
    with open(os.path.join(path, "corpus", "records.jsonl"), "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with open(os.path.join(path, "corpus", "split.json"), "w") as f:
        json.dump({"seed": spec["seed"], "heldout_fraction": spec["corpus"]["heldout_fraction"],
                   "train": train, "heldout": heldout}, f)
    with open(os.path.join(path, "corpus", "eval_prefix.json"), "w") as f:
        json.dump({"size": spec["eval"]["prefix_size"], "indices": heldout[:spec["eval"]["prefix_size"]]}, f)
    mb, acc = spec["batch"]["micro_batch"], spec["batch"]["accumulation"]
    micro = [train[i:i + mb] for i in range(0, len(train), mb)]
    updates = [micro[i:i + acc] for i in range(0, len(micro), acc)][:spec["batch"]["max_updates"]]
    with open(os.path.join(path, "plan.json"), "w") as f:
        json.dump({"version": 1, "seed": spec["seed"], "micro_batch": mb, "accumulation": acc,
                   "max_len": spec["sequence"]["max_len"], "epochs": 1, "updates": updates}, f)

    torch.manual_seed(spec["seed"])
    model = Qwen3ForCausalLM(Qwen3Config(**TINY_CONFIG)).float()
    model.save_pretrained(os.path.join(path, "base"))
    lora = spec["lora"]
    peft_model = get_peft_model(model, LoraConfig(r=lora["rank"], lora_alpha=lora["alpha"],
                                                  use_rslora=lora["use_rslora"], lora_dropout=lora["dropout"],
                                                  target_modules=lora["targets"], task_type="CAUSAL_LM"))
    # B is zero at init; give it small values so that the adapter changes the loss from step 0.
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn_like(p) * 0.02)
    peft_model.save_pretrained(os.path.join(path, "init"))
    # peft writes the adapter into init/ directly (no adapter name sub-folder for "default").
    return path


if __name__ == "__main__":
    make_run(sys.argv[1], small_spec())
