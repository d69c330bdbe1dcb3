"""`tandem faults` end to end on a small experiment (docs/faults.md): the measured matrix for
a fast subset of the catalogue, every row checked against run.h5's series read with h5py (the oracle:
the legs' own recorded numbers, not the matrix code); the report calls every faulty pair `different`
with the first update, the effect size and the localised point; no faults => the same numbers as a
plain `tandem run`; a fault that cannot apply is a `not applicable` row (no leg, exit 0) and a runtime
fault the gate misses is `not caught`; a fault set in the experiment file is recorded in run.h5 and
the catalog and leads the report with "FAULT INJECTED"."""
import json
import os
import sqlite3
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner"))
from runner_fixture import TANDEM, first_optimizer_off, h5_series, small_experiment  # noqa: E402

# The subset: at least one fault per level (L1, L2, L3, L4, gate), each caught where docs/faults.md says.
EXPECTED = {
    "rope-theta": {"L1", "L4"},
    "qk-norm-skipped": {"L1", "L4"},
    "template-chatml": {"L1", "L3", "L4"},
    "boundary-late": {"L1", "L3", "L4"},
    # L2 at once; its effect on held-out CE (~2e-6 relative) is below that bound, but the pre-clip grad
    # norm at update 0 is beyond its own (the per-update series judge): L4 too
    "bf16-truncation": {"L2", "L4"},
    "lora-b-grad-transposed": {"L4"},
    "eval-without-adapter": {"L4"},
    "adamw-no-bias-correction": {"L4"},
    "warmup-off-by-one": {"L4"},
    "slow-after-eval": {"gate"},
}
LEVELS = ["L1", "L2", "L3", "L4", "gate"]


def experiment(tmp, name, updates=8, **changes):
    """clinical-tiny cut to 8 updates; evaluations at 0, 3, 6, 8 (so the slow update after the evaluation
    at 6 has the gate's 5 updates of history); fingerprints of updates 0 and 1 (for the localised point)."""
    path = small_experiment(tmp, name, **changes)
    with open(path) as f:
        spec = json.load(f)
    spec["batch"]["max_updates"] = updates
    spec["eval"] = {"interval": 3, "prefix_size": 8}
    spec["checkpoint"] = {"interval": 4}
    spec.setdefault("observe", {"updates": [0, 1]})
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def only_folder(out):
    d = [os.path.join(out, x) for x in os.listdir(out)]
    assert len(d) == 1, d
    return d[0]


def h5_attrs(folder, path):
    import h5py

    with h5py.File(os.path.join(folder, "run.h5"), "r") as f:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f[path].attrs.items()}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("faults"))
    spec = experiment(tmp, "faults-small")
    out, db = os.path.join(tmp, "runs"), os.path.join(tmp, "tandem.db")
    # slow-after-eval at 15x: the small experiment's updates are short, so the leg's per-update overhead
    # (batching, events) dilutes the trainer's slowdown; clinical-tiny uses the catalogue's 7x
    faults = ",".join(f + "=15" if f == "slow-after-eval" else f for f in EXPECTED)
    p = subprocess.run([TANDEM, "faults", spec, "--faults", faults, "--jobs", "2", "--threads", "2",
                        "--no-probe", "--out", out, "--catalog", db, "--format", "csv"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    folder = only_folder(out)
    import h5py

    with h5py.File(os.path.join(folder, "run.h5"), "r") as f:
        m = json.loads(f["faults"]["matrix"][()].decode() if isinstance(f["faults"]["matrix"][()], bytes)
                       else f["faults"]["matrix"][()])
    return {"folder": folder, "db": db, "stdout": p.stdout, "matrix": m, "series": h5_series(folder), "spec": spec,
            "tmp": tmp}


def ratio_bound(u, k):
    return k * 2.0 ** -23 * 1.03 ** 3 * 128 ** 0.5 * (1 + u) ** 0.5


def first_different(leg, ref, optimizer_off=None):
    """The oracle of L4's first update, from the two legs' recorded series and (optimizer_off:
    first_optimizer_off of the two legs) their replayed optimizer steps."""
    firsts = [] if optimizer_off is None else [optimizer_off]
    for u, a, b in zip(ref["eval_update"], leg["heldout_ce"], ref["heldout_ce"]):
        if abs(a - b) / abs(b) > ratio_bound(u, 2.0):
            firsts.append(u)
            break
    for name, k in (("loss", 3.0), ("grad_norm", 28.0)):
        for u, a, b in zip(ref["update"], leg[name], ref[name]):
            if abs(a - b) / abs(b) > ratio_bound(u, k):
                firsts.append(u)
                break
    for u, a, b in zip(ref["update"], leg["lr"], ref["lr"]):
        if abs(a - b) > 4 * 2.0 ** -23 * max(abs(b), 1e-6 * 1e-4):
            firsts.append(u)
            break
    return min(firsts) if firsts else None


def row(m, fault):
    return next(r for r in m["rows"] if r["fault"] == fault)


def fired(r):
    return {level for level, u in r["first_update"].items() if u is not None}


def test_each_fault_is_caught_by_the_levels_docs_say(matrix):
    m = matrix["matrix"]
    assert [r["fault"] for r in m["rows"]] == list(EXPECTED)
    assert fired(m["clean"]) == set(), m["clean"]
    for fault, levels in EXPECTED.items():
        r = row(m, fault)
        assert r["status"] == "finished", r
        assert fired(r) == levels, (fault, r)
        for lv in {"L1", "L2", "L3"} & levels:
            assert r["first_update"][lv] == 0
    assert row(m, "slow-after-eval")["flags"] == ["step-time"]


def test_rows_agree_with_the_recorded_series(matrix):
    """The matrix's numbers recomputed from the legs' series in run.h5 (h5py)."""
    m, s = matrix["matrix"], matrix["series"]
    ref = s["reference"]
    assert ref["eval_update"] == [0, 3, 6, 8]
    for r in [m["clean"]] + m["rows"]:
        leg = s[r["leg"]]
        assert leg["eval_update"] == ref["eval_update"]
        assert r["end_update"] == 8
        # one subtraction of two CE values: within one ulp of the larger operand
        one_ulp = sys.float_info.epsilon * max(abs(leg["heldout_ce"][-1]), abs(ref["heldout_ce"][-1]))
        assert r["ce_diff_abs"] == pytest.approx(leg["heldout_ce"][-1] - ref["heldout_ce"][-1], rel=1e-12, abs=one_ulp)
        if r["fault"]:
            clean_diff = abs(m["clean"]["ce_diff_abs"])
            assert r["ce_diff_clean_units"] == pytest.approx(r["ce_diff_abs"] / clean_diff, rel=1e-9)
        # L1 from the series: the initial held-out CE's relative difference against 1e-5
        l1_rel = abs(leg["heldout_ce"][0] - ref["heldout_ce"][0]) / abs(ref["heldout_ce"][0])
        assert (l1_rel > 1e-5) == ("L1" in fired(r)), (r["fault"], l1_rel)
        # L4: the first update at which the pair is different (docs/thresholds.md): a held-out CE beyond
        # the float32 error-model bound k eps32 C^(L+1) sqrt(S) sqrt(1+u) (k = 2, C 1.03, L 2 layers, S =
        # max_len 128), a training loss or pre-clip grad norm beyond its own bound (k 3 and 28), or an lr
        # off the schedule (4 float32 ulp; the schedule: the reference leg's own, PyTorch's LambdaLR)
        # or a replayed optimizer step over its few-ulp bound (docs/thresholds.md "The optimizer step")
        first = first_different(leg, ref, first_optimizer_off(matrix["folder"], r["leg"], "reference"))
        assert first == r["first_update"]["L4"], (r["fault"], first, r["first_update"])
    # the adapter faults move nothing at update 0 (B = 0): the first evaluation equals the clean engine's
    for fault in ("lora-b-grad-transposed", "adamw-no-bias-correction", "warmup-off-by-one", "eval-without-adapter"):
        assert s["fault-" + fault]["heldout_ce"][0] == s["engine"]["heldout_ce"][0], fault
    # evaluation without the adapter: a flat held-out curve (paper fault 17), training untouched
    ev = s["fault-eval-without-adapter"]
    assert len(set(ev["heldout_ce"])) == 1
    assert ev["loss"] == s["engine"]["loss"]
    # the runtime fault changes no number at all
    slow = s["fault-slow-after-eval"]
    for k in ("loss", "grad_norm", "lr", "heldout_ce"):
        assert slow[k] == s["engine"][k], k


def test_the_report_calls_every_faulty_pair_different_with_its_first_update_and_localised_point(matrix):
    """A paired pair beyond a bound is `different` (exit 3), never passed; the reason names the
    level and the first update, says that no envelope sized the effect here (test_envelope.py has the
    run with one), and ends with the localised point (the experiment records fingerprints)."""
    p = subprocess.run([TANDEM, "report", matrix["folder"], "--catalog", os.path.join(matrix["tmp"], "none.db")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, p.stdout[-2000:]
    reasons = {}
    for ln in p.stdout.splitlines():
        for word in ("different: ", "equivalent: "):
            if ln.startswith("  - " + word):
                rest = ln[len("  - " + word):]
                pair = rest.split(": ", 1)[0].split(" ")[-1]  # "L1 a~b" or "a~b"
                reasons[pair.split("~")[0]] = word + rest
    for fault, levels in EXPECTED.items():
        reason = reasons.get("fault-" + fault, "")
        if fault == "slow-after-eval":  # a runtime fault changes no number: the pair is equivalent, the gate caught it
            assert reason == "" or reason.startswith("equivalent: "), reason
            continue
        first = min(u for lv, u in row(matrix["matrix"], fault)["first_update"].items() if u is not None and lv != "gate")
        assert reason.startswith("different: "), (fault, reason)
        if levels & {"L1", "L2", "L3"}:
            assert reason.startswith(f"different: {sorted(levels)[0]} fault-{fault}~reference: "), (fault, reason)
        else:
            assert reason.startswith(f"different: fault-{fault}~reference: L4 ") and f"at update {first}" in reason, (fault, reason)
            assert "; effect size: no seed envelope" in reason, (fault, reason)
        assert "; localised: " in reason, (fault, reason)
    # the L4 faults that act on training are localised to a point of update 0 or 1
    for fault in ("lora-b-grad-transposed", "adamw-no-bias-correction", "warmup-off-by-one"):
        assert "; localised: first divergence (fault-" + fault + " vs reference): update " in reasons["fault-" + fault], fault


def test_inapplicable_faults_are_rows_not_legs_and_a_missed_runtime_fault_is_not_caught(tmp_path):
    """adapter-wrong-projection cannot apply without LoRA on k_proj and v_proj: a `not applicable` row
    with the reason, checked before any leg starts, and the command exits 0; slow-after-eval on 6
    updates with evaluations at 3 (fewer than the gate's 5 updates of history before the slow one) is
    `not caught` — never "no effect": its only effect is time."""
    tmp = str(tmp_path)
    with open(small_experiment(tmp, "probe")) as f:
        lora = json.load(f)["lora"]
    lora["targets"] = ["q_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    spec = experiment(tmp, "qo", updates=6, lora=lora, observe={"updates": []})
    out, db = os.path.join(tmp, "runs"), os.path.join(tmp, "tandem.db")
    p = subprocess.run([TANDEM, "faults", spec, "--faults", "adapter-wrong-projection,rope-theta", "--jobs", "2", "--threads",
                        "2", "--no-probe", "--out", out, "--catalog", db], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "fault adapter-wrong-projection: not applicable" in p.stderr
    assert "adapter-wrong-projection (not applicable)" in p.stdout, p.stdout
    assert "adapter-wrong-projection: not applicable to this experiment, no leg ran it: needs LoRA on both k_proj and v_proj" in p.stdout
    assert "1 of 1 faults caught by at least one level (0 not caught)" in p.stdout and "not counted: 1 not applicable" in p.stdout
    folder = only_folder(out)
    import h5py

    with h5py.File(os.path.join(folder, "run.h5"), "r") as f:
        assert sorted(f["legs"]) == ["engine", "fault-rope-theta", "reference"]  # no leg for the inapplicable fault
        m = json.loads(f["faults"]["matrix"][()])
    r = row(m, "adapter-wrong-projection")
    assert r["status"] == "not applicable" and fired(r) == set() and "k_proj" in r["not_applicable"], r
    # a runtime fault the gate cannot see on this experiment: not caught, exit 3
    out2 = os.path.join(tmp, "runs2")
    p = subprocess.run([TANDEM, "faults", spec, "--faults", "slow-after-eval", "--jobs", "2", "--threads", "2", "--no-probe",
                        "--out", out2, "--catalog", db], capture_output=True, text=True, timeout=900)
    assert p.returncode == 3, p.stdout[-3000:] + p.stderr[-3000:]
    assert "slow-after-eval (not caught)" in p.stdout and "no effect" not in p.stdout, p.stdout
    assert "0 of 1 faults caught by at least one level (1 not caught)" in p.stdout, p.stdout


def test_matrix_run_is_marked_and_catalogued(matrix):
    folder, db = matrix["folder"], matrix["db"]
    out = matrix["stdout"]
    assert out.startswith("# FAULT INJECTED: fault-rope-theta: rope-theta=100; "), out[:300]
    assert "fault,size,L1,L2,L3,L4,gate,note,expected" in out
    attrs = h5_attrs(folder, "faults")
    assert attrs["reference_leg"] == "reference" and attrs["clean_leg"] == "engine"
    assert attrs["caught"] == len(EXPECTED)
    assert h5_attrs(folder, "legs/fault-rope-theta")["faults"] == "rope-theta=100"
    assert "faults" not in h5_attrs(folder, "legs/engine")
    g = h5_attrs(folder, "faults/rope-theta")
    assert g["first_update_L1"] == 0 and g["first_update_L2"] == -1
    con = sqlite3.connect(db)
    (run_faults,) = con.execute("SELECT faults FROM runs").fetchone()
    assert run_faults.startswith("FAULT INJECTED: ")
    legs = dict(con.execute("SELECT name, faults FROM legs"))
    assert legs["engine"] == "" and legs["reference"] == "" and legs["fault-bf16-truncation"] == "bf16-truncation=16"
    rows = con.execute("SELECT fault, caught_by, first_update_l4 FROM fault_results ORDER BY position").fetchall()
    assert [r[0] for r in rows] == list(EXPECTED)
    assert dict((r[0], set(r[1].split())) for r in rows) == EXPECTED
    # the report of the run folder leads with the banner, in every format
    for fmt, prefix in (("text", "FAULT INJECTED"), ("md", "**FAULT INJECTED"), ("csv", "# FAULT INJECTED"),
                        ("tex", "% FAULT INJECTED")):
        p = subprocess.run([TANDEM, "report", folder, "--format", fmt], capture_output=True, text=True, timeout=120)
        assert p.stdout.startswith(prefix), (fmt, p.stdout[:200], p.stderr[-500:])
        assert "passed" not in p.stdout.split("\n")[0]


def test_workbench_draws_the_heatmap(matrix):
    """tandem-workbench opens the faults run: the Faults page and the heatmap export (SVG, by suffix)."""
    workbench = os.path.join(os.environ.get("TANDEM_BINARY_DIR", "build"), "app", "workbench", "tandem-workbench")
    if not os.path.exists(workbench):
        pytest.skip("built without the GUI (TANDEM_BUILD_GUI=OFF)")
    shots = os.path.join(matrix["tmp"], "shots")
    svg = os.path.join(shots, "heatmap.svg")
    p = subprocess.run([workbench, matrix["folder"], "--screenshot-dir", shots, "--export-heatmap", svg],
                       capture_output=True, text=True, timeout=900, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert os.path.exists(os.path.join(shots, "faults.png"))
    with open(svg) as f:
        text = f.read()
    for fault in EXPECTED:
        assert fault in text, fault


def test_clean_rows_give_the_numbers_of_a_plain_run(matrix):
    """The matrix's clean pair (reference and clean engine legs, run beside ten faulty legs) computes
    exactly what a plain `tandem run` of the same experiment computes: every series, bit for bit."""
    tmp = matrix["tmp"]
    out = os.path.join(tmp, "plain")
    p = subprocess.run([TANDEM, "run", matrix["spec"], "--legs", "engine,reference", "--threads", "2", "--no-probe",
                        "--out", out, "--catalog", os.path.join(tmp, "plain.db")], capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "FAULT INJECTED" not in p.stdout + p.stderr
    plain = h5_series(only_folder(out))
    for leg in ("engine", "reference"):
        assert matrix["series"][leg] == plain[leg], leg
    # and the clean row's numbers are the plain run's
    clean = matrix["matrix"]["clean"]
    assert clean["ce_diff_abs"] == plain["engine"]["heldout_ce"][-1] - plain["reference"]["heldout_ce"][-1]


def test_experiment_file_faults_are_recorded_and_bannered(tmp_path):
    tmp = str(tmp_path)
    spec = experiment(tmp, "faults-file", legs={"clean": {"implementation": "engine"},
                                                 "faulty": {"implementation": "engine", "faults": ["qk-norm-skipped"]}})
    out, db = os.path.join(tmp, "runs"), os.path.join(tmp, "tandem.db")
    p = subprocess.run([TANDEM, "run", spec, "--threads", "2", "--no-probe", "--out", out, "--catalog", db],
                       capture_output=True, text=True, timeout=600)
    folder = only_folder(out)
    report = p.stdout[p.stdout.find("FAULT INJECTED"):] if "FAULT INJECTED" in p.stdout else ""
    assert report.startswith("FAULT INJECTED: faulty: qk-norm-skipped"), p.stdout[-2000:]
    assert h5_attrs(folder, "legs/faulty")["faults"] == "qk-norm-skipped"
    con = sqlite3.connect(db)
    assert con.execute("SELECT faults FROM runs").fetchone()[0] == "FAULT INJECTED: faulty: qk-norm-skipped"
    assert dict(con.execute("SELECT name, faults FROM legs")) == {"clean": "", "faulty": "qk-norm-skipped"}
    s = h5_series(folder)
    assert s["faulty"]["heldout_ce"][0] != s["clean"]["heldout_ce"][0]  # the switch reached the leg
    # a fault named in the file that does not exist: one clear line naming the field
    bad = experiment(tmp, "faults-bad", faults=["rope-thetta"])
    p = subprocess.run([TANDEM, "run", bad, "--no-probe", "--out", os.path.join(tmp, "bad"), "--catalog", db],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "field faults: unknown fault 'rope-thetta'" in p.stderr, p.stderr
