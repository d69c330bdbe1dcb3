"""Runner faults of docs/run-folder.md "Interruptions" beyond the kill test: concurrent runs on one catalog (defect 3), a full
disk (defect 4), summaries of incomplete runs (defect 8) and checks that must come before any
preparation (defect 9). Oracles: h5py reading run.h5, sqlite3 reading the catalog, /proc for leg
processes, and an uninterrupted run of the same experiment."""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from runner_fixture import TANDEM, h5_series, read_progress_until, small_experiment, verdict_of  # noqa: E402

TWO_ENGINES = "a=engine,b=engine"  # two real legs without the reference's start-up cost


def run_cmd(tmp, spec, *extra, legs=TWO_ENGINES, out=None, catalog=None, timeout=600):
    cmd = [TANDEM, "run", spec, "--legs", legs, "--threads", "2", "--no-probe",
           "--out", out or os.path.join(tmp, "runs"), "--catalog", catalog or os.path.join(tmp, "tandem.db"), *extra]
    return cmd


def folders(out):
    return sorted(os.path.join(out, d) for d in os.listdir(out)) if os.path.isdir(out) else []


def processes_naming(text):
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        pids.append(int(pid))
            except OSError:
                pass
    return pids


def one_line_error(stderr):
    lines = [l for l in stderr.strip().splitlines() if l.startswith("tandem: error:")]
    assert len(lines) == 1, stderr
    assert "internal error" not in stderr
    return lines[0]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """An uninterrupted run of the two-engine experiment: the oracle for the disk-full resume."""
    tmp = str(tmp_path_factory.mktemp("clean"))
    spec = small_experiment(tmp, "faults")
    p = subprocess.run(run_cmd(tmp, spec), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return h5_series(folders(os.path.join(tmp, "runs"))[0]), p


# ---- defect 3: concurrent runs ----------------------------------------------------------------------

def test_eight_runs_at_once_on_one_catalog_get_eight_folders_and_rows(tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "together")
    procs = [subprocess.Popen(run_cmd(tmp, spec), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    results = [p.communicate(timeout=1200) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err[-2000:]
        assert verdict_of(out).startswith("equivalent: "), out[-2000:]
    runs = folders(os.path.join(tmp, "runs"))
    assert len(runs) == 8, runs
    for f in runs:
        s = h5_series(f)
        assert s["a"]["update"] == list(range(6)) and s["b"]["update"] == list(range(6)), (f, s["a"]["update"])
    with sqlite3.connect(os.path.join(tmp, "tandem.db")) as db:
        rows = db.execute("SELECT folder, status, note FROM runs").fetchall()
        legs = db.execute("SELECT COUNT(*) FROM legs WHERE status = 'finished' AND updates_done = 6").fetchone()[0]
    assert sorted(r[0] for r in rows) == runs
    assert all(r[1] == "finished" and r[2].startswith("equivalent: ") for r in rows), rows
    assert legs == 16


def test_twelve_writers_opening_a_fresh_catalog_at_once_never_see_database_is_locked(tmp_path):
    tool = os.path.join(os.path.dirname(TANDEM), "..", "tests", "store", "storage_tool")
    db = str(tmp_path / "busy.db")
    procs = [subprocess.Popen([tool, "catalog-forever", db], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(12)]
    time.sleep(4)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    outs = [p.communicate(timeout=60) for p in procs]
    errors = [err for _, err in outs if "error" in err]
    assert errors == [], errors
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT COUNT(*) FROM probes").fetchone()[0]
    # Every writer committed rows; the count each printed last is at most what the table holds.
    assert rows >= sum(int(o.split()[-1]) for o, _ in outs if o.split()) > 0


def test_a_second_runner_on_a_running_folder_is_refused(tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "locked")
    p = subprocess.Popen(run_cmd(tmp, spec), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    try:
        assert read_progress_until(p, "plan:", 120)
        time.sleep(0.5)
        f = folders(os.path.join(tmp, "runs"))[0]
        r = subprocess.run([TANDEM, "run", "--resume", f, "--catalog", os.path.join(tmp, "tandem.db")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 1
        assert "in use by another `tandem run`" in one_line_error(r.stderr)
    finally:
        p.wait(timeout=600)
    assert p.returncode == 0


# ---- defect 4: a full disk ------------------------------------------------------------------------------

def mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True, text=True)
    return r.returncode == 0, r.stderr.strip()


def fill_disk(disk, leave):
    """Writes a filler file until `leave` bytes are free (the runner keeps writing meanwhile)."""
    chunk = b"\0" * (1 << 20)
    with open(os.path.join(disk, "filler"), "wb") as f:
        while True:
            st = os.statvfs(disk)
            free = st.f_bavail * st.f_frsize
            if free <= leave + len(chunk):
                break
            try:
                f.write(chunk)
                f.flush()
            except OSError:
                break
    with open(os.path.join(disk, "filler"), "r+b") as f:  # give back what a race took beyond `leave`
        st = os.statvfs(disk)
        free = st.f_bavail * st.f_frsize
        if free < leave:
            f.truncate(max(0, os.path.getsize(f.name) - (leave - free)))


def test_a_full_disk_stops_the_legs_records_why_and_resumes_without_missing_rows(tmp_path, clean):
    expected, _ = clean
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "faults")
    disk = os.path.join(tmp, "disk")
    ok, why = mount_tmpfs(disk, "140m")
    if not ok:
        pytest.skip(f"cannot mount a tmpfs here ({why}); test_a_file_size_limit_is_a_clean_error covers the write failure")
    try:
        out = os.path.join(disk, "runs")
        catalog = os.path.join(tmp, "tandem.db")
        p = subprocess.Popen(run_cmd(tmp, spec, out=out, catalog=catalog), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, bufsize=1)
        # Another program fills the disk once the run folder is prepared, leaving 256 KiB.
        assert read_progress_until(p, "initial adapter written", 120)
        fill_disk(disk, leave=256 * 1024)
        rest = p.communicate(timeout=600)[0]
        assert p.returncode == 1, rest[-3000:]
        err = [l for l in rest.splitlines() if l.startswith("tandem: error:")]
        assert len(err) == 1 and "No space left on device" in err[0] and "--resume" in err[0], rest[-3000:]
        assert "internal error" not in rest and not verdict_of(rest).startswith("equivalent")
        run = folders(out)[0]
        assert processes_naming(run) == [], "a leg outlived the failed runner"
        with sqlite3.connect(catalog) as db:
            status, note = db.execute("SELECT status, note FROM runs").fetchone()
        assert status == "failed" and "No space left on device" in note, (status, note)
        os.remove(os.path.join(disk, "filler"))
        r = subprocess.run([TANDEM, "run", "--resume", run, "--catalog", catalog, "--no-probe"],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        assert verdict_of(r.stdout).startswith("equivalent: "), r.stdout[-2000:]
        got = h5_series(run)
        for leg in ("a", "b"):
            for k in ("update", "loss", "grad_norm", "lr", "tokens", "eval_update", "heldout_ce"):
                assert got[leg][k] == expected[leg][k], (leg, k, got[leg][k], expected[leg][k])
        with sqlite3.connect(catalog) as db:
            status, note = db.execute("SELECT status, note FROM runs").fetchone()
            assert status == "finished" and note.startswith("equivalent: "), (status, note)
    finally:
        subprocess.run(["umount", "-l", disk])


def test_a_file_size_limit_is_a_clean_error_not_a_crash(tmp_path):
    """A write failure inside HDF5's own writes (RLIMIT_FSIZE: the copy fits, the growth does not) used
    to crash in HDF5's exit handler (exit 139)."""
    tool = os.path.join(os.path.dirname(TANDEM), "..", "tests", "store", "storage_tool")
    results = []
    for kb in (8, 40, 150, 3000):
        f = str(tmp_path / f"limit{kb}.h5")

        def limit(kb=kb):
            import resource

            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (kb * 1024, kb * 1024))

        r = subprocess.run([tool, "append-forever", f, "leg", "50"], capture_output=True, text=True, timeout=60,
                           preexec_fn=limit)
        results.append((kb, r.returncode, r.stderr.strip()))
        assert r.returncode == 1, results
        assert "File too large" in r.stderr and r.stderr.count("\n") == 1, r.stderr
        # The published file is the last committed one: it opens, with whole batches.
        import h5py

        if os.path.exists(f):
            with h5py.File(f, "r") as h:
                steps = h["legs/leg"]["steps"] if "legs/leg/steps" in h else []
                assert len(steps) % 50 == 0


# ---- defect 8: what incomplete runs say -------------------------------------------------------------------

def test_a_run_whose_leg_was_killed_says_incomplete_everywhere(tmp_path):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "killedleg")
    p = subprocess.Popen(run_cmd(tmp, spec), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert read_progress_until(p, "plan:", 120)
    run = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        fs_ = folders(os.path.join(tmp, "runs"))
        if fs_:
            ev = os.path.join(fs_[0], "legs", "a", "events.jsonl")
            if os.path.exists(ev) and '"event":"step"' in open(ev).read().replace(" ", ""):
                run = fs_[0]
                break
        time.sleep(0.05)
    assert run, "leg a never stepped"
    pid = json.load(open(os.path.join(run, "legs", "a", "process.json")))["pid"]
    os.kill(pid, signal.SIGKILL)
    out = p.communicate(timeout=600)[0]
    assert p.returncode == 1, out[-3000:]
    assert not verdict_of(out).startswith("equivalent")
    verdict_lines = [l for l in out.splitlines() if l.startswith("incomplete:")]
    assert verdict_lines and "a: leg failed (killed by signal 9" in verdict_lines[0], out[-3000:]
    with sqlite3.connect(os.path.join(tmp, "tandem.db")) as db:
        status, note = db.execute("SELECT status, note FROM runs").fetchone()
    assert status == "failed" and note.startswith("incomplete: a: leg failed"), (status, note)
    r = subprocess.run([TANDEM, "report", run], capture_output=True, text=True)
    assert r.returncode == 3
    assert "incomplete: a: leg failed" in r.stdout and "pending" not in r.stdout and not verdict_of(r.stdout).startswith("equivalent")


def test_a_run_cut_short_reports_incomplete_not_pending(tmp_path):
    """The runner SIGKILLed: `tandem report` on what is left says which rows are missing."""
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "cut")
    p = subprocess.Popen(run_cmd(tmp, spec), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    assert read_progress_until(p, "plan:", 120)
    time.sleep(2.5)
    p.kill()
    p.wait()
    run = folders(os.path.join(tmp, "runs"))[0]
    if not os.path.exists(os.path.join(run, "run.h5")):
        pytest.skip("killed before the run file existed")
    r = subprocess.run([TANDEM, "report", run], capture_output=True, text=True)
    assert r.returncode == 3, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()
    verdict = [l for l in last if l.startswith("incomplete:")]
    assert verdict, r.stdout[-2000:]
    assert "did not finish" in r.stdout or "missing" in r.stdout


def test_a_truncated_run_file_is_called_truncated(tmp_path, clean):
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "trunc")
    subprocess.run(run_cmd(tmp, spec, legs="engine"), capture_output=True, text=True, timeout=600, check=True)
    run = folders(os.path.join(tmp, "runs"))[0]
    h5 = os.path.join(run, "run.h5")
    with open(h5, "r+b") as f:
        f.truncate(os.path.getsize(h5) // 3)
    r = subprocess.run([TANDEM, "report", run], capture_output=True, text=True)
    assert r.returncode == 1
    line = one_line_error(r.stderr)
    assert "truncated" in line and "writer" not in line, line


def test_messages_say_what_is_wrong(tmp_path):
    tmp = str(tmp_path)
    r = subprocess.run([TANDEM, "run", tmp, "--out", os.path.join(tmp, "runs")], capture_output=True, text=True)
    assert r.returncode == 1 and "is a folder, not an experiment file" in one_line_error(r.stderr)
    spec = json.load(open(small_experiment(tmp, "lr")))
    spec["optimizer"]["lr"] = 100
    path = os.path.join(tmp, "lr100.json")
    json.dump(spec, open(path, "w"))
    r = subprocess.run(run_cmd(tmp, path), capture_output=True, text=True)
    assert r.returncode == 1 and "field optimizer.lr: must be a number in (0, 10]" in one_line_error(r.stderr)


# ---- defect 9: checks before preparing -------------------------------------------------------------------

@pytest.mark.parametrize("case", ["catalog-not-a-database", "unknown-config", "rank-2^62", "micro-batch-1e12"])
def test_bad_runs_are_refused_before_a_folder_is_prepared(tmp_path, case):
    tmp = str(tmp_path)
    spec = json.load(open(small_experiment(tmp, "late")))
    catalog = os.path.join(tmp, "tandem.db")
    expect = None
    if case == "catalog-not-a-database":
        with open(catalog, "w") as f:
            f.write("this is not SQLite\n" * 10)
        expect = "not an SQLite database"
    elif case == "unknown-config":
        spec["model"] = {"config": "qwen9-huge"}
        expect = "field model.config: unknown model config name 'qwen9-huge'"
    elif case == "rank-2^62":
        spec["lora"]["rank"] = 2 ** 62
        expect = "of memory for its legs"
    else:
        spec["batch"]["micro_batch"] = 10 ** 12
        expect = "of memory for its legs"
    path = os.path.join(tmp, case + ".json")
    json.dump(spec, open(path, "w"))
    t0 = time.monotonic()
    r = subprocess.run(run_cmd(tmp, path, legs="engine,reference", catalog=catalog), capture_output=True, text=True,
                       timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 1, r.stdout + r.stderr
    assert expect in one_line_error(r.stderr), r.stderr
    assert took < 10, took  # refused before preparation (which takes seconds and ~90 MB)
    assert folders(os.path.join(tmp, "runs")) == [], "a refused run left a folder behind"
    assert processes_naming(path) == []


def test_the_run_probe_uses_the_buffer_size_of_tandem_probe_and_records_it(tmp_path):
    """One buffer-size rule (docs/cli.md "probe"): a run's own CPU probe copies the same size as
    `tandem probe --device cpu` on this machine, and run.h5 says that size in `bytes` and `method`."""
    import h5py
    tmp = str(tmp_path)
    spec = small_experiment(tmp, "probed")
    cmd = [c for c in run_cmd(tmp, spec, "--quiet") if c != "--no-probe"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    alone = os.path.join(tmp, "alone.h5")
    q = subprocess.run([TANDEM, "probe", "--device", "cpu", "--out", alone, "--catalog", os.path.join(tmp, "p.db")],
                       capture_output=True, text=True, timeout=600)
    assert q.returncode == 0, q.stderr
    with h5py.File(os.path.join(folders(os.path.join(tmp, "runs"))[0], "run.h5"), "r") as f, h5py.File(alone, "r") as g:
        run_probe, own = f["probes/cpu"].attrs, g["probes/cpu"].attrs
        method = run_probe["method"].decode() if isinstance(run_probe["method"], bytes) else run_probe["method"]
        llc = int(g["host"].attrs["llc_bytes"])
        # The rule (docs/cli.md "probe"), applied to the MemAvailable each probe itself read and recorded:
        # MemAvailable moves between two processes on a busy machine, the rule does not.
        def rule(avail):
            want = max(256 * 2 ** 20, 8 * llc)
            if avail > 0:
                want = min(want, max(16 * 2 ** 20, avail // 8))
            return want // 4096 * 4096
        for probe in (run_probe, own):
            assert int(probe["memory_available_bytes"]) > 0, probe["method"]
            assert int(probe["bytes"]) == rule(int(probe["memory_available_bytes"])), probe["method"]
    assert " each (max(256 MiB, 8 x LLC " in method, method
