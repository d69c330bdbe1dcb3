"""tandem's CPU engine against transformers + peft (docs/engine.md).

A tiny random Qwen3 (transformers, fixed seed, save_pretrained) and a peft rsLoRA adapter with a
NON-zero B (so gradients of A are non-trivial) are written to a temporary folder; tests/engine's
engine_driver runs our engine on the same files and batches (right padding included) and the
numbers are compared with the reference computed here:

  logits        max|diff| / max|ref| <= 1e-5 (real positions; padded rows are never used)
  loss          relative <= 1e-6
  LoRA grads    ||diff|| / ||ref|| <= 1e-5 for every tensor; pre-clip grad norm relative <= 1e-6
  10 updates    docs/spec.md optimizer / schedule / clipping / accumulation: per-update loss relative <= 1e-5,
                dropout off, and separately with shared dropout masks reproduced here in Python
  held-out CE   of an adapter trained by tandem, loaded by peft: relative <= 1e-6
  masks         the shared dropout generator: C++ == tandem_leg/torch/shared_dropout.py (sdk/python), bit for bit

Tolerances and why: docs/engine.md ("Tolerances").
"""

import copy
import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

SOURCE_DIR = pathlib.Path(os.environ.get("TANDEM_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(SOURCE_DIR / "sdk" / "python"))
from tandem_leg.torch import shared_dropout  # noqa: E402

torch.set_num_threads(1)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

VOCAB = 1000
R, ALPHA = 8, 16
SEED = 1234
TARGETS = list(shared_dropout.PROJECTIONS)


def driver() -> str:
    path = os.environ.get("TANDEM_ENGINE_DRIVER")
    assert path and os.path.exists(path), "TANDEM_ENGINE_DRIVER must name the built engine_driver"
    return path


def run_driver(workdir: pathlib.Path, request: dict, chunks=(8, 256)) -> pathlib.Path:
    """chunks = (tokens, vocabulary rows) per LM-head chunk; the default exercises the two-pass path
    with a ragged last vocabulary chunk, (n, 0) the single-pass path over the whole vocabulary."""
    out = workdir / "out"
    request = dict(request, out=str(out), threads=1, ce_token_chunk=chunks[0], ce_vocab_chunk=chunks[1])
    workdir.mkdir(parents=True, exist_ok=True)
    req_path = workdir / "request.json"
    req_path.write_text(json.dumps(request))
    proc = subprocess.run([driver(), "run", str(req_path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"engine_driver failed: {proc.stderr}"
    return out


# ---------------------------------------------------------------------------------------------
# fixtures: model, adapters, batches

def make_model_dir(root: pathlib.Path) -> pathlib.Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
                      rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True, initializer_range=0.08,
                      torch_dtype="float32")
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(cfg).float()
    with torch.no_grad():  # non-trivial norm weights so a mis-bound norm cannot pass
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    d = root / "model"
    model.save_pretrained(d, safe_serialization=True)
    return d


def load_base(model_dir):
    from transformers import Qwen3ForCausalLM

    m = Qwen3ForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return m


def make_adapter_dir(root: pathlib.Path, model_dir: pathlib.Path, targets=TARGETS, name="adapter") -> pathlib.Path:
    from peft import LoraConfig, get_peft_model

    base = load_base(model_dir)
    pcfg = LoraConfig(r=R, lora_alpha=ALPHA, use_rslora=True, lora_dropout=0.0, target_modules=list(targets),
                      bias="none", task_type="CAUSAL_LM")
    torch.manual_seed(1)
    pm = get_peft_model(base, pcfg)
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    d = root / name
    pm.save_pretrained(d)
    return d


def with_dropout(adapter_dir: pathlib.Path, root: pathlib.Path, p: float) -> pathlib.Path:
    d = root / f"adapter_p{p}"
    d.mkdir(exist_ok=True)
    (d / "adapter_model.safetensors").write_bytes((adapter_dir / "adapter_model.safetensors").read_bytes())
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    cfg["lora_dropout"] = p
    (d / "adapter_config.json").write_text(json.dumps(cfg))
    return d


def make_micro_batch(rng, batch, seq, lengths):
    ids = rng.integers(0, VOCAB, size=(batch, seq)).astype(np.int64)
    sup = np.zeros((batch, seq), dtype=np.uint8)
    for b, n in enumerate(lengths):
        ids[b, n:] = 0  # padding id (never attended, never a label)
        prompt = max(1, n // 3)
        sup[b, prompt:n] = 1
    return {"batch": batch, "seq": seq, "ids": ids.reshape(-1).tolist(), "supervised": sup.reshape(-1).tolist(),
            "lengths": list(lengths)}


def make_batches(seed, count):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        seq = int(rng.integers(8, 17))
        lengths = [seq, int(rng.integers(3, seq + 1))]
        rng.shuffle(lengths)
        out.append(make_micro_batch(rng, 2, seq, lengths))
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("engine_ref")
    model_dir = make_model_dir(root)
    adapter_dir = make_adapter_dir(root, model_dir)
    return root, model_dir, adapter_dir


def tensors(mb):
    ids = torch.tensor(mb["ids"], dtype=torch.long).view(mb["batch"], mb["seq"])
    sup = torch.tensor(mb["supervised"], dtype=torch.bool).view(mb["batch"], mb["seq"])
    mask = torch.zeros(mb["batch"], mb["seq"], dtype=torch.long)
    for b, n in enumerate(mb["lengths"]):
        mask[b, :n] = 1
    return ids, sup, mask


def ce_sum(model, mb):
    """Sum of token losses over the supervised labels (labels shifted by one, as transformers does)."""
    ids, sup, mask = tensors(mb)
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    sel = sup[:, 1:]
    return F.cross_entropy(logits[:, :-1][sel], ids[:, 1:][sel], reduction="sum"), int(sel.sum())


def update_loss(pm, batch, before=lambda k: None):
    """One update of the reference over its micro-batches, the gradients accumulated into pm's: each
    micro-batch's token-loss sum over the update's supervised tokens (docs/spec.md normalisation).
    before(k) runs ahead of micro-batch k. Returns (the update's loss, its supervised tokens)."""
    total = sum(int(torch.tensor(mb["supervised"]).view(mb["batch"], mb["seq"])[:, 1:].sum()) for mb in batch)
    loss_sum = 0.0
    for k, mb in enumerate(batch):
        before(k)
        s, _ = ce_sum(pm, mb)
        (s / total).backward()
        loss_sum += float(s.detach())
    return loss_sum / total, total


def load_peft(model_dir, adapter_dir, trainable=True):
    from peft import PeftModel

    return PeftModel.from_pretrained(load_base(model_dir), adapter_dir, is_trainable=trainable)


def lora_params(pm):
    return [(n.replace(".default", ""), p) for n, p in pm.named_parameters() if p.requires_grad]


def rel(a, b):
    return abs(a - b) / abs(b)


# ---------------------------------------------------------------------------------------------

def test_shared_dropout_generator_matches_python(setup):
    root, _, _ = setup
    cases = [(SEED, 0, 0, 0, 0, 0.05), (SEED, 7, 1, 1, 6, 0.1), (2**63 + 5, 123456, 7, 27, 3, 0.5)]
    for seed, update, micro, layer, proj, p in cases:
        n = 4099
        out = run_driver(root / "mask", {"tasks": [{"kind": "mask", "seed": seed, "update": update,
                                                     "micro_batch": micro, "layer": layer, "projection": proj,
                                                     "n": n, "p": p}]})
        ours = np.array(json.loads((out / "mask.json").read_text())["keep"], dtype=bool)
        key = shared_dropout.shared_key(seed, update, micro, layer, proj)
        ref = shared_dropout.keep_mask(key, n, p)
        assert np.array_equal(ours, ref), f"mask differs for {(seed, update, micro, layer, proj, p)}"
        assert ours[:300].tolist() == shared_dropout.keep_mask_python(key, 300, p)
        assert abs(1.0 - ours.mean() - p) < 0.05  # the mask drops about p of the elements


@pytest.mark.parametrize("chunks", [(8, 256), (64, 0)], ids=["two-pass", "single-pass"])
def test_logits_loss_and_lora_gradients_match_peft(setup, chunks):
    root, model_dir, adapter_dir = setup
    mbs = make_batches(11, 2)
    out = run_driver(root / f"grads_{chunks[0]}_{chunks[1]}", {
        "model": str(model_dir), "adapter": str(adapter_dir), "micro_batches": mbs,
        "tasks": [{"kind": "logits", "micro_batch": 0}, {"kind": "logits", "micro_batch": 1},
                  {"kind": "grads", "micro_batches": [0, 1]}]}, chunks=chunks)
    from safetensors.numpy import load_file

    pm = load_peft(model_dir, adapter_dir)
    pm.train()  # dropout is 0 in this adapter; train mode as in training
    # logits on real (non-padded) positions
    for i, mb in enumerate(mbs):
        ids, sup, mask = tensors(mb)
        with torch.no_grad():
            ref = pm(input_ids=ids, attention_mask=mask).logits.float().numpy()
        ours = load_file(str(out / f"logits_{i}.safetensors"))["logits"]
        real = mask.numpy().astype(bool)
        err = np.abs(ours[real] - ref[real]).max() / np.abs(ref[real]).max()
        print(f"logits micro-batch {i}: max|diff|/max|ref| = {err:.3e}")
        assert err <= 1e-5

    # loss and accumulated gradients of one update (two micro-batches, docs/spec.md normalisation)
    pm.zero_grad()
    ref_loss, total = update_loss(pm, mbs)
    params = lora_params(pm)
    ref_norm = float(torch.nn.utils.clip_grad_norm_([p for _, p in params], max_norm=1e30))
    res = json.loads((out / "grads.json").read_text())
    print(f"loss: ours {res['loss']!r} ref {ref_loss!r} rel {rel(res['loss'], ref_loss):.3e}")
    print(f"grad norm: ours {res['grad_norm']!r} ref {ref_norm!r} rel {rel(res['grad_norm'], ref_norm):.3e}")
    assert res["supervised"] == total
    assert rel(res["loss"], ref_loss) <= 1e-6
    assert rel(res["grad_norm"], ref_norm) <= 1e-6
    grads = load_file(str(out / "grads.safetensors"))
    assert sorted(grads) == sorted(n for n, _ in params)
    worst = 0.0
    for name, p in params:
        ref = p.grad.numpy()
        assert float(np.linalg.norm(ref)) > 0.0, f"reference gradient of {name} is zero: the test would be vacuous"
        e = float(np.linalg.norm(grads[name] - ref) / np.linalg.norm(ref))
        worst = max(worst, e)
        assert e <= 1e-5, f"{name}: ||diff||/||ref|| = {e:.3e}"
    print(f"worst LoRA gradient ||diff||/||ref|| = {worst:.3e}")


class SharedDropout(torch.nn.Module):
    """Replaces peft's lora_dropout module: the mask of docs/spec.md §Recipe's shared generator."""

    ctx = {"update": 0, "micro_batch": 0}

    def __init__(self, layer, projection, p):
        super().__init__()
        self.layer, self.projection, self.p = layer, projection, p

    def forward(self, x):
        if not self.training:
            return x
        mult = shared_dropout.shared_multiplier(SEED, self.ctx["update"], self.ctx["micro_batch"], self.layer,
                                                self.projection, tuple(x.shape), self.p)
        return x * torch.from_numpy(mult)


def install_shared_dropout(pm, p):
    import re

    count = 0
    for name, module in pm.named_modules():
        m = re.search(r"layers\.(\d+)\.(self_attn|mlp)\.(\w+_proj)$", name)
        if m and hasattr(module, "lora_dropout"):
            module.lora_dropout["default"] = SharedDropout(int(m.group(1)), m.group(3), p)
            count += 1
    assert count == 2 * 7


def reference_training(pm, mbs, updates, lr, total_updates, shared_p=None):
    from transformers import get_cosine_schedule_with_warmup

    params = [p for _, p in lora_params(pm)]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    sched = get_cosine_schedule_with_warmup(opt, math.ceil(0.03 * total_updates), total_updates)
    if shared_p is not None:
        install_shared_dropout(pm, shared_p)
    pm.train()
    losses, norms, lrs = [], [], []
    for u, idx in enumerate(updates):
        batch = [mbs[i] for i in idx]
        opt.zero_grad()
        loss, _ = update_loss(pm, batch, lambda k: SharedDropout.ctx.update(update=u, micro_batch=k))
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, 1.0)))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        losses.append(loss)
    return losses, norms, lrs


def eval_loss(pm, mbs):
    pm.eval()
    s_all, n_all = 0.0, 0
    with torch.no_grad():
        for mb in mbs:
            s, n = ce_sum(pm, mb)
            s_all += float(s)
            n_all += n
    return s_all / n_all


@pytest.mark.parametrize("dropout", ["off", "shared"])
def test_ten_updates_match_torch(setup, dropout):
    root, model_dir, adapter_dir = setup
    p = 0.1 if dropout == "shared" else 0.0
    adir = with_dropout(adapter_dir, root, p)
    n_updates, lr = 10, 2e-3
    mbs = make_batches(21, 2 * n_updates + 3)
    updates = [[2 * u, 2 * u + 1] for u in range(n_updates)]
    held_out = [2 * n_updates, 2 * n_updates + 1, 2 * n_updates + 2]
    trained = root / f"trained_{dropout}"
    out = run_driver(root / f"train_{dropout}", {
        "model": str(model_dir), "adapter": str(adir), "micro_batches": mbs,
        "tasks": [{"kind": "train", "updates": updates, "lr": lr, "total_updates": n_updates,
                   "max_grad_norm": 1.0, "dropout_mode": dropout, "seed": SEED, "eval": held_out,
                   "save_adapter": str(trained)}]})
    res = json.loads((out / "train.json").read_text())

    pm = load_peft(model_dir, adir)
    ref_before = eval_loss(pm, [mbs[i] for i in held_out])
    losses, norms, lrs = reference_training(pm, mbs, updates, lr, n_updates, shared_p=p if p > 0 else None)
    assert rel(res["eval_before"], ref_before) <= 1e-6
    worst = 0.0
    for u, (ours, ref, gn, lr_ref) in enumerate(zip(res["updates"], losses, norms, lrs)):
        e = rel(ours["loss"], ref)
        worst = max(worst, e)
        print(f"[{dropout}] update {u}: loss ours {ours['loss']:.9f} ref {ref:.9f} rel {e:.2e}; "
              f"grad norm ours {ours['grad_norm']:.7f} ref {gn:.7f}; lr {ours['lr']:.3e} ref {lr_ref:.3e}")
        assert e <= 1e-5, f"update {u}: loss rel diff {e:.3e}"
        # lr = peak * warmup/cosine factor: a handful of double operations, and 1 + cos(pi p) cancels near the
        # end, so the error is a few ulps of the peak lr (not of lr_ref); 64 eps * peak bounds it on any CPU.
        assert abs(ours["lr"] - lr_ref) <= 64 * sys.float_info.epsilon * lr, (ours["lr"], lr_ref)
        assert rel(ours["grad_norm"], gn) <= 1e-4
    print(f"[{dropout}] worst per-update loss rel diff {worst:.3e}")
    # the run really trained: the held-out CE moved
    assert abs(res["eval_after"] - res["eval_before"]) > 1e-3

    # an adapter trained by tandem, loaded by peft: same held-out CE
    pm_ours = load_peft(model_dir, trained, trainable=False)
    peft_eval = eval_loss(pm_ours, [mbs[i] for i in held_out])
    print(f"[{dropout}] held-out CE of tandem's adapter: ours {res['eval_after']!r} peft {peft_eval!r} "
          f"rel {rel(res['eval_after'], peft_eval):.3e}")
    assert rel(res["eval_after"], peft_eval) <= 1e-6


def test_long_sequence_logits_and_loss_match(setup):
    """Positions up to 511 (docs/spec.md's max sequence): RoPE tables built in float32 as transformers does."""
    root, model_dir, adapter_dir = setup
    rng = np.random.default_rng(5)
    mbs = [make_micro_batch(rng, 2, 512, [512, 300])]
    out = run_driver(root / "long", {
        "model": str(model_dir), "adapter": str(adapter_dir), "micro_batches": mbs,
        "tasks": [{"kind": "logits", "micro_batch": 0}, {"kind": "grads", "micro_batches": [0]}]}, chunks=(64, 0))
    from safetensors.numpy import load_file

    pm = load_peft(model_dir, adapter_dir)
    pm.train()
    ids, sup, mask = tensors(mbs[0])
    pm.zero_grad()
    s, n = ce_sum(pm, mbs[0])
    (s / n).backward()
    logits = pm(input_ids=ids, attention_mask=mask).logits.detach().float().numpy()
    ours = load_file(str(out / "logits_0.safetensors"))["logits"]
    real = mask.numpy().astype(bool)
    err = np.abs(ours[real] - logits[real]).max() / np.abs(logits[real]).max()
    res = json.loads((out / "grads.json").read_text())
    print(f"long sequence: logits max|diff|/max|ref| = {err:.3e}, loss rel {rel(res['loss'], float(s.detach()) / n):.3e}")
    assert err <= 1e-5
    assert rel(res["loss"], float(s.detach()) / n) <= 1e-6
    grads = load_file(str(out / "grads.safetensors"))
    for name, p in lora_params(pm):
        e = float(np.linalg.norm(grads[name] - p.grad.numpy()) / np.linalg.norm(p.grad.numpy()))
        assert e <= 1e-5, f"{name}: ||diff||/||ref|| = {e:.3e}"


def test_subset_of_projections_matches_peft(setup):
    """LoRA on a subset (q, v, down): the other projections are plain frozen linears."""
    root, model_dir, _ = setup
    adapter_dir = make_adapter_dir(root, model_dir, targets=("q_proj", "v_proj", "down_proj"), name="adapter_subset")
    mbs = make_batches(31, 2)
    out = run_driver(root / "subset", {
        "model": str(model_dir), "adapter": str(adapter_dir), "micro_batches": mbs,
        "tasks": [{"kind": "grads", "micro_batches": [0, 1]}]}, chunks=(64, 0))
    from safetensors.numpy import load_file

    pm = load_peft(model_dir, adapter_dir)
    pm.train()
    pm.zero_grad()
    ref_loss, _ = update_loss(pm, mbs)
    res = json.loads((out / "grads.json").read_text())
    assert rel(res["loss"], ref_loss) <= 1e-6
    grads = load_file(str(out / "grads.safetensors"))
    params = lora_params(pm)
    assert sorted(grads) == sorted(n for n, _ in params)
    assert len(grads) == 2 * 3 * 2  # 2 layers x 3 projections x (A, B)
    for name, p in params:
        e = float(np.linalg.norm(grads[name] - p.grad.numpy()) / np.linalg.norm(p.grad.numpy()))
        assert e <= 1e-5, f"{name}: ||diff||/||ref|| = {e:.3e}"
