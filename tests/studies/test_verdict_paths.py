"""A verdict that never passes a detected difference, on every judging path (docs/thresholds.md
"The verdict", "One judging path"), end to end on the 6-update experiment of runner_fixture:

- every catalogued L4 fault (`tandem faults --list`, expected level L4 only), paired with the reference,
  is `different` with exit 3 — without an envelope and with one —, and its reason names the first
  update, carries the effect size (or says no envelope sized it) and the localised point;
- `tandem report RUN` and `tandem compare RUN:a RUN:b` print the same verdict for the same pair, with
  the same envelope (found in the catalog by both when the run file holds none);
- two runs that differ only in settings that cannot change numbers (name, description, observe, the
  legs section) are judged on numbers by `tandem compare`; a leg compared with itself is refused (exit 2);
- `tandem run` says how to record fingerprints for a `different` pair that has none.
Oracles: the legs' own series in run.h5 (h5py) for the first update, the catalogue's own list."""
import csv
import io
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner"))
from runner_fixture import TANDEM, first_optimizer_off, h5_series, optimizer_checks, small_experiment, verdict_of  # noqa: E402


def tandem(*args, timeout=900):
    return subprocess.run([TANDEM, *args], capture_output=True, text=True, timeout=timeout)


def only_folder(out):
    d = [os.path.join(out, x) for x in os.listdir(out)]
    assert len(d) == 1, d
    return d[0]


def reasons_of(report):
    """{leg: the reason line} of `tandem report`'s lines under the verdict ("  - <verdict>: <a>~<b>: ...")."""
    out = {}
    for ln in report.splitlines():
        if ln.startswith("  - ") and "~" in ln:
            rest = ln[4:]
            pair = rest.split(": ", 2)[1] if rest.startswith(("different: ", "equivalent: ")) else ""
            out[pair.split(" ")[-1].split("~")[0]] = rest
    return out


def l4_faults():
    p = tandem("faults", "--list", "--format", "csv")
    assert p.returncode == 0, p.stderr
    rows = [r for r in csv.reader(io.StringIO(p.stdout)) if r and not r[0].startswith("#")]
    header = rows[0]
    return [r[0] for r in rows[1:] if r[header.index("expected")] == "L4"]


@pytest.fixture(scope="module")
def faults_run(tmp_path_factory):
    """`tandem faults` with every L4 fault (fingerprints of updates 0 and 1); an engine seed envelope of
    the same experiment built after it (so the run file holds none: only the catalog has it)."""
    tmp = str(tmp_path_factory.mktemp("verdict-faults"))
    spec = small_experiment(tmp, "verdict", observe={"updates": [0, 1]})
    faults = l4_faults()
    assert len(faults) >= 10 and "adamw-eps-inside-sqrt" in faults, faults
    out, db = os.path.join(tmp, "runs"), os.path.join(tmp, "tandem.db")
    p = tandem("faults", spec, "--faults", ",".join(faults), "--jobs", "2", "--threads", "2", "--no-probe", "--out", out,
               "--catalog", db)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]  # every L4 fault caught, the clean pair quiet
    folder = only_folder(out)
    e = tandem("envelope", spec, "--legs", "engine", "--seeds", "3", "--threads", "2", "--out", os.path.join(tmp, "env"),
               "--catalog", db)
    assert e.returncode == 0, e.stdout[-3000:] + e.stderr[-3000:]
    assert "varying dropout,plan,adapter (the default for verdict): every leg is paired" in e.stderr, e.stderr[-2000:]
    return {"tmp": tmp, "spec": spec, "folder": folder, "db": db, "faults": faults, "series": h5_series(folder)}


def first_bound_update(leg, ref, optimizer_off=None):
    """The first update at which a series leaves its float32 bound, the lr its schedule or (optimizer_off:
    first_optimizer_off of the two legs) a replayed optimizer step its few-ulp bound (the oracle)."""
    def bound(u, k):
        return k * 2.0 ** -23 * 1.03 ** 3 * 128 ** 0.5 * (1 + u) ** 0.5
    firsts = [u for u, a, b in zip(ref["eval_update"], leg["heldout_ce"], ref["heldout_ce"]) if abs(a - b) / abs(b) > bound(u, 2)]
    for name, k in (("loss", 3), ("grad_norm", 28)):
        firsts += [u for u, a, b in zip(ref["update"], leg[name], ref[name]) if abs(a - b) / abs(b) > bound(u, k)]
    firsts += [u for u, a, b in zip(ref["update"], leg["lr"], ref["lr"]) if abs(a - b) > 4 * 2.0 ** -23 * max(abs(b), 1e-10)]
    firsts += [] if optimizer_off is None else [optimizer_off]
    return min(firsts) if firsts else None


@pytest.mark.parametrize("with_envelope", [False, True])
def test_every_l4_fault_is_different_with_and_without_an_envelope(faults_run, with_envelope):
    catalog = faults_run["db"] if with_envelope else os.path.join(faults_run["tmp"], "none.db")
    p = tandem("report", faults_run["folder"], "--catalog", catalog)
    assert p.returncode == 3, p.stdout[-2000:]
    reasons = reasons_of(p.stdout)
    s = faults_run["series"]
    for fault in faults_run["faults"]:
        leg = "fault-" + fault
        reason = reasons.get(leg, "")
        first = first_bound_update(s[leg], s["reference"], first_optimizer_off(faults_run["folder"], leg, "reference"))
        assert first is not None, fault
        assert reason.startswith(f"different: {leg}~reference: L4 ") and f"at update {first}" in reason.split(";")[0], (fault, first, reason)
        if with_envelope:
            assert "; effect within seed noise: |z| " in reason or "; effect beyond seed noise: |z| " in reason, (fault, reason)
            assert "(the engine seed envelope, 3 runs" in reason, (fault, reason)
        else:
            assert "; effect size: no seed envelope" in reason, (fault, reason)
        assert "; localised: " in reason, (fault, reason)
    # the run's verdict line: different, whatever an envelope says
    assert verdict_of(p.stdout).startswith("different: "), verdict_of(p.stdout)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Run 1: a clean engine leg and one with adamw-eps-inside-sqrt, fingerprints of updates 0-1. Run 2: the
    same numbers under another name and description, no observe, and a legs section naming the faulty leg
    otherwise (settings that cannot change numbers). Then an engine envelope of the experiment."""
    tmp = str(tmp_path_factory.mktemp("verdict-compare"))
    legs = {"engine": {"implementation": "engine"}, "eps": {"implementation": "engine", "faults": ["adamw-eps-inside-sqrt"]}}
    spec1 = small_experiment(tmp, "cmp-one", legs=legs, observe={"updates": [0, 1]})
    with open(spec1) as f:
        s2 = json.load(f)
    s2["name"], s2["description"] = "cmp-two", "another name and description, no observe: the same numbers"
    del s2["observe"]
    s2["legs"] = {"engine": {"implementation": "engine"}, "eps-again": {"implementation": "engine", "faults": ["adamw-eps-inside-sqrt"]}}
    spec2 = os.path.join(tmp, "cmp-two.json")
    with open(spec2, "w") as f:
        json.dump(s2, f)
    db = os.path.join(tmp, "tandem.db")
    runs = []
    for i, spec in enumerate((spec1, spec2)):
        out = os.path.join(tmp, f"runs{i}")
        p = tandem("run", spec, "--threads", "2", "--no-probe", "--out", out, "--catalog", db)
        assert p.returncode == 3, p.stdout[-3000:] + p.stderr[-3000:]
        runs.append((p, only_folder(out)))
    return {"tmp": tmp, "db": db, "runs": runs, "spec1": spec1}


def test_tandem_run_suggests_observe_for_a_different_pair_without_fingerprints(two_runs):
    (p1, _), (p2, _) = two_runs["runs"]
    assert "; localised: first divergence (engine vs eps): update " in verdict_of(p1.stdout), verdict_of(p1.stdout)
    assert "to localise where they diverge" not in p1.stderr
    v2 = verdict_of(p2.stdout)
    assert v2.startswith("different: engine~eps-again: L4 ") and "localised" not in v2, v2
    assert "engine~eps-again are different from update " in p2.stderr and '"observe": {"updates": [' in p2.stderr, p2.stderr[-2000:]


def test_the_engine_legs_replay_their_optimizer_steps(two_runs):
    """The engine leg replays its own optimizer step with the spec's AdamW, as the Python legs do
    (docs/thresholds.md "The optimizer step"): the clean leg within half the few-ulp bound at updates 0
    and 1 (the replayed ones; observed updates too), the leg with the catalogue's adamw-eps-inside-sqrt
    `different` at update 1 by that bound, over 10x — the first update whose step moves anything (update
    0 runs with lr 0 under warm-up: both steps are exact there)."""
    (p1, f1), _ = two_runs["runs"]
    clean, eps = optimizer_checks(f1, "engine"), optimizer_checks(f1, "eps")
    print("clean engine replayed steps:", [(c["update"], c["max_ratio"]) for c in clean])
    print("adamw-eps-inside-sqrt replayed steps:", [(c["update"], c["max_ratio"], c["tensor"], c["over"]) for c in eps])
    assert [c["update"] for c in clean] == [c["update"] for c in eps] == [0, 1]
    assert all(float(c["max_ratio"]) <= 0.5 and c["over"] == 0 for c in clean), clean
    assert all(c["elements"] > 0 and c["tensors"] > 0 and c["elements"] == clean[0]["elements"] for c in clean + eps)
    assert float(eps[0]["max_ratio"]) == 0 and float(eps[1]["max_ratio"]) > 10, eps
    v = verdict_of(p1.stdout)
    assert v.startswith("different: engine~eps: L4 optimizer step of eps at update 1: "), v


def test_report_and_compare_print_the_same_verdict_for_the_same_pair(two_runs):
    folder = two_runs["runs"][0][1]
    rid = os.path.basename(folder)
    # with the catalog's envelope (built now: the run file holds none) and without one
    e = tandem("envelope", two_runs["spec1"], "--legs", "engine", "--seeds", "3", "--threads", "2", "--out",
               os.path.join(two_runs["tmp"], "env"), "--catalog", two_runs["db"])
    assert e.returncode == 0, e.stderr[-2000:]
    for catalog in (two_runs["db"], os.path.join(two_runs["tmp"], "none.db")):
        r = tandem("report", folder, "--catalog", catalog)
        c = tandem("compare", f"{folder}:engine", f"{folder}:eps", "--catalog", catalog)
        assert r.returncode == c.returncode == 3, (r.stdout[-1500:], c.stdout[-1500:])
        vr, vc = verdict_of(r.stdout), verdict_of(c.stdout).replace(rid + ":", "")
        assert vr == vc, (vr, vc)
        assert vr.startswith("different: engine~eps: L4 "), vr
        assert ("seed noise: |z| " in vr) == (catalog == two_runs["db"]), vr
    # compare's default catalog is run's (tandem.db in the working folder): run from the test's folder
    c = subprocess.run([os.path.abspath(TANDEM), "compare", f"{folder}:engine", f"{folder}:eps"], capture_output=True,
                       text=True, timeout=300, cwd=two_runs["tmp"])
    assert "seed noise: |z| " in verdict_of(c.stdout), verdict_of(c.stdout)


def test_runs_differing_only_in_name_description_observe_are_judged_on_numbers(two_runs):
    (_, f1), (_, f2) = two_runs["runs"]
    none = os.path.join(two_runs["tmp"], "none.db")
    c = tandem("compare", f"{f1}:engine", f"{f2}:engine", "--catalog", none)
    assert c.returncode == 0, c.stdout[-3000:]
    v = verdict_of(c.stdout)
    assert v.startswith("equivalent: ") and "held-out CE within the float32 error-model bound" in v, v
    for key in ("name", "description", "observe"):
        line = next((ln for ln in c.stdout.splitlines() if ln.strip().startswith(key + " ")), "")
        assert line.rstrip().endswith(" no"), (key, line, c.stdout[:2000])  # the config table: does not change numbers
    assert "judged as one run's legs" in c.stdout
    # and the faulty leg of run 1 against the clean one of run 2: different, on numbers
    d = tandem("compare", f"{f1}:eps", f"{f2}:engine", "--catalog", none)
    assert d.returncode == 3 and verdict_of(d.stdout).startswith("different: "), verdict_of(d.stdout)


def test_a_leg_compared_with_itself_is_refused(two_runs):
    f1 = two_runs["runs"][0][1]
    for a, b in ((f"{f1}:engine", f"{f1}:engine"), (f"{f1}/run.h5:engine", f"{f1}:engine")):
        p = tandem("compare", a, b)
        assert p.returncode == 2, (p.returncode, p.stdout[-500:], p.stderr[-500:])
        assert "a leg equals itself by construction" in p.stderr, p.stderr
