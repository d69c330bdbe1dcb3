"""The leg watchdog (docs/gate.md "Stalled legs") and catalog continuity (docs/catalog.md
"Continuity") on real runs. Oracles: the kernel (a leg SIGSTOPped by this test, its state read by
the runner), the run's own twin leg (two engine legs of one run compute the same trajectory bit for
bit, so a stalled, stopped and resumed leg must equal its uninterrupted twin), h5py reading run.h5
and sqlite3 reading the catalog."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runner_fixture import (TANDEM, assert_twins_equal, read_progress_until, small_experiment, start_run,  # noqa: E402
                            steps_seen, verdict_of)


def folder_of(tmp):
    d = os.path.join(tmp, "runs")
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    return os.path.join(d, names[0]) if names else None


def step_events(folder, leg):
    out = []
    for line in open(os.path.join(folder, "legs", leg, "events.jsonl")):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "step":
            out.append(e)
    return out


def steps_of(tmp, leg):
    return steps_seen(folder_of(tmp), leg)


def wait_for_step(tmp, leg, update, runner):
    """Until `leg` has recorded `update` updates. No clock: a busy machine only makes it slower; the wait
    fails when the runner ends first (ctest's timeout bounds a hang)."""
    while steps_of(tmp, leg) < update:
        if runner.poll() is not None:
            raise AssertionError(f"the runner ended (exit {runner.returncode}) before leg {leg} reached update {update}")
        time.sleep(0.02)


def leg_pid(tmp, leg):
    return json.load(open(os.path.join(folder_of(tmp), "legs", leg, "process.json")))["pid"]


def stall_flags(folder, leg):
    import h5py

    with h5py.File(os.path.join(folder, "run.h5"), "r") as f:
        if f"legs/{leg}/flags" not in f:
            return []
        v = f[f"legs/{leg}/flags"][()]
    return [x for x in json.loads(v.decode() if isinstance(v, bytes) else v) if x["kind"] == "stall"]


def test_a_sigstopped_leg_is_stopped_as_stalled_and_resumes_equal_to_its_twin(tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "stall", gate={"stall": "stop", "stall_seconds": 3})
    p = start_run(tmp, spec)
    try:
        wait_for_step(tmp, "a", 1, p)
        pid = leg_pid(tmp, "a")
        os.killpg(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        out = p.communicate(timeout=600)[0]
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, out[-3000:]
    verdict = verdict_of(out)
    assert verdict.startswith("incomplete: a: leg failed") and "stalled" in verdict, out[-3000:]
    assert "is stopped (T state" in out, out[-3000:]
    folder = folder_of(tmp)
    flags = stall_flags(folder, "a")
    assert [f["action"] for f in flags] == ["stop"] and flags[0]["threshold"] == 3, flags
    assert "stalled" in open(os.path.join(folder, "legs", "a", "stderr.log")).read()
    with sqlite3.connect(os.path.join(tmp, "tandem.db")) as db:
        rows = dict((n, (s, e)) for n, s, e in db.execute("SELECT name, status, error FROM legs"))
    assert rows["b"][0] == "finished" and rows["a"][0] == "failed" and "stalled" in rows["a"][1], rows
    assert f"tandem run --resume {folder}" in out
    assert time.monotonic() - stopped_at < 300
    # Resumed: a continues from its last checkpoint and ends equal to b, bit for bit.
    r = subprocess.run([TANDEM, "run", "--resume", folder, "--catalog", os.path.join(tmp, "tandem.db"), "--no-probe"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and verdict_of(r.stdout).startswith("equivalent: "), r.stdout[-3000:] + r.stderr[-2000:]
    assert_twins_equal(folder)


def test_with_default_settings_a_sigstopped_leg_is_flagged_within_120_s(tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "stall-default")
    p = start_run(tmp, spec, legs="a=engine")
    try:
        wait_for_step(tmp, "a", 1, p)
        pid = leg_pid(tmp, "a")
        os.killpg(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        seen = read_progress_until(p, "stalled", 130)
        detected_s = time.monotonic() - stopped_at
        print(f"watchdog: a SIGSTOPped engine leg flagged after {detected_s:.1f} s (default settings)")
        assert seen, "no 'stalled' line within 130 s"
        os.killpg(pid, signal.SIGCONT)  # it goes on (warn): the run ends normally
        out = p.communicate(timeout=600)[0]
    finally:
        if p.poll() is None:
            p.kill()
    folder = folder_of(tmp)
    log = open(os.path.join(folder, "legs", "a", "stderr.log")).read()
    assert "stalled" in log and "events again after" in log, log[-2000:]
    flags = stall_flags(folder, "a")
    assert [f["action"] for f in flags] == ["warn"], flags
    # The default rule (docs/gate.md "Stalled legs"): max(floor 60 s, 10 x the leg's pace), the pace being at
    # least its median update before the stop. On a quiet machine that is the floor; on a busy one the pace
    # may lift it, so the bound comes from the leg's own recorded updates, not from a sampled constant.
    walls = sorted(e["wall_s"] for e in step_events(folder, "a") if e["update"] <= flags[0]["update"])
    median = (walls[(len(walls) - 1) // 2] + walls[len(walls) // 2]) / 2 if walls else 0
    threshold = flags[0]["threshold"]
    assert threshold >= 60 and threshold >= 10 * median - 1e-9, (threshold, median, flags)
    assert threshold == 60 or "median update" in flags[0]["message"] or "longest silence" in flags[0]["message"], flags
    assert detected_s <= threshold + 60, (detected_s, threshold)
    assert steps_of(tmp, "a") == 5, out[-2000:]


def test_a_catalog_deleted_mid_run_is_recreated_with_the_run_and_the_last_line_says_so(tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "catalog-gone")
    db_path = os.path.join(tmp, "tandem.db")
    p = start_run(tmp, spec, legs="engine")
    try:
        wait_for_step(tmp, "engine", 1, p)
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(db_path + suffix):
                os.remove(db_path + suffix)
        out = p.communicate(timeout=600)[0]
    finally:
        if p.poll() is None:
            p.kill()
    lines = [l for l in out.splitlines() if l.strip()]
    assert "WARNING: the catalog" in lines[-1] and "was deleted" in lines[-1] and "re-created" in lines[-1], lines[-5:]
    folder = folder_of(tmp)
    with sqlite3.connect(db_path) as db:
        runs = db.execute("SELECT folder, status FROM runs").fetchall()
        legs = db.execute("SELECT name, status FROM legs").fetchall()
    assert [os.path.realpath(r[0]) for r in runs] == [os.path.realpath(folder)], runs
    assert legs == [("engine", "finished")], legs
