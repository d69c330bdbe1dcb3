"""docs/run-folder.md: every asset a run reads is recorded with its sha256, and a tokenizer that is
not the shipped Qwen3 one is said loudly.

A tokenizer.json with two vocabulary ids swapped passes every level: L3 compares tandem's
tokenizer with HuggingFace's over the SAME file, so both legs agree. The digest is the detection:
the run must print a WARNING, record tokenizer_is_shipped_qwen3 = 0 and the warning in run.h5's
/experiment attributes and in prepare.json. The digests themselves are checked against Python's
hashlib over the files (an independent oracle), for the tokenizer and for every corpora file.
"""
import hashlib
import json
import os
import subprocess

import h5py

from runner_fixture import SOURCE_DIR, TANDEM

SHARED = os.path.abspath(os.environ.get("TANDEM_ASSETS", os.path.join(SOURCE_DIR, "..", "shared")))
TOKENIZER = os.path.join(SHARED, "assets", "qwen3-tokenizer")
CORPORA = os.path.join(SHARED, "data", "corpora")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def experiment(tmp, name):
    spec = {"name": name, "seed": 5, "model": {"config": "tiny"},
            "lora": {"rank": 2, "alpha": 4, "dropout": 0.0, "targets": ["q_proj", "v_proj"]},
            "batch": {"micro_batch": 1, "accumulation": 1, "max_updates": 2}, "sequence": {"max_len": 96},
            "corpus": {"sources": ["medmcqa"], "heldout_fraction": 0.2, "max_records_per_source": 16},
            "eval": {"interval": 1, "prefix_size": 2}, "l3_records": 8}
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def run(tmp, name, assets, legs):
    p = subprocess.run([TANDEM, "run", experiment(tmp, name), "--legs", legs, "--threads", "2", "--no-probe",
                        "--assets", assets, "--out", os.path.join(tmp, "runs"), "--catalog", os.path.join(tmp, "c.db")],
                       capture_output=True, text=True, timeout=900)
    folder = os.path.join(tmp, "runs", next(d for d in os.listdir(os.path.join(tmp, "runs")) if d.startswith(name + "-")))
    return p, folder


def swapped_assets(tmp):
    """An asset folder whose tokenizer.json gives " the" and " of" each other's ids."""
    with open(os.path.join(TOKENIZER, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    vocab["Ġthe"], vocab["Ġof"] = vocab["Ġof"], vocab["Ġthe"]
    root = os.path.join(tmp, "assets-swapped")
    os.makedirs(os.path.join(root, "assets", "qwen3-tokenizer"))
    os.makedirs(os.path.join(root, "data"))
    with open(os.path.join(root, "assets", "qwen3-tokenizer", "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    os.symlink(os.path.join(TOKENIZER, "tokenizer_config.json"), os.path.join(root, "assets", "qwen3-tokenizer", "tokenizer_config.json"))
    os.symlink(CORPORA, os.path.join(root, "data", "corpora"))
    return root


def attrs(folder):
    with h5py.File(os.path.join(folder, "run.h5"), "r") as f:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f["experiment"].attrs.items()}


def test_the_shipped_tokenizer_is_recognised_and_every_asset_digest_is_right(tmp_path):
    tmp = str(tmp_path)
    p, folder = run(tmp, "digests", SHARED, "engine")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "WARNING" not in p.stderr
    with open(os.path.join(folder, "assets.json")) as f:
        assets = json.load(f)
    assert assets["tokenizer"] == {n: sha256(os.path.join(TOKENIZER, n)) for n in ("tokenizer.json", "tokenizer_config.json")}
    expected = {}
    for root, _, files in os.walk(CORPORA, followlinks=True):
        for n in files:
            expected[os.path.relpath(os.path.join(root, n), CORPORA)] = sha256(os.path.join(root, n))
    assert assets["corpora"] == expected and len(expected) >= 4
    assert assets["tokenizer_is_shipped_qwen3"] is True
    a = attrs(folder)
    assert a["tokenizer_is_shipped_qwen3"] == 1
    assert a["tokenizer_sha256"] == sha256(os.path.join(TOKENIZER, "tokenizer.json"))
    assert a["input_warnings"] == ""
    assert json.loads(a["assets_json"]) == assets


def test_a_tokenizer_with_two_ids_swapped_is_said_loudly(tmp_path):
    tmp = str(tmp_path)
    root = swapped_assets(tmp)
    swapped_sha = sha256(os.path.join(root, "assets", "qwen3-tokenizer", "tokenizer.json"))
    p, folder = run(tmp, "swapped", root, "engine,reference")
    # Both legs read the same (wrong) file, so the run's levels agree: the warning is the detection.
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    warning = ("WARNING: this run's tokenizer is not the shipped Qwen3 tokenizer (tokenizer.json: sha256 "
               f"{swapped_sha[:12]}... is not the shipped Qwen3 tokenizer's aeb13307a71a...)")
    assert warning in p.stderr, p.stderr[-3000:]
    a = attrs(folder)
    assert a["tokenizer_is_shipped_qwen3"] == 0
    assert a["tokenizer_sha256"] == swapped_sha
    assert a["input_warnings"].startswith(warning)
    with open(os.path.join(folder, "prepare.json")) as f:
        assert json.load(f)["warnings"][0].startswith(warning)
    with open(os.path.join(folder, "assets.json")) as f:
        assert json.load(f)["tokenizer"]["tokenizer.json"] == swapped_sha
