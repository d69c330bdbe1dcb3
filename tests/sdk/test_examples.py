"""The example legs (examples/): a plain PyTorch loop, a HuggingFace Trainer script and a TRL SFTTrainer
script, paired with the reference through tandem_leg (shared dropout masks, the shared plan), each a
`command` leg the experiment defines, run by `tandem run` next to the engine and reference legs
(clinical-tiny on the pretrained base, made small).

Each must agree with the reference at L1 (relative difference <= 1e-5), L2 (every tensor's bytes) and
L3 (every record), and be `equivalent` at L4: paired, its held-out CE within the float32 error-model
bound. The known difference — the Trainer's own eval_loss (a mean of per-batch means) instead of
the token-weighted held-out CE (--trainer-eval) — must be flagged at L1, and only there among L1-L3."""
import json
import os
import subprocess
import sys

import pytest

from test_run_end_to_end import SOURCE_DIR, TANDEM, check_json, h5, tandem_run, write_spec

EXAMPLES = {"loop": ["torch_loop_leg.py"], "hf": ["hf_trainer_leg.py"], "trl": ["trl_sft_leg.py"],
            "hf-default-eval": ["hf_trainer_leg.py", "--trainer-eval"]}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("examples"))
    with open(os.path.join(SOURCE_DIR, "experiments", "clinical-tiny.json")) as f:
        spec = json.load(f)
    spec.update(name="examples", l3_records=8)  # the experiment's shared masks and plan: every leg is paired
    spec["batch"]["max_updates"] = 4
    spec["eval"] = {"interval": 2, "prefix_size": 4}
    spec["checkpoint"] = {"interval": 0}
    spec["corpus"]["max_records_per_source"] = 40
    spec["sequence"]["max_len"] = 128
    spec["legs"] = {leg: {"implementation": "command",
                          "command": [sys.executable, os.path.join(SOURCE_DIR, "examples", script), *flags, "--run", "{run}",
                                      "--leg", "{leg}", "--device", "{device}", "--threads", "{threads}"]}
                    for leg, (script, *flags) in EXAMPLES.items()}
    p, folder = tandem_run(tmp, write_spec(tmp, spec), "--legs", ",".join(["engine", "reference", *EXAMPLES]),
                           "--threads", "6")
    # Exit 3: the run finished and a check failed (hf-default-eval at L1, on purpose).
    assert p.returncode == 3, p.stdout[-4000:] + p.stderr[-4000:]
    report = subprocess.run([TANDEM, "report", folder], capture_output=True, text=True)
    return folder, report


def rows(report, a, b):
    return [line for line in report.stdout.splitlines()
            if line.startswith(f"  {a} vs {b} ") or line.startswith(f"  {b} vs {a} ")]


@pytest.mark.parametrize("leg", ["loop", "hf", "trl"])
def test_example_agrees_with_the_reference_at_every_level(run, leg):
    folder, report = run
    l1, l2, l3, l4_eval, l4_loss, distances, series = rows(report, leg, "reference")
    assert l1.rstrip().endswith(" pass") and l2.rstrip().endswith(" pass") and l3.rstrip().endswith(" pass"), report.stdout
    # Paired (tandem's shared masks, the shared plan): L4 is gated by the float32 error-model bound.
    assert "held-out CE" in l4_eval and l4_eval.rstrip().endswith(" equivalent"), l4_eval
    assert "training loss" in l4_loss and l4_loss.rstrip().endswith(" -"), l4_loss
    assert distances.split()[3] == "yes" and distances.rstrip().endswith(" equivalent"), distances
    # the per-update series: the lr on the schedule, no training loss or grad norm beyond its bound
    assert series.split()[3] == "none" and "beyond" not in series, series
    with h5(folder) as f:
        a, r = check_json(f, leg, "l1"), check_json(f, "reference", "l1")
        assert a["tokens"] == r["tokens"] and abs(a["heldout_ce"] - r["heldout_ce"]) / r["heldout_ce"] <= 1e-5
        assert {t["name"]: t["sha256"] for t in check_json(f, leg, "l2")["tensors"]} == \
               {t["name"]: t["sha256"] for t in check_json(f, "reference", "l2")["tensors"]}
        a3, r3 = check_json(f, leg, "l3")["records"], check_json(f, "reference", "l3")["records"]
        assert len(a3) == 8 and [(x["ids"], x["boundary"], x["text"]) for x in a3] == \
               [(x["ids"], x["boundary"], x["text"]) for x in r3]
        steps = f[f"legs/{leg}/steps"][()]
        assert list(steps["update"]) == [0, 1, 2, 3]
        assert list(f[f"legs/{leg}/eval"][()]["update"]) == [0, 2, 4]
        # The lr each update ran with: the schedule's value (the Trainer logs the lr before its scheduler steps).
        assert list(steps["lr"]) == list(f["legs/reference/steps"][()]["lr"])


def test_the_trainers_own_eval_loss_is_flagged_at_l1(run):
    folder, report = run
    # The verdict (docs/report.md "The verdict"): an L1 failure makes the run "different", naming the
    # level, the update and the ratio, and the first failing pair; the other 4 pairs with hf-default-eval
    # fail L1 too.
    assert report.returncode == 3
    verdict = [line for line in report.stdout.splitlines() if line.startswith("different: ")]
    assert len(verdict) == 1 and verdict[0].startswith("different: L1 engine~hf-default-eval: initial held-out CE (update 0) "
                                                       "differs by ") \
        and "x the threshold 1e-05" in verdict[0] and verdict[0].endswith(" (+4 more)"), verdict
    l1, l2, l3, _, _, distances, _ = rows(report, "hf-default-eval", "reference")
    assert l1.rstrip().endswith(" FAIL") and l2.rstrip().endswith(" pass") and l3.rstrip().endswith(" pass")
    assert distances.rstrip().endswith(" different")
    assert "L1 hf-default-eval~reference: initial held-out CE (update 0) differs by" in report.stdout
    with h5(folder) as f:
        a, r = check_json(f, "hf-default-eval", "l1"), check_json(f, "reference", "l1")
        assert abs(a["heldout_ce"] - r["heldout_ce"]) / r["heldout_ce"] > 1e-4  # a mean of per-batch means
    # Every other level of every other pair passes: the failures name only this leg.
    failures = [line for line in report.stdout.splitlines() if line.startswith("  - ")]
    assert failures and all("hf-default-eval" in line for line in failures), failures
