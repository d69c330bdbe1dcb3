"""The reference leg's known Python exceptions become one line `FILE: what is wrong`, naming an asset by
its source (prepare.json's `base`), not by its copy in the run folder, and never a traceback.
Oracles: the files written here and the exceptions the libraries themselves raise on them."""
import json
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "experiments", "legs"))
import reference_leg  # noqa: E402


@pytest.fixture
def run(tmp_path):
    src = tmp_path / "shared" / "assets" / "tiny"
    run = tmp_path / "runs" / "r1"
    (run / "base").mkdir(parents=True)
    (run / "init").mkdir()
    (run / "prepare.json").write_text(json.dumps({"base": f"assets:tiny ({src})"}))
    (run / "base" / "config.json").write_text(json.dumps({"vocab_size": 8}))
    from safetensors.torch import save_file
    save_file({"w": torch.zeros(64, 4)}, str(run / "base" / "model.safetensors"))
    save_file({"a": torch.zeros(2, 2)}, str(run / "init" / "adapter_model.safetensors"))
    return run, src


def raised(fn):
    try:
        fn()
    except Exception as e:  # the library's own exception, as the leg would see it
        return e
    raise AssertionError("nothing raised")


def one_line(msg):
    assert msg is not None and "\n" not in msg and "Traceback" not in msg, msg
    return msg


def test_vocab_size_too_small_names_the_source_config(run):
    run, src = run
    e = raised(lambda: torch.nn.Embedding(8, 4)(torch.tensor([9])))
    assert isinstance(e, IndexError)
    msg = one_line(reference_leg.known_failure(e, str(run)))
    assert msg.startswith(f"{src}/config.json: vocab_size 8 is smaller than a token id"), msg


def test_truncated_base_weights_name_the_source_file(run):
    run, src = run
    p = run / "base" / "model.safetensors"
    p.write_bytes(p.read_bytes()[:40])
    from safetensors import safe_open
    e = raised(lambda: safe_open(str(p), framework="pt"))
    msg = one_line(reference_leg.known_failure(e, str(run)))
    assert msg.startswith(f"{src}/model.safetensors: not a valid safetensors file ("), msg


def test_a_missing_file_is_named_by_its_source(run):
    run, src = run
    os.remove(run / "base" / "config.json")
    e = raised(lambda: open(run / "base" / "config.json"))
    msg = one_line(reference_leg.known_failure(e, str(run)))
    assert msg == f"{src}/config.json: No such file or directory", msg


def test_json_and_unknown_exceptions(run):
    run, _ = run
    e = raised(lambda: json.loads('{"a": '))
    assert one_line(reference_leg.known_failure(e, str(run))).startswith("JSON input: line 1, column 7: ")
    assert reference_leg.known_failure(ValueError("x"), str(run)) is None
