"""`tandem export tensorboard RUN DIR`: every leg's series as TensorBoard event files.

Oracle: h5py's reading of run.h5 on one side, TensorBoard's own reader (EventAccumulator) of the
exported folder on the other; every value equals run.h5's rounded to float32 (what TensorBoard
stores), at HF Trainer's steps (a training value of update u at step u + 1, an evaluation before
update u at step u), tokens seen are the summed supervised tokens, wall times increase by the
updates' wall seconds. `tandem import tensorboard` reads the export back to the same rows. A second
export into the same folder is refused unless --overwrite; a missing run fails on one line."""
import os
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner"))
from runner_fixture import cut_spec  # noqa: E402
from test_run_end_to_end import TANDEM, h5, tandem_run, write_spec  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A small real run: two engine legs, 4 updates on the random base (a few seconds)."""
    tmp = str(tmp_path_factory.mktemp("tbexport"))
    spec = cut_spec("clinical-tiny-random.json", "tbx", 4, 2, 0, 30, 128, l3_records=4)
    spec["eval"]["prefix_size"] = 4  # 30 records per source hold out 5
    p, folder = tandem_run(tmp, write_spec(tmp, spec), "--legs", "engine,second=engine", "--threads", "2", timeout=600)
    assert p.returncode in (0, 3), p.stdout[-3000:] + p.stderr[-3000:]
    return tmp, folder


def tandem(*args):
    return subprocess.run([TANDEM, *map(str, args)], capture_output=True, text=True, timeout=300)


def read_events(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_events_read_back_equal_run_h5(run, tmp_path):
    tmp, folder = run
    out = tmp_path / "tb"
    r = tandem("export", "tensorboard", folder, out)
    assert r.returncode == 0, r.stderr
    with h5(folder) as f:
        run_id = f["experiment"].attrs["run_id"]
        run_id = run_id.decode() if isinstance(run_id, bytes) else str(run_id)
        legs = sorted(f["legs"])
        assert legs == ["engine", "second"]
        for leg in legs:
            steps, ev = f["legs"][leg]["steps"][()], f["legs"][leg]["eval"][()]
            got = read_events(out / run_id / leg)
            assert set(got) >= {"train/loss", "train/grad_norm", "train/learning_rate", "train/tokens_per_second",
                                "train/num_input_tokens_seen", "eval/loss"}, got.keys()
            assert len(steps) == 4 and len(ev) == 3
            f32 = lambda x: float(np.float32(x))  # what TensorBoard stores
            for tag, column in (("train/loss", "loss"), ("train/grad_norm", "grad_norm"), ("train/learning_rate", "lr")):
                assert [s for s, _, _ in got[tag]] == [int(u) + 1 for u in steps["update"]], tag
                assert [v for _, v, _ in got[tag]] == [f32(x) for x in steps[column]], tag
            tps = [f32(t / w) for t, w in zip(steps["tokens"], steps["wall_s"])]
            assert [v for _, v, _ in got["train/tokens_per_second"]] == tps
            assert [v for _, v, _ in got["train/num_input_tokens_seen"]] == [f32(x) for x in np.cumsum(steps["tokens"])]
            assert [s for s, _, _ in got["eval/loss"]] == [int(u) for u in ev["update"]]
            assert [v for _, v, _ in got["eval/loss"]] == [f32(x) for x in ev["heldout_ce"]]
            # Wall times: the run's start plus the summed update seconds, increasing.
            walls = [w for _, _, w in got["train/loss"]]
            assert all(b > a for a, b in zip(walls, walls[1:]))
            assert np.allclose(np.diff(walls), steps["wall_s"][1:], rtol=0, atol=1e-3)
    assert "view: tensorboard --logdir" in r.stdout


def test_import_reads_the_export_back(run, tmp_path):
    tmp, folder = run
    out = tmp_path / "tb"
    assert tandem("export", "tensorboard", folder, out).returncode == 0
    with h5(folder) as f:
        run_id = f["experiment"].attrs["run_id"]
        run_id = run_id.decode() if isinstance(run_id, bytes) else str(run_id)
        steps = f["legs/engine/steps"][()]
        ev = f["legs/engine/eval"][()]
    r = tandem("import", "tensorboard", out / run_id / "engine", "--into", folder, "--as", "engine-tb",
               "--catalog", os.path.join(tmp, "tandem.db"))
    assert r.returncode == 0, r.stderr
    with h5(folder) as f:
        back = f["legs/engine-tb/steps"][()]
        back_ev = f["legs/engine-tb/eval"][()]
    assert list(back["update"]) == list(steps["update"])
    assert list(back["loss"]) == [float(np.float32(x)) for x in steps["loss"]]
    assert list(back_ev["update"]) == list(ev["update"])
    assert list(back_ev["heldout_ce"]) == [float(np.float32(x)) for x in ev["heldout_ce"]]


def test_second_export_is_refused_unless_overwrite_and_a_bad_run_says_so(run, tmp_path):
    tmp, folder = run
    out = tmp_path / "tb"
    assert tandem("export", "tensorboard", folder, out).returncode == 0
    again = tandem("export", "tensorboard", folder, out)
    assert again.returncode != 0
    assert "already holds TensorBoard event files" in again.stderr and "--overwrite" in again.stderr, again.stderr
    assert len(again.stderr.strip().splitlines()) == 1, again.stderr
    replaced = tandem("export", "tensorboard", folder, out, "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    for leg_dir in (out).glob("*/*"):
        assert len(list(leg_dir.glob("*tfevents*"))) == 1, leg_dir  # replaced, not doubled
    missing = tandem("export", "tensorboard", tmp_path / "nope", out)
    assert missing.returncode != 0 and "nope" in missing.stderr and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
