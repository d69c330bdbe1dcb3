"""`tandem run` end to end on a smaller variant of clinical-tiny, with both legs:
L1 relative difference <= 1e-5, L2 all equal, L3 identical on K = 64 records, L4 with shared masks
mean |difference| <= 1e-4 relative — recomputed here from run.h5 with h5py and numpy, not only
read from the runner's summary — and the catalog rows present. Fault tests: the engine leg with the
generic ChatML template is flagged at L3 and its L1 differs; a leg killed with SIGKILL is recorded
as failed while the other completes, and `--resume` finishes it with a trajectory identical to an
uninterrupted engine run."""
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from runner_fixture import SOURCE_DIR, TANDEM, cut_spec, verdict_of  # noqa: E402


def small_spec(name, **changes):
    # The random-base variant: these tests check the legs' agreement and the runner, and run twice as
    # fast on the 2-layer generated base (test_pretrained_base.py runs the shipped pretrained one).
    spec = cut_spec("clinical-tiny-random.json", name, 8, 2, 2, 60, 192)
    spec.update(changes)
    return spec


def write_spec(tmp, spec):
    p = os.path.join(tmp, spec["name"] + ".json")
    with open(p, "w") as f:
        json.dump(spec, f)
    return p


def run_args(tmp, spec_path, *extra):
    return [TANDEM, "run", spec_path, "--out", os.path.join(tmp, "runs"), "--catalog", os.path.join(tmp, "tandem.db"),
            "--no-probe", *extra]


def tandem_run(tmp, spec_path, *extra, timeout=1800):
    p = subprocess.run(run_args(tmp, spec_path, *extra), capture_output=True, text=True, timeout=timeout)
    return p, only_run_folder(tmp, json.load(open(spec_path))["name"])


def start_both_legs(tmp, name):
    """small_spec(name) run with the engine and the reference leg in the background (pipes for stdout and stderr)."""
    spec_path = write_spec(tmp, small_spec(name))
    cmd = run_args(tmp, spec_path, "--legs", "engine,reference", "--threads", "2", "--quiet")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), spec_path


def only_run_folder(tmp, name):
    if not os.path.isdir(os.path.join(tmp, "runs")):
        return None
    runs = sorted(d for d in os.listdir(os.path.join(tmp, "runs")) if d.startswith(name + "-"))
    return os.path.join(tmp, "runs", runs[-1]) if runs else None


def h5(folder):
    import h5py

    return h5py.File(os.path.join(folder, "run.h5"), "r")


def check_json(f, leg, level):
    v = f[f"legs/{leg}/checks/{level}"][()]
    return json.loads(v.decode() if isinstance(v, bytes) else v)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("e2e"))
    p, folder = tandem_run(tmp, write_spec(tmp, small_spec("e2e-both")), "--legs", "engine,reference", "--threads", "2")
    return tmp, p, folder


def test_both_legs_agree_at_every_level(both):
    tmp, p, folder = both
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert verdict_of(p.stdout).startswith("equivalent: "), p.stdout[-3000:]
    with h5(folder) as f:
        # L1: recomputed from each leg's own check record.
        e1, r1 = check_json(f, "engine", "l1"), check_json(f, "reference", "l1")
        assert e1["tokens"] == r1["tokens"] > 0
        assert abs(e1["heldout_ce"] - r1["heldout_ce"]) / abs(r1["heldout_ce"]) <= 1e-5
        # L2: every tensor, same shape and bytes.
        e2 = {t["name"]: t for t in check_json(f, "engine", "l2")["tensors"]}
        r2 = {t["name"]: t for t in check_json(f, "reference", "l2")["tensors"]}
        assert e2.keys() == r2.keys() and len(e2) > 0
        for n in e2:
            assert e2[n]["shape"] == r2[n]["shape"], n
            assert e2[n]["sha256"] == r2[n]["sha256"], n
        # L3: 64 records, identical ids, boundary, supervised count, truncation and text.
        e3, r3 = check_json(f, "engine", "l3")["records"], check_json(f, "reference", "l3")["records"]
        assert len(e3) == len(r3) == 64
        for a, b in zip(e3, r3):
            for k in ("id", "ids", "boundary", "supervised_count", "full_length", "truncated_at", "text"):
                assert a[k] == b[k], (a["id"], k)
        # L4: paired held-out CE, shared masks and plan.
        ee, re_ = f["legs/engine/eval"][()], f["legs/reference/eval"][()]
        assert list(ee["update"]) == list(re_["update"]) == [0, 2, 4, 6, 8]
        d = ee["heldout_ce"] - re_["heldout_ce"]
        assert np.mean(np.abs(d)) / np.mean(np.abs(re_["heldout_ce"])) <= 1e-4
        # The runner's stored summary equals this recomputation (numpy conventions).
        s = f["comparisons/engine~reference/heldout_ce"]
        assert s.attrs["paired"] == 5
        assert np.isclose(s.attrs["mean_abs_diff"], np.mean(np.abs(d)), rtol=1e-12, atol=0)
        assert np.isclose(s.attrs["std_diff"], np.std(d), rtol=1e-12, atol=1e-300)
        assert np.isclose(s.attrs["mean_signed_diff"], np.mean(d), rtol=1e-9, atol=1e-300)
        steps_e, steps_r = f["legs/engine/steps"][()], f["legs/reference/steps"][()]
        assert len(steps_e) == len(steps_r) == 8
        assert np.allclose(steps_e["lr"], steps_r["lr"], rtol=1e-12, atol=0)
        assert steps_e["lr"][0] == 0.0
        assert list(steps_e["tokens"]) == list(steps_r["tokens"])
        assert np.max(np.abs(steps_e["loss"] - steps_r["loss"]) / steps_r["loss"]) < 1e-5
    # Catalog rows.
    db = sqlite3.connect(os.path.join(tmp, "tandem.db"))
    run_id = os.path.basename(folder)
    assert db.execute("select status from runs where id = ?", (run_id,)).fetchone() == ("finished",)
    legs = dict(db.execute("select name, status from legs where run_id = ?", (run_id,)).fetchall())
    assert legs == {"engine": "finished", "reference": "finished"}


def test_report_exports(both):
    tmp, p, folder = both
    for fmt, marker in (("md", "| engine vs reference |"), ("csv", "engine vs reference,"), ("tex", "\\toprule")):
        r = subprocess.run([TANDEM, "report", folder, "--format", fmt], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert marker in r.stdout
    tex = subprocess.run([TANDEM, "report", folder, "--format", "tex"], capture_output=True, text=True).stdout
    body = "\n".join(line for line in tex.splitlines() if not line.startswith("%"))
    assert body.count("\\begin{tabular}") == body.count("\\end{tabular}")
    # one table per section of the text report (docs/report.md); a wide table is split into several tabulars
    captions = [c.split(":")[0] for c in re.findall(r"\\caption\{([^}]*)", body)]
    assert captions == ["L1", "L2", "L3", "Optimizer settings against the spec (before update 0)", "L4",
                        "Two distances", "Per-update series", "Pre-clip gradient norm", "Stacks", "Timing and memory",
                        "Device bandwidth probes", "Evaluation observables"], captions
    assert body.count("\\begin{tabular}") >= len(captions)
    assert "_" not in body.replace("\\_", "")  # every underscore escaped


def test_chatml_engine_is_flagged_at_l3_and_l1(tmp_path):
    tmp = str(tmp_path)
    spec = small_spec("e2e-chatml", overrides={"engine": {"template": "chatml"}})
    spec["batch"]["max_updates"] = 1
    p, folder = tandem_run(tmp, write_spec(tmp, spec), "--legs", "engine,reference", "--threads", "2")
    assert p.returncode == 3, p.stdout[-3000:] + p.stderr[-3000:]
    with h5(folder) as f:
        attrs = f["comparisons/engine~reference"].attrs
        assert attrs["l3_pass"] == 0
        assert attrs["l3_identical"] < attrs["l3_compared"] == 64
        assert attrs["l1_pass"] == 0
        e1, r1 = check_json(f, "engine", "l1"), check_json(f, "reference", "l1")
        assert abs(e1["heldout_ce"] - r1["heldout_ce"]) / abs(r1["heldout_ce"]) > 1e-5
        assert attrs["l2_pass"] == 1  # same weights: only the template differs
    r = subprocess.run([TANDEM, "report", folder], capture_output=True, text=True)
    assert r.returncode == 3
    assert "\ndifferent: L1 engine~reference: " in r.stdout  # a detected difference, not "not comparable"
    assert "L3 engine~reference: token records (update 0): 64 of 64 differ, first record " in r.stdout


def wait_for_event(path, pred, timeout):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if os.path.exists(path):
            for line in open(path):
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if pred(e):
                    return e
        time.sleep(0.2)
    raise AssertionError(f"no matching event in {path} after {timeout}s")


def test_killed_leg_is_recorded_and_resume_matches_uninterrupted(tmp_path):
    tmp = str(tmp_path)
    runner, spec_path = start_both_legs(tmp, "e2e-kill")
    deadline = 1200
    t0 = time.time()
    while only_run_folder(tmp, "e2e-kill") is None or not os.path.exists(
            os.path.join(only_run_folder(tmp, "e2e-kill"), "legs", "engine", "events.jsonl")):
        assert time.time() - t0 < deadline and runner.poll() is None
        time.sleep(0.2)
    folder = only_run_folder(tmp, "e2e-kill")
    events = os.path.join(folder, "legs", "engine", "events.jsonl")
    hello = wait_for_event(events, lambda e: e.get("event") == "hello", deadline)
    wait_for_event(events, lambda e: e.get("event") == "checkpoint" and e.get("update") == 4, deadline)
    os.kill(hello["pid"], signal.SIGKILL)
    out, err = runner.communicate(timeout=deadline)
    assert runner.returncode == 1, out[-3000:] + err[-3000:]

    db = sqlite3.connect(os.path.join(tmp, "tandem.db"))
    run_id = os.path.basename(folder)
    legs = {r[0]: r[1:] for r in db.execute("select name, status, exit_status, error from legs where run_id = ?", (run_id,))}
    assert legs["engine"][0] == "failed" and legs["engine"][1] == 128 + signal.SIGKILL
    assert "signal 9" in legs["engine"][2]
    assert legs["reference"][0] == "finished"
    with h5(folder) as f:  # readable after the failure
        assert f["legs/engine"].attrs["status"] in (b"failed", "failed")
        last = f["legs/engine"].attrs["last_event"]
        assert json.loads(last.decode() if isinstance(last, bytes) else last)["v"] == 1  # its last event, kept
        assert len(f["legs/reference/steps"]) == 8

    r = subprocess.run([TANDEM, "run", "--resume", folder, "--catalog", os.path.join(tmp, "tandem.db"), "--no-probe",
                        "--threads", "2"], capture_output=True, text=True, timeout=deadline)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert db.execute("select status from legs where run_id = ? and name = 'engine'", (run_id,)).fetchone() == ("finished",)

    # An uninterrupted engine run of the same experiment (1 CPU thread, as in the two-leg run).
    p, straight = tandem_run(tmp, spec_path, "--legs", "engine", "--threads", "1")
    assert p.returncode == 0, p.stderr[-3000:]
    with h5(folder) as f, h5(straight) as g:
        a, b = f["legs/engine/steps"][()], g["legs/engine/steps"][()]
        assert list(a["update"]) == list(b["update"]) == list(range(8))
        assert np.array_equal(a["loss"], b["loss"])
        assert np.array_equal(a["grad_norm"], b["grad_norm"])
        assert np.array_equal(f["legs/engine/eval"][()]["heldout_ce"], g["legs/engine/eval"][()]["heldout_ce"])


def test_ctrl_c_stops_every_leg_and_leaves_a_readable_run_file(tmp_path):
    tmp = str(tmp_path)
    runner, _ = start_both_legs(tmp, "e2e-sigint")
    t0 = time.time()
    while only_run_folder(tmp, "e2e-sigint") is None:
        assert time.time() - t0 < 600 and runner.poll() is None
        time.sleep(0.2)
    folder = only_run_folder(tmp, "e2e-sigint")
    wait_for_event(os.path.join(folder, "legs", "engine", "events.jsonl"),
                   lambda e: e.get("event") == "step" and e.get("update") == 1, 1200)
    runner.send_signal(signal.SIGINT)
    out, err = runner.communicate(timeout=300)
    assert runner.returncode == 130, out[-2000:] + err[-2000:]
    db = sqlite3.connect(os.path.join(tmp, "tandem.db"))
    run_id = os.path.basename(folder)
    assert db.execute("select status from runs where id = ?", (run_id,)).fetchone() == ("interrupted",)
    statuses = dict(db.execute("select name, status from legs where run_id = ?", (run_id,)).fetchall())
    assert statuses["engine"] == "interrupted"
    assert statuses["reference"] in ("interrupted", "finished")
    with h5(folder) as f:  # the run file opens and holds what was measured before the stop
        assert len(f["legs/engine/steps"]) >= 2
        assert "l1" in f["legs/engine/checks"]


def test_malformed_leg_output_is_recorded_and_does_not_stop_the_runner(tmp_path):
    """A leg (a stand-in script in place of reference_leg.py) that prints garbage between events."""
    tmp = str(tmp_path)
    legs = os.path.join(tmp, "fake_legs")
    os.makedirs(legs)
    with open(os.path.join(legs, "reference_leg.py"), "w") as f:
        f.write(
            "import json, os, sys\n"
            "def ev(**k):\n"
            "    k['v'] = 1\n"
            "    print(json.dumps(k), flush=True)\n"
            "ev(event='hello', implementation='fake', pid=os.getpid())\n"
            "print('Traceback-like garbage {not json', flush=True)\n"
            "print('{\"v\": 7, \"event\": \"step\"}', flush=True)\n"
            "ev(event='l1', heldout_ce=2.0, tokens=5, examples=1)\n"  # L1-L3 present: a leg lacking one is incomplete
            "ev(event='l2', tensors=[])\n"
            "ev(event='l3', template='qwen3', max_len=8, records=[])\n"
            "ev(event='eval', update=0, heldout_ce=2.0, tokens=5)\n"
            "ev(event='step', update=0, loss=1.5, grad_norm=0.5, lr=0.0, tokens=3, wall_s=0.01, extra={'x': 1})\n"
            "ev(event='eval', update=1, heldout_ce=1.9, tokens=5)\n"  # a complete run: every planned row
            "ev(event='done', updates=1)\n")
    spec = small_spec("e2e-malformed")
    spec["batch"]["max_updates"] = 1
    env = dict(os.environ, TANDEM_LEGS_DIR=legs)
    p = subprocess.run(run_args(tmp, write_spec(tmp, spec), "--legs", "reference", "--quiet"), capture_output=True,
                       text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    folder = only_run_folder(tmp, "e2e-malformed")
    with h5(folder) as f:
        a = f["legs/reference"].attrs
        assert a["malformed_lines"] == 2
        first = a["first_malformed"]
        assert "garbage {not json" in (first.decode() if isinstance(first, bytes) else first)
        steps = f["legs/reference/steps"][()]
        assert len(steps) == 1 and steps["loss"][0] == 1.5
    log = open(os.path.join(folder, "legs", "reference", "stderr.log")).read()
    assert "malformed event" in log and "unsupported protocol version" in log
