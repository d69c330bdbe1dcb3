"""tandem_leg — write a tandem leg in Python (docs/legs.md).

A leg is a process that reads a run folder prepared by `tandem run` and reports the leg protocol
(docs/leg-protocol.md) as JSON Lines on stdout. This package reads the run folder, writes every
event checked against the protocol, computes L2 digests, and keeps checkpoints in the runner's
format — with the standard library only. `tandem_leg.hf.TandemCallback` turns a HuggingFace
`Trainer` run into a leg; `tandem_leg.sdk_leg` is the sdk-python leg (its own training loop over
the engine's C ABI).

    import tandem_leg
    args = tandem_leg.parse_leg_args()          # --run --leg --device --threads --resume
    run = tandem_leg.RunFolder(args.run)
    events = tandem_leg.EventWriter()
    events.emit("hello", implementation="my-stack", leg=args.leg, ...)
"""
import argparse
import array
import hashlib
import math
import os
import resource
import sys
import time

from .checkpoint import newest_valid_checkpoint, verify_checkpoint, write_checkpoint  # noqa: F401
from .protocol import (PROTOCOL_VERSION, EventWriter, ProtocolError, claim_stdout,  # noqa: F401
                       finite_or_none, validate_event)
from .run_folder import RunFolder, RunFolderError  # noqa: F401

__version__ = "0.1.0"


def stack_versions(device=None):
    """The hello event's `versions` of a Python leg: python, torch, transformers, peft, numpy and tokenizers
    (those importable), and CUDA and cuDNN when `device` is a GPU. The report's Stacks table compares them
    between legs, so a leg run in another environment says which versions it ran (docs/legs.md "Upgrade
    check"). Each package's own __version__, which a locally patched copy may mark (5.24.0+patch)."""
    import importlib
    import platform

    v = {"python": platform.python_version()}
    for name in ("torch", "transformers", "peft", "numpy", "tokenizers"):
        try:
            module = sys.modules.get(name) or importlib.import_module(name)
        except ImportError:
            continue
        v[name] = str(getattr(module, "__version__", "unknown"))
    if device is not None and str(device).startswith("cuda") and "torch" in sys.modules:
        torch = sys.modules["torch"]
        v["cuda"] = str(torch.version.cuda)
        v["cudnn"] = str(torch.backends.cudnn.version())
    return v


def parse_leg_args(argv=None, description="a tandem leg"):
    """The command line every leg accepts: --run RUN_DIR --leg NAME --device cpu|cuda:N [--threads N] [--resume]."""
    return leg_arg_parser(description).parse_args(argv)


def leg_arg_parser(description="a tandem leg"):
    """An argparse parser with the leg options (add your own flags, then parse_args)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--run", required=True, help="the run folder prepared by `tandem run`")
    ap.add_argument("--leg", required=True, help="this leg's name (legs/<name>/ in the run folder)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda:N")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: the library's default)")
    ap.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint")
    return ap


def digest(name, kind, shape, values):
    """The L2 digest of one tensor: shape, sum, sum of squares and max |x| accumulated in float64 (in
    order), and the sha256 of its float32 little-endian bytes, row-major. `values`: an array('f'), the
    float32 bytes, any sequence of numbers (rounded to float32 first), or a numpy array (then numpy
    sums it in float64 — pairwise, not in order: the sums may differ in their last bits; L2 compares
    the sha256, which is the same)."""
    if type(values).__module__ == "numpy":
        return _digest_numpy(name, kind, shape, values)
    if isinstance(values, (bytes, bytearray, memoryview)):
        a = array.array("f")
        a.frombytes(bytes(values))
    elif isinstance(values, array.array) and values.typecode == "f":
        a = values
    else:
        a = array.array("f", values)
    if sys.byteorder != "little":
        a = array.array("f", a)
        a.byteswap()
    count = 1
    for d in shape:
        count *= d
    if count != len(a):
        raise ValueError(f"tensor {name}: shape {list(shape)} holds {count} values, got {len(a)}")
    s = ss = mx = 0.0
    for x in a:  # sequential float64 accumulation, as the engine leg does
        s += x
        ss += x * x
        ax = -x if x < 0 else x
        if ax > mx:
            mx = ax
    return {"name": name, "kind": kind, "shape": list(shape), "sum": s, "sumsq": ss, "maxabs": mx,
            "sha256": hashlib.sha256(a.tobytes()).hexdigest()}


def _digest_numpy(name, kind, shape, values):
    """digest() of a numpy array: a 151,936 x 1024 embedding in well under a second."""
    import numpy as np

    a = np.ascontiguousarray(values, dtype="<f4")
    if list(a.shape) != list(shape):
        raise ValueError(f"tensor {name}: shape {list(shape)}, the array's is {list(a.shape)}")
    a64 = a.astype(np.float64)
    return {"name": name, "kind": kind, "shape": list(shape), "sum": float(a64.sum()),
            "sumsq": float((a64 * a64).sum()), "maxabs": float(np.abs(a64).max()) if a.size else 0.0,
            "sha256": hashlib.sha256(a.tobytes()).hexdigest()}


_IMPORTED = time.perf_counter()


def process_age_s():
    """Seconds since this process started — the protocol's setup_s and total_s count from there (imports
    included): Linux's /proc/self/stat start time against /proc/uptime; elsewhere, since tandem_leg was
    imported."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)": field 3 on; starttime is field 22
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter() - _IMPORTED


def peak_host_rss_bytes():
    """getrusage's max resident set size in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def needed_records(updates, eval_indices, l3_count):
    """The record indices a leg encodes: those of the plan's micro-batches (updates[u][m], as plan.json
    holds them), the evaluation prefix and the first l3_count (the l3 event's)."""
    needed = set(eval_indices) | set(range(l3_count))
    for u in updates:
        for mb in u:
            needed.update(mb)
    return needed


def warmup_updates(fraction, total):
    """W = ceil(fraction * T) (docs/spec.md §Recipe)."""
    return math.ceil(float(fraction) * total)


def cosine_with_warmup_lr(base_lr, t, warmup, total):
    """transformers.get_cosine_schedule_with_warmup (num_cycles 0.5) times base_lr, for 0-based update t."""
    if t < warmup:
        return base_lr * (float(t) / float(max(1, warmup)))  # LambdaLR: base_lr * lambda(t)
    progress = float(t - warmup) / float(max(1, total - warmup))
    return base_lr * max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
