"""`tandem run --executor slurm` on a real one-node Slurm cluster (docs/cluster.md), started for these tests by
scripts/slurm-local and stopped after them. No part of Slurm is mocked.

Oracle: the same experiment run with the local executor, same thread count, read with h5py: the Slurm
run's series must be bit-identical. Slurm's own accounting (sacct) says how many jobs each leg had: a
resumed runner must re-attach to the jobs still running, never submit a leg twice. The journal
(events.jsonl) must hold exactly the bytes the job wrote (no line lost or repeated by a re-attach).
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "runner"))
from runner_fixture import TANDEM, h5_series, small_experiment  # noqa: E402
from slurm_cluster import Cluster  # noqa: E402

LEGS = ["engine", "reference"]


@pytest.fixture(scope="module")
def cluster():
    c = Cluster()
    try:
        t0 = time.monotonic()
        c.start()
        print(f"\nlocal Slurm cluster up in {time.monotonic() - t0:.1f} s")
        yield c
    finally:
        c.stop()


def run_cmd(tmp, spec, *extra):
    return [TANDEM, "run", spec, "--legs", ",".join(LEGS), "--threads", "2", "--no-probe", "--quiet",
            "--out", os.path.join(tmp, "runs"), "--catalog", os.path.join(tmp, "tandem.db"), *extra]


def only_folder(tmp):
    d = os.path.join(tmp, "runs")
    folders = sorted(os.path.join(d, x) for x in os.listdir(d))
    assert len(folders) == 1, folders
    return folders[0]


def events_of(folder, leg):
    path = os.path.join(folder, "legs", leg, "events.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{") and line.rstrip().endswith("}")]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def assert_journal_is_the_jobs_output(folder, leg):
    """events.jsonl = the job's stdout, byte for byte (one attempt: nothing lost, nothing twice)."""
    out = os.path.join(folder, "legs", leg, "slurm", "attempt-1.out")
    assert not os.path.exists(os.path.join(folder, "legs", leg, "slurm", "attempt-2.sh")), f"{leg} was submitted twice"
    assert read_bytes(os.path.join(folder, "legs", leg, "events.jsonl")) == read_bytes(out), leg


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """The local executor's run: the oracle (the executor overhead is measured by bench_slurm_start.py)."""
    tmp = str(tmp_path_factory.mktemp("local"))
    spec = small_experiment(tmp, "slurmeq")
    p = subprocess.run(run_cmd(tmp, spec), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert any(l.startswith("equivalent: ") for l in p.stdout.splitlines()), p.stdout[-3000:]
    series = h5_series(only_folder(tmp))
    assert [len(series[leg]["loss"]) for leg in LEGS] == [6, 6]
    return series


def test_slurm_run_equals_the_local_run_and_its_legs_are_in_sacct(cluster, baseline, tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "slurmeq")
    p = subprocess.run(run_cmd(tmp, spec, "--executor", "slurm"), env=cluster.env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert any(l.startswith("equivalent: ") for l in p.stdout.splitlines()), p.stdout[-3000:]
    folder = only_folder(tmp)
    assert h5_series(folder) == baseline  # bit-identical trajectories, held-out CE, lr, tokens

    jobs = cluster.wait_for_jobs(folder, len(LEGS))
    names = sorted(j[1] for j in jobs)
    base = os.path.basename(folder)
    assert names == [f"tandem:{base}:{leg}:1" for leg in sorted(LEGS)], jobs
    assert all(j[2] == "COMPLETED" and j[3] == "0:0" for j in jobs), jobs
    for leg in LEGS:
        assert_journal_is_the_jobs_output(folder, leg)
        assert not os.path.exists(os.path.join(folder, "legs", leg, "process.json"))
    with open(os.path.join(folder, "legs.json")) as f:
        assert [e.get("executor") for e in json.load(f)] == ["slurm", "slurm"]


def test_a_killed_runner_resumes_by_reattaching_to_its_running_jobs(cluster, baseline, tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "slurmkill")
    runner = subprocess.Popen(run_cmd(tmp, spec, "--executor", "slurm"), env=cluster.env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    # Kill the runner mid-run: once the engine leg has trained and the reference leg has started.
    deadline = time.monotonic() + 600
    folder = None
    while time.monotonic() < deadline and runner.poll() is None:
        d = os.path.join(tmp, "runs")
        if os.path.isdir(d) and os.listdir(d):
            folder = only_folder(tmp)
            ev = {leg: [e["event"] for e in events_of(folder, leg)] for leg in LEGS}
            if "step" in ev["engine"] and "hello" in ev["reference"] and "done" not in ev["reference"]:
                break
        time.sleep(0.1)
    assert runner.poll() is None, "the run ended before it could be killed"
    runner.send_signal(signal.SIGKILL)
    runner.wait()

    base = os.path.basename(folder)
    active = [j for j in cluster.active_jobs() if f":{base}:" in j[1]]
    assert any(f":{base}:reference:" in j[1] for j in active), active  # the legs outlive the killed runner
    records = {leg: json.load(open(os.path.join(folder, "legs", leg, "process.json")))
               for leg in LEGS if os.path.exists(os.path.join(folder, "legs", leg, "process.json"))}
    assert "reference" in records and records["reference"]["job_id"]
    lines_before = {leg: len(events_of(folder, leg)) for leg in LEGS}

    p = subprocess.run([TANDEM, "run", "--resume", folder, "--catalog", os.path.join(tmp, "tandem.db"), "--quiet"],
                       env=cluster.env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert any(l.startswith("equivalent: ") for l in p.stdout.splitlines()), p.stdout[-3000:]
    for leg, rec in records.items():
        assert f"leg {leg}: re-attached to Slurm job {rec['job_id']}" in p.stderr, p.stderr

    jobs = cluster.wait_for_jobs(folder, len(LEGS))
    per_leg = {leg: [j for j in jobs if j[1].split(":")[2] == leg] for leg in LEGS}
    assert {leg: len(v) for leg, v in per_leg.items()} == {leg: 1 for leg in LEGS}, jobs  # no leg ran twice
    assert all(j[2] == "COMPLETED" for j in jobs), jobs
    for leg in LEGS:
        assert_journal_is_the_jobs_output(folder, leg)
    assert h5_series(folder) == baseline  # full histories, equal to the uninterrupted local run
    assert lines_before["reference"] < len(events_of(folder, "reference"))
    with sqlite3.connect(os.path.join(tmp, "tandem.db")) as db:
        statuses = dict(db.execute("SELECT name, status FROM legs"))
    assert statuses == {"engine": "finished", "reference": "finished"}


def test_a_leg_cancelled_with_scancel_fails_with_its_slurm_state_while_the_other_finishes(cluster, tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "slurmcancel")
    runner = subprocess.Popen(run_cmd(tmp, spec, "--executor", "slurm"), env=cluster.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    job = None
    while time.monotonic() < deadline and runner.poll() is None and job is None:
        d = os.path.join(tmp, "runs")
        if os.path.isdir(d) and os.listdir(d):
            folder = only_folder(tmp)
            rec = os.path.join(folder, "legs", "reference", "process.json")
            if "hello" in [e["event"] for e in events_of(folder, "reference")] and os.path.exists(rec):
                job = json.load(open(rec))["job_id"]
        time.sleep(0.1)
    assert job, "the reference leg's job never started"
    assert cluster.run("scancel", job).returncode == 0
    out, err = runner.communicate(timeout=900)
    assert runner.returncode == 1, out[-2000:] + err[-3000:]  # a leg failed
    assert f"leg reference failed (exit status 143): Slurm job {job} CANCELLED (exit code 0:15)" in err, err[-3000:]

    series = h5_series(folder)
    assert len(series["engine"]["loss"]) == 6  # the other leg finished its whole history
    assert len(series["reference"]["loss"]) < 6
    with sqlite3.connect(os.path.join(tmp, "tandem.db")) as db:
        rows = {r[0]: r[1:] for r in db.execute("SELECT name, status, error FROM legs")}
        verdict = db.execute("SELECT note FROM runs").fetchone()[0]  # the verdict
    assert rows["engine"][0] == "finished"
    assert rows["reference"][0] == "failed" and "CANCELLED" in rows["reference"][1], rows
    assert verdict.startswith("incomplete"), verdict
    jobs = cluster.wait_for_jobs(folder, 2)
    states = {j[1].split(":")[2]: j[2] for j in jobs}
    assert states == {"engine": "COMPLETED", "reference": "CANCELLED"}, jobs
