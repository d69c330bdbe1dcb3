"""An independently written training loop in Python drives the engine through the C ABI (ctypes) and
is compared, update by update, with the reference stack (transformers + peft + torch AdamW, docs/spec.md §Recipe
schedule, clipping and per-update token normalisation) on the same generated files and batches."""
import ctypes as C
import json
import math
import os
from pathlib import Path

import pytest
import torch

LIB = os.environ.get("TANDEM_ENGINE_C_LIB") or str(
    Path(os.environ.get("TANDEM_BINARY_DIR", "build")) / "tests/engine_io/libtandem_engine_c_test.so")


class Options(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("lr", C.c_double), ("beta1", C.c_double), ("beta2", C.c_double),
                ("eps", C.c_double), ("weight_decay", C.c_double), ("total_updates", C.c_int64),
                ("warmup_updates", C.c_int64), ("max_grad_norm", C.c_double), ("dropout_mode", C.c_int32),
                ("threads", C.c_int32), ("seed", C.c_uint64)]


class MicroBatch(C.Structure):
    _fields_ = [("batch", C.c_int64), ("seq", C.c_int64), ("ids", C.POINTER(C.c_int32)),
                ("supervised", C.POINTER(C.c_int32)), ("lengths", C.POINTER(C.c_int32))]


class Metrics(C.Structure):
    _fields_ = [("update", C.c_int64), ("loss", C.c_double), ("grad_norm", C.c_double), ("lr", C.c_double),
                ("supervised_tokens", C.c_int64), ("wall_seconds", C.c_double)]


def load_lib():
    assert Path(LIB).exists(), f"C ABI test library not built at {LIB}"
    lib = C.CDLL(LIB)
    lib.tandem_last_error.restype = C.c_char_p
    lib.tandem_generate_base.argtypes = [C.c_char_p, C.c_char_p, C.c_uint64]
    lib.tandem_generate_adapter.argtypes = [C.c_char_p, C.c_char_p, C.c_uint64, C.c_int64, C.c_double, C.c_int32,
                                            C.c_double, C.c_char_p]
    lib.tandem_train_options_default.argtypes = [C.POINTER(Options)]
    lib.tandem_trainer_create.argtypes = [C.c_char_p, C.c_char_p, C.POINTER(Options), C.POINTER(C.c_void_p)]
    lib.tandem_trainer_step.argtypes = [C.c_void_p, C.POINTER(MicroBatch), C.c_size_t, C.POINTER(Metrics)]
    lib.tandem_trainer_eval.argtypes = [C.c_void_p, C.POINTER(MicroBatch), C.c_size_t, C.POINTER(C.c_double),
                                        C.POINTER(C.c_int64)]
    lib.tandem_trainer_destroy.argtypes = [C.c_void_p]
    return lib


def ok(lib, status):
    assert status == 0, lib.tandem_last_error().decode()


def make_batches():
    """Two micro-batches of two right-padded sequences: (ids, supervised, lengths) as Python lists."""
    out = []
    for m in range(2):
        seq, lengths = 14, [14 - 2 * m, 9 + m]
        ids = [[(11 * m + 7 * b + 3 * t * t + 5) % 97 for t in range(seq)] for b in range(2)]
        sup = [[1 if 4 <= t < lengths[b] else 0 for t in range(seq)] for b in range(2)]
        out.append((ids, sup, lengths))
    return out


def to_c(batches):
    keep, arr = [], (MicroBatch * len(batches))()
    for i, (ids, sup, lengths) in enumerate(batches):
        flat_ids = (C.c_int32 * (len(ids) * len(ids[0])))(*[x for row in ids for x in row])
        flat_sup = (C.c_int32 * (len(sup) * len(sup[0])))(*[x for row in sup for x in row])
        lens = (C.c_int32 * len(lengths))(*lengths)
        keep += [flat_ids, flat_sup, lens]
        arr[i] = MicroBatch(len(ids), len(ids[0]), flat_ids, flat_sup, lens)
    return arr, keep


def reference_run(base_dir, adapter_dir, batches, updates, lr):
    from peft import PeftModel
    from transformers import Qwen3ForCausalLM, get_cosine_schedule_with_warmup
    torch.manual_seed(0)
    model = Qwen3ForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")
    model = PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    sched = get_cosine_schedule_with_warmup(opt, math.ceil(0.03 * updates), updates)
    rows = []
    for _ in range(updates):
        total = sum(sum(map(sum, sup)) for _, sup, _ in batches)
        loss_sum = 0.0
        for ids, sup, lengths in batches:
            x = torch.tensor(ids)
            mask = torch.tensor([[1 if t < n else 0 for t in range(len(ids[0]))] for n in lengths])
            labels = torch.where(torch.tensor(sup) == 1, x, torch.full_like(x, -100))
            logits = model(input_ids=x, attention_mask=mask).logits
            ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                   labels[:, 1:].reshape(-1), ignore_index=-100, reduction="sum")
            (ce / total).backward()
            loss_sum += ce.item()
        lr_now = opt.param_groups[0]["lr"]
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0).item()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        rows.append((loss_sum / total, norm, lr_now))
    return rows


def test_python_loop_over_the_c_abi_matches_the_reference(tmp_path):
    lib = load_lib()
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "qwen3", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 48,
                               "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "head_dim": 8, "tie_word_embeddings": True, "rope_theta": 1e6}))
    base, adapter = tmp_path / "base", tmp_path / "init"
    ok(lib, lib.tandem_generate_base(str(base).encode(), str(cfg).encode(), 5))
    ok(lib, lib.tandem_generate_adapter(str(adapter).encode(), str(base).encode(), 77, 4, 8.0, 1, 0.0, None))

    updates, lr = 5, 1e-2
    opts = Options()
    lib.tandem_train_options_default(C.byref(opts))
    opts.lr, opts.total_updates, opts.dropout_mode, opts.threads = lr, updates, 0, 1
    handle = C.c_void_p()
    ok(lib, lib.tandem_trainer_create(str(base).encode(), str(adapter).encode(), C.byref(opts), C.byref(handle)))
    batches = make_batches()
    arr, _keep = to_c(batches)
    ours = []
    try:
        for _ in range(updates):
            m = Metrics()
            ok(lib, lib.tandem_trainer_step(handle, arr, len(batches), C.byref(m)))
            ours.append((m.loss, m.grad_norm, m.lr, m.supervised_tokens))
        assert lib.tandem_trainer_step(None, arr, 2, None) == 1 and b"NULL" in lib.tandem_last_error()
    finally:
        lib.tandem_trainer_destroy(handle)

    ref = reference_run(base, adapter, batches, updates, lr)
    tokens = sum(sum(map(sum, sup)) for _, sup, _ in batches)
    for u, ((loss, norm, lr_ours, tok), (rloss, rnorm, rlr)) in enumerate(zip(ours, ref)):
        assert tok == tokens
        assert lr_ours == pytest.approx(rlr, rel=1e-12, abs=0), u
        assert abs(loss - rloss) <= 1e-5 * abs(rloss), (u, loss, rloss)
        assert abs(norm - rnorm) <= 1e-5 * abs(rnorm), (u, norm, rnorm)
    worst_loss = max(abs(o[0] - r[0]) / abs(r[0]) for o, r in zip(ours, ref))
    worst_norm = max(abs(o[1] - r[1]) / abs(r[1]) for o, r in zip(ours, ref))
    print(f"C ABI vs reference over {updates} updates: max rel loss diff {worst_loss:.3e}, "
          f"max rel grad-norm diff {worst_norm:.3e}, loss {ours[0][0]:.6f} -> {ours[-1][0]:.6f}")
    assert ours[-1][0] < ours[0][0], "training must lower the loss"
