"""docs/leg-protocol.md, non-finite numbers: NaN and infinity are named, never stored silently.

Both legs (the engine and the PyTorch reference) run each case; the oracle is each leg's own
events.jsonl, read here with a strict JSON parser:
  - a loss that goes non-finite at update k (injected with the legs' test switch
    TANDEM_TEST_NONFINITE_LOSS_AT): each leg writes the step with "NaN" spelt out and the error
    "leg <name>: non-finite loss at update k" (in one write, so the runner's live gate, which stops a
    leg on reading a NaN, cannot cut them apart), and stops; the run exits 1, never says "passed";
  - a real overflow in both stacks' arithmetic: a base whose final-norm weights are 3e38 (finite,
    so the loaders accept it) overflows the hidden state, and the initial held-out loss is NaN in
    both legs: "leg <name>: non-finite held-out loss at update 0";
  - a base holding a NaN in one tensor: both loaders name the file and the tensor before anything
    is computed (before, the reference leg's l2 event was unparsable and L2 read "no digests").
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner"))
from runner_fixture import SOURCE_DIR, TANDEM  # noqa: E402

SHARED = os.environ.get("TANDEM_ASSETS", os.path.join(SOURCE_DIR, "..", "shared"))
TINY_BASE = os.path.join(SHARED, "assets", "qwen3-tiny-clinical")


def strict_loads(line):
    """json.loads that refuses NaN / Infinity literals (what a strict JSON reader does)."""
    def refuse(token):
        raise ValueError(f"non-JSON number literal {token}")
    return json.loads(line, parse_constant=refuse)


def experiment(tmp, name, **changes):
    spec = {
        "name": name, "seed": 11, "model": {"config": "tiny"},
        "lora": {"rank": 2, "alpha": 4, "dropout": 0.0, "targets": ["q_proj", "v_proj"]},
        "batch": {"micro_batch": 1, "accumulation": 2, "max_updates": 4},
        "sequence": {"max_len": 96},
        "corpus": {"sources": ["medmcqa"], "heldout_fraction": 0.2, "max_records_per_source": 20},
        "eval": {"interval": 2, "prefix_size": 2}, "l3_records": 2,
    }
    spec.update(changes)
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def run(tmp, spec_path, env=None):
    cmd = [TANDEM, "run", spec_path, "--legs", "engine,reference", "--threads", "2", "--no-probe",
           "--out", os.path.join(tmp, "runs"), "--catalog", os.path.join(tmp, "tandem.db")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=dict(os.environ, **(env or {})))
    runs = sorted(os.listdir(os.path.join(tmp, "runs")))
    return p, os.path.join(tmp, "runs", runs[-1])


def events(folder, leg):
    with open(os.path.join(folder, "legs", leg, "events.jsonl")) as f:
        return [strict_loads(line) for line in f if line.strip()]


def number(v):
    """A protocol number: a JSON number or "NaN" / "Infinity" / "-Infinity"."""
    return float(v)


def assert_not_passed(p):
    out = p.stdout + p.stderr
    assert p.returncode == 1, out[-3000:]
    assert "passed" not in p.stdout.lower().replace("did not pass", ""), p.stdout[-3000:]


def test_a_non_finite_loss_stops_both_legs_at_that_update(tmp_path):
    tmp = str(tmp_path)
    p, folder = run(tmp, experiment(tmp, "nan-loss"), env={"TANDEM_TEST_NONFINITE_LOSS_AT": "1"})
    assert_not_passed(p)
    for leg in ("engine", "reference"):
        ev = events(folder, leg)
        steps = [e for e in ev if e["event"] == "step"]
        # Update 0 finite, update 1 written with the NaN spelt out, and nothing trained after it.
        assert [s["update"] for s in steps] == [0, 1], (leg, steps)
        assert math.isfinite(number(steps[0]["loss"])) and math.isfinite(number(steps[0]["grad_norm"]))
        assert steps[1]["loss"] == "NaN", steps[1]
        errors = [e["message"] for e in ev if e["event"] == "error"]
        assert len(errors) == 1 and errors[0].startswith(f"leg {leg}: non-finite loss at update 1 (loss nan, grad norm "), errors
        assert not any(e["event"] == "done" for e in ev)
        # The run names it too (the leg's error, or the runner's live gate, which may stop the leg
        # as soon as it reads the NaN: the leg writes the step and its error in one write). The leg's
        # line says "non-finite loss", the gate's names the series by the metric table's label,
        # "non-finite training loss" (docs/decisions.md).
        assert re.search(rf"\b{leg}: non-finite (training )?loss at update 1\b", p.stdout + p.stderr), p.stdout + p.stderr


def write_base(tmp, change):
    """The shipped tiny pretrained base as float32, with `change(tensors)` applied."""
    from safetensors.torch import load_file, save_file

    base = os.path.join(tmp, "base")
    os.makedirs(base)
    shutil.copy(os.path.join(TINY_BASE, "config.json"), base)
    tensors = {k: v.float().contiguous() for k, v in load_file(os.path.join(TINY_BASE, "model.safetensors")).items()}
    change(tensors)
    save_file(tensors, os.path.join(base, "model.safetensors"), metadata={"format": "pt"})
    return base


def test_an_overflowing_base_gives_a_non_finite_held_out_loss_in_both_stacks(tmp_path):
    tmp = str(tmp_path)

    def huge_norm(t):
        t["model.norm.weight"].fill_(3e38)

    base = write_base(tmp, huge_norm)
    p, folder = run(tmp, experiment(tmp, "overflow", model={"base": base}))
    assert_not_passed(p)
    for leg in ("engine", "reference"):
        ev = events(folder, leg)
        l1 = [e for e in ev if e["event"] == "l1"]
        assert len(l1) == 1 and math.isnan(number(l1[0]["heldout_ce"])), l1  # explicit, computed by the stack
        assert not [e for e in ev if e["event"] == "step"], "a leg trained on after a NaN held-out loss"
        errors = [e["message"] for e in ev if e["event"] == "error"]
        assert errors == [f"leg {leg}: non-finite held-out loss at update 0 (held-out CE nan)"], errors


def test_a_nan_in_the_base_names_the_tensor_in_both_loaders(tmp_path):
    tmp = str(tmp_path)

    def one_nan(t):
        t["model.layers.2.mlp.up_proj.weight"].view(-1)[1234] = float("nan")

    base = write_base(tmp, one_nan)
    p, folder = run(tmp, experiment(tmp, "nan-base", model={"base": base}))
    assert_not_passed(p)
    for leg in ("engine", "reference"):
        ev = events(folder, leg)  # every line parses strictly (no bare NaN)
        assert not [e for e in ev if e["event"] in ("l2", "step")]
        errors = [e["message"] for e in ev if e["event"] == "error"]
        assert len(errors) == 1, errors
        assert errors[0].endswith("base/model.safetensors: tensor 'model.layers.2.mlp.up_proj.weight' holds non-finite "
                                  "values (1 NaN, 0 infinite of 49152; first at flat index 1234)"), errors
