"""The hostile-input harness (docs/fuzzing.md): run `tandem` on one bad input and classify
what it did. Importable, so other suites in this folder (the runner-kill cases) reuse it.

A case is a command line plus the files it needs; its outcome is exactly one of
  clear     exit 1, 2 or 3 as the case expects, and one output line names the file / field (the
            case's `expect` fragment) -- the only acceptable answer to a bad input;
  internal  the output says "internal error" (an exception tandem did not turn into a message);
  crash     killed by a signal (segfault, abort, ...) or timed out;
  silent    exit 0: the bad input was accepted;
  unclear   anything else (another exit code, no line naming the file / field, a Python traceback).

`run_cases` prints one line per case that is not clear, then the totals
  "N bad inputs, N clear errors, 0 internal errors, 0 crashes, 0 silent acceptances"
and returns True when every case was a clear error.
"""
import concurrent.futures
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Callable, Optional, Union

SOURCE_DIR = os.path.abspath(os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))
BINARY_DIR = os.path.abspath(os.environ.get("TANDEM_BINARY_DIR", os.path.join(SOURCE_DIR, "build")))
TANDEM = os.environ.get("TANDEM_BIN", os.path.join(BINARY_DIR, "app", "tandem"))
SHARED = os.path.abspath(os.environ.get("TANDEM_ASSETS", os.path.join(SOURCE_DIR, "..", "shared")))
TOKENIZER_DIR = os.path.join(SHARED, "assets", "qwen3-tokenizer")
CORPORA_DIR = os.path.join(SHARED, "data", "corpora")


# A valid experiment that runs in seconds (the engine leg alone on a tiny model): the base every
# bad-input, full-disk, never-started and resume case changes one thing in.
TINY_EXPERIMENT = {
    "name": "faults", "seed": 7, "model": {"config": "tiny"},
    "lora": {"rank": 2, "alpha": 4, "dropout": 0.0, "targets": ["q_proj", "v_proj"]},
    "optimizer": {"name": "adamw", "lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
    "schedule": {"name": "cosine_with_warmup", "warmup_fraction": 0.0},
    "clip": 1.0,
    "batch": {"micro_batch": 1, "accumulation": 1, "epochs": 1, "max_updates": 2},
    "sequence": {"max_len": 64},
    "corpus": {"sources": ["medmcqa"], "heldout_fraction": 0.2, "max_records_per_source": 12},
    "eval": {"interval": 1, "prefix_size": 2},
    "checkpoint": {"interval": 1},
    "l3_records": 2,
}


@dataclasses.dataclass
class Case:
    name: str                        # unique, says what is wrong ("experiment: optimizer.lr null")
    args: list                       # argv after `tandem`; placeholders below are substituted
    expect_rc: int = 1
    expect: str = ""                 # fragment one output line must contain (placeholders substituted)
    files: dict = dataclasses.field(default_factory=dict)  # relative path -> str | bytes, in the case folder
    setup: Optional[Callable] = None  # setup(case_dir) for copies, symlinks, truncations
    stdin: Union[bytes, str, None] = None
    check: Optional[Callable] = None  # check(result) -> None or a problem (e.g. "--keep-going stopped")
    timeout: float = 180
    env: dict = dataclasses.field(default_factory=dict)
    cwd: str = ""                    # the working folder, relative to the case folder (default: the case folder)


@dataclasses.dataclass
class Result:
    case: Case
    rc: int
    stdout: str
    stderr: str
    kind: str = ""      # clear | internal | crash | silent | unclear
    problem: str = ""
    seconds: float = 0.0
    case_dir: str = ""  # the case's folder (a check may compare files in it; removed after the case)


# Placeholders a suite adds (e.g. "{fixture}": a run folder it prepared once).
PLACEHOLDERS = {}


def substitute(text, case_dir):
    """{dir} the case's own folder; {shared} {tok} {corpora} the shared assets; {src} the checkout;
    plus the suite's PLACEHOLDERS."""
    text = (text.replace("{dir}", case_dir).replace("{shared}", SHARED).replace("{tok}", TOKENIZER_DIR)
            .replace("{corpora}", CORPORA_DIR).replace("{src}", SOURCE_DIR))
    for k, v in PLACEHOLDERS.items():
        text = text.replace(k, v)
    return text


def classify(case, rc, out, err, case_dir):
    text = out + "\n" + err
    if rc < 0 or rc in (128 + signal.SIGSEGV, 128 + signal.SIGABRT, 128 + signal.SIGBUS, 128 + signal.SIGKILL):
        return "crash", f"killed by signal {-rc if rc < 0 else rc - 128}"
    if "internal error" in text:
        return "internal", next(l for l in text.splitlines() if "internal error" in l)
    if rc == 0:
        return "silent", "exit 0"
    if "Traceback (most recent call last)" in text:
        return "unclear", "a Python traceback reached the user"
    # A library's own words are not a message for a user: nlohmann's "[json.exception.*]",
    # HDF5's error stack ("H5E..."), a bare exception's what().
    for leak in ("json.exception", "Traceback", "what()", "H5E"):
        if leak in text:
            return "unclear", f"library text {leak!r} reached the user"
    if rc != case.expect_rc:
        return "unclear", f"exit {rc}, expected {case.expect_rc}"
    fragment = substitute(case.expect, case_dir)
    if not any(fragment in line for line in text.splitlines()):
        return "unclear", f"no output line contains {fragment!r}"
    if case.check:
        problem = case.check(Result(case, rc, out, err, case_dir=case_dir))
        if problem:
            return "unclear", problem
    return "clear", ""


def run_case(case, keep=False):
    case_dir = tempfile.mkdtemp(prefix="tandem-faults-")
    try:
        for rel, content in case.files.items():
            path = os.path.join(case_dir, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:  # text content gets the placeholders too
                f.write(substitute(content, case_dir).encode() if isinstance(content, str) else content)
        if case.setup:
            case.setup(case_dir)
        argv = [TANDEM] + [substitute(a, case_dir) for a in case.args]
        stdin = case.stdin.encode() if isinstance(case.stdin, str) else case.stdin
        env = dict(os.environ, **{k: substitute(v, case_dir) for k, v in case.env.items()})
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, input=stdin if stdin is not None else b"", capture_output=True,
                               cwd=os.path.join(case_dir, case.cwd), timeout=case.timeout, env=env)
            rc, out, err = p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as e:
            r = Result(case, -1, (e.stdout or b"").decode("utf-8", "replace"), (e.stderr or b"").decode("utf-8", "replace"))
            r.kind, r.problem = "crash", f"timed out after {case.timeout} s"
            return r
        r = Result(case, rc, out, err, seconds=time.monotonic() - t0, case_dir=case_dir)
        r.kind, r.problem = classify(case, rc, out, err, case_dir)
        return r
    finally:
        unmount_below(case_dir)  # a case's small filesystem (a full disk), before its folder goes
        if not keep:
            for root, dirs, _ in os.walk(case_dir):  # a case may leave read-only folders
                for x in dirs:
                    os.chmod(os.path.join(root, x), 0o755)
            shutil.rmtree(case_dir, ignore_errors=True)


def unmount_below(folder):
    """Unmounts every filesystem mounted at or below `folder` (deepest first)."""
    try:
        with open("/proc/mounts") as f:
            points = [line.split()[1].replace("\\040", " ") for line in f]
    except OSError:
        return
    for p in sorted((p for p in points if p == folder or p.startswith(folder + "/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", p], capture_output=True)


def small_filesystem(path, size="256k", fill=True):
    """A tmpfs of `size` mounted at `path` (created), filled up unless fill=False: a full disk for the
    output of a case. Needs root; returns False (and mounts nothing) where mounting is not allowed."""
    os.makedirs(path, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True).returncode != 0:
        return False
    if fill:
        try:
            with open(os.path.join(path, "filler"), "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
        except OSError:
            pass
    return True


def totals_line(results):
    n = len(results)
    count = lambda k: sum(1 for r in results if r.kind == k)  # noqa: E731
    line = (f"{n} bad inputs, {count('clear')} clear errors, {count('internal')} internal errors, "
            f"{count('crash')} crashes, {count('silent')} silent acceptances")
    if count("unclear"):
        line += f", {count('unclear')} unclear errors"
    return line


def run_cases(cases, jobs=2, verbose=False, out=sys.stdout):
    names = [c.name for c in cases]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError(f"case names repeated: {sorted(duplicates)}")
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(run_case, cases))
    for r in results:
        if r.kind != "clear" or verbose:
            first = next((l for l in (r.stderr + "\n" + r.stdout).splitlines() if l.strip()), "")
            print(f"[{r.kind:8}] {r.case.name}: {r.problem or 'ok'} (exit {r.rc}; {r.seconds:.1f} s) :: {first[:300]}", file=out)
    print(totals_line(results), file=out)
    return results, all(r.kind == "clear" for r in results)


# ---- helpers for building bad inputs -----------------------------------------------------------

def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def link_tree(src, dst, copy_below=1 << 20):
    """A cheap writable copy of a folder: files under `copy_below` bytes are copied (so a case may
    corrupt them), larger ones are symlinked (read-only use)."""
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for f in files:
            s, d = os.path.join(root, f), os.path.join(dst, rel, f)
            if os.path.islink(s) or os.path.getsize(s) >= copy_below:
                os.symlink(os.path.realpath(s), d)
            else:
                shutil.copy2(s, d)


def asset_root_with(case_dir, tokenizer_json=None, tokenizer_config=None, corpora=True):
    """An asset folder laid out like ../shared in case_dir/assets-root: the shipped tokenizer files
    unless replaced (bytes), the shipped corpora linked unless corpora=False."""
    root = os.path.join(case_dir, "assets-root")
    tok = os.path.join(root, "assets", "qwen3-tokenizer")
    os.makedirs(tok, exist_ok=True)
    for name, content in (("tokenizer.json", tokenizer_json), ("tokenizer_config.json", tokenizer_config)):
        dst = os.path.join(tok, name)
        if content is None:
            os.symlink(os.path.join(TOKENIZER_DIR, name), dst)
        else:
            with open(dst, "wb") as f:
                f.write(content)
    if corpora:
        os.makedirs(os.path.join(root, "data"), exist_ok=True)
        os.symlink(CORPORA_DIR, os.path.join(root, "data", "corpora"))
    # The main job's pretrained base (doctor checks it too): linked, so each case has one MISSING line.
    os.symlink(os.path.join(SHARED, "assets", "qwen3-tiny-clinical"), os.path.join(root, "assets", "qwen3-tiny-clinical"))
    return root


def fake_reference_env(case_dir):
    """A stand-in for the reference environment that `tandem doctor` inspects: a `python` that
    prints the versions pinned in experiments/legs/requirements.txt, so a doctor case takes
    milliseconds and its only MISSING line is the one the case provokes. Returns the folder, for
    TANDEM_REFENV."""
    pins = {}
    with open(os.path.join(SOURCE_DIR, "experiments", "legs", "requirements.txt")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "==" in line:
                name, version = line.split("==", 1)
                pins[name.strip()] = version.strip()
    versions = {m: pins.get(m, "0.0") for m in ("torch", "transformers", "peft", "safetensors", "tokenizers", "jinja2",
                                                "h5py", "numpy")}
    env = os.path.join(case_dir, "fake-refenv")
    os.makedirs(os.path.join(env, "bin"), exist_ok=True)
    python = os.path.join(env, "bin", "python")
    with open(python, "w") as f:
        f.write("#!/bin/sh\necho '" + json.dumps(versions) + "'\n")
    os.chmod(python, 0o755)
    return env
