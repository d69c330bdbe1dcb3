"""The leg protocol (docs/leg-protocol.md), version 1: one JSON object per line on stdout.

`EventWriter.emit(kind, **fields)` checks every event against the protocol before it writes it
(required fields, their types, `hello` first, nothing after `done` or `error`, step and eval
updates in order) and raises `ProtocolError` naming the event and the field instead of writing a
line the runner would have to reject. Non-finite numbers go out as null (JSON has no NaN), as the
protocol says. Standard library only.
"""
import json
import math
import re
import sys
import time

PROTOCOL_VERSION = 1


class ProtocolError(ValueError):
    """An event that does not follow docs/leg-protocol.md (raised before anything is written)."""


_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# Field checks: each returns None when the value is fine, else why not.
def _int(minimum=None):
    def check(x):
        if not _is_int(x):
            return "must be an integer"
        if minimum is not None and x < minimum:
            return f"must be >= {minimum}"
        return None
    return check


def _num_or_null(x):
    return None if x is None or _is_num(x) else "must be a number or null"


def _finite_num(x):
    if not _is_num(x) or not math.isfinite(float(x)):
        return "must be a finite number"
    return None


def _nonneg_num(x):
    if not _is_num(x) or not math.isfinite(float(x)) or x < 0:
        return "must be a finite number >= 0"
    return None


def _str(x):
    return None if isinstance(x, str) else "must be a string"


def _one_line(x):
    if not isinstance(x, str) or not x:
        return "must be a non-empty string"
    return "must be one line" if "\n" in x else None


def _bool(x):
    return None if isinstance(x, bool) else "must be true or false"


def _one_of(*allowed):
    def check(x):
        return None if x in allowed else f"must be one of {'|'.join(allowed)}"
    return check


def _int_or_null(x):
    return None if x is None or _is_int(x) else "must be an integer or null"


def _sha256(x):
    return None if isinstance(x, str) and _HEX64.match(x) else "must be 64 lowercase hex digits"


def _versions(x):
    if not isinstance(x, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in x.items()):
        return "must be an object of name -> version strings"
    return None


def _int_list(x):
    if not isinstance(x, list) or not all(_is_int(i) for i in x):
        return "must be a list of integers"
    return None


_DIGEST = {"name": _str, "kind": _one_of("base", "adapter"), "shape": _int_list, "sum": _finite_num,
           "sumsq": _nonneg_num, "maxabs": _nonneg_num, "sha256": _sha256}
_L3_RECORD = {"index": _int(0), "id": _str, "ids": _int_list, "boundary": _int(-1), "supervised_count": _int(0),
              "full_length": _int(0), "truncated_at": _int_or_null, "text": _str}


def _list_of(schema, what):
    def check(x):
        if not isinstance(x, list):
            return "must be a list"
        for i, item in enumerate(x):
            if not isinstance(item, dict):
                return f"[{i}] must be an object ({what})"
            for key, field_check in schema.items():
                if key not in item:
                    return f"[{i}] lacks '{key}' ({what})"
                why = field_check(item[key])
                if why:
                    return f"[{i}].{key} {why}"
        return None
    return check


def _protocol_number(x):
    """A number, or one of the protocol's spellings of a non-finite one (fingerprints, observables)."""
    if x in ("NaN", "Infinity", "-Infinity") or x is None or _is_num(x):
        return None
    return "must be a number, \"NaN\", \"Infinity\" or \"-Infinity\""


def _number_list(n):
    def check(x):
        if not isinstance(x, list) or len(x) != n or any(_protocol_number(v) for v in x):
            return f"must be a list of {n} numbers"
        return None
    return check


_POINT = {"micro_batch": _int(-1), "layer": _int(-1), "op": _one_line,
          "pass": _one_of("forward", "backward", "optimizer"), "count": _int(0),
          "norm": _protocol_number, "mean": _protocol_number, "maxabs": _protocol_number, "sketch": _number_list(16)}
_ADAPTER_NORM = {"layer": _int(0), "projection": _one_line, "a_norm": _protocol_number, "b_norm": _protocol_number,
                 "delta_norm": _protocol_number}
def _names(x):
    return None if isinstance(x, list) and all(isinstance(n, str) for n in x) else "must be a list of names"


_SETTINGS_GROUP = {"lr": _finite_num, "lr_update0": _finite_num, "betas": _number_list(2), "eps": _finite_num,
                   "weight_decay": _finite_num, "tensors": _names}
_PROBE = {"probe": _int(0), "record": _int(0), "position": _int(0), "ids": _int_list, "probs": lambda x: (
    None if isinstance(x, list) and not any(_protocol_number(v) for v in x) else "must be a list of numbers")}

# event -> (required fields, optional fields)
SCHEMAS = {
    "hello": ({"implementation": _one_line, "leg": _one_line, "language": _one_line, "stack": _one_line,
               "versions": _versions, "device": _one_line, "device_name": _str, "threads": _int(0),
               "pid": _int(1), "spec_sha256": _sha256, "resume": _bool}, {}),
    "resume": ({"update": _int(0), "path": _str}, {}),
    "l2": ({"tensors": _list_of(_DIGEST, "an L2 digest")}, {}),
    "l3": ({"template": _one_line, "max_len": _int(1), "records": _list_of(_L3_RECORD, "an L3 record")}, {}),
    "l1": ({"heldout_ce": _num_or_null, "tokens": _int(0), "examples": _int(0)}, {}),
    "eval": ({"update": _int(0), "heldout_ce": _num_or_null, "tokens": _int(0)}, {}),
    "step": ({"update": _int(0), "loss": _num_or_null, "grad_norm": _num_or_null, "lr": _finite_num,
              "tokens": _int(0)}, {"input_tokens": _int(0), "wall_s": _nonneg_num, "cpu_s": _nonneg_num}),
    "timing": ({"phase": _one_of("setup", "train")}, {"model_load_s": _nonneg_num, "tokenize_s": _nonneg_num,
                                                      "setup_s": _nonneg_num, "train_s": _nonneg_num,
                                                      "total_s": _nonneg_num}),
    "memory": ({"peak_host_rss_bytes": _int(0), "peak_device_bytes": _int_or_null}, {}),
    "checkpoint": ({"update": _int(1), "path": _str}, {}),
    "done": ({"updates": _int(0), "final": _str}, {}),
    "error": ({"message": _one_line}, {}),
    # docs/observables.md: the points of an observed update (after its step), the evaluation observables
    "fingerprints": ({"update": _int(0), "points": _list_of(_POINT, "a fingerprint point")}, {}),
    # the optimizer as the leg built it, before its first update (docs/leg-protocol.md "settings"): tandem
    # compares it with the spec's recipe and names every difference
    "settings": ({"optimizer": _one_line, "groups": _list_of(_SETTINGS_GROUP, "a parameter group"),
                  "clip": _num_or_null, "schedule": _one_line},
                 {"warmup_updates": _int_or_null, "total_updates": _int_or_null, "bias_correction": _bool,
                  "decoupled_weight_decay": _bool, "amsgrad": _bool, "not_optimized": _names}),
    # the optimizer step of an update replayed with the spec's AdamW on the leg's own operands
    # (tandem_leg.torch.replay): its largest elementwise difference over a few-ulp bound
    "optimizer_check": ({"update": _int(0), "max_ratio": _protocol_number, "tensor": _one_line, "over": _int(0),
                         "elements": _int(0), "tensors": _int(0)}, {"bound": _str}),
    "observables": ({"update": _int(0), "adapter": _list_of(_ADAPTER_NORM, "an adapter norm"),
                     "probes": _list_of(_PROBE, "a next-token probe")}, {}),
}
_TIMING_PHASE_FIELDS = {"setup": ("model_load_s", "tokenize_s", "setup_s"), "train": ("train_s", "total_s")}


def finite_or_none(x):
    """JSON has no NaN or infinity: the protocol writes a non-finite number as null."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def normalise_event(kind, fields):
    """The fields as they go out: a non-finite number in a field that may be null becomes null
    (the protocol's NaN); anywhere else it is an error."""
    if kind not in SCHEMAS:
        raise ProtocolError(f"unknown event '{kind}' (one of {', '.join(SCHEMAS)})")
    required, optional = SCHEMAS[kind]
    out = dict(fields)
    for key, check in {**required, **optional}.items():
        x = out.get(key)
        if isinstance(x, float) and not math.isfinite(x):
            if check in (_num_or_null,):
                out[key] = None
            else:
                raise ProtocolError(f"event {kind}: field '{key}' is {x}, not a finite number")
    return out


def validate_event(kind, fields):
    """Raises ProtocolError unless (kind, fields) is a well-formed event of protocol version 1."""
    if kind not in SCHEMAS:
        raise ProtocolError(f"unknown event '{kind}' (one of {', '.join(SCHEMAS)})")
    required, optional = SCHEMAS[kind]
    for key in ("v", "event", "t"):
        if key in fields:
            raise ProtocolError(f"event {kind}: field '{key}' is set by the writer")
    for key, check in required.items():
        if key not in fields:
            raise ProtocolError(f"event {kind}: field '{key}' is required")
        why = check(fields[key])
        if why:
            raise ProtocolError(f"event {kind}: field '{key}' {why}")
    for key, check in optional.items():
        if key in fields:
            why = check(fields[key])
            if why:
                raise ProtocolError(f"event {kind}: field '{key}' {why}")
    if kind == "timing":
        for key in _TIMING_PHASE_FIELDS[fields["phase"]]:
            if key not in fields:
                raise ProtocolError(f"event timing (phase {fields['phase']}): field '{key}' is required")


def claim_stdout():
    """Keeps the process's stdout for the protocol alone: returns a line-buffered text stream on a
    duplicate of file descriptor 1, then points descriptor 1 and sys.stdout at stderr, so whatever
    else prints (a Trainer's log lines, a progress bar, a C library) lands in stderr.log instead of
    corrupting the event stream."""
    import os

    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(fd, "w", buffering=1, encoding="utf-8")


class EventWriter:
    """Writes validated events, one JSON object per line, flushed after each (the runner reads them live).

    It also checks the order the protocol needs: `hello` first and once, `resume` right after it,
    updates of `step` events consecutive from where the leg started, `eval` updates not going
    back, nothing after `done` or `error`."""

    def __init__(self, out=None, clock=time.time):
        self._out = out if out is not None else sys.stdout
        self._clock = clock
        self.events = []          # kinds written, in order
        self._next_step = None    # the update index the next step event must carry
        self._last_eval = -1
        self._closed = False

    def emit(self, kind, **fields):
        fields = normalise_event(kind, fields)
        validate_event(kind, fields)
        if self._closed:
            raise ProtocolError(f"event {kind} after '{self.events[-1]}': a leg says nothing after done or error")
        if not self.events and kind not in ("hello", "error"):
            raise ProtocolError(f"event {kind} before hello: hello must be the first line")
        if kind == "hello" and self.events:
            raise ProtocolError("hello written twice")
        if kind == "resume":
            if self.events[-1] != "hello":
                raise ProtocolError("resume must come right after hello")
            self._next_step = fields["update"]
            self._last_eval = fields["update"]
        if kind in ("l1", "l2", "l3") and "resume" in self.events:
            raise ProtocolError(f"event {kind} from a resumed leg (it does not repeat l1/l2/l3)")
        if kind == "step":
            expected = self._next_step if self._next_step is not None else 0
            if fields["update"] != expected:
                raise ProtocolError(f"event step: field 'update' is {fields['update']}, expected {expected}")
            self._next_step = expected + 1
        if kind == "eval":
            if fields["update"] < self._last_eval:
                raise ProtocolError(f"event eval: field 'update' {fields['update']} goes back (last {self._last_eval})")
            self._last_eval = fields["update"]
        if kind == "done" and self._next_step is not None and fields["updates"] != self._next_step:
            raise ProtocolError(f"event done: field 'updates' is {fields['updates']} but {self._next_step} were stepped")
        record = {"v": PROTOCOL_VERSION, "event": kind, "t": round(self._clock(), 3)}
        record.update(fields)
        # allow_nan=False: a NaN that slipped through is a bug here, not a line for the runner to drop.
        line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        self._out.write(line + "\n")
        self._out.flush()
        self.events.append(kind)
        if kind in ("done", "error"):
            self._closed = True
        return record
