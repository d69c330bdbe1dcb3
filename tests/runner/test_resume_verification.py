"""`tandem run --resume` checks the run folder against what the run recorded before it changes anything
(docs/run-folder.md "Resuming"): the experiment's hash in run.h5 and in the catalog, prepare.json
against run.h5, and the prepared files (plan, corpus, initial adapter, tokenizer) against their
recorded digests. A folder with one of them swapped for another run's (each self-consistent: the
swapped experiment.json carries its own valid hash) is refused with one line naming the file, and
run.h5, the catalog and the swapped file are byte-identical afterwards. The untouched folder resumes.

The oracle is independent of tandem's checks: the other run's files really differ (compared here), and
"unchanged" is sha256 of the bytes before and after.
"""
import hashlib
import json
import os
import sys
import shutil
import subprocess
import tempfile

import pytest

from runner_fixture import TANDEM

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cli"))
from hostile import TINY_EXPERIMENT  # noqa: E402

TINY = dict(TINY_EXPERIMENT, name="resumed")


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture(scope="module")
def two_runs():
    """Two finished engine runs in one catalog: `mine` (seed 7) and `other` (seed 8, lr 2e-4: another
    experiment, another split and plan)."""
    tmp = tempfile.mkdtemp(prefix="tandem-resume-verify-")
    folders = {}
    for label, changes in (("mine", {}), ("other", {"seed": 8, "optimizer": dict(TINY["optimizer"], lr=2e-4)})):
        spec = dict(TINY, name=label, **changes)
        path = os.path.join(tmp, label + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        p = subprocess.run([TANDEM, "run", path, "--legs", "engine", "--no-probe", "--quiet", "--threads", "2",
                            "--out", os.path.join(tmp, "runs-" + label), "--catalog", os.path.join(tmp, "c.db")],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        runs = os.listdir(os.path.join(tmp, "runs-" + label))
        folders[label] = os.path.join(tmp, "runs-" + label, runs[0])
    yield tmp, folders
    shutil.rmtree(tmp, ignore_errors=True)


def copy_run(tmp, folder, name):
    dst = os.path.join(tmp, name, os.path.basename(folder))  # the same run id: the catalog's row applies
    shutil.copytree(folder, dst, symlinks=True)
    return dst


def resume(tmp, folder, catalog):
    return subprocess.run([TANDEM, "run", "--resume", folder, "--no-probe", "--quiet", "--threads", "2", "--catalog", catalog],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("swapped", ["experiment.json", "plan.json", "corpus/records.jsonl", "prepare.json"])
def test_a_swapped_artifact_is_refused_and_nothing_changes(two_runs, swapped):
    tmp, folders = two_runs
    work = tempfile.mkdtemp(dir=tmp)
    folder = copy_run(work, folders["mine"], "runs")
    catalog = os.path.join(work, "c.db")
    shutil.copy(os.path.join(tmp, "c.db"), catalog)
    theirs = os.path.join(folders["other"], swapped)
    assert sha(theirs) != sha(os.path.join(folder, swapped)), f"the other run's {swapped} is the same file: no swap to detect"
    os.remove(os.path.join(folder, swapped))
    shutil.copy(theirs, os.path.join(folder, swapped))
    if swapped == "experiment.json":  # self-consistent: its own spec_sha256 matches its spec
        doc = json.load(open(os.path.join(folder, swapped)))
        assert doc["spec"]["name"] == "other" and len(doc["spec_sha256"]) == 64
    before = {p: sha(p) for p in (os.path.join(folder, "run.h5"), catalog, os.path.join(folder, swapped))}
    p = resume(work, folder, catalog)
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    lines = [l for l in out.splitlines() if "refusing to resume" in l]
    assert len(lines) == 1, out
    named = os.path.join(folder, swapped) if swapped != "corpus/records.jsonl" else os.path.join(folder, "corpus")
    assert named in lines[0] or os.path.join(folder, "prepare.json") in lines[0], lines[0]
    if swapped in ("experiment.json", "plan.json"):
        assert os.path.join(folder, swapped) in lines[0], lines[0]
    after = {p: sha(p) for p in before}
    assert after == before, "a refused resume changed: " + ", ".join(p for p in before if before[p] != after[p])


def test_the_untouched_folder_resumes(two_runs):
    tmp, folders = two_runs
    work = tempfile.mkdtemp(dir=tmp)
    folder = copy_run(work, folders["mine"], "runs")
    catalog = os.path.join(work, "c.db")
    shutil.copy(os.path.join(tmp, "c.db"), catalog)
    p = resume(work, folder, catalog)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "refusing" not in p.stdout + p.stderr
