"""`tandem import tensorboard|csv|events` (docs/legs.md): a run made elsewhere becomes a read-only leg.

Oracle for TensorBoard: event files written here by torch.utils.tensorboard.SummaryWriter (both its
classic simple_value scalars and new_style tensor scalars); the imported run.h5 rows, read back with
h5py, must equal the float32 values SummaryWriter stored, bit for bit, at the documented update
mapping (HF convention: a training value at step s is update s-1, an evaluation at step s follows s
updates). CSV: values parsed from text equal Python's float(); flags map W&B-style columns. The
report marks levels an imported leg cannot have as "n/a (imported)"; its unjudged L4 pair is "not judged", named
as not judged on the verdict line and kept out of the run's verdict; bad
input fails on one line naming the file and the column or leg, and leaves run.h5 as it was."""
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner"))
from test_run_end_to_end import SOURCE_DIR, TANDEM, h5, only_run_folder, write_spec # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A small real run (engine leg only, 2 updates on the random base) to import into."""
    tmp = str(tmp_path_factory.mktemp("import"))
    with open(os.path.join(SOURCE_DIR, "experiments", "clinical-tiny-random.json")) as f:
        spec = json.load(f)
    spec.update(name="imp", l3_records=4)
    spec["batch"]["max_updates"] = 2
    spec["eval"] = {"interval": 1, "prefix_size": 4}
    spec["checkpoint"] = {"interval": 0}
    spec["corpus"]["max_records_per_source"] = 30
    spec["sequence"]["max_len"] = 128
    p = subprocess.run([TANDEM, "run", write_spec(tmp, spec), "--legs", "engine", "--out", os.path.join(tmp, "runs"),
                        "--catalog", os.path.join(tmp, "tandem.db"), "--no-probe", "--threads", "2"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return tmp, only_run_folder(tmp, "imp")


def tandem(*args):
    return subprocess.run([TANDEM, *map(str, args)], capture_output=True, text=True, timeout=300)


def file_hash(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_tensorboard_events_from_summarywriter_reproduce_exactly(run, tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    tmp, folder = run
    rng = np.random.default_rng(7)
    loss = {s: float(v) for s, v in zip(range(1, 13), 7.0 + rng.standard_normal(12) * 1e-3)}
    grad = {s: float(v) for s, v in zip(range(1, 13), rng.uniform(0.5, 20.0, 12))}
    lr = {s: 1e-4 * s / 12 for s in range(1, 13)}
    evals = {0: 7.2317612, 6: 7.1000001, 12: 7.0177929}
    w = SummaryWriter(str(tmp_path / "tb"))
    for s in range(1, 13):
        w.add_scalar("train/loss", loss[s], s)                     # classic simple_value
        w.add_scalar("train/grad_norm", grad[s], s, new_style=True)  # tensor form of the scalars plugin
        w.add_scalar("train/learning_rate", lr[s], s)
        w.add_scalar("other/ignored", 1.0, s)
    for s, v in evals.items():
        w.add_scalar("eval/loss", v, s)
    w.close()

    r = tandem("import", "tensorboard", tmp_path / "tb", "--into", folder, "--as", "hf-trainer",
               "--catalog", os.path.join(tmp, "tandem.db"))
    assert r.returncode == 0, r.stderr
    assert "loss <- train/loss (12 points)" in r.stdout and "heldout_ce <- eval/loss (3 points)" in r.stdout
    with h5(folder) as f:
        leg = f["legs/hf-trainer"]
        assert leg.attrs["implementation"] in (b"imported", "imported")
        steps, ev = leg["steps"][()], leg["eval"][()]
        assert list(steps["update"]) == list(range(12))  # step s -> update s-1
        for row in steps:
            s = int(row["update"]) + 1
            # What SummaryWriter stored is float32: the import must give exactly that value.
            assert row["loss"] == np.float32(loss[s]), s
            assert row["grad_norm"] == np.float32(grad[s]), s
            assert row["lr"] == np.float32(lr[s]), s
        assert list(ev["update"]) == [0, 6, 12]
        assert [float(x) for x in ev["heldout_ce"]] == [float(np.float32(evals[s])) for s in (0, 6, 12)]
        assert "checks" not in leg or "l1" not in leg["checks"]  # no L1 claimed for an imported run
    rep = tandem("report", folder)
    # The imported leg's missing levels are n/a, not failures; its pair with the engine has no paired
    # distance and no seed envelope: "not judged" in the pair's rows, named on the verdict line as
    # not judged, and excluded from the run's verdict (docs/thresholds.md "Imported legs").
    assert rep.returncode == 0, rep.stdout
    rows = [line for line in rep.stdout.splitlines() if line.startswith("  engine vs hf-trainer ")]
    assert len(rows) == 7, rows  # L1, L2, L3, L4 held-out CE, L4 training loss, distances, per-update series
    assert sum(line.rstrip().endswith("n/a (imported)") for line in rows) == 3, rows
    assert rows[3].split()[3:5] == ["held-out", "CE"] and rows[3].rstrip().endswith(" not judged"), rows
    assert rows[5].split()[3] == "no" and rows[5].rstrip().endswith(" not judged"), rows
    assert rep.stdout.rstrip().splitlines()[-1] == (
        "complete; no pair of the run's own legs to cross-check; not judged: engine~hf-trainer: an imported leg, "
        "no paired distance and no seed envelope"), rep.stdout[-2000:]
    db = sqlite3.connect(os.path.join(tmp, "tandem.db"))
    got = db.execute("select implementation, status, updates_done from legs where name = 'hf-trainer'").fetchone()
    assert got == ("imported", "finished", 12)


def test_csv_with_mapped_columns(run, tmp_path):
    tmp, folder = run
    csv = tmp_path / "wandb.csv"
    csv.write_text('"_step","train/loss","eval/heldout","run"\n'
                   "0,,7.25,\"a, b\"\n"
                   "1,6.875,,x\n"
                   "2,6.5000000000000001,,x\n"
                   "3,6.25e0,7.0,x\n")
    r = tandem("import", "csv", csv, "--into", folder, "--as", "wandb", "--step", "_step", "--eval-loss",
               "eval/heldout", "--step-counts", "index")
    assert r.returncode == 0, r.stderr
    with h5(folder) as f:
        steps, ev = f["legs/wandb/steps"][()], f["legs/wandb/eval"][()]
        assert list(steps["update"]) == [1, 2, 3]
        assert list(steps["loss"]) == [6.875, float("6.5000000000000001"), 6.25]
        assert np.isnan(steps["grad_norm"]).all()
        assert list(ev["update"]) == [0, 3] and list(ev["heldout_ce"]) == [7.25, 7.0]


@pytest.mark.parametrize("args, words", [
    (["csv", "{csv}", "--loss", "nope"], ["wandb2.csv", "no series 'nope'"]),
    (["csv", "{csv}", "--step", "iteration"], ["wandb2.csv", "no column 'iteration'"]),
    (["csv", "{bad}"], ["bad.csv", "line 3", "not an integer step"]),
    (["tensorboard", "{empty}"], ["no TensorBoard event file"]),
    (["events", "{csv}"], ["wandb2.csv"]),
])
def test_bad_input_is_one_line_naming_it_and_leaves_the_run_file(run, tmp_path, args, words):
    tmp, folder = run
    (tmp_path / "wandb2.csv").write_text("step,loss\n1,6.0\n")
    (tmp_path / "bad.csv").write_text("step,loss\n1,6.0\n2.5,6.1\n")
    (tmp_path / "empty").mkdir()
    subst = {"{csv}": tmp_path / "wandb2.csv", "{bad}": tmp_path / "bad.csv", "{empty}": tmp_path / "empty"}
    before = file_hash(os.path.join(folder, "run.h5"))
    r = tandem("import", *[subst.get(a, a) for a in args], "--into", folder, "--as", "bad-leg")
    assert r.returncode == 1, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tandem: error:"), r.stderr
    for w in words:
        assert w in err[0], err[0]
    assert file_hash(os.path.join(folder, "run.h5")) == before


def test_a_leg_name_the_run_has_is_refused(run, tmp_path):
    tmp, folder = run
    (tmp_path / "l.csv").write_text("step,loss\n1,6.0\n")
    r = tandem("import", "csv", tmp_path / "l.csv", "--into", folder, "--as", "engine")
    assert r.returncode == 1 and "already has a leg 'engine'" in r.stderr, r.stderr


def test_events_of_a_leg_import_as_that_leg_and_are_judged(run, tmp_path):
    # The engine leg's own events, imported under another name, agree with it at every level.
    tmp, folder = run
    r = tandem("import", "events", os.path.join(folder, "legs", "engine", "events.jsonl"), "--into", folder,
               "--as", "engine-again")
    assert r.returncode == 0, r.stderr
    rep = tandem("report", folder)
    rows = [line for line in rep.stdout.splitlines() if line.startswith("  engine vs engine-again ")]
    assert len(rows) == 7, rows  # L1, L2, L3, L4 held-out CE, L4 training loss, distances, per-update series
    # The per-update series of a leg and its own events: the lr on the schedule, nothing beyond a bound.
    assert rows[6].split()[3] == "none" and rows[6].count(" 0x bound (0)") == 2 and "beyond" not in rows[6], rows[6]
    assert all(line.rstrip().endswith(" pass") for line in rows[:3]), rows
    assert rows[3].rstrip().endswith(" equivalent") and rows[5].rstrip().endswith(" equivalent"), rows
    # The run's verdict is this pair's (the imported TensorBoard/CSV legs are named as not judged).
    verdict = [line for line in rep.stdout.splitlines() if line.startswith("equivalent: ")]
    assert len(verdict) == 1 and verdict[0].startswith("equivalent: engine~engine-again: held-out CE within the float32 "
                                                       "error-model bound at all 3 paired evaluations"), rep.stdout[-2000:]
    assert "; not judged: engine~hf-trainer (+" in verdict[0], verdict
    assert rep.returncode == 0, rep.stdout


def test_non_finite_values_are_kept_named_and_never_passed(run, tmp_path):
    # A diverged run's nan/inf (docs/decisions.md "Imported series"): imported, kept out of the series,
    # named on the import's WARNING line and in run.h5, and the run's verdict says "incomplete".
    tmp, folder = run
    work = tmp_path / "r"
    shutil.copytree(folder, work, symlinks=True)
    (tmp_path / "d.csv").write_text("step,loss,eval_loss\n1,6.0,\n2,nan,6.2\n3,inf,-inf\n")
    r = tandem("import", "csv", tmp_path / "d.csv", "--into", work, "--as", "diverged")
    assert r.returncode == 0, r.stderr
    warn = [line for line in r.stdout.splitlines() if line.startswith("WARNING: ")]
    assert len(warn) == 1 and "3 non-finite values kept out of statistics: loss at step 2, loss at step 3, eval_loss at step 3" \
        in warn[0], r.stdout
    assert "loss <- loss (1 points, 2 non-finite kept out)" in r.stdout, r.stdout
    with h5(str(work)) as f:
        g = f["legs/diverged"]
        assert g.attrs["non_finite_kept_out"].startswith("3 non-finite values kept out"), dict(g.attrs)
        steps = g["steps"][()]
        assert list(steps["update"]) == [0] and steps["loss"][0] == 6.0, steps  # only the finite row
        evals = g["eval"][()]
        assert list(evals["update"]) == [2] and evals["heldout_ce"][0] == 6.2, evals
    rep = tandem("report", work)
    verdict = rep.stdout.strip().splitlines()[-1]
    assert verdict.startswith("incomplete: diverged: 3 non-finite values kept out of statistics"), rep.stdout[-2000:]
    assert rep.returncode == 3, rep.returncode
