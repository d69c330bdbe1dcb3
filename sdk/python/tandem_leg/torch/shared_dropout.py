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
    x * shared_multiplier(...) gives (the multiplier is built in x's dtype from the float32 scale).
    One Triton kernel where fused_available(x) (a float32 tensor on a GPU), else torch integer ops."""
    import torch

    key = shared_key(seed, update, micro_batch, layer, projection)
    if fused_available(x):
        return _fused_function().apply(x, key, p)
    keep = keep_mask_torch(key, x.numel(), p, device=x.device)
    multiplier = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
    multiplier.view(-1).masked_fill_(keep, float(dropout_scale(p)))
    return x * multiplier


# --- one fused kernel on a GPU (Triton) -------------------------------------------------------------
#
# On a GPU the torch-op generator above is launch-bound: about 14 small kernels per LoRA module and
# micro-batch (250 us a call on an H200 whatever the size, 0.8 s of every 0.6B update). Where Triton is
# there (it comes with PyTorch's CUDA wheels), dropout(x) is one kernel instead: each element's hash,
# threshold and product in registers, the same bits as the definition (uint64 arithmetic wraps, `>>`
# on uint64 is logical), and the same kernel on the incoming gradient in the backward, which is exactly
# what autograd does for x * multiplier. Elsewhere (the CPU, float16/bfloat16 activations, no Triton)
# the torch-op path runs. TANDEM_SHARED_DROPOUT=torch forces that path.

_FUSED = {}  # "kernel" -> the jitted Triton kernel, or None when Triton cannot be imported


def _fused_kernel():
    if "kernel" in _FUSED:
        return _FUSED["kernel"]
    try:
        import triton
        import triton.language as tl
    except Exception:  # no Triton (a CPU-only torch): the torch-op path
        _FUSED["kernel"] = None
        return None

    @triton.jit(do_not_specialize=["n", "key_hi", "key_lo", "threshold"])
    def shared_dropout_kernel(x_ptr, out_ptr, n, key_hi, key_lo, threshold, scale, BLOCK: tl.constexpr):
        offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)
        inside = offs < n
        key = (key_hi.to(tl.uint64) << 32) | key_lo.to(tl.uint64)
        z = offs.to(tl.uint64) ^ key
        z = z + ((tl.full((), 0x9E3779B9, tl.uint64) << 32) | tl.full((), 0x7F4A7C15, tl.uint64))
        z = (z ^ (z >> 30)) * ((tl.full((), 0xBF58476D, tl.uint64) << 32) | tl.full((), 0x1CE4E5B9, tl.uint64))
        z = (z ^ (z >> 27)) * ((tl.full((), 0x94D049BB, tl.uint64) << 32) | tl.full((), 0x133111EB, tl.uint64))
        keep = (z >> 40) >= threshold.to(tl.uint64)  # the finaliser's last xor leaves these bits alone
        x = tl.load(x_ptr + offs, mask=inside, other=0.0)
        multiplier = tl.where(keep, scale, 0.0).to(tl.float32)
        tl.store(out_ptr + offs, x * multiplier, mask=inside)

    _FUSED["kernel"] = shared_dropout_kernel
    return shared_dropout_kernel


def _fused_apply(t, key: int, p: float):
    """t * multiplier for the mask of `key`, by the Triton kernel (t float32)."""
    import torch

    t = t.contiguous()
    out = torch.empty_like(t)
    n = t.numel()
    block = 1024
    _fused_kernel()[((n + block - 1) // block,)](t, out, n, (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF,
                                                 keep_threshold(p), float(dropout_scale(p)), BLOCK=block)
    return out


def fused_available(x) -> bool:
    """True when apply_shared_dropout takes the one-kernel path for x."""
    import os

    if os.environ.get("TANDEM_SHARED_DROPOUT", "") == "torch":
        return False
    interpreted = os.environ.get("TRITON_INTERPRET", "") == "1"  # Triton's CPU interpreter: the tests
    return (x.is_cuda or interpreted) and x.dtype == _torch_float32() and _fused_kernel() is not None


def _torch_float32():
    import torch

    return torch.float32


def _fused_function():
    if "function" in _FUSED:
        return _FUSED["function"]
    import torch

    class FusedSharedDropout(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, key, p):
            ctx.key, ctx.p = key, p
            return _fused_apply(x, key, p)

        @staticmethod
        def backward(ctx, grad):
            return _fused_apply(grad, ctx.key, ctx.p), None, None

    _FUSED["function"] = FusedSharedDropout
    return FusedSharedDropout
