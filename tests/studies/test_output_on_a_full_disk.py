"""Every output command on a full disk (docs/cli.md "Outputs never replace a run"): a small tmpfs,
filled up, under the output path. Each command must fail with exit 1 and one `tandem: error:` line
naming the output path (not the input run), leave nothing on the full filesystem but the filler, and,
once the filler is removed, succeed on the same command line, without --overwrite or --force.

Also the readers of a live run (a process holds RUN/.runner.lock as a runner does): `tandem report`
says the run is live and who holds it; `tandem export tensorboard` refuses it and writes nothing.

Needs root for mount(8); skipped (with the reason) where mounting is not allowed.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "cli"))
import hostile as F  # noqa: E402
from hostile import TINY_EXPERIMENT  # noqa: E402

TANDEM = F.TANDEM
GOOD = dict(TINY_EXPERIMENT, name="fulldisk")


def tandem(*args, timeout=300):
    return subprocess.run([TANDEM, *map(str, args)], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run():
    import json

    tmp = tempfile.mkdtemp(prefix="tandem-fulldisk-")
    with open(os.path.join(tmp, "x.json"), "w") as f:
        json.dump(GOOD, f)
    p = tandem("run", os.path.join(tmp, "x.json"), "--legs", "engine", "--no-probe", "--quiet", "--threads", "2",
               "--out", os.path.join(tmp, "runs"), "--catalog", os.path.join(tmp, "c.db"))
    assert p.returncode == 0, p.stdout + p.stderr
    yield tmp, os.path.join(tmp, "runs", os.listdir(os.path.join(tmp, "runs"))[0])
    F.unmount_below(tmp)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def full(run):
    tmp, _ = run
    disk = tempfile.mkdtemp(dir=tmp)
    if not F.small_filesystem(disk, size="256k"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield disk
    F.unmount_below(disk)


# (name, argv after `tandem` with RUN and OUT placeholders, the output path the message must name)
COMMANDS = [
    ("report --out", ["report", "RUN", "--out", "OUT/r.md"], "OUT/r.md"),
    ("corpus plan --out", ["corpus", "plan", "--corpus", "RUN", "--out", "OUT/p.json"], "OUT/p.json"),
    ("export tensorboard", ["export", "tensorboard", "RUN", "OUT/tb"], "OUT/tb/"),
    ("probe --out", ["probe", "--device", "cpu", "--out", "OUT/p.h5", "--catalog", "OUT/../probe.db"], "OUT/p.h5"),
]


@pytest.mark.parametrize("name,argv,named", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_a_full_disk_is_one_line_naming_the_output_and_the_retry_succeeds(run, full, name, argv, named):
    tmp, folder = run
    sub = lambda a: a.replace("RUN", folder).replace("OUT", full)  # noqa: E731
    args = [sub(a) for a in argv]
    p = tandem(*args)
    assert p.returncode == 1, p.stdout + p.stderr
    # progress lines ("probing cpu ...") may precede it; the failure is one line
    errors = [l for l in p.stderr.splitlines() if "error" in l.lower()]
    assert len(errors) == 1 and errors[0].startswith("tandem: error:"), p.stderr
    assert sub(named) in errors[0] and "No space left on device" in errors[0], errors[0]
    assert "errno" not in errors[0] and "buf = 0x" not in errors[0], f"library text in {errors[0]}"
    assert "Exception in thread" not in p.stdout + p.stderr and "Traceback" not in p.stdout + p.stderr
    assert sorted(os.listdir(full)) == ["filler"], f"{name} left {os.listdir(full)} on the full disk"
    os.remove(os.path.join(full, "filler"))
    again = tandem(*args)  # the same command line: no --overwrite, no --force
    assert again.returncode in (0, 3), again.stdout + again.stderr


# The commands that make run folders: they check the free space first (the estimate names the
# output folder), so the disk is a larger tmpfs that a retry fits once the filler is gone.
RUN_FOLDER_COMMANDS = [
    ("run", ["run", "EXP", "--legs", "engine", "--no-probe", "--quiet", "--threads", "2", "--out", "OUT/runs",
             "--catalog", "OUT/../c.db"], "OUT/runs"),
    ("envelope", ["envelope", "EXP", "--legs", "engine", "--seeds", "2", "--threads", "2", "--out", "OUT/env",
                  "--catalog", "OUT/../c.db"], "OUT/env"),
    ("faults", ["faults", "EXP", "--faults", "none", "--no-probe", "--threads", "2", "--out", "OUT/f",
                "--catalog", "OUT/../c.db"], "OUT/f"),
]


@pytest.mark.parametrize("name,argv,named", RUN_FOLDER_COMMANDS, ids=[c[0] for c in RUN_FOLDER_COMMANDS])
def test_commands_that_make_run_folders_on_a_full_disk(run, name, argv, named):
    tmp, _ = run
    disk = tempfile.mkdtemp(dir=tmp)
    if not F.small_filesystem(disk, size="600m"):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        sub = lambda a: a.replace("EXP", os.path.join(tmp, "x.json")).replace("OUT", disk)  # noqa: E731
        args = [sub(a) for a in argv]
        p = tandem(*args, timeout=600)
        assert p.returncode == 1, p.stdout + p.stderr
        errors = [l for l in p.stderr.splitlines() if "error" in l.lower()]
        assert len(errors) == 1 and errors[0].startswith("tandem: error:"), p.stderr
        assert sub(named) in errors[0], errors[0]
        assert "No space left on device" in errors[0] or "of disk" in errors[0], errors[0]
        assert "Traceback" not in p.stdout + p.stderr
        assert sorted(os.listdir(disk)) == ["filler"], f"{name} left {os.listdir(disk)} on the full disk"
        os.remove(os.path.join(disk, "filler"))
        again = tandem(*args, timeout=600)  # the same command line
        assert again.returncode in (0, 3), again.stdout + again.stderr
    finally:
        F.unmount_below(disk)


def test_report_of_a_live_run_says_so_and_export_refuses_it(run):
    tmp, folder = run
    live = tempfile.mkdtemp(dir=tmp)
    copy = os.path.join(live, os.path.basename(folder))
    shutil.copytree(folder, copy, symlinks=True)
    lock = os.path.join(copy, ".runner.lock")
    with open(lock, "w") as f:
        f.write("pid 4242 on testhost\n")
    holder = subprocess.Popen(["flock", "-x", lock, "sleep", "60"], start_new_session=True)  # flock and its sleep: one group
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["flock", "-n", "-s", lock, "true"]).returncode == 0:
            assert time.monotonic() < deadline, "flock(1) never took the lock"
            time.sleep(0.05)
        r = tandem("report", copy)
        notes = [l for l in r.stderr.splitlines() if l.startswith("note: ")]
        assert len(notes) == 1 and f"{copy} is live" in notes[0] and "pid 4242 on testhost" in notes[0] and lock in notes[0], r.stderr
        e = tandem("export", "tensorboard", copy, os.path.join(live, "tb"))
        assert e.returncode == 1 and f"{copy} is live" in e.stderr, e.stderr
        assert not os.path.exists(os.path.join(live, "tb"))
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    # The runner gone, the same commands read the run as usual.
    r = tandem("report", copy)
    assert not [l for l in r.stderr.splitlines() if l.startswith("note: ")], r.stderr
    assert tandem("export", "tensorboard", copy, os.path.join(live, "tb")).returncode == 0


def test_import_into_a_run_on_a_full_disk_leaves_run_h5_as_it_was(run):
    """`tandem import` writes into RUN/run.h5: on a full disk one line naming it, run.h5 byte-identical,
    nothing else left in the folder; after freeing space the same import succeeds."""
    import hashlib

    tmp, folder = run
    disk = tempfile.mkdtemp(dir=tmp)
    if not F.small_filesystem(disk, size="32m", fill=False):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        copy = os.path.join(disk, "run")
        os.mkdir(copy)
        for name in os.listdir(folder):  # the base (tens of MB) stays where it is, linked
            src = os.path.join(folder, name)
            if name == "base":
                os.symlink(src, os.path.join(copy, name))
            elif os.path.isdir(src):
                shutil.copytree(src, os.path.join(copy, name), symlinks=True)
            else:
                shutil.copy2(src, os.path.join(copy, name))
        try:
            with open(os.path.join(disk, "filler"), "wb", buffering=0) as f:
                while True:
                    f.write(b"\0" * 65536)
        except OSError:
            pass
        csv = os.path.join(tmp, "l.csv")
        with open(csv, "w") as f:
            f.write("step,loss\n1,2.5\n2,2.4\n")
        sha = lambda: hashlib.sha256(open(os.path.join(copy, "run.h5"), "rb").read()).hexdigest()  # noqa: E731
        before, names = sha(), sorted(os.listdir(copy))
        args = ("import", "csv", csv, "--into", copy, "--as", "imp", "--catalog", os.path.join(tmp, "import.db"))
        p = tandem(*args)
        errors = [l for l in p.stderr.splitlines() if "error" in l.lower()]
        assert p.returncode == 1 and len(errors) == 1, p.stdout + p.stderr
        assert os.path.join(copy, "run.h5") in errors[0] and "No space left on device" in errors[0], errors[0]
        assert sha() == before and sorted(os.listdir(copy)) == names
        os.remove(os.path.join(disk, "filler"))
        again = tandem(*args)
        assert again.returncode == 0, again.stdout + again.stderr
        assert sha() != before
    finally:
        F.unmount_below(disk)
