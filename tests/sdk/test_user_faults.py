"""The user-stack fault matrix (issue 30): examples/hf_trainer_leg.py, paired with the reference through
tandem_leg (shared dropout masks, the shared plan, fingerprints), commits one known bug of real training
stacks at a time (its test-only --test-bug), and tandem judges it against the reference leg of the same
run folder — clinical-tiny on the pretrained base, cut to 6 updates (evaluations at 0, 2, 4, 6).

How it runs (2 cores, a few minutes): one `tandem run` with the reference leg alone; the Trainer leg,
clean and with each bug, run on that run folder two at a time, each then judged alone against the
reference by `tandem import events` into its own copy of run.h5 and `tandem report` (the verdict and the
exit code) / `tandem localise`; and the clean leg on 5 seeds — seed 1234 so, the other four as `tandem
run --legs reference,hf` with the Trainer as a `command` leg (the runner's own path).

What is asserted, per bug: the levels today's judge fires (L1-L3 from the report's rows; L4 = the held-out
CE beyond the float32 error-model bound, recomputed here from run.h5's series with h5py), the first update
(every bug of CAUGHT_TODAY by the first evaluation after update 0 or earlier), the report's verdict and
its exit code (3); the clean leg `equivalent` with exit 0 on 5 of 5 seeds; `tandem localise` naming the
first diverging point for rslora-off and boundary-off-by-one and no divergence for the clean leg.

NEEDS_SERIES_JUDGE is the expected-failure list: bugs today's judge passes (their held-out CE stays within
the bound by update 6) although the leg's own per-update series (lr, training loss, pre-clip grad norm,
which every leg emits) show them at once. They need issue 30 items 3-4; their "caught" test is
xfail(strict=True), so the day the series judge catches one it XPASSes, fails, and moves to CAUGHT_TODAY.
The matrix is printed (pytest -s) and written to user-faults.md in the test's temporary folder."""
import concurrent.futures
import json
import math
import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(HERE, "..", ".."))
TANDEM = os.environ.get("TANDEM_BIN", os.path.join(os.environ.get("TANDEM_BINARY_DIR", "build"), "app", "tandem"))
HF = os.path.join(SOURCE_DIR, "examples", "hf_trainer_leg.py")
sys.path.insert(0, os.path.join(HERE, "..", "runner"))
from runner_fixture import verdict_of  # noqa: E402
SEEDS = [1234, 1235, 1236, 1237, 1238]

# bug -> (the level that fires first, the update it fires at) under today's judge, measured (docs/legs.md)
CAUGHT_TODAY = {
    "ga-mean-of-means": ("L4", 2),
    "rslora-off": ("L4", 2),
    "generic-template": ("L1", 0),
    "boundary-off-by-one": ("L1", 0),
    "linear-schedule": ("L4", 4),  # cosine and linear agree on the lr of updates 0-1: the evaluation at 2 is equal
    "warmup-plus-one": ("L4", 2),
    "eval-without-adapter": ("L4", 2),
    "clip-per-micro-batch": ("L4", 2),
    "adamw-eps-x100": ("L4", 4),   # 1.9x the bound at 4, 2.1x at 6
    "pad-labelled": ("L1", 0),
}
FIRST_EVALUATION = 2  # the issue's bar: caught by the first evaluation after update 0, or earlier
# The expected-failure list: caught today, but after the first evaluation; the per-update series the leg emits
# show them earlier (the series, the first update beyond the bound). Needs issue 30 items 3-4 (lr against the
# schedule, training loss and pre-clip grad norm as paired series, the series and the first update in the
# verdict's reason); xfail(strict=True): when that judge lands and names them, the test XPASSes and fails.
NEEDS_SERIES_JUDGE = {
    "linear-schedule": ("lr", 2),
    "adamw-eps-x100": ("training loss", 3),
}
# A bug too small to see at this lr: its measured effect (the buggy leg against the clean leg of the same
# stack) stays below the float32 bound on every series; reported as such (docs/legs.md), not as caught.
BELOW_THE_BOUND = ["weight-decay"]
BUGS = list(CAUGHT_TODAY) + BELOW_THE_BOUND
L1_L3 = ("L1", "L2", "L3")


def experiment(tmp, seed, legs=None):
    with open(os.path.join(SOURCE_DIR, "experiments", "clinical-tiny.json")) as f:
        spec = json.load(f)
    spec["name"] = f"userfaults-{seed}"
    # what a seed envelope varies by default (docs/envelope.md): the adapter, the plan and the masks; the split
    # stays (another split of this small corpus may hold out fewer records than the eval prefix)
    spec["seeds"] = {"split": spec["seed"], "base": spec["seed"], "adapter": seed, "plan": seed, "dropout": seed}
    spec["batch"]["max_updates"] = 6
    spec["eval"] = {"interval": 2, "prefix_size": 8}
    spec["checkpoint"] = {"interval": 0}
    spec["corpus"]["max_records_per_source"] = 40
    spec["sequence"]["max_len"] = 128
    spec["l3_records"] = 16
    spec["observe"] = {"updates": [0]}  # fingerprints of update 0, for tandem localise
    if legs:
        spec["legs"] = legs
    path = os.path.join(tmp, spec["name"] + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path, spec


def hf_command(*extra):
    return [sys.executable, HF, "--run", "{run}", "--leg", "{leg}", "--device", "{device}", "--threads", "{threads}",
            *extra]


def tandem_run(tmp, seed, legs, spec_legs=None):
    path, spec = experiment(tmp, seed, spec_legs)
    out = os.path.join(tmp, f"runs-{seed}")
    p = subprocess.run([TANDEM, "run", path, "--legs", legs, "--threads", "2" if "," in legs else "1", "--no-probe",
                        "--out", out, "--catalog", os.path.join(tmp, f"tandem-{seed}.db")],
                       capture_output=True, text=True, timeout=1800)
    folders = [os.path.join(out, d) for d in os.listdir(out)] if os.path.isdir(out) else []
    assert len(folders) == 1, (p.stdout[-3000:], p.stderr[-3000:])
    return p, folders[0]


def run_leg_by_hand(folder, leg, bug):
    """The Trainer leg on a prepared run folder, as the runner starts a command leg (one thread)."""
    d = os.path.join(folder, "legs", leg)
    os.makedirs(d, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
               TANDEM_RUN_DIR=folder, TANDEM_LEG=leg)
    with open(os.path.join(d, "events.jsonl"), "w") as out, open(os.path.join(d, "stderr.log"), "w") as err:
        rc = subprocess.run([sys.executable, HF, "--run", folder, "--leg", leg, "--device", "cpu", "--threads", "1",
                             *(["--test-bug", bug] if bug else [])], stdout=out, stderr=err, env=env,
                            timeout=1800).returncode
    return rc


def judge_alone(tmp, folder, leg):
    """The leg against the reference alone: its events imported into a copy of the reference-only run.h5,
    then `tandem report` (verdict, exit code) and `tandem localise` on that copy."""
    d = os.path.join(tmp, "judged", leg)
    os.makedirs(d, exist_ok=True)
    h5 = os.path.join(d, "run.h5")
    shutil.copy(os.path.join(folder, "run.h5"), h5)
    p = subprocess.run([TANDEM, "import", "events", os.path.join(folder, "legs", leg, "events.jsonl"), "--into", h5,
                        "--as", leg, "--catalog", ""], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    report = subprocess.run([TANDEM, "report", h5], capture_output=True, text=True, timeout=300)
    localise = subprocess.run([TANDEM, "localise", h5, "--legs", f"{leg},reference", "--no-store"],
                              capture_output=True, text=True, timeout=300)
    return {"h5": h5, "report": report.stdout, "report_rc": report.returncode, "localise": localise.stdout,
            "localise_rc": localise.returncode, "localise_err": localise.stderr}


def pair_rows(report, leg):
    """{level: the row's last word} of the report's rows for `leg vs reference` (L1, L2, L3, then L4's)."""
    rows = [ln for ln in report.splitlines() if ln.startswith(f"  {leg} vs reference ")]
    levels = {}
    for name, row in zip(("L1", "L2", "L3"), rows[:3]):
        levels[name] = row.split()[-1]
    return levels


def series(h5, leg):
    import h5py

    with h5py.File(h5, "r") as f:
        steps, ev = f[f"legs/{leg}/steps"][()], f[f"legs/{leg}/eval"][()]
        return {"update": steps["update"].tolist(), "loss": steps["loss"].tolist(),
                "grad_norm": steps["grad_norm"].tolist(), "lr": steps["lr"].tolist(),
                "eval_update": ev["update"].tolist(), "heldout_ce": ev["heldout_ce"].tolist()}


def bound(u, spec, layers):
    """docs/thresholds.md: k eps32 C^(L+1) sqrt(S) sqrt(1 + u), k = 2, C = 1.03."""
    return 2.0 * 2.0 ** -23 * 1.03 ** (layers + 1) * math.sqrt(spec["sequence"]["max_len"]) * math.sqrt(1 + u)


def first_beyond(values, reference, updates, spec, layers, exact=False):
    """First update whose relative difference exceeds the bound (exact: differs at all), its ratio."""
    worst = (None, 0.0)
    for u, a, b in zip(updates, values, reference):
        rel = abs(a - b) / abs(b) if b else (0.0 if a == b else math.inf)
        ratio = (math.inf if rel > 0 else 0.0) if exact else rel / bound(u, spec, layers)
        if ratio > 1:
            return u, ratio
        worst = max(worst, (u, ratio), key=lambda x: x[1])
    return None, worst[1]


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("userfaults"))
    _, spec = experiment(tmp, SEEDS[0])
    with open(os.path.join(SOURCE_DIR, "..", "shared", "assets", "qwen3-tiny-clinical", "config.json")) as f:
        layers = json.load(f)["num_hidden_layers"]
    seeds = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        base = pool.submit(tandem_run, tmp, SEEDS[0], "reference")
        seeded = {s: pool.submit(tandem_run, tmp, s, "reference,hf",
                                 {"reference": {"implementation": "reference"},
                                  "hf": {"implementation": "command", "command": hf_command()}})
                  for s in SEEDS[1:]}
        p, folder = base.result()
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
        legs = {"hf": None, **{f"hf-{b}": b for b in BUGS}}
        ran = {leg: pool.submit(run_leg_by_hand, folder, leg, bug) for leg, bug in legs.items()}
        rcs = {leg: f.result() for leg, f in ran.items()}
        for s, f in seeded.items():
            p, sfolder = f.result()
            report = subprocess.run([TANDEM, "report", sfolder], capture_output=True, text=True, timeout=300)
            seeds[s] = {"run_rc": p.returncode, "report_rc": report.returncode, "verdict": verdict_of(report.stdout)}
    for leg in legs:
        assert rcs[leg] == 0, (leg, open(os.path.join(folder, "legs", leg, "stderr.log")).read()[-3000:])
    rows, judged = judge_rows(tmp, folder, legs, spec, layers)
    seeds[SEEDS[0]] = {"run_rc": 0, "report_rc": judged["hf"]["report_rc"], "verdict": verdict_of(judged["hf"]["report"])}
    table = write_table(tmp, rows, seeds)
    print(table)
    return {"rows": rows, "seeds": seeds, "folder": folder, "tmp": tmp}


def judge_rows(tmp, folder, legs, spec, layers):
    """Each leg judged alone against the reference, and its row of the matrix."""
    judged = {leg: judge_alone(tmp, folder, leg) for leg in legs}
    ref = series(judged["hf"]["h5"], "reference")
    rows = {}
    for leg, bug in legs.items():
        j = judged[leg]
        s = series(j["h5"], leg)
        levels = {lv for lv, word in pair_rows(j["report"], leg).items() if word == "FAIL"}
        l4_update, l4_ratio = first_beyond(s["heldout_ce"], ref["heldout_ce"], s["eval_update"], spec, layers)
        if l4_update is not None:
            levels.add("L4")
        first = {lv: 0 for lv in levels & set(L1_L3)}
        if l4_update is not None:
            first["L4"] = l4_update
        signal = min(first, key=lambda lv: (first[lv], lv)) if first else None
        rows[leg] = {
            "bug": bug or "clean", "levels": levels, "first": first,
            "first_signal": signal, "first_update": first.get(signal) if signal else None, "ce_ratio": l4_ratio,
            "verdict": verdict_of(j["report"]), "exit": j["report_rc"],
            # what the series show (issue 30 items 3-4 will judge them): first update beyond the bound
            "lr": first_beyond(s["lr"], ref["lr"], s["update"], spec, layers, exact=True),
            "loss": first_beyond(s["loss"], ref["loss"], s["update"], spec, layers),
            "grad_norm": first_beyond(s["grad_norm"], ref["grad_norm"], s["update"], spec, layers),
            "localise_rc": j["localise_rc"], "localise": j["localise"], "localise_err": j["localise_err"],
        }
    clean = series(judged["hf"]["h5"], "hf") if "hf" in legs else None
    for leg in rows:  # the bug alone: the leg against the clean leg of the same stack, the largest ratio per series
        s = series(judged[leg]["h5"], leg)
        rows[leg]["effect_vs_clean"] = {
            name: max(abs(a - b) / abs(b) / bound(u, spec, layers) for u, a, b in zip(s[ux], s[name], clean[name]))
            for name, ux in (("heldout_ce", "eval_update"), ("loss", "update"), ("grad_norm", "update"))}
    return rows, judged


def write_table(tmp, rows, seeds):
    def at(x):
        u, ratio = x
        return f"update {u}" if u is not None else f"- ({ratio:.2g} of the bound)" if ratio else "-"

    out = ["| bug | caught today by | update | verdict | exit | lr | training loss | pre-clip grad norm "
           "| the bug alone (vs the clean leg): CE / loss / grad norm, of the bound |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows.values():
        by = "+".join(sorted(r["levels"])) or "nothing"
        e = r["effect_vs_clean"]
        out.append(f"| {r['bug']} | {by} | {r['first_update'] if r['first_update'] is not None else '-'} | "
                   f"{r['verdict'].split(':')[0]} | {r['exit']} | {at(r['lr'])} | {at(r['loss'])} | {at(r['grad_norm'])} "
                   f"| {e['heldout_ce']:.3g} / {e['loss']:.3g} / {e['grad_norm']:.3g} |")
    out.append("")
    out.append("clean on seeds: " + ", ".join(f"{s}: {v['verdict'].split(':')[0]} (exit {v['report_rc']})"
                                              for s, v in sorted(seeds.items())))
    text = "\n".join(out)
    with open(os.path.join(tmp, "user-faults.md"), "w") as f:
        f.write(text + "\n")
    return text


def test_the_clean_paired_trainer_is_equivalent_on_5_seeds(matrix):
    seeds = matrix["seeds"]
    assert sorted(seeds) == SEEDS
    for s, v in seeds.items():
        assert v["run_rc"] == 0 and v["report_rc"] == 0, (s, v)
        assert v["verdict"].startswith("equivalent: hf~reference: held-out CE within the float32 error-model bound"), (s, v)
    clean = matrix["rows"]["hf"]
    assert clean["levels"] == set() and clean["ce_ratio"] < 0.5, clean
    # its per-update series are the reference's: lr exactly, loss and grad norm within the bound
    assert clean["lr"][0] is None and clean["loss"][0] is None and clean["grad_norm"][0] is None, clean


@pytest.mark.parametrize("bug", list(CAUGHT_TODAY))
def test_each_bug_is_caught_and_named(matrix, bug):
    r = matrix["rows"][f"hf-{bug}"]
    level, update = CAUGHT_TODAY[bug]
    assert r["first_signal"] == level and r["first_update"] == update, r
    assert r["exit"] == 3 and r["verdict"].startswith("not comparable: "), r  # issue 24: `different`
    assert f"hf-{bug}~reference" in r["verdict"], r["verdict"]


@pytest.mark.parametrize("bug", [b for b in CAUGHT_TODAY if b not in NEEDS_SERIES_JUDGE])
def test_caught_by_the_first_evaluation_or_earlier(matrix, bug):
    assert matrix["rows"][f"hf-{bug}"]["first_update"] <= FIRST_EVALUATION


@pytest.mark.parametrize("bug", list(NEEDS_SERIES_JUDGE))
def test_the_series_show_what_the_held_out_ce_shows_late(matrix, bug):
    """What the leg emits for the series judge: the series beyond the bound where the list says."""
    series_name, update = NEEDS_SERIES_JUDGE[bug]
    key = {"lr": "lr", "training loss": "loss", "grad norm": "grad_norm"}[series_name]
    assert matrix["rows"][f"hf-{bug}"][key][0] == update, matrix["rows"][f"hf-{bug}"]


@pytest.mark.parametrize("bug", list(NEEDS_SERIES_JUDGE))
@pytest.mark.xfail(strict=True, reason="needs issue 30 items 3-4: lr / training loss / pre-clip grad norm judged "
                                       "per update as paired series, named with the first update in the reason")
def test_the_series_judge_names_them_first(matrix, bug):
    series_name, update = NEEDS_SERIES_JUDGE[bug]
    r = matrix["rows"][f"hf-{bug}"]
    m = re.search(rf"{series_name}[^;]*?update (\d+)", r["verdict"])
    assert r["exit"] == 3 and m and int(m.group(1)) == update, r["verdict"]


@pytest.mark.parametrize("bug", BELOW_THE_BOUND)
def test_a_bug_below_the_bound_is_measured_not_passed_silently(matrix, bug):
    """Weight decay 0.01 at lr 1e-4 shrinks the adapter by 1e-6 per update: against the clean Trainer leg (the
    same stack, so only the bug differs) every series stays below the float32 bound — the matrix gives the
    number — and today's judge reads the pair `equivalent` (it cannot see it)."""
    r = matrix["rows"][f"hf-{bug}"]
    assert r["levels"] == set() and r["exit"] == 0 and r["verdict"].startswith("equivalent"), r
    effect = r["effect_vs_clean"]
    assert all(0 < v < 1 for v in effect.values()), effect  # measurable (not 0), below the bound


def test_localise_names_the_first_point_of_the_trainer_leg(matrix):
    rows = matrix["rows"]
    clean = rows["hf"]
    assert clean["localise_rc"] == 0 and "no divergence" in clean["localise"], (clean["localise"], clean["localise_err"])
    for bug, where in (("rslora-off", r"update 0, micro-batch 0, layer 3, down_proj.lora_B \(backward\)"),
                       ("boundary-off-by-one", r"update 0, micro-batch 0, outside the layers, labels \(forward\)")):
        r = rows[f"hf-{bug}"]
        assert r["localise_rc"] == 3, (bug, r["localise"][-2000:], r["localise_err"])
        m = re.search(r"first divergence[^\n]*", r["localise"])
        assert m and re.search(where, m.group(0)), (bug, r["localise"][-2000:])
