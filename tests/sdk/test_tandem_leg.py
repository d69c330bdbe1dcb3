"""The tandem_leg package (sdk/python, standard library only) against independent oracles:
- protocol: every event kind with its documented fields is written as one JSON line that tandem's own
  parser accepts (`tandem import events` + h5py), and malformed events are refused before a byte is written;
- safetensors reader: every bfloat16 bit pattern, float16 and float64 values, upcast exactly as torch's
  .float() (the oracle), and our F32 writer read back by the `safetensors` library;
- digests: the sha256 of the float32 bytes (hashlib) and exact float64 sums (math.fsum), from bytes and numpy;
- the schedule: transformers' get_cosine_schedule_with_warmup, value for value;
- checkpoints: round trip, a corrupted file falls back to the older checkpoint;
- `pip install sdk/python` into a fresh virtual environment and an import from outside the checkout."""
import array
import io
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

SOURCE_DIR = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "sdk", "python"))

import tandem_leg  # noqa: E402
from tandem_leg import checkpoint, safetensors  # noqa: E402
from tandem_leg.protocol import EventWriter, ProtocolError  # noqa: E402

SHA = "ab" * 32


def hello(**over):
    h = dict(implementation="mine", leg="mine", language="python", stack="x", versions={"x": "1"}, device="cpu",
             device_name="cpu", threads=1, pid=os.getpid(), spec_sha256=SHA, resume=False)
    h.update(over)
    return h


def test_valid_events_are_written_and_nan_becomes_null():
    out = io.StringIO()
    w = EventWriter(out, clock=lambda: 1.0)
    w.emit("hello", **hello())
    w.emit("l2", tensors=[tandem_leg.digest("a", "base", [2], array.array("f", [1.0, -2.0]))])
    w.emit("l3", template="qwen3", max_len=8, records=[{"index": 0, "id": "r", "ids": [1, 2], "boundary": 1,
                                                         "supervised_count": 1, "full_length": 3, "truncated_at": 2,
                                                         "text": "t"}])
    w.emit("l1", heldout_ce=float("nan"), tokens=5, examples=2)
    w.emit("eval", update=0, heldout_ce=7.5, tokens=5)
    w.emit("timing", phase="setup", model_load_s=0.1, tokenize_s=0.2, setup_s=0.3)
    w.emit("step", update=0, loss=float("inf"), grad_norm=1.0, lr=0.0, tokens=3, input_tokens=9, wall_s=0.5)
    w.emit("step", update=1, loss=2.0, grad_norm=1.0, lr=1e-4, tokens=3)
    w.emit("eval", update=2, heldout_ce=7.0, tokens=5)
    w.emit("checkpoint", update=2, path="legs/mine/ckpt-000002")
    w.emit("timing", phase="train", train_s=1.0, total_s=2.0)
    w.emit("memory", peak_host_rss_bytes=10, peak_device_bytes=None)
    w.emit("done", updates=2, final="legs/mine/final")
    lines = [json.loads(l) for l in out.getvalue().splitlines()]
    assert [l["event"] for l in lines] == ["hello", "l2", "l3", "l1", "eval", "timing", "step", "step", "eval",
                                           "checkpoint", "timing", "memory", "done"]
    assert all(l["v"] == 1 and l["t"] == 1.0 for l in lines)
    assert lines[3]["heldout_ce"] is None and lines[6]["loss"] is None  # the protocol's NaN
    assert "NaN" not in out.getvalue() and "Infinity" not in out.getvalue()


@pytest.mark.parametrize("events, why", [
    ([("step", dict(update=0, loss=1.0, grad_norm=1.0, lr=0.0, tokens=1))], "before hello"),
    ([("hello", hello(spec_sha256="xyz"))], "spec_sha256"),
    ([("hello", hello()), ("hello", hello())], "twice"),
    ([("hello", hello()), ("step", dict(update=1, loss=1.0, grad_norm=1.0, lr=0.0, tokens=1))], "expected 0"),
    ([("hello", hello()), ("step", dict(update=0, loss=1.0, grad_norm=1.0, tokens=1))], "'lr' is required"),
    ([("hello", hello()), ("step", dict(update=0, loss="1", grad_norm=1.0, lr=0.0, tokens=1))], "'loss'"),
    ([("hello", hello()), ("step", dict(update=0, loss=1.0, grad_norm=1.0, lr=float("nan"), tokens=1))], "'lr'"),
    ([("hello", hello()), ("eval", dict(update=4, heldout_ce=1.0, tokens=1)),
      ("eval", dict(update=2, heldout_ce=1.0, tokens=1))], "goes back"),
    ([("hello", hello()), ("timing", dict(phase="setup", model_load_s=1.0))], "tokenize_s"),
    ([("hello", hello()), ("l2", dict(tensors=[{"name": "a", "kind": "weights", "shape": [1], "sum": 0.0,
                                                "sumsq": 0.0, "maxabs": 0.0, "sha256": SHA}]))], "kind"),
    ([("hello", hello()), ("error", dict(message="two\nlines"))], "one line"),
    ([("hello", hello()), ("done", dict(updates=0, final="f")), ("eval", dict(update=0, heldout_ce=1.0, tokens=1))],
     "after"),
    ([("hello", hello()), ("resume", dict(update=4, path="p")), ("l1", dict(heldout_ce=1.0, tokens=1, examples=1))],
     "resumed"),
    ([("hello", hello()), ("bogus", {})], "unknown event"),
])
def test_malformed_events_are_refused_before_writing(events, why):
    out = io.StringIO()
    w = EventWriter(out)
    *ok, (kind, fields) = events
    for k, f in ok:
        w.emit(k, **f)
    before = out.getvalue()
    with pytest.raises(ProtocolError) as e:
        w.emit(kind, **fields)
    assert why in str(e.value), str(e.value)
    assert out.getvalue() == before


def test_every_bf16_and_other_dtypes_read_as_torch_upcasts(tmp_path):
    from safetensors.torch import save_file

    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    # (No float16 NaN: torch's half -> float conversion does not keep NaN payloads, the engine's and ours do.)
    f16 = torch.tensor([0.0, -0.0, 1.0, 65504.0, 6e-8, 1e-5, -3.5, float("inf"), -float("inf")], dtype=torch.float16)
    f64 = torch.tensor([0.1, -1e-300, 1e300, 3.141592653589793, 2.0 ** -149 / 3], dtype=torch.float64)
    f32 = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
    save_file({"bf16": every.reshape(256, 256), "f16": f16, "f64": f64, "f32": f32}, tmp_path / "t.safetensors")
    got = safetensors.read(tmp_path / "t.safetensors")
    for name, t in (("bf16", every.reshape(256, 256)), ("f16", f16), ("f64", f64), ("f32", f32)):
        shape, values = got[name]
        assert shape == list(t.shape)
        assert values.tobytes() == t.float().numpy().tobytes(), name


def test_f32_writer_is_read_by_the_safetensors_library(tmp_path):
    from safetensors.torch import load_file

    a = array.array("f", [1.5, -2.25, 3e-38, 7.0, 0.0, -0.0])
    safetensors.write(tmp_path / "w.safetensors", {"b": ([2, 3], a), "a": ([0], array.array("f"))},
                      metadata={"format": "pt"})
    t = load_file(tmp_path / "w.safetensors")
    assert t["b"].shape == (2, 3) and t["b"].numpy().tobytes() == a.tobytes() and t["a"].numel() == 0
    assert (os.path.getsize(tmp_path / "w.safetensors") - 8 - len(a) * 4) % 8 == 0


def test_digest_of_bytes_and_of_a_numpy_array_agree_with_hashlib_and_float64_sums():
    """Both forms (the standard-library loop over float32 bytes, and numpy's path the reference leg and
    tandem_leg.torch.l2_digests take) against hashlib and math.fsum (exact float64 sums) as the oracle."""
    import hashlib

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((64, 33)) * 5).astype(np.float32)
    exact = {"sum": math.fsum(x.astype(np.float64).ravel()),
             "sumsq": math.fsum((x.astype(np.float64) ** 2).ravel()), "maxabs": float(np.abs(x).max())}
    for values in (x.tobytes(), x):
        d = tandem_leg.digest("w", "base", [64, 33], values)
        assert d["sha256"] == hashlib.sha256(x.astype("<f4").tobytes()).hexdigest() and d["shape"] == [64, 33]
        assert d["name"] == "w" and d["kind"] == "base"
        for k in ("sum", "sumsq", "maxabs"):  # sequential / pairwise float64 sums vs the exact sum: rounding only
            assert math.isclose(d[k], exact[k], rel_tol=1e-12), k
    with pytest.raises(ValueError, match="tensor w: shape"):
        tandem_leg.digest("w", "base", [64, 32], x)


def test_schedule_is_transformers_cosine_with_warmup():
    from transformers import get_cosine_schedule_with_warmup

    for total, fraction in ((30, 0.03), (7, 0.5), (1, 0.03), (500, 0.1)):
        w = tandem_leg.warmup_updates(fraction, total)
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-4)
        sched = get_cosine_schedule_with_warmup(opt, w, total)
        for t in range(total):
            assert tandem_leg.cosine_with_warmup_lr(1e-4, t, w, total) == sched.get_last_lr()[0], (total, t)
            opt.step()
            sched.step()


def test_checkpoints_round_trip_and_fall_back_past_a_damaged_one(tmp_path):
    leg = tmp_path / "leg"
    leg.mkdir()

    def payload(n):
        def write(tmp):
            with open(os.path.join(tmp, "state.json"), "w") as f:
                json.dump({"n": n}, f)
        return write

    for n in (2, 4):
        checkpoint.write_checkpoint(str(leg), n, SHA, payload(n))
    path, manifest = checkpoint.newest_valid_checkpoint(str(leg), SHA)
    assert path.endswith("ckpt-000004") and manifest["update"] == 4
    with open(os.path.join(path, "state.json"), "w") as f:
        f.write('{"n": 5}')  # damaged after commit
    skipped = []
    path, manifest = checkpoint.newest_valid_checkpoint(str(leg), SHA, skipped.append)
    assert path.endswith("ckpt-000002") and "does not match its manifest" in skipped[0]
    assert checkpoint.newest_valid_checkpoint(str(leg), "cd" * 32) == (None, None)  # another spec


def test_resume_checkpoint_says_when_there_is_none(tmp_path):
    said = []
    assert checkpoint.resume_checkpoint(str(tmp_path / "leg"), SHA, said.append) == (None, None)
    assert said == ["no valid checkpoint: starting from the beginning (resume requested)"]
    checkpoint.write_checkpoint(str(tmp_path / "leg"), 3, SHA, lambda tmp: None)
    said.clear()
    path, manifest = checkpoint.resume_checkpoint(str(tmp_path / "leg"), SHA, said.append)
    assert path.endswith("ckpt-000003") and manifest["update"] == 3 and said == []


def test_needed_records_are_the_plan_the_eval_prefix_and_the_l3_records():
    updates = [[[7, 2], [9]], [[2, 11]]]  # updates[u][m]: record indices
    assert tandem_leg.needed_records(updates, [20, 21], 3) == {0, 1, 2, 7, 9, 11, 20, 21}
    assert tandem_leg.needed_records([], [], 0) == set()


def test_pip_installs_from_the_checkout_into_a_fresh_venv(tmp_path):
    # The wheel is built by the reference environment's setuptools (no download), then installed by the
    # new environment's own pip into an environment without torch or transformers: the core and the
    # sdk-python leg import from outside the checkout with the standard library only.
    # Built from a copy: setuptools writes build/ and *.egg-info next to the sources it builds.
    src = tmp_path / "src"
    shutil.copytree(os.path.join(SOURCE_DIR, "sdk", "python"), src, ignore=shutil.ignore_patterns("__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps", "-w",
                        str(tmp_path / "dist"), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    wheels = os.listdir(tmp_path / "dist")
    assert len(wheels) == 1 and wheels[0].startswith("tandem_leg-0.1.0-"), wheels
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(tmp_path / "dist" / wheels[0])],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([py, "-c", "import tandem_leg, tandem_leg.sdk_leg, tandem_leg.protocol as p, importlib.util as u; "
                                  "print(tandem_leg.__file__, p.PROTOCOL_VERSION, u.find_spec('torch'))"],
                       capture_output=True, text=True, cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    where, version, torch_spec = r.stdout.split()
    assert where.startswith(str(venv)) and version == "1" and torch_spec == "None"
    assert os.path.exists(venv / "bin" / "tandem-sdk-python-leg")
    # tandem_leg.torch (paired mode: the shared masks and the fingerprint hooks) is in the wheel too
    site = next((venv / "lib").glob("python*/site-packages"))
    for f in ("__init__.py", "shared_dropout.py", "fingerprint.py"):
        assert (site / "tandem_leg" / "torch" / f).exists(), f


def test_fingerprints_and_observables_events_are_checked():
    out = io.StringIO()
    w = EventWriter(out, clock=lambda: 1.0)
    w.emit("hello", **hello())
    point = {"micro_batch": 0, "layer": -1, "op": "tokens", "pass": "forward", "count": 3, "norm": 1.5, "mean": 0.5,
             "maxabs": 1.0, "sketch": [0.25] * 15 + ["NaN"]}
    w.emit("fingerprints", update=0, points=[point])
    w.emit("observables", update=0, adapter=[{"layer": 0, "projection": "q_proj", "a_norm": 1.0, "b_norm": 0.0,
                                              "delta_norm": 0.0}],
           probes=[{"probe": 0, "record": 3, "position": 7, "ids": [1, 2], "probs": [0.5, 0.25]}])
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["hello", "fingerprints", "observables"]
    with pytest.raises(ProtocolError, match=r"event fingerprints: field 'points' \[0\].sketch must be a list of 16"):
        w.emit("fingerprints", update=1, points=[dict(point, sketch=[0.0] * 15)])
    with pytest.raises(ProtocolError, match=r"'points' \[0\].pass must be one of forward\|backward\|optimizer"):
        w.emit("fingerprints", update=1, points=[dict(point, **{"pass": "sideways"})])
