"""Legs on one GPU (docs/cli.md "Legs on one GPU"), on a machine without one: two command legs that the
experiment places on cuda:0 run a wrapper that records when it ran and the --threads it was given, then
trains on the CPU (tandem leg engine --device cpu), so the runner's scheduling is observed, not the GPU's.
Oracles: the wrappers' own clocks (one after the other by default, overlapping with --share-devices), the
--threads each leg received against the rule (an even share among the legs that run at once), the line the
runner says at the start, the report's timing rows, and the two legs' identical trajectories."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner"))
from runner_fixture import TANDEM, h5_series, small_experiment, verdict_of  # noqa: E402

WRAPPER = r'''
import json, os, subprocess, sys, time
out, tandem = sys.argv[1], sys.argv[2]
args = sys.argv[3:]
threads = args[args.index("--threads") + 1]
device = args[args.index("--device") + 1]
start = time.time()
args[args.index("--device") + 1] = "cpu"  # the runner placed the leg on a GPU; this machine trains on the CPU
rc = subprocess.call([tandem, "leg", "engine", *args])
json.dump({"start": start, "end": time.time(), "threads": int(threads), "device": device}, open(out, "w"))
sys.exit(rc)
'''


def _run(tmp, share):
    wrapper = os.path.join(tmp, "wrapper.py")
    with open(wrapper, "w") as f:
        f.write(WRAPPER)
    legs = {name: {"implementation": "command", "device": "cuda:0",
                   "command": [sys.executable, wrapper, os.path.join(tmp, name + ".json"), os.path.abspath(TANDEM),
                               "--run", "{run}", "--leg", "{leg}", "--device", "{device}", "--threads", "{threads}",
                               "{resume}"]}
            for name in ("g1", "g2")}
    spec = small_experiment(tmp, "gpu-share", legs=legs)
    cmd = [TANDEM, "run", spec, "--legs", "g1,g2", "--threads", "4", "--no-probe", "--out", os.path.join(tmp, "runs"),
           "--catalog", os.path.join(tmp, "tandem.db")] + (["--share-devices"] if share else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    marks = {name: json.load(open(os.path.join(tmp, name + ".json"))) for name in ("g1", "g2")}
    runs = os.path.join(tmp, "runs")
    folder = os.path.join(runs, sorted(os.listdir(runs))[0])
    return p, marks, folder


def _overlap(a, b):
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_legs_on_one_gpu_run_one_after_the_other_with_every_thread(tmp_path):
    p, marks, folder = _run(str(tmp_path), share=False)
    assert "cuda:0 is used by legs g1, g2: they run one after the other" in p.stderr, p.stderr[-2000:]
    assert not _overlap(marks["g1"], marks["g2"]), marks
    # alone on its GPU, each leg gets the whole --threads
    assert [marks[n]["threads"] for n in ("g1", "g2")] == [4, 4]
    assert [l["threads"] for l in json.load(open(os.path.join(folder, "legs.json")))] == [4, 4]
    assert all(m["device"] == "cuda:0" for m in marks.values())
    assert verdict_of(p.stdout).startswith("equivalent: "), p.stdout[-2000:]
    assert "shared with" not in p.stdout


def test_share_devices_runs_them_at_once_splits_the_threads_and_marks_the_timings(tmp_path):
    p, marks, folder = _run(str(tmp_path), share=True)
    assert "cuda:0 is shared by legs g1, g2: they run at the same time (--share-devices)" in p.stderr, p.stderr[-2000:]
    assert _overlap(marks["g1"], marks["g2"]), marks
    assert [marks[n]["threads"] for n in ("g1", "g2")] == [2, 2]
    timing = [line for line in p.stdout.splitlines() if line.lstrip().startswith(("g1 (command)", "g2 (command)"))]
    assert len(timing) == 2 and "cuda:0 (shared with g2)" in timing[0] and "cuda:0 (shared with g1)" in timing[1], timing
    assert "shared: legs that ran at the same time on one GPU" in p.stdout
    s = h5_series(folder)
    assert s["g1"]["loss"] == s["g2"]["loss"] and len(s["g1"]["loss"]) == 6
    assert verdict_of(p.stdout).startswith("equivalent: "), p.stdout[-2000:]
