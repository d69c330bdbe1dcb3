"""The leg protocol (docs/leg-protocol.md), Python side: one JSON object per line on stdout.

Every event carries "v" (protocol version) and "event" (its kind). Anything a leg wants to say
that is not an event goes to stderr, never stdout, so the runner can parse stdout line by line.
"""
import hashlib
import json
import math
import sys
import time

PROTOCOL_VERSION = 1

_out = sys.stdout


def emit(event, **fields):
    """Writes one event line and flushes, so the runner sees it at once."""
    record = {"v": PROTOCOL_VERSION, "event": event, "t": round(time.time(), 3)}
    record.update(fields)
    _out.write(json.dumps(record, separators=(",", ":"), allow_nan=True) + "\n")
    _out.flush()


def finite_or_none(x):
    """JSON has no NaN/Inf; the protocol writes them as null plus a flag the runner understands."""
    x = float(x)
    return x if math.isfinite(x) else None


def tensor_digest(name, array_f32):
    """L2 digest of one tensor (a numpy float32 array): shape, sum, sum of squares, max |x| (all
    accumulated in float64) and the sha256 of its float32 little-endian bytes, row-major."""
    import numpy as np

    a = np.ascontiguousarray(array_f32, dtype="<f4")
    a64 = a.astype(np.float64)
    return {
        "name": name,
        "shape": list(a.shape),
        "sum": float(a64.sum()),
        "sumsq": float((a64 * a64).sum()),
        "maxabs": float(np.abs(a64).max()) if a.size else 0.0,
        "sha256": hashlib.sha256(a.tobytes()).hexdigest(),
    }
