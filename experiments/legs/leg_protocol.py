"""The leg protocol (docs/leg-protocol.md), Python side: one JSON object per line on stdout.

Every event carries "v" (protocol version) and "event" (its kind). Anything a leg wants to say
that is not an event goes to stderr, never stdout, so the runner can parse stdout line by line.
"""
import json
import math
import sys
import time

PROTOCOL_VERSION = 1

_out = sys.stdout


def protocol_number(x):
    """JSON has no NaN/Inf (json.dumps would write a bare NaN, which no JSON parser reads): the
    protocol spells them "NaN", "Infinity", "-Infinity" (docs/leg-protocol.md)."""
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _explicit(value):
    """`value` with every non-finite float inside it replaced by its protocol string."""
    if isinstance(value, float):
        return value if math.isfinite(value) else protocol_number(value)
    if isinstance(value, dict):
        return {k: _explicit(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_explicit(v) for v in value]
    return value


def _line(event, fields):
    record = {"v": PROTOCOL_VERSION, "event": event, "t": round(time.time(), 3)}
    record.update(_explicit(fields))
    return json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n"


def emit(event, **fields):
    """Writes one event line and flushes, so the runner sees it at once. Non-finite floats anywhere
    in the fields are written explicitly; allow_nan=False makes any that slipped through an error
    here rather than an unparsable line for the runner."""
    _out.write(_line(event, fields))
    _out.flush()


def emit_together(*events):
    """Several (event, fields) in ONE write: a runner that stops the leg as soon as it reads the
    first (a NaN step) still finds the next (the error) in the pipe."""
    _out.flush()
    _out.write("".join(_line(event, fields) for event, fields in events))
    _out.flush()
