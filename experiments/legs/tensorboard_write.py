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
import sys


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: tensorboard_write.py REQUEST.json")
    with open(argv[1], encoding="utf-8") as f:
        request = json.load(f)
    from torch.utils.tensorboard import SummaryWriter

    # Every leg's folder is checked before any is written: a refused export writes nothing.
    old = {leg["dir"]: glob.glob(os.path.join(leg["dir"], "*tfevents*")) for leg in request["legs"]}
    for folder, files in old.items():
        if files and not request.get("overwrite"):
            raise SystemExit(f"{folder} already holds TensorBoard event files ({os.path.basename(files[0])}); "
                             "pass --overwrite to replace them")
    for leg in request["legs"]:
        for path in old[leg["dir"]]:
            os.remove(path)
        os.makedirs(leg["dir"], exist_ok=True)
        w = SummaryWriter(log_dir=leg["dir"])
        for tag, points in leg["scalars"].items():
            for step, value, walltime in points:
                w.add_scalar(tag, math.nan if value is None else float(value), int(step), walltime=float(walltime))
        w.close()
        print(f"{leg['name']}: {leg['dir']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
