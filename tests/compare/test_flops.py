"""The FLOP formula every leg is credited with (tandem/compare/flops.h) against an
independent count: torch.utils.flop_counter.FlopCounterMode around the reference leg's training
step (experiments/legs/bench_reference.py: transformers Qwen3 + peft rsLoRA, eager attention, the
LM head on the supervised rows, reference_leg.summed_loss) on the same micro-batch. Must agree within
2 %; the formula counts exactly what autograd runs, so it is checked to 1e-9 too.

The formula's side comes from `tandem bench engine --flops REQUEST` (the C++ code the runner and the
bench use), on requests in the bench's own format.
"""
import json
import os
import random
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

SOURCE = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "experiments", "legs"))
from bench_reference import build_model, collate_ids  # noqa: E402
from reference_leg import summed_loss  # noqa: E402

TANDEM = os.environ.get("TANDEM_BIN", "tandem")


def config(hidden, inter, layers, heads, kv, head_dim, vocab, tied):
    return dict(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, tie_word_embeddings=tied,
                max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1e6, model_type="qwen3")


CASES = {
    # the three bench shapes' structure at test size (the formula has no size-dependent branch)
    "clinical-tiny-like": (config(128, 384, 2, 4, 2, 32, 1000, True), None, 2, 64),
    "qwen3-0.6b-like": (config(256, 768, 2, 16, 8, 32, 1500, True), None, 2, 48),
    "odd": (config(96, 200, 3, 6, 2, 24, 777, False), None, 3, 40),
    # subsets of the targets: which input gradients autograd needs depends on them
    "q-v-only": (config(64, 160, 2, 4, 2, 16, 500, True), ["q_proj", "v_proj"], 2, 32),
    "o-and-mlp-only": (config(64, 160, 2, 4, 2, 16, 500, True), ["o_proj", "down_proj"], 2, 32),
    "gate-only": (config(64, 160, 2, 4, 2, 16, 500, True), ["gate_proj"], 2, 32),
}


def request(cfg, targets, batch, seq, seed):
    rng = random.Random(seed)
    mbs = []
    for _ in range(2):
        lengths = [seq] + [rng.randint(seq // 2, seq) for _ in range(batch - 1)]
        ids, sup = [], []
        for n in lengths:
            prompt = rng.randint(1, n // 2)
            ids += [rng.randrange(cfg["vocab_size"]) for _ in range(n)] + [0] * (seq - n)
            sup += [0] * prompt + [1] * (n - prompt) + [0] * (seq - n)
        mbs.append({"batch": batch, "seq": seq, "ids": ids, "supervised": sup, "lengths": lengths})
    lora = {"r": 16, "alpha": 32, "dropout": 0.0}
    if targets:
        lora["targets"] = targets
    return {"config": cfg, "lora": lora, "threads": 1, "warmup_updates": 0, "updates": [[0], [1]], "micro_batches": mbs}


@pytest.mark.parametrize("name", sorted(CASES))
def test_formula_matches_flop_counter_mode(name, tmp_path):
    cfg, targets, batch, seq = CASES[name]
    req = request(cfg, targets, batch, seq, seed=len(name))
    path = tmp_path / "request.json"
    path.write_text(json.dumps(req))
    ours = json.loads(subprocess.run([TANDEM, "bench", "engine", "--flops", str(path)], check=True,
                                     capture_output=True, text=True).stdout)
    assert len(ours) == len(req["micro_batches"])
    torch.set_num_threads(1)
    model = build_model(torch, req)
    model.train()
    for mb, count in zip(req["micro_batches"], ours):
        ids, attn, labels = collate_ids(torch, mb)
        assert count["supervised"] == int((labels[:, 1:] != -100).sum())
        with FlopCounterMode(display=False) as fc:
            s, _ = summed_loss(torch, model, ids, attn, labels)
            s.backward()
        training = fc.get_total_flops()
        with torch.no_grad(), FlopCounterMode(display=False) as fc:
            summed_loss(torch, model, ids, attn, labels)
        evaluation = fc.get_total_flops()
        model.zero_grad(set_to_none=True)
        for what, mine, theirs in (("training", count["total"], training), ("evaluation", count["evaluation"], evaluation)):
            rel = abs(mine - theirs) / theirs
            print(f"{name} {what}: formula {mine:.6g}, FlopCounterMode {theirs:.6g}, relative difference {rel:.2e}")
            assert rel <= 0.02, f"{name} {what}: formula {mine}, FlopCounterMode {theirs}"
            assert rel <= 1e-9, f"{name} {what}: the formula no longer counts exactly what autograd runs"
