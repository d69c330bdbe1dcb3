"""Legs the experiment defines (command legs), acting on one leg while the others go on
(`tandem leg pause|stop|resume`), and the live gate's flags. Oracles: two engine legs of one run
compute the same trajectory bit for bit, so a leg paused and resumed must equal its uninterrupted
twin; fake legs (small Python scripts) emit known values for the gate."""
import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner"))
from runner_fixture import (TANDEM, assert_twins_equal, h5_series, read_progress_until, run_cmd, small_experiment,  # noqa: E402
                            start_run, steps_seen, verdict_of)


def folder_of(tmp):
    d = os.path.join(tmp, "runs")
    return os.path.join(d, sorted(os.listdir(d))[0])


def run(tmp, spec, *extra, timeout=900):
    return subprocess.run(run_cmd(tmp, spec, *extra), capture_output=True, text=True, timeout=timeout)


def test_a_command_leg_runs_like_a_built_in_one(tmp_path):
    tmp = str(tmp_path)
    legs = {"mine": {"implementation": "command",
                     "command": [os.path.abspath(TANDEM), "leg", "engine", "--run", "{run}", "--leg", "{leg}",
                                 "--device", "{device}", "--threads", "{threads}", "{resume}"]}}
    spec = small_experiment(tmp, "cmdleg", legs=legs)
    p = run(tmp, spec, "--legs", "engine,mine")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert verdict_of(p.stdout).startswith("equivalent: "), p.stdout[-2000:]
    s = h5_series(folder_of(tmp))
    assert s["mine"]["loss"] == s["engine"]["loss"] and len(s["mine"]["loss"]) == 6
    legs_json = json.load(open(os.path.join(folder_of(tmp), "legs.json")))
    assert [l["implementation"] for l in legs_json] == ["engine", "command"]
    assert legs_json[1]["command"][-1] == "{resume}"  # the template is kept for --resume


@pytest.mark.parametrize("behaviour,expect", [
    ("import sys; sys.exit(3)", "exit status 3"),
    ("print('garbage, not an event', flush=True)", "without a done event"),
    ("import json; print(json.dumps({'v': 1, 'event': 'hello', 'implementation': 'x'}), flush=True)",
     "without a done event"),
    ("import sys; sys.stderr.write('Traceback: boom\\n'); raise SystemExit(1)", "exit status 1"),
])
def test_a_broken_command_leg_fails_with_its_stderr_while_the_engine_finishes(tmp_path, behaviour, expect):
    tmp = str(tmp_path)
    script = os.path.join(tmp, "broken.py")
    with open(script, "w") as f:
        f.write(behaviour + "\n")
    spec = small_experiment(tmp, "broken", legs={"broken": {"implementation": "command",
                                                            "command": [sys.executable, script]}})
    p = run(tmp, spec, "--legs", "engine,broken")
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert not verdict_of(p.stdout).startswith("equivalent")
    assert "incomplete: broken: leg failed" in p.stdout
    folder = folder_of(tmp)
    with sqlite3.connect(os.path.join(tmp, "tandem.db")) as db:
        legs = dict(db.execute("SELECT name, status FROM legs").fetchall())
        err = db.execute("SELECT error FROM legs WHERE name = 'broken'").fetchone()[0]
    assert legs == {"engine": "finished", "broken": "failed"}
    assert expect in err, err
    if "Traceback" in behaviour:
        assert "Traceback: boom" in open(os.path.join(folder, "legs", "broken", "stderr.log")).read()


def test_a_paused_leg_resumes_bit_identically_while_its_twin_goes_on(tmp_path):
    tmp = str(tmp_path)
    p = start_run(tmp, small_experiment(tmp, "pause"))
    assert read_progress_until(p, "plan:", 120)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and steps_seen(folder_of(tmp), "a") < 2:
        time.sleep(0.05)
    r = subprocess.run([TANDEM, "leg", "pause", folder_of(tmp), "a"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "took the request: pause leg a" in r.stdout, r.stdout + r.stderr
    paused_at = steps_seen(folder_of(tmp), "a")
    time.sleep(1.5)
    assert steps_seen(folder_of(tmp), "a") == paused_at  # a really stopped
    with sqlite3.connect(os.path.join(tmp, "tandem.db")) as db:
        assert db.execute("SELECT status FROM legs WHERE name = 'a'").fetchone()[0] == "paused"
    r = subprocess.run([TANDEM, "leg", "resume", folder_of(tmp), "a"], capture_output=True, text=True, timeout=60)
    out = p.communicate(timeout=900)[0]
    if "took the request: resume" not in r.stdout:
        # b had already finished and the runner with it: `leg resume` continued the run itself.
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        out = r.stdout
    assert verdict_of(out).startswith("equivalent: "), out[-3000:]
    assert_twins_equal(folder_of(tmp))


def test_a_stopped_leg_stays_stopped_on_resume_until_resumed(tmp_path):
    tmp = str(tmp_path)
    p = start_run(tmp, small_experiment(tmp, "stop"))
    assert read_progress_until(p, "plan:", 120)
    while steps_seen(folder_of(tmp), "a") < 1:
        time.sleep(0.05)
    r = subprocess.run([TANDEM, "leg", "stop", folder_of(tmp), "a"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = p.communicate(timeout=900)[0]
    assert p.returncode == 1 and "incomplete: a: leg stopped" in out, out[-2000:]
    assert "tandem leg resume" in out
    r = subprocess.run([TANDEM, "run", "--resume", folder_of(tmp), "--catalog", os.path.join(tmp, "tandem.db"),
                        "--no-probe"], capture_output=True, text=True, timeout=600)
    assert "stays stopped" in r.stderr and "incomplete: a: leg stopped" in r.stdout
    r = subprocess.run([TANDEM, "leg", "resume", folder_of(tmp), "a", "--catalog", os.path.join(tmp, "tandem.db")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and verdict_of(r.stdout).startswith("equivalent: "), r.stdout[-2000:] + r.stderr[-2000:]
    s = h5_series(folder_of(tmp))
    assert s["a"]["loss"] == s["b"]["loss"]


FAKE_LEG = r'''
import json, math, sys, time
def ev(**k):
    k["v"] = 1
    print(json.dumps(k), flush=True)
ev(event="hello", implementation="fake")
ev(event="l1", heldout_ce=2.0, tokens=5, examples=1)  # L1-L3 present: a leg lacking one is incomplete
ev(event="l2", tensors=[])
ev(event="l3", template="qwen3", max_len=8, records=[])
ev(event="eval", update=0, heldout_ce=2.0, tokens=5)
for u in range(6):
    wall = 0.1 if u != 5 else 3.0          # update 5: 30x its running median
    loss = 2.0 - 0.01 * u if u != 4 else float("nan")
    print(json.dumps({"v": 1, "event": "step", "update": u, "loss": None if math.isnan(loss) else loss,
                      "grad_norm": 1.0, "lr": 1e-4, "tokens": 3, "wall_s": wall}), flush=True)
    time.sleep(0.4)  # like a real leg: the runner sees each update before the next
    if (u + 1) % 2 == 0:  # the schedule of small_experiment: every 2 updates
        ev(event="eval", update=u + 1, heldout_ce=2.0 - 0.01 * (u + 1), tokens=5)
ev(event="done", updates=6)
'''


def test_the_gate_flags_a_slow_update_and_stops_a_leg_at_a_non_finite_loss(tmp_path):
    tmp = str(tmp_path)
    script = os.path.join(tmp, "fake.py")
    open(script, "w").write(FAKE_LEG)
    # step_time_min_history 3 so the short fake run has history; non-finite: warn here (the leg goes on
    # and shows the slow update); then stop in a second run.
    spec = small_experiment(tmp, "gate", legs={"fake": {"implementation": "command", "command": [sys.executable, script]}},
                            gate={"non_finite": "warn", "step_time_min_history": 3})
    p = run(tmp, spec, "--legs", "fake")
    assert "gate: fake: non-finite training loss at update 4 (warn)" in p.stderr, p.stderr[-2000:]
    assert "gate: fake: update 5 took 3 s, 30.0x its running median 0.1 s (warn)" in p.stderr, p.stderr[-2000:]
    import h5py

    with h5py.File(os.path.join(folder_of(tmp), "run.h5"), "r") as f:
        v = f["legs/fake/flags"][()]
        flags = json.loads(v.decode() if isinstance(v, bytes) else v)
    assert [(x["kind"], x["update"], x["action"]) for x in flags] == [("non-finite", 4, "warn"), ("step-time", 5, "warn")]
    assert "Live gate flags" in p.stdout
    assert p.returncode == 3 and verdict_of(p.stdout).startswith("different: fake: non-finite training loss at update 4"), p.stdout[-2000:]

    tmp2 = str(tmp_path / "stop")
    os.makedirs(tmp2)
    spec = small_experiment(tmp2, "gate2", legs={"fake": {"implementation": "command", "command": [sys.executable, script]}})
    p = run(tmp2, spec, "--legs", "fake")
    assert p.returncode == 1
    assert "incomplete: fake: leg stopped (gate: fake: non-finite training loss at update 4)" in p.stdout, p.stdout[-2000:]
