"""A leg that never ran is missing, never different (docs/report.md "The verdict"): a run whose only other
leg fails before its first event ends `incomplete`, with that leg's own failure line, and neither the
runner's output nor the run's report speaks of a difference, a localisation hint, `observe` or tensor
counts. One case per way a leg can fail to start: the reference environment missing, a GPU device on a
build or machine without one, a command leg whose program is missing, one that prints nothing, one that
prints non-JSON. A base whose config.json disagrees with its safetensors shapes is refused before any
run folder exists (preflight), so it never gets that far.

The oracle is the run's own words: what the runner printed and what `tandem report` renders from run.h5.
"""
import json
import os
import sys
import shutil
import subprocess
import tempfile

import pytest

from runner_fixture import TANDEM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from hostile import TINY_EXPERIMENT  # noqa: E402

# The engine leg on the tiny model in seconds (hostile.TINY_EXPERIMENT).
TINY = dict(TINY_EXPERIMENT, name="never")
FORBIDDEN = ("different", "localise", "observe", "tensor(s)")


def command_leg(argv):
    return {"mine": {"implementation": "command", "command": argv}}


# (case, legs, extra run arguments, experiment changes, environment changes, the failing leg)
CASES = [
    ("reference environment missing", "engine,reference", [], {}, {"TANDEM_REFENV_PYTHON": "/nonexistent/refenv/bin/python"},
     "reference"),
    ("a GPU device without a GPU", "engine,other=engine", ["--devices", "cpu,cuda:0"], {}, {}, "other"),
    ("command leg program missing", "engine,mine", [], {"legs": command_leg(["/nonexistent/leg-program"])}, {}, "mine"),
    ("command leg prints nothing", "engine,mine", [], {"legs": command_leg(["/bin/sh", "-c", "exit 0"])}, {}, "mine"),
    ("command leg prints non-JSON", "engine,mine", [], {"legs": command_leg(["/bin/sh", "-c", "echo 'not json {'; exit 0"])}, {},
     "mine"),
]


def has_cuda():
    return os.path.exists("/dev/nvidia0") or os.path.exists("/dev/nvidiactl")


@pytest.mark.parametrize("case,legs,extra,changes,env,failing", CASES, ids=[c[0] for c in CASES])
def test_a_leg_that_never_started_is_incomplete_never_different(case, legs, extra, changes, env, failing):
    if case.startswith("a GPU device") and has_cuda():
        pytest.skip("this machine has a GPU: cuda:0 would start")
    tmp = tempfile.mkdtemp(prefix="tandem-never-")
    try:
        spec = dict(TINY, **changes)
        path = os.path.join(tmp, "x.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        p = subprocess.run([TANDEM, "run", path, "--legs", legs, "--no-probe", "--threads", "2", "--out", os.path.join(tmp, "runs"),
                            "--catalog", os.path.join(tmp, "c.db"), *extra], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, **env))
        out = p.stdout + p.stderr
        assert p.returncode != 0, out
        for word in FORBIDDEN:
            assert word not in out.lower(), f"{case}: the runner's output speaks of {word!r}:\n{out}"
        runs = os.listdir(os.path.join(tmp, "runs")) if os.path.isdir(os.path.join(tmp, "runs")) else []
        if not runs:  # refused before a folder existed: a clear line naming the leg or the cause is enough
            assert "error" in out.lower() or failing in out, out
            return
        folder = os.path.join(tmp, "runs", runs[0])
        assert f"leg {failing} failed" in out, out
        r = subprocess.run([TANDEM, "report", folder], capture_output=True, text=True, timeout=120)
        report = r.stdout + r.stderr
        for word in FORBIDDEN:
            assert word not in report.lower(), f"{case}: the report speaks of {word!r}:\n{report}"
        verdict = [l for l in report.splitlines() if l.startswith("incomplete")]
        assert verdict, f"{case}: no incomplete verdict line:\n{report}"
        assert verdict[0].startswith(f"incomplete: {failing}: leg failed"), verdict[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


SHARED = os.path.abspath(os.environ.get("TANDEM_ASSETS", os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared")))


def test_a_base_whose_config_disagrees_with_its_shapes_is_refused_before_a_run_folder():
    """The shipped tiny base with config.json's intermediate_size changed (its tensors say 384): preflight
    names the tensor, its shape and the config, and no run folder is made."""
    tmp = tempfile.mkdtemp(prefix="tandem-never-")
    try:
        src = os.path.join(SHARED, "assets", "qwen3-tiny-clinical")
        base = os.path.join(tmp, "base")
        os.makedirs(base)
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        assert cfg["intermediate_size"] == 384
        cfg["intermediate_size"] = 256
        with open(os.path.join(base, "config.json"), "w") as f:
            json.dump(cfg, f)
        os.symlink(os.path.join(src, "model.safetensors"), os.path.join(base, "model.safetensors"))
        spec = dict(TINY, model={"base": base})
        path = os.path.join(tmp, "x.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        p = subprocess.run([TANDEM, "run", path, "--legs", "engine,reference", "--no-probe", "--threads", "2", "--out",
                            os.path.join(tmp, "runs"), "--catalog", os.path.join(tmp, "c.db")],
                           capture_output=True, text=True, timeout=300)
        out = p.stdout + p.stderr
        assert p.returncode == 1, out
        line = next((l for l in out.splitlines() if "model.safetensors" in l), "")
        assert "mlp." in line and "384" in line and "intermediate_size 256" in line and "config.json" in line, out
        for word in FORBIDDEN:
            assert word not in out.lower(), out
        runs = os.path.join(tmp, "runs")
        assert not os.path.isdir(runs) or not os.listdir(runs), os.listdir(runs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
