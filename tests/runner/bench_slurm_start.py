"""What the Slurm executor costs per leg start (docs/cluster.md), against the local executor in the same run.

    TANDEM_BIN=build/app/tandem $REFENV/bin/python tests/runner/bench_slurm_start.py [--repeats 5]

Starts its own one-node cluster (scripts/slurm-local, as the tests do). Each repetition runs the same
experiment twice, once per executor, with one trivial command leg (it prints `hello` and `done` and
exits, so the leg's own work is ~0): the difference of the runs' wall times is what the executor adds
to one leg's start and end (sbatch, scheduling, job start, following files, squeue noticing the end).
Also printed: from the job script being written (just before sbatch) to the leg's first event.
The run itself is reported incomplete (the leg trains nothing); only its timing is used.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "runner"))
from runner_fixture import TANDEM, small_experiment  # noqa: E402
from slurm_cluster import Cluster  # noqa: E402

LEG = """import json, sys, time
def emit(e, **f):
    print(json.dumps(dict(v=1, event=e, t=time.time(), **f)), flush=True)
emit("hello", implementation="command", leg="quick")
emit("done", updates=0, final="")
"""


def one_run(tmp, spec, executor, env):
    out = os.path.join(tmp, executor)
    t0 = time.monotonic()
    subprocess.run([TANDEM, "run", spec, "--no-probe", "--quiet", "--format", "csv", "--threads", "1", "--out", out,
                    "--catalog", os.path.join(tmp, "tandem.db"), "--executor", executor],
                   env=env, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - t0
    folder = os.path.join(out, sorted(os.listdir(out))[-1])
    with open(os.path.join(folder, "legs", "quick", "events.jsonl")) as f:
        hello_t = json.loads(f.readline())["t"]
    start = None
    script = os.path.join(folder, "legs", "quick", "slurm", "attempt-1.sh")
    if os.path.exists(script):
        start = hello_t - os.stat(script).st_mtime
    return wall, start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    cluster = Cluster()
    cluster.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            leg = os.path.join(tmp, "quick_leg.py")
            with open(leg, "w") as f:
                f.write(LEG)
            spec = small_experiment(tmp, "quick", legs={"quick": {"implementation": "command",
                                                                   "command": [sys.executable, leg]}})
            local, slurm, starts = [], [], []
            for i in range(args.repeats):
                local.append(one_run(tmp, spec, "local", cluster.env)[0])
                w, s = one_run(tmp, spec, "slurm", cluster.env)
                slurm.append(w)
                starts.append(s)
                print(f"repeat {i + 1}: local {local[-1]:.2f} s, slurm {slurm[-1]:.2f} s, "
                      f"job script to first event {s:.2f} s", flush=True)
            ml, ms = statistics.median(local), statistics.median(slurm)
            print(f"median run wall time: local {ml:.2f} s, slurm {ms:.2f} s; Slurm executor overhead per leg "
                  f"{ms - ml:+.2f} s (slurm / local {ms / ml:.2f}x); job script written to the leg's first event: "
                  f"median {statistics.median(starts):.2f} s")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
