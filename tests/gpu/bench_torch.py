#!/usr/bin/env python3
"""PyTorch + transformers + peft leg of the GPU benchmark (docs/benchmarks.md; run by scripts/gpu-check).

The same workload as tandem_cuda_bench: Qwen3-0.6B architecture (docs/spec.md §Recipe) with randomly initialised
weights (speed does not depend on the values), rsLoRA r 16 / alpha 32 / dropout 0.05 on all seven
projections, micro-batch 2 x accumulation 8 at sequence 512 (every token real, the first --prompt
tokens of each sequence unsupervised), float32 with TF32 OFF for matmul and cuDNN, AdamW (torch's
default foreach implementation) with the transformers cosine/warmup schedule, clip_grad_norm_ 1.0,
loss = sum of token losses / supervised tokens of the whole update (num_items_in_batch, as the
transformers Trainer does). Attention is transformers' default ("sdpa").

Runs --warmup updates, then times --timed updates with torch.cuda.synchronize() around each one.
Prints one JSON line on stdout: seconds/update (mean and median), tokens/s, peak device memory
(torch.cuda.max_memory_allocated / max_memory_reserved over the timed window).
"""
import argparse
import json
import statistics
import sys
import time

import torch


def build(args, device):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if args.config == "qwen3-0.6b":
        dims = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                    num_attention_heads=16, num_key_value_heads=8, head_dim=128)
    elif args.config == "tiny":  # for a CPU smoke run of this script
        dims = dict(vocab_size=151936, hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=32)
    else:
        sys.exit(f"bench_torch.py: unknown --config {args.config}")
    cfg = Qwen3Config(**dims, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1e6,
                      tie_word_embeddings=True, attention_bias=False)
    torch.manual_seed(1)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(torch.float32)
    lora = LoraConfig(r=16, lora_alpha=32, use_rslora=True, lora_dropout=0.05, bias="none", task_type="CAUSAL_LM",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, lora)
    model.train()
    return model, cfg


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="qwen3-0.6b")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--micro-batch", type=int, default=2)
    p.add_argument("--accumulation", type=int, default=8)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--timed", type=int, default=40)
    p.add_argument("--prompt", type=int, default=64)
    args = p.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    from transformers import get_cosine_schedule_with_warmup

    t0 = time.perf_counter()
    model, cfg = build(args, device)
    sync()
    load_s = time.perf_counter() - t0
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    total = args.warmup + args.timed
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=max(1, -(-3 * total // 100)), num_training_steps=total)

    g = torch.Generator().manual_seed(100)
    batches = []
    for _ in range(args.accumulation):
        ids = torch.randint(0, 151669, (args.micro_batch, args.seq), generator=g)
        labels = ids.clone()
        labels[:, : args.prompt] = -100
        batches.append((ids.to(device), torch.ones_like(ids).to(device), labels.to(device)))
    supervised = sum(int((b[2][:, 1:] != -100).sum()) for b in batches)
    n_items = torch.tensor(supervised, device=device)

    times, losses, norms = [], [], []
    for step in range(total):
        if step == args.warmup and cuda:
            torch.cuda.reset_peak_memory_stats(device)
        sync()
        start = time.perf_counter()
        loss_sum = 0.0
        for ids, mask, labels in batches:
            out = model(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=n_items)
            out.loss.backward()
            loss_sum += out.loss.detach()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss_sum))  # synchronises
        norms.append(float(norm))
        sync()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)

    median = statistics.median(times)
    tokens = args.micro_batch * args.accumulation * args.seq
    res = {
        "leg": "pytorch+peft", "config": args.config, "seq": args.seq, "micro_batch": args.micro_batch,
        "accumulation": args.accumulation, "warmup_updates": args.warmup, "timed_updates": args.timed,
        "load_s": round(load_s, 3), "s_per_update_mean": statistics.fmean(times), "s_per_update_median": median,
        "tokens_per_s": tokens / median,
        "peak_device_bytes": torch.cuda.max_memory_allocated(device) if cuda else 0,
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(device) if cuda else 0,
        "loss_first": losses[0], "loss_last": losses[-1], "grad_norm_last": norms[-1],
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "allow_tf32": [torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32],
    }
    print(json.dumps(res))


if __name__ == "__main__":
    main()
