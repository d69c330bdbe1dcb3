"""Shared pieces of the runner fault tests: a small two-leg experiment, the `tandem run` command line and a
run of twin engine legs, run.h5 series via h5py, reading a runner's output until a marker line, the
verdict line of a report."""
import json
import os
import select
import subprocess
import time

SOURCE_DIR = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TANDEM = os.environ.get("TANDEM_BIN", os.path.join(os.environ.get("TANDEM_BINARY_DIR", "build"), "app", "tandem"))


def cut_spec(experiment, name, updates, eval_interval, checkpoint_interval, records, max_len, l3_records=None):
    """experiments/<experiment> cut to `updates` updates on `records` records per source (evaluations
    every `eval_interval` updates on an 8-example prefix, checkpoints every `checkpoint_interval`)."""
    with open(os.path.join(SOURCE_DIR, "experiments", experiment)) as f:
        spec = json.load(f)
    spec["name"] = name
    spec["batch"]["max_updates"] = updates
    spec["eval"] = {"interval": eval_interval, "prefix_size": 8}
    spec["checkpoint"] = {"interval": checkpoint_interval}
    spec["corpus"]["max_records_per_source"] = records
    spec["sequence"]["max_len"] = max_len
    if l3_records is not None:
        spec["l3_records"] = l3_records
    return spec


def small_experiment(tmp, name, **changes):
    """clinical-tiny cut to 6 updates (evaluations at 0, 2, 4, 6; checkpoints every 2 updates)."""
    spec = cut_spec("clinical-tiny-random.json", name, 6, 2, 2, 40, 128, l3_records=16)
    for k, v in changes.items():
        spec[k] = v  # top-level fields (legs, gate, ...)
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def run_cmd(tmp, spec, *extra):
    """`tandem run SPEC` on 2 threads without probes, its run folders in tmp/runs and its catalog tmp/tandem.db."""
    return [TANDEM, "run", spec, "--threads", "2", "--no-probe", "--out", os.path.join(tmp, "runs"),
            "--catalog", os.path.join(tmp, "tandem.db"), *extra]


def start_run(tmp, spec, legs="a=engine,b=engine"):
    """run_cmd's run of `legs` (default: twin engine legs a and b) in the background, stdout and stderr
    together, line by line."""
    return subprocess.Popen(run_cmd(tmp, spec, "--legs", legs), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)


TWIN_SERIES = ("update", "loss", "grad_norm", "lr", "tokens", "eval_update", "heldout_ce")


def assert_twins_equal(folder, updates=6):
    """Two engine legs a and b of one run compute the same trajectory bit for bit: every recorded series
    equal, over all `updates` updates."""
    s = h5_series(folder)
    for k in TWIN_SERIES:
        assert s["a"][k] == s["b"][k], (k, s["a"][k], s["b"][k])
    assert s["a"]["update"] == list(range(updates))


def h5_series(folder):
    """Every leg's recorded series (exact values, as Python lists) from run.h5."""
    import h5py

    out = {}
    with h5py.File(os.path.join(folder, "run.h5"), "r") as f:
        for leg in f["legs"]:
            g = f["legs"][leg]
            steps = g["steps"][()] if "steps" in g else None
            ev = g["eval"][()] if "eval" in g else None
            out[leg] = {
                "update": [] if steps is None else steps["update"].tolist(),
                "loss": [] if steps is None else steps["loss"].tolist(),
                "grad_norm": [] if steps is None else steps["grad_norm"].tolist(),
                "lr": [] if steps is None else steps["lr"].tolist(),
                "tokens": [] if steps is None else steps["tokens"].tolist(),
                "eval_update": [] if ev is None else ev["update"].tolist(),
                "heldout_ce": [] if ev is None else ev["heldout_ce"].tolist(),
            }
    return out


def steps_seen(folder, leg):
    """The last update in the leg's events.jsonl (-1 when none yet)."""
    path = os.path.join(folder, "legs", leg, "events.jsonl") if folder else ""
    if not path or not os.path.exists(path):
        return -1
    n = -1
    for line in open(path):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "step":
            n = max(n, e["update"])
    return n


def read_progress_until(proc, marker, timeout):
    """Reads the process's (text, line-buffered) stdout until a line contains `marker`; True when seen."""
    deadline = time.monotonic() + timeout
    fd = proc.stdout.fileno()
    os.set_blocking(fd, False)
    buf = ""
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.05)
        if not r:
            if proc.poll() is not None:
                return False
            continue
        chunk = os.read(fd, 65536).decode(errors="replace")
        if not chunk:
            return False
        buf += chunk
        if marker in buf:
            return True
        buf = buf[-4096:]
    return False


VERDICTS = ("equivalent: ", "different: ", "within the seed envelope: ", "outside the seed envelope: ", "not judged: ",
            "incomplete: ", "complete; one leg", "complete; no pair")


def verdict_of(text):
    """The verdict line `tandem run` / `tandem report` print last (docs/report.md "The verdict"); "" when none."""
    lines = [l for l in text.splitlines() if l.startswith(VERDICTS)]
    return lines[-1] if lines else ""


def optimizer_checks(folder, leg):
    """The leg's optimizer steps replayed with the spec's AdamW (its `optimizer_check` events as run.h5
    keeps them, /legs/<leg>/checks/optimizer): [{update, max_ratio, tensor, over, ...}], [] when none."""
    import h5py

    with h5py.File(os.path.join(folder, "run.h5"), "r") as f:
        key = f"legs/{leg}/checks/optimizer"
        if key not in f:
            return []
        v = f[key][()]
        return json.loads(v.decode() if isinstance(v, bytes) else v)


def first_optimizer_off(folder, *legs):
    """The first update at which any of the legs' replayed optimizer steps is over its bound (max_ratio
    > 1, "Infinity" included: docs/thresholds.md "The optimizer step"); None when none is."""
    offs = [c["update"] for leg in legs for c in optimizer_checks(folder, leg)
            if c["max_ratio"] is None or c["max_ratio"] == "Infinity" or float(c["max_ratio"]) > 1]
    return min(offs) if offs else None
