#!/usr/bin/env python3
"""Writes a run's series as TensorBoard event files with torch.utils.tensorboard.SummaryWriter (the
writer HF Trainer and most PyTorch code use), for `tandem export tensorboard`:

    python tensorboard_write.py REQUEST.json

REQUEST: {"run_id": ..., "overwrite": bool, "legs": [{"name": ..., "dir": ..., "scalars":
{"<tag>": [[step, value|null, walltime], ...]}}]}. One event file per leg, in the leg's "dir" (a
TensorBoard run). A dir that already holds event files is refused unless "overwrite" (then those
event files are removed first), so an export never silently doubles a run's points. null is NaN.
"""
import glob
import json
import math
import os
import shutil
import sys
import threading


def write_leg(leg, stage):
    """One leg's events into the empty folder `stage`. SummaryWriter writes from a background thread,
    whose failure (a full disk) is otherwise only printed ("Exception in thread ...") and lost: it is
    collected and raised here."""
    from torch.utils.tensorboard import SummaryWriter

    failed = []
    hook = threading.excepthook
    threading.excepthook = lambda a: failed.append(a.exc_value)
    try:
        w = SummaryWriter(log_dir=stage)
        for tag, points in leg["scalars"].items():
            for step, value, walltime in points:
                w.add_scalar(tag, math.nan if value is None else float(value), int(step), walltime=float(walltime))
        w.flush()  # raises the writer thread's error, if it had one
        w.close()
    finally:
        threading.excepthook = hook
    if failed:
        raise failed[0]


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: tensorboard_write.py REQUEST.json")
    with open(argv[1], encoding="utf-8") as f:
        request = json.load(f)
    import torch.utils.tensorboard  # noqa: F401  (a missing package is said before anything is written)

    # Every leg's folder is checked before any is written: a refused export writes nothing.
    old = {leg["dir"]: glob.glob(os.path.join(leg["dir"], "*tfevents*")) for leg in request["legs"]}
    for folder, files in old.items():
        if files and not request.get("overwrite"):
            raise SystemExit(f"{folder} already holds TensorBoard event files ({os.path.basename(files[0])}); "
                             "pass --overwrite to replace them")
    # Each leg is written into a staging folder beside its own and moved in only when every leg is
    # complete: a failure (a full disk, a read-only folder) leaves no file behind, so the retry needs
    # no --overwrite.
    made, staged, current = [], [], None
    try:
        for leg in request["legs"]:
            current = leg["dir"]
            parent = os.path.dirname(os.path.abspath(leg["dir"]))
            missing = []
            p = parent
            while not os.path.isdir(p):
                missing.append(p)
                p = os.path.dirname(p)
            os.makedirs(parent, exist_ok=True)
            made.extend(reversed(missing))
            stage = os.path.join(parent, f".{os.path.basename(leg['dir'])}.tmp-{os.getpid()}")
            os.makedirs(stage)
            staged.append((leg, stage))
            write_leg(leg, stage)
        for leg, stage in staged:
            current = leg["dir"]
            if not os.path.isdir(leg["dir"]):
                os.mkdir(leg["dir"])
                made.append(leg["dir"])
            for path in old[leg["dir"]]:
                os.remove(path)
            for name in os.listdir(stage):
                os.replace(os.path.join(stage, name), os.path.join(leg["dir"], name))
            os.rmdir(stage)
            print(f"{leg['name']}: {leg['dir']}")
    except OSError as e:
        for _, stage in staged:
            shutil.rmtree(stage, ignore_errors=True)
        for folder in reversed(made):  # folders this export created, when nothing is left in them
            try:
                os.rmdir(folder)
            except OSError:
                pass
        raise SystemExit(f"cannot write {current}: {e.strerror or e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
