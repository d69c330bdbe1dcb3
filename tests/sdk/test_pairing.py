"""tandem_leg.torch.pair and TandemCallback(pair=True) against the reference leg (the oracle) on a small
run folder made with transformers + peft (tests/legs/make_test_run.py: a generated Qwen3, LoRA
dropout 0.1 so the masks matter):

- SharedMaskDropout multiplies by exactly the mask of the pure-Python generator (shared_dropout's
  keep_mask_python: the definition, element by element);
- the paired HuggingFace Trainer leg (examples/hf_trainer_leg.py) and the plain loop
  (examples/torch_loop_leg.py) reproduce the reference leg's per-update training loss, pre-clip grad
  norm and lr and its held-out CE to float32 rounding, and their fingerprints match the reference's
  point by point; the same Trainer with peft's own (native) masks does not (the control that shows the
  masks are what is shared);
- the callback measures the model load and tokenization times itself;
- wrong wiring is named at the first update and the leg exits 1: a Trainer whose DataLoader shuffles,
  a callback that does not pair a leg the experiment pairs, a model whose dropout p is not the
  experiment's, a plain loop that batches other records than the plan's."""
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "sdk", "python"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "legs"))

import make_test_run  # noqa: E402
import tandem_leg  # noqa: E402
from tandem_leg.torch import PairingError, SharedMaskDropout, pair, shared_dropout  # noqa: E402

REFERENCE = os.path.join(SOURCE_DIR, "experiments", "legs", "reference_leg.py")
HF = os.path.join(SOURCE_DIR, "examples", "hf_trainer_leg.py")
LOOP = os.path.join(SOURCE_DIR, "examples", "torch_loop_leg.py")


def leg(script, run_dir, name, *extra):
    p = subprocess.run([sys.executable, script, "--run", run_dir, "--leg", name, "--device", "cpu", "--threads", "1",
                        *extra], capture_output=True, text=True, timeout=600)
    return p.returncode, [json.loads(line) for line in p.stdout.splitlines() if line.strip()], p.stderr


def kinds(events, kind):
    return [e for e in events if e["event"] == kind]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pairing") / "run")
    spec = make_test_run.small_spec("pairing", dropout_masks="shared", observe={"updates": [1]},
                                    overrides={"hf-native": {"dropout_masks": "native"}})
    spec["lora"]["dropout"] = 0.1
    spec["checkpoint"] = {"interval": 0}
    make_test_run.make_run(d, spec)
    return d


@pytest.fixture(scope="module")
def legs(run_dir):
    out = {}
    for name, script, extra in (("reference", REFERENCE, ()), ("hf", HF, ()), ("loop", LOOP, ()),
                                ("hf-native", HF, ()), ("hf-wd", HF, ("--test-bug", "weight-decay")),
                                ("hf-mb", HF, ("--micro-batch-dataset",))):
        rc, events, err = leg(script, run_dir, name, *extra)
        assert rc == 0, (name, err[-3000:])
        out[name] = events
    return out


def test_shared_mask_dropout_is_the_generator():
    ctx = tandem_leg.torch.MaskContext()
    ctx.update, ctx.micro_batch = 3, 1
    d = SharedMaskDropout(ctx, seed=1234, layer=1, projection="v_proj", p=0.25)
    x = torch.randn(2, 5, 7)
    y = d(x)
    key = shared_dropout.shared_key(1234, 3, 1, 1, shared_dropout.PROJECTIONS.index("v_proj"))
    keep = shared_dropout.keep_mask_python(key, x.numel(), 0.25)
    scale = np.float32(1.0 / 0.75)
    want = np.where(np.array(keep).reshape(2, 5, 7), x.numpy() * scale, np.float32(0.0))
    assert np.array_equal(y.numpy(), want)
    d.eval()
    assert torch.equal(d(x), x)  # evaluation: no mask


def test_pair_replaces_every_lora_dropout_and_refuses_another_p(run_dir):
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM

    run = tandem_leg.RunFolder(run_dir)

    def load(p):
        config = PeftConfig.from_pretrained(run.init_dir)
        config.lora_dropout = p
        return PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run.base_dir), run.init_dir,
                                         config=config, is_trainable=True)

    model = load(0.1)
    pairing = pair(model, run, "hf")
    layers = model.get_base_model().config.num_hidden_layers
    assert len(tandem_leg.torch.lora_dropouts(model)) == layers * 7
    assert tandem_leg.torch.unpaired_dropouts(model) == []
    assert pair(model, run, "hf") is pairing  # pairing twice keeps the first
    with pytest.raises(PairingError, match=r"leg hf: .*lora_dropout.default has dropout p 0.2, the experiment's "
                                           r"lora.dropout is 0.1"):
        pair(load(0.2), run, "hf")


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


@pytest.mark.parametrize("name", ["hf", "loop", "hf-mb"])
def test_paired_legs_reproduce_the_reference_per_update(legs, name):
    ref, mine = legs["reference"], legs[name]
    rs, ms = kinds(ref, "step"), kinds(mine, "step")
    assert [s["update"] for s in ms] == [s["update"] for s in rs] == [0, 1, 2, 3]
    for r, m in zip(rs, ms):
        assert m["lr"] == r["lr"], (m, r)  # the schedule's value, exactly
        # float32 rounding of a different op order (full-vocabulary logits, another summation order):
        assert close(m["loss"], r["loss"], 1e-5), (name, m["update"], m["loss"], r["loss"])
        assert close(m["grad_norm"], r["grad_norm"], 1e-4), (name, m["update"], m["grad_norm"], r["grad_norm"])
        assert m["tokens"] == r["tokens"]
    re, me = kinds(ref, "eval"), kinds(mine, "eval")
    assert [e["update"] for e in me] == [e["update"] for e in re] == [0, 2, 4]
    for r, m in zip(re, me):
        assert m["tokens"] == r["tokens"] and close(m["heldout_ce"], r["heldout_ce"], 1e-5), (name, m, r)
    assert mine[-1]["event"] == "done"


@pytest.mark.parametrize("name", ["hf", "loop"])
def test_paired_legs_fingerprint_the_reference_points(legs, name):
    """The same points (update 1, every micro-batch, layer, op, pass) and, per point, the localisation's
    value max(|sketch_a - sketch_b| / (4 max norm), |norm_a - norm_b| / max norm) small: the two stacks
    compute the same tensors."""
    def points(events):
        (f,) = kinds(events, "fingerprints")
        assert f["update"] == 1
        return {(p["micro_batch"], p["layer"], p["op"], p["pass"]): p for p in f["points"]}

    ref, mine = points(legs["reference"]), points(legs[name])
    assert set(mine) == set(ref), (sorted(set(ref) - set(mine))[:5], sorted(set(mine) - set(ref))[:5])
    worst = 0.0
    for key, r in ref.items():
        m = mine[key]
        assert m["count"] == r["count"], key
        scale = max(r["norm"], m["norm"])
        if scale == 0:
            continue
        d = math.sqrt(sum((a - b) ** 2 for a, b in zip(m["sketch"], r["sketch"])))
        worst = max(worst, d / (4 * scale), abs(m["norm"] - r["norm"]) / scale)
    assert worst < 1e-3, worst


def test_the_callback_times_model_load_and_tokenization_itself(legs):
    """examples/hf_trainer_leg.py sets no timing: the callback measured both (time inside from_pretrained
    and inside the tokenizer), and setup_s counts from the process start, so it holds both."""
    (setup,) = [e for e in kinds(legs["hf"], "timing") if e["phase"] == "setup"]
    assert setup["model_load_s"] > 0 and setup["tokenize_s"] > 0, setup
    assert setup["setup_s"] >= setup["model_load_s"] + setup["tokenize_s"], setup


@pytest.mark.parametrize("name", ["reference", "hf", "loop"])
def test_every_leg_reports_the_optimizer_it_built_before_update_0(legs, run_dir, name):
    """The `settings` event, before the first step, against the run's spec (the oracle: experiment.json)
    and the model's trainable tensors (every adapter tensor, each in one group)."""
    events = legs[name]
    (s,) = kinds(events, "settings")
    assert events.index(s) < events.index(kinds(events, "step")[0])
    spec = tandem_leg.RunFolder(run_dir).spec
    total = len(tandem_leg.RunFolder(run_dir).plan_updates())
    opt = spec["optimizer"]
    assert s["optimizer"] == "AdamW" and s["decoupled_weight_decay"] is True and s["amsgrad"] is False, s
    assert s["schedule"] == "cosine" and s["warmup_updates"] == tandem_leg.warmup_updates(
        spec["schedule"]["warmup_fraction"], total) and s["total_updates"] == total, s
    assert s["clip"] == spec["clip"] and s["not_optimized"] == [], s
    tensors = [t for g in s["groups"] for t in g["tensors"]]
    (l2,) = kinds(events, "l2")
    adapter = [d for d in l2["tensors"] if d["kind"] == "adapter"]
    assert len(tensors) == len(set(tensors)) == len(adapter) and all("lora_" in t for t in tensors), tensors[:3]
    for g in s["groups"]:
        if g["tensors"]:
            assert g["lr"] == opt["lr"] and g["betas"] == opt["betas"] and g["eps"] == opt["eps"], g
            assert g["weight_decay"] == opt["weight_decay"] and g["lr_update0"] == kinds(events, "step")[0]["lr"], g


def test_a_trainer_with_weight_decay_reports_it_on_its_adapter_tensors(legs):
    """TrainingArguments(weight_decay=0.01): the Trainer's decay group holds every adapter tensor (names
    without bias/norm), its no-decay group none; the event says so (tandem names it: tests/compare)."""
    (s,) = kinds(legs["hf-wd"], "settings")
    decayed = [t for g in s["groups"] if g["weight_decay"] == 0.01 for t in g["tensors"]]
    (l2,) = kinds(legs["hf-wd"], "l2")
    assert len(decayed) == len([d for d in l2["tensors"] if d["kind"] == "adapter"]) > 0, s["groups"]


def test_settings_of_a_plain_optimizer_and_a_transformers_schedule():
    """optimizer_settings on torch's own optimizers (the oracle: the values they were built with): torch's
    AdamW default weight decay 0.01 (a plain loop's common slip), Adam's coupled decay, a linear schedule,
    a cosine with another num_cycles, no scheduler, a trainable tensor left out of the optimizer."""
    from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

    from tandem_leg.torch import optimizer_settings

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 2))
    params = list(model[0].parameters())
    s = optimizer_settings(model, torch.optim.AdamW(params, lr=1e-4, eps=1e-6), clip=0.0)
    assert s["optimizer"] == "AdamW" and s["decoupled_weight_decay"] and s["clip"] is None, s
    (g,) = s["groups"]
    assert g["weight_decay"] == 0.01 and g["eps"] == 1e-6 and g["lr"] == g["lr_update0"] == 1e-4, g
    assert g["tensors"] == ["0.weight", "0.bias"] and s["not_optimized"] == ["1.weight", "1.bias"], s
    assert s["schedule"] == "none" and s["warmup_updates"] is None, s
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    s = optimizer_settings(model, opt, get_linear_schedule_with_warmup(opt, 2, 10), clip=1.0)
    assert (s["schedule"], s["warmup_updates"], s["total_updates"], s["clip"]) == ("linear", 2, 10, 1.0), s
    assert s["groups"][0]["lr"] == 1e-4 and s["groups"][0]["lr_update0"] == 0.0, s
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    s = optimizer_settings(model, opt, get_cosine_schedule_with_warmup(opt, 1, 10, num_cycles=1.0))
    assert s["schedule"] == "cosine (num_cycles 1)", s
    s = optimizer_settings(model, torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=0.01))
    assert s["optimizer"] == "Adam" and s["decoupled_weight_decay"] is False, s
    # and the protocol writes it (the event's schema)
    out = __import__("io").StringIO()
    w = tandem_leg.EventWriter(out)
    w.emit("hello", implementation="x", leg="x", language="python", stack="x", versions={"x": "1"}, device="cpu",
           device_name="cpu", threads=1, pid=os.getpid(), spec_sha256="ab" * 32, resume=False)
    w.emit("settings", **s)
    assert json.loads(out.getvalue().splitlines()[-1])["groups"][0]["weight_decay"] == 0.01


def test_native_masks_are_not_the_shared_ones(legs):
    """The control: the same Trainer leg with peft's own dropout draws other masks, so its updates differ
    from the reference's by far more than rounding (the shared masks are what makes the pair)."""
    rs, ns = kinds(legs["reference"], "step"), kinds(legs["hf-native"], "step")
    assert close(ns[0]["loss"], rs[0]["loss"], 1e-2) and not close(ns[0]["loss"], rs[0]["loss"], 1e-4)


@pytest.mark.parametrize("bug, message", [
    ("shuffled-sampler", r"leg wired: update 0 micro-batch 0 row \d is not record \d+ of plan.json .* the DataLoader "
                         r"does not follow the plan"),
    ("pair-off", r"leg wired: the experiment pairs this leg with the reference \(dropout_masks shared, plan shared\) "
                 r"but TandemCallback\(pair=False\)"),
])
def test_wrong_trainer_wiring_is_named_at_the_first_update(run_dir, bug, message):
    import re

    rc, events, err = leg(HF, run_dir, "wired", "--test-bug", bug)
    assert rc == 1, err[-2000:]
    assert not kinds(events, "step")  # nothing was trained unpaired
    (error,) = kinds(events, "error")
    assert re.search(message, error["message"]), error["message"]


def test_a_plain_loop_that_leaves_the_plan_is_named(run_dir):
    """begin_micro_batch with the records the loop batched: other records than plan.json's are refused."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = tandem_leg.RunFolder(run_dir)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run.base_dir), run.init_dir,
                                      is_trainable=True)
    pairing = pair(model, run, "loop")
    model.train()
    planned = run.plan_updates()[0][0]
    ids = torch.ones((len(planned), 4), dtype=torch.long)
    pairing.begin_update(0)
    with pytest.raises(PairingError, match=rf"leg loop: update 0 micro-batch 0 holds records \[.*\], plan.json's are "
                                           rf"\[{planned[0]}, {planned[1]}\]: the loop does not follow the plan"):
        pairing.begin_micro_batch(ids, torch.ones_like(ids), None, records=list(reversed(planned)))
    # left padding: the shared masks are drawn over the right-padded layout
    pairing = pair(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run.base_dir), run.init_dir,
                                             is_trainable=True), run, "loop2")
    pairing.begin_update(0)
    attn = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    with pytest.raises(PairingError, match=r"micro-batch 0 row 0 is not right-padded"):
        pairing.begin_micro_batch(ids, attn, None, records=planned)


def test_the_plan_check_compares_the_tokens_fed_up_to_each_records_length(run_dir):
    """The Trainer's plan check (the callback sets example_ids: record -> its dataset tokens): a row is its
    record when its first len(record) tokens are the record's, whatever the attention mask says over the
    padding after them — an all-ones mask over right padding passes; a mask that hides one of the record's
    tokens is named as the attention mask, not as another record."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    run = tandem_leg.RunFolder(run_dir)
    planned = run.plan_updates()[0][0]
    records = {r: [10 + r, 20 + r, 30 + r][: 2 + (k % 2)] for k, r in enumerate(planned)}  # lengths 2 and 3
    width = max(len(v) for v in records.values())
    ids = torch.full((len(planned), width), 7, dtype=torch.long)
    for b, r in enumerate(planned):
        ids[b, :len(records[r])] = torch.tensor(records[r])

    def pairing_for(name):
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(run.base_dir), run.init_dir,
                                          is_trainable=True)
        p = pair(model, run, name)
        p.example_ids = lambda r: records[r]
        p.begin_update(0)
        return p

    pairing_for("ones").begin_micro_batch(ids, torch.ones_like(ids), None)  # all ones: passes
    hide = torch.ones_like(ids)
    short = min(range(len(planned)), key=lambda b: len(records[planned[b]]))
    hide[short, 1] = 0
    with pytest.raises(PairingError, match=rf"micro-batch 0 row {short} holds record {planned[short]}'s "
                                           rf"{len(records[planned[short]])} tokens but its attention mask hides 1 of "
                                           r"them \(first at position 1\): the attention mask differs, not the tokens"):
        pairing_for("hidden").begin_micro_batch(ids, hide, None)
    other = ids.clone()
    other[0, 0] += 1
    with pytest.raises(PairingError, match=r"row 0 is not record \d+ of plan.json"):
        pairing_for("other").begin_micro_batch(other, torch.ones_like(ids), None)
