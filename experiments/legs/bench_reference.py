"""The PyTorch side of `tandem bench engine` (docs/benchmarks.md): the reference leg's training step
(reference_leg.py: transformers Qwen3 + peft rsLoRA, eager attention, deterministic algorithms, the
LM head on the supervised rows only, AdamW and clipping without foreach), timed on the micro-batches
of a request file that the engine side times too. Base and adapter weights are random (the time
does not depend on them); dropout is peft's own (the bench measures the stacks, not tandem's shared
mask generator).

    $REFENV/bin/python bench_reference.py REQUEST.json   ->  one JSON line on stdout

REQUEST: {"config": {HF config.json fields}, "lora": {"r", "alpha", "dropout"}, "threads": N,
          "warmup_updates": W, "updates": [[micro-batch index, ...], ...],
          "micro_batches": [{"batch", "seq", "ids", "supervised", "lengths"}]}
Output: {"seconds": [per timed update], "cpu_seconds": [...], "tokens": [...], "setup_seconds",
         "peak_rss_bytes", "losses": [...], "threads"}
"""

import json
import math
import os
import resource
import sys
import time


def collate_ids(torch, mb):
    """A request micro-batch as reference_leg.collate makes it: ids, attention mask, labels (-100
    where not supervised or padding)."""
    shape = (int(mb["batch"]), int(mb["seq"]))
    ids = torch.tensor(mb["ids"], dtype=torch.long).view(shape)
    attn = torch.zeros(shape, dtype=torch.long)
    for b, n in enumerate(mb["lengths"]):
        attn[b, :n] = 1
    sup = torch.tensor(mb["supervised"], dtype=torch.bool).view(shape) & attn.bool()
    labels = torch.where(sup, ids, torch.full_like(ids, -100))
    return ids, attn, labels


ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build_model(torch, req, attn="eager"):
    """The reference leg's model for a request: transformers Qwen3 (random weights) + peft rsLoRA."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(**req["config"])
    config._attn_implementation = attn
    model = Qwen3ForCausalLM(config).float()
    lora = req["lora"]
    return get_peft_model(model, LoraConfig(r=int(lora["r"]), lora_alpha=float(lora["alpha"]),
                                            lora_dropout=float(lora["dropout"]), use_rslora=True,
                                            target_modules=lora.get("targets", ALL_TARGETS)))


def main(argv):
    path = argv[1]
    attn = argv[2] if len(argv) > 2 else "eager"
    t_start = time.perf_counter()
    req = json.load(open(path))
    import torch
    from transformers import get_cosine_schedule_with_warmup

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from reference_leg import set_determinism, summed_loss

    torch.set_num_threads(int(req["threads"]))
    set_determinism(torch, torch.device("cpu"))
    model = build_model(torch, req, attn)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                                  foreach=False, fused=False)
    updates = req["updates"]
    scheduler = get_cosine_schedule_with_warmup(optimizer, math.ceil(0.03 * len(updates)), len(updates))
    model.train()
    setup = time.perf_counter() - t_start

    def cpu_seconds():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    out = {"seconds": [], "cpu_seconds": [], "tokens": [], "losses": []}
    for u, idx in enumerate(updates):
        t0, c0 = time.perf_counter(), cpu_seconds()
        optimizer.zero_grad(set_to_none=True)
        collated = [collate_ids(torch, req["micro_batches"][i]) for i in idx]
        n_update = sum(int((lab[:, 1:] != -100).sum().item()) for _, _, lab in collated)
        loss_total = 0.0
        for ids, attn_mask, labels in collated:
            s, _ = summed_loss(torch, model, ids, attn_mask, labels)
            (s / max(1, n_update)).backward()
            loss_total += float(s.item())
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=False)
        optimizer.step()
        scheduler.step()
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        out["losses"].append(loss_total / max(1, n_update))
        if u >= int(req["warmup_updates"]):
            out["seconds"].append(wall)
            out["cpu_seconds"].append(cpu)
            out["tokens"].append(sum(sum(req["micro_batches"][i]["lengths"]) for i in idx))
    out["setup_seconds"] = setup
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["threads"] = torch.get_num_threads()
    import peft
    import transformers
    out["versions"] = (f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__} "
                       f"({attn} attention)")
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv)
