#!/usr/bin/env python3
"""Prints every scalar of TensorBoard event files as one JSON object, read with TensorBoard's own
reader (tensorboard.backend.event_processing), for `tandem import tensorboard`:

    python tensorboard_scalars.py DIR|FILE
    -> {"files": [...], "scalars": {"<tag>": [[step, value], ...]}}

Both encodings torch.utils.tensorboard.SummaryWriter and TensorFlow write are read: the classic
`simple_value` (float32) and the tensor form of the scalars plugin. Values are the stored numbers
widened to float64 (exact); NaN and infinities become null. A step logged twice keeps its last value.
"""
import glob
import json
import math
import os
import sys


def event_files(path):
    if os.path.isfile(path):
        return [path]
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "**", "*tfevents*"), recursive=True))
        if files:
            return files
        raise SystemExit(f"tensorboard_scalars: {path}: no TensorBoard event file (*tfevents*) in it")
    raise SystemExit(f"tensorboard_scalars: {path}: no such file or folder")


def scalars_of(files):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    out = {}
    for f in files:
        try:
            for event in EventFileLoader(f).Load():
                if not event.HasField("summary"):
                    continue
                for v in event.summary.value:
                    if v.HasField("simple_value"):
                        x = float(v.simple_value)
                    elif v.HasField("tensor") and v.metadata.plugin_data.plugin_name in ("scalars", ""):
                        arr = tensor_util.make_ndarray(v.tensor)
                        if arr.size != 1:
                            continue
                        x = float(arr.reshape(()))
                    else:
                        continue
                    out.setdefault(v.tag, {})[int(event.step)] = x if math.isfinite(x) else None
        except Exception as e:  # a damaged file: name it, one line
            raise SystemExit(f"tensorboard_scalars: {f}: cannot read it ({type(e).__name__}: {e})")
    return {tag: sorted(points.items()) for tag, points in out.items()}


def main(argv):
    if len(argv) != 2:
        raise SystemExit("usage: tensorboard_scalars.py DIR|FILE")
    files = event_files(argv[1])
    json.dump({"files": files, "scalars": scalars_of(files)}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
