"""The shared dropout generator of docs/spec.md §Recipe ("shared" masks), bit for bit as tandem's engine draws them.

Definition (also in docs/engine.md and engine/include/tandem/engine/dropout.h); all arithmetic mod 2**64:

    mix64(z):  z = z + 0x9E3779B97F4A7C15
               z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
               z = (z ^ (z >> 27)) * 0x94D049BB133111EB
               return z ^ (z >> 31)

    key     = mix64(mix64(mix64(mix64(mix64(seed) ^ update) ^ micro_batch) ^ layer) ^ projection)
    u_i     = (mix64(key ^ i) >> 40) * 2**-24          # top 24 bits, an exact float in [0, 1)
    keep_i  = u_i >= p
    xd_i    = x_i * (float32(1 / (1 - p)) if keep_i else 0)

i is the flat row-major index into the adapter input of that micro-batch viewed as
[batch * seq, in_features] (padding positions included; seq = the micro-batch's padded length).
update is the 0-based optimizer update, micro_batch the 0-based index inside the update, layer the
0-based decoder layer, projection the index of the module in PROJECTIONS.
"""

from __future__ import annotations

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MUL1 = 0xBF58476D1CE4E5B9
MUL2 = 0x94D049BB133111EB


def mix64(z: int) -> int:
    """SplitMix64's step + finaliser on a Python int (mod 2**64)."""
    z = (z + GOLDEN) & MASK64
    z = ((z ^ (z >> 30)) * MUL1) & MASK64
    z = ((z ^ (z >> 27)) * MUL2) & MASK64
    return z ^ (z >> 31)


def shared_key(seed: int, update: int, micro_batch: int, layer: int, projection: int | str) -> int:
    if isinstance(projection, str):
        projection = PROJECTIONS.index(projection)
    k = mix64(seed & MASK64)
    for part in (update, micro_batch, layer, projection):
        k = mix64(k ^ (part & MASK64))
    return k


def keep_mask_python(key: int, n: int, p: float) -> list[bool]:
    """Pure-Python reference (slow; for small n and for checking keep_mask)."""
    return [((mix64(key ^ i) >> 40) * (1.0 / 16777216.0)) >= p for i in range(n)]


def keep_mask(key: int, n: int, p: float):
    """numpy version: a bool array of n elements (uint64 arithmetic wraps mod 2**64)."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = np.arange(n, dtype=np.uint64) ^ np.uint64(key)
        z = z + np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(MUL1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(MUL2)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float64) * (1.0 / 16777216.0)
    return u >= p


def dropout_scale(p: float):
    """The float32 multiplier of kept elements."""
    import numpy as np

    return np.float32(1.0 / (1.0 - p))


def shared_multiplier(seed: int, update: int, micro_batch: int, layer: int, projection: int | str,
                      shape: tuple[int, ...], p: float):
    """float32 array of `shape` (..., in_features): scale where kept, 0 where dropped. x * this = dropout(x)."""
    import numpy as np

    n = 1
    for s in shape:
        n *= int(s)
    keep = keep_mask(shared_key(seed, update, micro_batch, layer, projection), n, p)
    return np.where(keep, dropout_scale(p), np.float32(0.0)).astype(np.float32).reshape(shape)
