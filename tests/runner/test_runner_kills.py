"""The runner killed with SIGKILL at random moments, then `tandem run --resume` (docs/run-folder.md "Interruptions"
and 2). Oracle: an uninterrupted run of the same experiment with the same thread count, read with
h5py. Every kill must end in a complete history equal to the uninterrupted one (training loss,
grad norm, lr, tokens per update; held-out CE per evaluation; catalog row finished with every update;
the report passing) or in a clear refusal (exit 1, one line naming the folder). No leg may outlive
the runner it belonged to.

Kill moments are spread over the phases of a run: during preparation, during the bandwidth probe,
while the legs train (uniform over the baseline's leg time), and between the legs ending and the
report. TANDEM_KILLS sets how many (default 20); the totals line is printed for the issue's note.
"""
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from runner_fixture import TANDEM, h5_series, small_experiment, read_progress_until, verdict_of  # noqa: E402

KILLS = int(os.environ.get("TANDEM_KILLS", "20"))


def start_run(tmp, spec_path, probe):
    cmd = [TANDEM, "run", spec_path, "--legs", "engine,reference", "--threads", "2", "--out",
           os.path.join(tmp, "runs"), "--catalog", os.path.join(tmp, "tandem.db")]
    if not probe:
        cmd.append("--no-probe")
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)


def leg_processes_of(folder):
    """PIDs of processes whose command line names the run folder (legs get --run FOLDER)."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if folder.encode() in cmd:
            out.append(int(pid))
    return out


def run_folders(tmp):
    d = os.path.join(tmp, "runs")
    return sorted(os.path.join(d, x) for x in os.listdir(d)) if os.path.isdir(d) else []


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("baseline"))
    spec = small_experiment(tmp, "kill")
    t0 = time.monotonic()
    p = start_run(tmp, spec, probe=False)
    out, _ = p.communicate(timeout=600)
    assert p.returncode == 0, out[-3000:]
    assert verdict_of(out).startswith("equivalent: "), out[-2000:]
    folder = run_folders(tmp)[0]
    return spec, h5_series(folder), time.monotonic() - t0


# (phase, marker line, delay range after the marker in seconds). The legs phase kills at a uniform
# moment of the baseline's duration after the legs start.
def kill_plan(n, legs_s, rng):
    fixed = [("prepare", "preparing ", (0.0, 1.2))] * 3 + [("probe", "probing cpu", (0.0, 0.15))] * 3 + \
            [("finish", "legs ended; comparing", (0.0, 0.05))] * 3
    legs = [("legs", "probe cpu done", (0.5, max(1.0, legs_s))) for _ in range(max(0, n - len(fixed)))]
    plan = (fixed + legs)[:n]
    rng.shuffle(plan)
    return plan


def test_runner_killed_at_random_moments_resumes_to_complete_histories(baseline, tmp_path):
    spec, expected, base_s = baseline
    rng = random.Random(20261201)
    plan = kill_plan(KILLS, base_s - 2.0, rng)
    complete = refused = 0
    outcomes = []
    for i, (phase, marker, (lo, hi)) in enumerate(plan):
        tmp = str(tmp_path / f"k{i:02d}")
        os.makedirs(tmp)
        spec_i = small_experiment(tmp, "kill")
        p = start_run(tmp, spec_i, probe=True)
        seen = read_progress_until(p, marker, timeout=300)
        assert seen, f"kill {i}: the runner never printed '{marker}'"
        delay = rng.uniform(lo, hi)
        time.sleep(delay)
        p.kill()
        p.wait()
        folders = run_folders(tmp)
        # Defect 2: legs die with the runner (PR_SET_PDEATHSIG), within a second.
        if folders:
            deadline = time.monotonic() + 2.0
            while leg_processes_of(folders[0]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not leg_processes_of(folders[0]), f"kill {i} ({phase}): legs outlived the runner"
        if not folders:
            refused += 1  # killed before the folder existed: nothing to resume, nothing claimed
            outcomes.append((phase, delay, "no folder"))
            continue
        r = subprocess.run([TANDEM, "run", "--resume", folders[0], "--catalog", os.path.join(tmp, "tandem.db"),
                            "--no-probe"], capture_output=True, text=True, timeout=600)
        if r.returncode == 1 and "not a tandem run folder" in r.stderr:
            refused += 1
            assert r.stderr.strip().count("\n") == 0, r.stderr  # one clear line
            outcomes.append((phase, delay, "refused"))
            continue
        assert r.returncode == 0, f"kill {i} ({phase} +{delay:.2f}s): resume exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        assert verdict_of(r.stdout).startswith("equivalent: "), r.stdout[-2000:]
        got = h5_series(folders[0])
        for leg in ("engine", "reference"):
            for series in ("update", "loss", "grad_norm", "lr", "tokens", "eval_update", "heldout_ce"):
                assert got[leg][series] == expected[leg][series], \
                    f"kill {i} ({phase} +{delay:.2f}s): {leg} {series} differs from the uninterrupted run:\n" \
                    f"{got[leg][series]}\nvs\n{expected[leg][series]}"
        with sqlite3.connect(os.path.join(tmp, "tandem.db")) as db:
            status, note = db.execute("SELECT status, note FROM runs").fetchone()
            legs = db.execute("SELECT name, status, updates_done, updates_total FROM legs ORDER BY name").fetchall()
        assert status == "finished" and note.startswith("equivalent: "), (status, note)
        assert [(n, s, d == t) for n, s, d, t in legs] == [("engine", "finished", True), ("reference", "finished", True)], legs
        rep = subprocess.run([TANDEM, "report", folders[0]], capture_output=True, text=True)
        assert rep.returncode == 0 and verdict_of(rep.stdout).startswith("equivalent: "), rep.stdout[-2000:]
        complete += 1
        outcomes.append((phase, delay, "complete"))
    by_phase = {}
    for phase, _, result in outcomes:
        by_phase.setdefault(phase, []).append(result)
    print(f"\nrunner kills: {len(plan)} kills, {complete} complete histories, {refused} clear refusals, "
          f"0 lost rows; by phase: " + ", ".join(f"{k} {len(v)}" for k, v in sorted(by_phase.items())))
    assert complete + refused == len(plan)
    assert complete >= len(plan) - 3  # refusals only possible in the first instants of preparation
