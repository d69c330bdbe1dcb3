"""The main job's base (docs/decisions.md): `model.base = "assets:qwen3-tiny-clinical"`, the small pretrained
bfloat16 Qwen3 in ../shared. A short run of both legs on it must pass every level, with L2's base
digests equal to sha256 of torch's `.float()` of each tensor of the shipped file (the oracle, not the
legs' agreement alone), held-out CE falling in both legs, and the base's file hashes recorded in
prepare.json and run.h5 (recomputed here with hashlib). A missing asset fails before anything is
written, with one line naming what was tried."""
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors import safe_open

from runner_fixture import cut_spec
from test_run_end_to_end import SOURCE_DIR, TANDEM, check_json, h5, only_run_folder, tandem_run, write_spec

sys.path.insert(0, os.path.join(SOURCE_DIR, "sdk", "python"))
from tandem_leg.checkpoint import file_sha256  # noqa: E402  (the file hashes prepare.json must equal)

ASSET = "qwen3-tiny-clinical"


def asset_dir():
    root = os.environ.get("TANDEM_ASSETS") or os.path.join(os.path.abspath(SOURCE_DIR), "..", "shared")
    d = os.path.realpath(os.path.join(root, "assets", ASSET))
    assert os.path.isfile(os.path.join(d, "model.safetensors")), f"the shipped base is not at {d} (set TANDEM_ASSETS)"
    return d


def pretrained_spec(name):
    spec = cut_spec("clinical-tiny.json", name, 8, 4, 0, 60, 192, l3_records=16)
    assert spec["model"] == {"base": f"assets:{ASSET}"}  # the main job runs on the shipped base
    return spec


def test_both_legs_pass_on_the_shipped_bf16_base_and_its_hashes_are_recorded(tmp_path):
    tmp = str(tmp_path)
    p, folder = tandem_run(tmp, write_spec(tmp, pretrained_spec("e2e-pretrained")), "--legs", "engine,reference",
                           "--threads", "2")
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert any(l.startswith("equivalent: ") for l in p.stdout.splitlines()), p.stdout[-3000:]
    d = asset_dir()
    expected_files = {n: file_sha256(os.path.join(d, n)) for n in sorted(os.listdir(d))
                      if os.path.isfile(os.path.join(d, n))}
    assert "model.safetensors" in expected_files and "config.json" in expected_files

    prepared = json.load(open(os.path.join(folder, "prepare.json")))
    assert prepared["base_sha256"] == expected_files
    assert prepared["base"].startswith(f"assets:{ASSET} (")

    # The oracle for L2's base tensors: torch's own upcast of the shipped bfloat16 file.
    with safe_open(os.path.join(d, "model.safetensors"), framework="pt") as f:
        want = {n: hashlib.sha256(f.get_tensor(n).float().numpy().tobytes()).hexdigest() for n in f.keys()}
    with h5(folder) as f:
        attrs = f["experiment"].attrs
        text = lambda v: v.decode() if isinstance(v, bytes) else v
        assert json.loads(text(attrs["base_sha256"])) == expected_files
        assert text(attrs["base"]) == prepared["base"]
        for leg in ("engine", "reference"):
            base = {t["name"]: t["sha256"] for t in check_json(f, leg, "l2")["tensors"] if t["kind"] == "base"}
            assert base == want, leg
        assert f["comparisons/engine~reference"].attrs["l2_pass"] == 1
        # Held-out CE falls on a pretrained base (7.23 -> 7.02 over the main job's 30 updates).
        curves = {leg: f[f"legs/{leg}/eval"][()] for leg in ("engine", "reference")}
        for leg, ev in curves.items():
            assert list(ev["update"]) == [0, 4, 8], leg
            assert 6.5 < ev["heldout_ce"][0] < 8.0, leg  # a model that knows the text (random: ~11.96)
            assert ev["heldout_ce"][-1] < ev["heldout_ce"][0] - 0.01, (leg, ev["heldout_ce"])
        diff = curves["engine"]["heldout_ce"] - curves["reference"]["heldout_ce"]
        assert np.max(np.abs(diff) / curves["reference"]["heldout_ce"]) <= 1e-5


def test_a_missing_shipped_base_fails_before_the_run_folder_with_what_was_tried(tmp_path):
    tmp = str(tmp_path)
    empty = tmp_path / "assets-without-the-base"
    (empty / "assets").mkdir(parents=True)
    spec_path = write_spec(tmp, pretrained_spec("e2e-missing-base"))
    env = dict(os.environ, TANDEM_ASSETS=str(empty))
    p = subprocess.run([TANDEM, "run", spec_path, "--out", os.path.join(tmp, "runs"), "--catalog",
                        os.path.join(tmp, "tandem.db"), "--no-probe", "--legs", "engine,reference"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 1, p.stderr
    errors = [line for line in p.stderr.splitlines() if line.startswith("tandem: error:")]
    assert len(errors) == 1, p.stderr
    assert f"model.base: assets:{ASSET}" in errors[0]
    assert f"{empty}/assets/{ASSET} (TANDEM_ASSETS)" in errors[0]
    assert only_run_folder(tmp, "e2e-missing-base") is None or not os.listdir(only_run_folder(tmp, "e2e-missing-base"))


def test_doctor_reports_the_main_jobs_base(tmp_path):
    # An assets folder with the tokenizer and corpora but not the base: doctor says MISSING (exit 3)
    # naming the folder it tried; the real one: OK with the folder.
    real = os.path.dirname(os.path.dirname(asset_dir()))
    partial = tmp_path / "partial"
    (partial / "assets").mkdir(parents=True)
    os.symlink(os.path.join(real, "assets", "qwen3-tokenizer"), partial / "assets" / "qwen3-tokenizer")
    os.symlink(os.path.join(real, "data"), partial / "data")
    env = {k: v for k, v in os.environ.items() if k != "TANDEM_ASSETS"}
    p = subprocess.run([TANDEM, "doctor", "--assets", str(partial)], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 3, p.stdout
    line = next(l for l in p.stdout.splitlines() if "pretrained base" in l)
    assert line.startswith("[MISSING]") and f"{partial}/assets/{ASSET} (--assets)" in line, line
    p = subprocess.run([TANDEM, "doctor", "--assets", real], capture_output=True, text=True, timeout=300, env=env)
    line = next(l for l in p.stdout.splitlines() if "pretrained base" in l)
    assert line.startswith("[  OK   ]") and os.path.join(real, "assets", ASSET) in line, line
