"""Legs in other Python environments (docs/legs.md "Upgrade check").

- Two reference legs in the same environment (the second named as `reference@ENV`): `equivalent`, every
  recorded series equal bit for bit (h5py), the Stacks table with the versions this interpreter's
  importlib.metadata gives and no difference marked.
- An interpreter that does not exist, and an environment without peft (the reference environment's
  site-packages behind a folder of links that leaves peft out): one line each on stderr, naming the leg,
  the interpreter and (for the package) requirements.txt's pin, exit 1, and no run folder.
- An overlay environment (`tandem env create`, no packages named: nothing downloaded) whose
  transformers is patched at import time: Qwen3RMSNorm's epsilon x10 and its __version__ marked
  "+rmsnorm.eps.x10". The Stacks table marks transformers, the verdict is `different` and names the
  versions, and the localised point is layer 0's input_norm at update 0 (the first op the patched norm
  computes), as the engine's own rms_norm_eps_factor fault is localised (docs/observables.md).
"""
import importlib.metadata
import json
import os
import re
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner"))
from runner_fixture import SOURCE_DIR, TANDEM, cut_spec, h5_series  # noqa: E402
from runner_fixture import verdict_of as text_verdict_of  # noqa: E402

REFENV = os.path.dirname(os.path.dirname(sys.executable))  # the tests run with the reference environment's python

# Applied in the overlay's site-packages by a .pth line: a locally patched transformers, as a user's
# edited copy or a release with one changed default would be.
PATCH = '''
import importlib.abc
import sys

FACTOR = 10.0


class _PatchTransformers(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.todo = {"transformers", "transformers.models.qwen3.modeling_qwen3"}

    def find_spec(self, name, path, target=None):
        # every lookup is patched: torch and peft look transformers up (find_spec) before importing it
        if name not in self.todo:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            if name == "transformers":
                # transformers puts a lazy module in its place in sys.modules, and importing peft makes
                # another one: mark every lazy transformers module, now and later
                lazy = sys.modules["transformers.utils.import_utils"]._LazyModule
                lazy_init = lazy.__init__

                def marked(self, module_name, *a, **k):
                    lazy_init(self, module_name, *a, **k)
                    if module_name == "transformers" and not self.__version__.endswith("+rmsnorm.eps.x10"):
                        self.__version__ = self.__version__ + "+rmsnorm.eps.x10"

                lazy.__init__ = marked
                for m in (module, sys.modules.get(name, module)):
                    if not m.__version__.endswith("+rmsnorm.eps.x10"):
                        m.__version__ = m.__version__ + "+rmsnorm.eps.x10"
                return
            cls = module.Qwen3RMSNorm
            init = cls.__init__

            def __init__(self, hidden_size, eps=1e-6):
                init(self, hidden_size, eps=eps * FACTOR)

            cls.__init__ = __init__

        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _PatchTransformers())
'''


def experiment(tmp, name):
    spec = cut_spec("clinical-tiny-random.json", name, 3, 1, 0, 40, 128, l3_records=8)
    spec["observe"] = {"updates": [0, 1]}
    path = os.path.join(tmp, name + ".json")
    with open(path, "w") as f:
        json.dump(spec, f)
    return path


def tandem_run(tmp, path, legs):
    return subprocess.run([TANDEM, "run", path, "--threads", "2", "--no-probe", "--out", os.path.join(tmp, "runs"),
                           "--catalog", os.path.join(tmp, "tandem.db"), "--legs", legs, "--format", "md"],
                          capture_output=True, text=True, timeout=1500)


def verdict_of(report):
    """The verdict line of a Markdown report (printed in bold)."""
    return text_verdict_of("\n".join(l.strip("*") for l in report.splitlines()))


def run_folder(tmp):
    runs = os.path.join(tmp, "runs")
    folders = sorted(os.listdir(runs)) if os.path.isdir(runs) else []
    assert len(folders) == 1, folders
    return os.path.join(runs, folders[0])


def stacks_rows(report):
    """The Stacks table of a Markdown report: package -> cells (one per leg, then `differs`)."""
    lines = report.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("Stacks") or "Stacks:" in l)
    rows = {}
    for l in lines[start + 1:]:
        if not l.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        if cells[0] in ("package", "") or set(cells[0]) <= set("-: "):
            continue
        rows[cells[0]] = cells[1:]
    return rows


def installed(name):
    return importlib.metadata.version(name)


def test_same_environment_is_equivalent_bit_for_bit(tmp_path):
    tmp = str(tmp_path)
    p = tandem_run(tmp, experiment(tmp, "same-env"), "reference,reference@" + REFENV)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    verdict = verdict_of(p.stdout)
    assert verdict.startswith("equivalent: "), verdict
    assert "stacks differ" not in verdict
    folder = run_folder(tmp)
    # the second leg is named after its environment and ran its interpreter
    legs = {e["name"]: e for e in json.load(open(os.path.join(folder, "legs.json")))}
    assert set(legs) == {"reference", "reference-refenv"}
    assert legs["reference-refenv"]["python"] == os.path.join(REFENV, "bin", "python")
    assert "python" not in legs["reference"]
    s = h5_series(folder)
    a, b = s["reference"], s["reference-refenv"]
    assert a["update"] == [0, 1, 2] and a["eval_update"] == [0, 1, 2, 3]
    for k in ("loss", "grad_norm", "lr", "tokens", "heldout_ce"):
        assert a[k] == b[k], (k, a[k], b[k])  # every paired difference exactly 0
    rows = stacks_rows(p.stdout)
    for package in ("torch", "transformers", "peft", "numpy", "tokenizers"):
        want = installed(package)
        assert rows[package][0].split("+")[0] == want and rows[package][1].split("+")[0] == want, (package, rows[package])
        assert rows[package][2] == "", rows[package]
    assert rows["python"][0] == rows["python"][1] == "%d.%d.%d" % sys.version_info[:3]


def test_missing_interpreter_one_line_no_run_folder(tmp_path):
    tmp = str(tmp_path)
    missing = os.path.join(tmp, "no-such-env")
    p = tandem_run(tmp, experiment(tmp, "no-python"), "reference,old=reference@" + missing)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "leg old" in lines[0] and "no Python interpreter at " + missing in lines[0], lines[0]
    assert not os.path.exists(os.path.join(tmp, "runs")) or not os.listdir(os.path.join(tmp, "runs"))


def test_missing_package_one_line_with_its_pin_no_run_folder(tmp_path):
    tmp = str(tmp_path)
    # The reference environment's site-packages, every entry but peft's, behind a venv's .pth
    site = next(p for p in sys.path if p.startswith(REFENV) and p.endswith("site-packages"))
    partial = os.path.join(tmp, "no-peft-site")
    os.makedirs(partial)
    for entry in os.listdir(site):
        if entry == "peft" or entry.startswith("peft-"):
            continue
        os.symlink(os.path.join(site, entry), os.path.join(partial, entry))
    env = os.path.join(tmp, "no-peft")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", env], check=True)
    own = subprocess.run([os.path.join(env, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(own, "base.pth"), "w") as f:
        f.write(partial + "\n")
    pin = next(l.split("==")[1].strip() for l in open(os.path.join(SOURCE_DIR, "experiments", "legs", "requirements.txt"))
               if l.startswith("peft=="))
    p = tandem_run(tmp, experiment(tmp, "no-peft"), "reference,reference@" + env)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tandem: error: leg reference-no-peft: " + os.path.join(env, "bin", "python") +
                               " has no package peft"), lines[0]
    assert "peft==" + pin in lines[0], lines[0]
    assert not os.path.exists(os.path.join(tmp, "runs")) or not os.listdir(os.path.join(tmp, "runs"))


def test_patched_overlay_is_different_and_localised_to_the_norm(tmp_path):
    tmp = str(tmp_path)
    env = os.path.join(tmp, "patched")
    made = subprocess.run([TANDEM, "env", "create", env], capture_output=True, text=True, timeout=900)
    assert made.returncode == 0, made.stdout + made.stderr
    record = json.load(open(os.path.join(env, "tandem-env.json")))
    assert record["with"] == [] and record["base_python"] == os.path.join(REFENV, "bin", "python")
    freeze = open(os.path.join(env, "tandem-freeze.txt")).read()
    # the overlay reuses the reference environment's packages: its freeze names the same versions
    for package in ("torch", "transformers", "peft"):
        assert re.search(r"(?im)^%s==%s$" % (package, re.escape(installed(package))), freeze), package
    own = subprocess.run([os.path.join(env, "bin", "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(own, "_rmsnorm_patch.py"), "w") as f:
        f.write(PATCH)
    with open(os.path.join(own, "_rmsnorm_patch.pth"), "w") as f:
        f.write("import _rmsnorm_patch\n")

    p = tandem_run(tmp, experiment(tmp, "patched"), "reference,patched=reference@" + env)
    assert p.returncode == 3, p.stdout[-3000:] + p.stderr[-3000:]
    verdict = verdict_of(p.stdout)
    version = installed("transformers")
    assert verdict.startswith("different: "), verdict
    # legs in name order: patched, reference
    assert verdict.endswith("; stacks differ: transformers %s+rmsnorm.eps.x10 (patched) -> %s (reference)" % (version, version)), verdict
    assert "update 0, micro-batch 0, layer 0, input_norm (forward)" in verdict.split("localised: ")[1], verdict
    rows = stacks_rows(p.stdout)
    assert rows["transformers"] == [version + "+rmsnorm.eps.x10", version, "differs"], rows["transformers"]
    for package in ("torch", "peft", "numpy", "tokenizers", "python"):
        assert rows[package][2] == "" and rows[package][0] == rows[package][1], (package, rows[package])
    loc = subprocess.run([TANDEM, "localise", run_folder(tmp), "--no-store"], capture_output=True, text=True, timeout=300)
    assert loc.returncode == 3, loc.stdout + loc.stderr
    marked = [l for l in loc.stdout.splitlines() if "<<" in l]
    assert len(marked) == 1 and re.search(r"\b0\b.*\binput_norm\b.*\bforward\b", marked[0]), loc.stdout
