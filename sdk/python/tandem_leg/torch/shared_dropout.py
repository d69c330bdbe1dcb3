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

Two implementations of the same definition:
- `keep_mask` / `shared_multiplier` (numpy, on the host): the definition as written, kept as the test
  oracle (tests/sdk/test_shared_dropout.py) and for callers that want a numpy array;
- `keep_mask_torch` / `apply_shared_dropout` (torch integer ops on the device that holds the
  activations): what the legs use (SharedMaskDropout). No host round trip: on a GPU the mask is made
  where the activations are, a few elementwise kernels per LoRA module instead of numpy on the host and
  a host-to-device copy (which made the reference leg 20x slower than its own compute on an H200).
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


def keep_mask_python(key: int, n: int, p: float, first: int = 0) -> list[bool]:
    """Pure-Python reference (slow; for small n and for checking keep_mask): keep_i for
    i = first .. first + n - 1."""
    return [((mix64(key ^ i) >> 40) * (1.0 / 16777216.0)) >= p for i in range(first, first + n)]


def keep_mask(key: int, n: int, p: float, first: int = 0):
    """numpy version: a bool array of n elements, keep_i for i = first .. first + n - 1 (uint64
    arithmetic wraps mod 2**64)."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = np.arange(first, first + n, dtype=np.uint64) ^ np.uint64(key)
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


# --- the device-side twin (torch) ------------------------------------------------------------------
#
# torch has no usable unsigned 64-bit arithmetic on every device, so the state is held in int64 as the
# two's-complement image of the uint64 value: xor, add and multiply are the same bit patterns mod 2**64
# (torch's int64 add and multiply wrap on the CPU and on CUDA; the bit-identity tests hold it to that,
# keys and indices beyond 2**32 included). Right shifts are arithmetic on int64, so every `>>` is
# followed by a mask that clears the copied sign bits: a logical shift.
#
# Two simplifications, both exact:
# - the finaliser's last step z ^ (z >> 31) leaves the top 24 bits unchanged ((z >> 31) >> 40 == 0
#   for a 64-bit z), so u_i's bits are taken straight after the second multiply;
# - u_i >= p with u_i = top24 * 2**-24 (exact) is top24 >= ceil(p * 2**24) (p * 2**24 is exact in
#   float64): an integer comparison, no float conversion of n elements.


def _signed64(v: int) -> int:
    """The int64 whose bits are the uint64 v (mod 2**64)."""
    v &= MASK64
    return v - (1 << 64) if v >= (1 << 63) else v


def _logical_shift_right(z, bits: int):
    """z >> bits on the uint64 that int64 z holds (torch's >> on int64 copies the sign bit)."""
    return (z >> bits).bitwise_and_((1 << (64 - bits)) - 1)


def keep_threshold(p: float) -> int:
    """The smallest 24-bit value u * 2**24 that is kept: u >= p  <=>  top24 >= ceil(p * 2**24)."""
    import math

    return math.ceil(float(p) * 16777216.0)


_INDICES = {}  # device -> int64 tensor 0, 1, ..., kept and grown: torch.arange is the slowest step on a CPU


def _flat_indices(n: int, device):
    """int64 tensor [0, n) on device, a view of one cached tensor per device."""
    import torch

    device = torch.device(device if device is not None else "cpu")
    cached = _INDICES.get(device)
    if cached is None or cached.numel() < n:
        cached = torch.arange(max(n, 2 * (cached.numel() if cached is not None else 0)), dtype=torch.int64,
                              device=device)
        _INDICES[device] = cached
    return cached[:n]


def keep_mask_torch(key: int, n: int, p: float, device=None, first: int = 0):
    """torch bool tensor of n elements on `device`: keep_i of the module docstring for
    i = first .. first + n - 1 (first > 0: a slice of a longer flat index, as a rank that holds part
    of a tensor would draw it). Bit-identical to keep_mask (numpy)."""
    import torch

    if first == 0:
        z = torch.bitwise_xor(_flat_indices(n, device), _signed64(key))
    else:  # a slice far into the flat index: its own range (the cache serves the common first == 0)
        z = torch.arange(first, first + n, dtype=torch.int64, device=device).bitwise_xor_(_signed64(key))
    z.add_(_signed64(GOLDEN))
    z.bitwise_xor_(_logical_shift_right(z, 30))
    z.mul_(_signed64(MUL1))
    z.bitwise_xor_(_logical_shift_right(z, 27))
    z.mul_(_signed64(MUL2))
    return _logical_shift_right(z, 40) >= keep_threshold(p)


def apply_shared_dropout(x, seed: int, update: int, micro_batch: int, layer: int, projection: int | str,
                         p: float):
    """dropout(x) with the shared mask for (seed, update, micro-batch, layer, projection), computed on
    x's device: x * float32(1 / (1 - p)) where kept, x * 0 where dropped, the very products
    x * shared_multiplier(...) gives (the multiplier is built in x's dtype from the float32 scale)."""
    import torch

    keep = keep_mask_torch(shared_key(seed, update, micro_batch, layer, projection), x.numel(), p,
                           device=x.device)
    multiplier = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    multiplier.view(-1).masked_fill_(keep, float(dropout_scale(p)))
    return x * multiplier
