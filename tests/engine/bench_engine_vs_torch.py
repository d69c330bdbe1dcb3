"""Engine (CPU) vs PyTorch + peft on the same CPU training config and data (docs/engine.md).

Not a test: prints tokens/s for both, the ratio, and the peak resident memory of both (each side runs
in its own process so peak RSS is its own). Figures go to docs/benchmarks.md ("Engine (CPU)").

    $REFENV/bin/python tests/engine/bench_engine_vs_torch.py --bench BUILD/tests/engine/bench_engine \
        [--threads 2] [--updates 4] [--warmup 1]
    $REFENV/bin/python tests/engine/bench_engine_vs_torch.py --write-request req.json [--threads 1]
        (then BUILD/tests/engine/bench_engine req.json, e.g. two builds interleaved)

Config: hidden 512, 4 layers, 8 heads / 4 kv heads, head_dim 64, intermediate 1536, vocabulary
151,936 rows, sequence 256, micro-batch 2 x accumulation 2, rsLoRA r 16 / alpha 32 on all seven
projections, dropout 0.05, AdamW + clipping. Sequences have a prompt (unsupervised) of 20-40% of their
length and right padding (lengths 160..256), as SFT data does.
"""

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

CONFIG = dict(vocab_size=151936, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=4096,
              rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, initializer_range=0.02)
LORA = dict(r=16, alpha=32, dropout=0.05)
SEQ, MICRO, ACCUM = 256, 2, 2


def make_batches(updates, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    mbs = []
    for _ in range(updates * ACCUM):
        lengths = [int(rng.integers(160, SEQ + 1)) for _ in range(MICRO)]
        lengths[0] = SEQ  # the longest sequence sets the padded length
        ids = rng.integers(0, 151669, size=(MICRO, SEQ))
        sup = np.zeros((MICRO, SEQ), dtype=np.uint8)
        for b, n in enumerate(lengths):
            ids[b, n:] = 151643  # <|endoftext|> as padding
            sup[b, int(n * rng.uniform(0.2, 0.4)):n] = 1
        mbs.append({"batch": MICRO, "seq": SEQ, "ids": ids.reshape(-1).tolist(),
                    "supervised": sup.reshape(-1).tolist(), "lengths": lengths})
    plan = [[ACCUM * u + k for k in range(ACCUM)] for u in range(updates)]
    return mbs, plan


def torch_side(request_path):
    import torch
    import torch.nn.functional as F
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM, get_cosine_schedule_with_warmup

    req = json.load(open(request_path))
    torch.set_num_threads(req["threads"])
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = Qwen3ForCausalLM(Qwen3Config(**CONFIG)).float()
    pm = get_peft_model(model, LoraConfig(r=LORA["r"], lora_alpha=LORA["alpha"], lora_dropout=LORA["dropout"],
                                          use_rslora=True, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                           "gate_proj", "up_proj", "down_proj"]))
    setup = time.perf_counter() - t0
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    sched = get_cosine_schedule_with_warmup(opt, math.ceil(0.03 * len(req["updates"])), len(req["updates"]))
    pm.train()
    def cpu_seconds():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    timed_s, timed_cpu, timed_tokens, per_update = 0.0, 0.0, 0, []
    for u, idx in enumerate(req["updates"]):
        start = time.perf_counter()
        cpu0 = cpu_seconds()
        batch = [req["micro_batches"][i] for i in idx]
        total = sum(sum(mb["supervised"]) for mb in batch)
        tokens = sum(sum(mb["lengths"]) for mb in batch)
        opt.zero_grad()
        loss_sum = 0.0
        for mb in batch:
            ids = torch.tensor(mb["ids"]).view(mb["batch"], mb["seq"])
            sup = torch.tensor(mb["supervised"], dtype=torch.bool).view(mb["batch"], mb["seq"])
            mask = torch.zeros_like(ids)
            for b, n in enumerate(mb["lengths"]):
                mask[b, :n] = 1
            logits = pm(input_ids=ids, attention_mask=mask).logits
            sel = sup[:, 1:]
            s = F.cross_entropy(logits[:, :-1][sel].float(), ids[:, 1:][sel], reduction="sum")
            (s / total).backward()
            loss_sum += float(s.detach())
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        seconds = time.perf_counter() - start
        cpu = cpu_seconds() - cpu0
        per_update.append({"loss": loss_sum / total, "seconds": seconds})
        if u >= req["warmup_updates"]:
            timed_s += seconds
            timed_cpu += cpu
            timed_tokens += tokens
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"tokens_per_s": timed_tokens / timed_s, "timed_seconds": timed_s, "timed_cpu_seconds": timed_cpu, "timed_tokens": timed_tokens,
                      "setup_seconds": setup, "peak_rss_mb": peak, "updates": per_update}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", help="path to the built bench_engine")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--updates", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--write-request", metavar="PATH",
                    help="only write bench_engine's request (config, batches, threads) to PATH, e.g. to time two "
                         "engine builds against each other on the same batches")
    ap.add_argument("--torch-side", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_side:
        torch_side(args.torch_side)
        return
    mbs, plan = make_batches(args.updates)
    from transformers import Qwen3Config

    hf_config = Qwen3Config(**CONFIG).to_dict()
    req = {"config": hf_config, "lora": LORA, "threads": args.threads, "warmup_updates": args.warmup,
           "updates": plan, "micro_batches": mbs, "seed": 0}
    if args.write_request:
        json.dump(req, open(args.write_request, "w"))
        return
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "request.json")
        json.dump(req, open(path, "w"))
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
        ours = json.loads(subprocess.run([args.bench, path], check=True, capture_output=True, text=True,
                                         env=env).stdout)
        ref = json.loads(subprocess.run([sys.executable, __file__, "--torch-side", path], check=True,
                                        capture_output=True, text=True, env=env).stdout)
    sup = sum(sum(mb["supervised"]) for mb in mbs) / sum(sum(mb["lengths"]) for mb in mbs)
    print(f"config: hidden {CONFIG['hidden_size']}, {CONFIG['num_hidden_layers']} layers, vocab {CONFIG['vocab_size']}, "
          f"seq {SEQ}, micro-batch {MICRO} x accumulation {ACCUM}, threads {args.threads}, "
          f"{args.updates} updates ({args.warmup} warm-up not timed), supervised fraction {sup:.2f}")
    timed = args.updates - args.warmup
    for name, r in (("engine", ours), ("torch ", ref)):
        print(f"{name} : {r['tokens_per_s']:8.1f} tokens/s wall  {r['timed_tokens'] / r['timed_cpu_seconds']:8.1f} "
              f"tokens/CPU-s  peak RSS {r['peak_rss_mb']:8.1f} MB  ({r['timed_seconds'] / timed:.2f} s/update, "
              f"{r['timed_cpu_seconds'] / timed:.2f} CPU-s/update)")
    print(f"ratio  : {ours['tokens_per_s'] / ref['tokens_per_s']:.2f}x tokens/s wall, "
          f"{(ours['timed_tokens'] / ours['timed_cpu_seconds']) / (ref['timed_tokens'] / ref['timed_cpu_seconds']):.2f}x "
          f"tokens/CPU-s, {ours['peak_rss_mb'] / ref['peak_rss_mb']:.2f}x peak memory")
    print(f"load average during the run (1/5/15 min): {os.getloadavg()}")
    print("losses (engine vs torch; different random base weights, shown for sanity only): "
          + ", ".join(f"{a['loss']:.3f}/{b['loss']:.3f}" for a, b in zip(ours["updates"], ref["updates"])))


if __name__ == "__main__":
    main()
