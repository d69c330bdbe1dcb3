"""The SDK legs (docs/legs.md): sdk-python (tandem_leg over the C ABI with ctypes) and sdk-go (cgo), each its
own training loop, adapter construction, optimizer and checkpoints, against the reference leg on
clinical-tiny (the pretrained base, shared masks and plan).

One `tandem run --legs engine,reference,sdk-python,sdk-go` runs the four legs side by side. The report
must pass every level for every pair, and the levels are recomputed here from run.h5 with numpy: L1
relative difference <= 1e-5 against the reference, L2 every tensor's bytes equal, L3 every record
identical, L4 mean |held-out CE difference| <= 1e-4 relative, the same lr and tokens per update. Each
SDK leg, killed after a checkpoint and resumed (run by hand on the same folder, as the runner runs a
leg), continues bit-identically to its uninterrupted twin."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from runner_fixture import cut_spec
from test_run_end_to_end import SOURCE_DIR, TANDEM, check_json, h5, only_run_folder, tandem_run, write_spec

PYTHON_LEG = [sys.executable, os.path.join(SOURCE_DIR, "sdk", "python", "sdk_leg.py")]
GO_LEG = os.environ.get("TANDEM_SDK_GO_LEG")
SDK_LEGS = {"sdk-python": PYTHON_LEG}
if GO_LEG:  # registered with the Go leg only when the build made it (sdk/CMakeLists.txt)
    SDK_LEGS["sdk-go"] = [GO_LEG]


def spec_for(name):
    return cut_spec("clinical-tiny.json", name, 8, 4, 4, 60, 192, l3_records=16)


def env_for(threads):
    env = dict(os.environ, TANDEM_BIN=TANDEM)
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = str(threads)
    return env


def start_leg(folder, leg, argv, resume=False):
    d = os.path.join(folder, "legs", leg)
    os.makedirs(d, exist_ok=True)
    out = open(os.path.join(d, "events.jsonl"), "a")
    err = open(os.path.join(d, "stderr.log"), "a")
    cmd = [*argv, "--run", folder, "--leg", leg, "--device", "cpu", "--threads", "1"] + (["--resume"] if resume else [])
    return subprocess.Popen(cmd, stdout=out, stderr=err, env=env_for(1))


def events(folder, leg):
    with open(os.path.join(folder, "legs", leg, "events.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("sdk"))
    p, folder = tandem_run(tmp, write_spec(tmp, spec_for("sdk")), "--legs", ",".join(["engine", "reference", *SDK_LEGS]),
                           "--threads", str(2 + len(SDK_LEGS)))
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    return tmp, folder, p


def test_every_pair_passes_in_the_report(run):
    tmp, folder, p = run
    assert any(l.startswith("equivalent: ") for l in p.stdout.splitlines()), p.stdout[-3000:]
    legs = ["engine", "reference", *SDK_LEGS]
    for i, a in enumerate(legs):
        for b in legs[i + 1:]:
            rows = [line for line in p.stdout.splitlines()
                    if line.startswith(f"  {a} vs {b} ") or line.startswith(f"  {b} vs {a} ")]
            assert len(rows) == 7, (a, b, rows)  # L1, L2, L3, L4 held-out CE, L4 training loss, distances, series
            # the per-update series: both lr on the schedule, no training loss or grad norm beyond its bound
            assert rows[6].split()[3] == "none" and "beyond" not in rows[6], rows[6]
            assert all(line.rstrip().endswith(" pass") for line in rows[:3]), rows
            assert rows[3].rstrip().endswith(" equivalent") and rows[5].rstrip().endswith(" equivalent"), rows
    r = subprocess.run([TANDEM, "report", folder], capture_output=True, text=True)
    assert r.returncode == 0 and any(l.startswith("equivalent: ") for l in r.stdout.splitlines()), r.stdout


@pytest.mark.parametrize("leg", list(SDK_LEGS))
def test_levels_recomputed_against_the_reference(run, leg):
    tmp, folder, _ = run
    ev = events(folder, leg)
    hello = ev[0]
    assert hello["event"] == "hello" and hello["implementation"] == leg and ev[-1]["event"] == "done"
    assert hello["threads"] == 1  # the runner's share of --threads
    with h5(folder) as f:
        assert f[f"legs/{leg}"].attrs["implementation"] in (leg, leg.encode())
        # L1
        a, r = check_json(f, leg, "l1"), check_json(f, "reference", "l1")
        assert a["tokens"] == r["tokens"] > 0
        assert abs(a["heldout_ce"] - r["heldout_ce"]) / abs(r["heldout_ce"]) <= 1e-5
        # L2: every tensor as the reference loaded it (46 base + 56 adapter on the pretrained base).
        a2 = {t["name"]: t for t in check_json(f, leg, "l2")["tensors"]}
        r2 = {t["name"]: t for t in check_json(f, "reference", "l2")["tensors"]}
        assert a2.keys() == r2.keys() and len(a2) == 102
        for n in a2:
            assert (a2[n]["shape"], a2[n]["sha256"], a2[n]["kind"]) == (r2[n]["shape"], r2[n]["sha256"], r2[n]["kind"]), n
        # L3
        a3, r3 = check_json(f, leg, "l3")["records"], check_json(f, "reference", "l3")["records"]
        assert len(a3) == len(r3) == 16
        for x, y in zip(a3, r3):
            for k in ("id", "ids", "boundary", "supervised_count", "full_length", "truncated_at", "text"):
                assert x[k] == y[k], (x["id"], k)
        # L4
        ea, er = f[f"legs/{leg}/eval"][()], f["legs/reference/eval"][()]
        assert list(ea["update"]) == list(er["update"]) == [0, 4, 8]
        d = ea["heldout_ce"] - er["heldout_ce"]
        assert np.mean(np.abs(d)) / np.mean(np.abs(er["heldout_ce"])) <= 1e-4
        assert ea["heldout_ce"][-1] < ea["heldout_ce"][0] - 0.01  # it learns
        sa, sr = f[f"legs/{leg}/steps"][()], f["legs/reference/steps"][()]
        assert len(sa) == len(sr) == 8
        assert np.allclose(sa["lr"], sr["lr"], rtol=1e-12, atol=0) and sa["lr"][0] == 0.0
        assert list(sa["tokens"]) == list(sr["tokens"])
        assert np.max(np.abs(sa["loss"] - sr["loss"]) / sr["loss"]) < 1e-5
        assert np.max(np.abs(sa["grad_norm"] - sr["grad_norm"]) / sr["grad_norm"]) < 1e-4


@pytest.mark.parametrize("leg", list(SDK_LEGS))
def test_killed_after_a_checkpoint_and_resumed_continues_bit_identically(run, leg):
    tmp, folder, _ = run
    name = leg + "-killed"
    proc = start_leg(folder, name, SDK_LEGS[leg])
    path = os.path.join(folder, "legs", name, "events.jsonl")
    t0 = time.time()
    while not any(e.get("event") == "checkpoint" and e.get("update") == 4 for e in (events(folder, name) if os.path.exists(path) else [])):
        assert proc.poll() is None and time.time() - t0 < 600, "no checkpoint at update 4"
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    resumed = start_leg(folder, name, SDK_LEGS[leg], resume=True)
    assert resumed.wait(timeout=600) == 0, open(os.path.join(folder, "legs", name, "stderr.log")).read()[-3000:]
    ev = events(folder, name)
    hellos = [i for i, e in enumerate(ev) if e["event"] == "hello"]
    assert len(hellos) == 2 and ev[hellos[1]]["resume"] is True
    assert ev[hellos[1] + 1]["event"] == "resume" and ev[hellos[1] + 1]["update"] >= 4
    # The latest attempt's steps from the resume point on equal the uninterrupted leg's, bit for bit.
    start = ev[hellos[1] + 1]["update"]
    after = [e for e in ev[hellos[1]:] if e["event"] in ("step", "eval")]
    whole = [e for e in events(folder, leg) if e["event"] in ("step", "eval") and e["update"] >= start]
    whole = [e for e in whole if not (e["event"] == "eval" and e["update"] == start)]
    keys = ("event", "update", "loss", "grad_norm", "lr", "tokens", "heldout_ce")
    assert [tuple(e.get(k) for k in keys) for e in after] == [tuple(e.get(k) for k in keys) for e in whole]
    final = lambda l: open(os.path.join(folder, "legs", l, "final", "adapter_model.safetensors"), "rb").read()
    assert final(name) == final(leg)


@pytest.mark.parametrize("leg", list(SDK_LEGS))
def test_a_leg_that_cannot_run_says_why_in_one_error_event(run, leg):
    tmp, folder, _ = run
    p = subprocess.run([*SDK_LEGS[leg], "--run", folder, "--leg", leg + "-gpu", "--device", "cuda:0"],
                       capture_output=True, text=True, env=env_for(1), timeout=120)
    assert p.returncode == 1
    ev = [json.loads(line) for line in p.stdout.splitlines()]
    assert [e["event"] for e in ev] == ["hello", "error"]
    assert "--device cuda:0" in ev[-1]["message"] and "\n" not in ev[-1]["message"]
