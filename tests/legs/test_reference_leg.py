"""The reference leg on a small run folder made with transformers + peft (make_test_run.py):
its events, its L1 against an independent full-logits computation, its supervision against the
decoded assistant turn, and a bit-exact resume from its checkpoint."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(HERE, "..", ".."))
LEG = os.path.join(SOURCE_DIR, "experiments", "legs", "reference_leg.py")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "experiments", "legs"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "sdk", "python"))

import make_test_run  # noqa: E402


def run_leg(run_dir, *extra):
    p = subprocess.run([sys.executable, LEG, "--run", run_dir, "--leg", "reference", "--device", "cpu",
                        "--threads", "1", *extra], capture_output=True, text=True, timeout=600)
    events = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    assert p.returncode == 0, p.stderr[-3000:]
    return events


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("refleg") / "run")
    make_test_run.make_run(d, make_test_run.small_spec())
    return d


@pytest.fixture(scope="module")
def first_events(run_dir):
    return run_leg(run_dir)


def kinds(events, kind):
    return [e for e in events if e["event"] == kind]


def test_protocol_events(first_events):
    assert all(e["v"] == 1 for e in first_events)
    assert first_events[0]["event"] == "hello"
    assert first_events[0]["implementation"] == "reference"
    assert first_events[-1]["event"] == "done"
    steps = kinds(first_events, "step")
    assert [s["update"] for s in steps] == [0, 1, 2, 3]
    assert steps[0]["lr"] == 0.0  # warmup: update 0 runs with lr 0 (docs/spec.md §Recipe)
    assert [e["update"] for e in kinds(first_events, "eval")] == [0, 2, 4]
    assert kinds(first_events, "checkpoint")[0]["update"] == 2
    l2 = kinds(first_events, "l2")[0]["tensors"]
    names = [t["name"] for t in l2]
    assert any(n.startswith("model.layers.0.self_attn.q_proj.weight") for n in names)
    assert any(n.endswith("lora_A.weight") for n in names)


def test_l1_matches_full_logits_computation(run_dir, first_events):
    """Independent oracle: the plain transformers forward with full logits and a mean CE."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    from hf_text import encode_record, load_tokenizer
    from tandem_leg import RunFolder

    run = RunFolder(run_dir)
    tok = load_tokenizer(run, "qwen3")
    base = AutoModelForCausalLM.from_pretrained(run.base_dir, dtype=torch.float64, attn_implementation="eager")
    model = PeftModel.from_pretrained(base, run.file("init")).double().eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for i in run.eval_prefix():
            e = encode_record(tok, run.records()[i], run.spec["sequence"]["max_len"])
            ids = torch.tensor([e.ids])
            labels = torch.tensor([[t if s else -100 for t, s in zip(e.ids, e.supervised)]])
            logits = model(input_ids=ids).logits
            total += torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100,
                                                       reduction="sum").item()
            count += int((labels[0, 1:] != -100).sum())
    l1 = kinds(first_events, "l1")[0]
    assert l1["tokens"] == count
    assert abs(l1["heldout_ce"] - total / count) / (total / count) < 1e-6


def test_supervision_is_the_assistant_turn(run_dir, first_events):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.join(run_dir, "tokenizer"))
    records = [json.loads(x) for x in open(os.path.join(run_dir, "corpus", "records.jsonl"))]
    l3 = kinds(first_events, "l3")[0]["records"]
    assert len(l3) == 8
    for r in l3:
        if r["truncated_at"] is not None:
            continue
        sup = r["ids"][r["boundary"]:r["boundary"] + r["supervised_count"]]
        assert tok.decode(sup) == records[r["index"]]["messages"][-1]["content"] + "<|im_end|>"
        assert r["ids"][r["boundary"] + r["supervised_count"]] == tok.convert_tokens_to_ids("Ċ")  # "\n" not supervised


def test_resume_is_bit_exact(run_dir, first_events):
    resumed = run_leg(run_dir, "--resume")
    assert kinds(resumed, "resume")[0]["update"] == 2
    a = {s["update"]: (s["loss"], s["grad_norm"]) for s in kinds(first_events, "step")}
    b = {s["update"]: (s["loss"], s["grad_norm"]) for s in kinds(resumed, "step")}
    assert sorted(b) == [2, 3]
    for u in b:
        assert a[u] == b[u]
    assert kinds(first_events, "eval")[-1]["heldout_ce"] == kinds(resumed, "eval")[-1]["heldout_ce"]
