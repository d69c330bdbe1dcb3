"""docs/legs.md "Upgrade check", followed as written: every ```sh block of the section is run, in order,
with bash in a fresh folder that holds the checkout's `experiments`, `examples`, `sdk` and the build
(`build`), as a user in a checkout would. The first block makes an environment with the reference
environment's own transformers (pip installs nothing: no download) and runs two reference legs, one
in it: `equivalent`, every recorded series equal bit for bit (h5py), the Stacks table naming the
version importlib.metadata gives. The second runs the paired Trainer example in both environments:
the run passes, and legs.json records the interpreter of each leg."""
import importlib.metadata
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runner"))
from runner_fixture import SOURCE_DIR, h5_series, verdict_of  # noqa: E402

BINARY_DIR = os.environ.get("TANDEM_BINARY_DIR", os.path.join(SOURCE_DIR, "build"))
REFENV = os.path.dirname(os.path.dirname(sys.executable))  # the tests run with the reference environment's python


def section_blocks():
    text = open(os.path.join(SOURCE_DIR, "docs", "legs.md")).read()
    start = text.index("\n## Upgrade check")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


def run_block(cwd, block):
    return subprocess.run(["bash", "-e", "-c", block], cwd=cwd, capture_output=True, text=True, timeout=2400)


def only_run(cwd, prefix):
    runs = [d for d in os.listdir(os.path.join(cwd, "runs")) if d.startswith(prefix + "-")]
    assert len(runs) == 1, runs
    return os.path.join(cwd, "runs", runs[0])


def test_upgrade_check_as_written(tmp_path):
    cwd = str(tmp_path)
    for name in ("experiments", "examples", "sdk"):
        os.symlink(os.path.join(SOURCE_DIR, name), os.path.join(cwd, name))
    os.symlink(BINARY_DIR, os.path.join(cwd, "build"))
    blocks = section_blocks()
    assert len(blocks) == 2, blocks
    assert "build/app/tandem env create" in blocks[0] and "reference@" in blocks[0]

    # The reference under two environments: the null check
    p = run_block(cwd, blocks[0])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    env = os.path.join(cwd, "envs", "transformers-5.24.0")
    version = importlib.metadata.version("transformers")
    assert version == "5.24.0"  # the doc's null check names the reference environment's own version
    record = json.load(open(os.path.join(env, "tandem-env.json")))
    assert record["installed"] == ["transformers 5.24.0"] and record["base_python"] == os.path.join(REFENV, "bin", "python")
    verdict = verdict_of(p.stdout)
    assert verdict.startswith("equivalent: ") and "stacks differ" not in verdict, verdict
    folder = only_run(cwd, "clinical-tiny")
    legs = {e["name"]: e for e in json.load(open(os.path.join(folder, "legs.json")))}
    assert legs["reference-transformers-5.24.0"]["python"] == os.path.join(env, "bin", "python")
    s = h5_series(folder)
    a, b = s["reference"], s["reference-transformers-5.24.0"]
    assert len(a["update"]) == 30 and a["update"] == b["update"]
    for k in ("loss", "grad_norm", "lr", "heldout_ce"):
        assert a[k] == b[k], k
    stacks = [l for l in p.stdout.splitlines() if re.match(r"^\s*transformers\s", l)]
    assert stacks and stacks[-1].split()[1:3] == [version, version], stacks

    # Your own paired Trainer leg under two environments
    p = run_block(cwd, blocks[1])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert verdict_of(p.stdout).startswith("equivalent: "), verdict_of(p.stdout)
    folder = only_run(cwd, "upgrade-trainer")
    legs = {e["name"]: e for e in json.load(open(os.path.join(folder, "legs.json")))}
    assert legs["trainer-new"]["python"] == os.path.join(env, "bin", "python") and "python" not in legs["trainer"]
    assert legs["trainer-new"]["command"][0] == "{python}"
    hello = {}
    for leg in ("trainer", "trainer-new"):
        for line in open(os.path.join(folder, "legs", leg, "events.jsonl")):
            e = json.loads(line)
            if e.get("event") == "hello":
                hello[leg] = e["versions"]
    assert hello["trainer"]["transformers"] == hello["trainer-new"]["transformers"] == version
    assert hello["trainer"]["peft"] == importlib.metadata.version("peft")
