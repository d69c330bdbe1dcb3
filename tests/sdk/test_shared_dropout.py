"""The shared dropout generator on the tensor's device (tandem_leg.torch.shared_dropout.keep_mask_torch,
apply_shared_dropout) against its definition, on the CPU:

- bit for bit equal to the numpy definition (keep_mask) and, on a slice of every case, to the pure-Python
  one (keep_mask_python, Python ints: no wrap-around or shift subtleties at all), across keys at the
  signed/unsigned edges, shapes, p in {0, 0.05, 0.5, 0.999} and flat indices beyond 2**32;
- SharedMaskDropout's output and its input gradient equal the old host path x * shared_multiplier(...) to
  the bit, and so does a whole paired update of a small Qwen3 + LoRA model (loss, every gradient, every
  parameter after AdamW), on both device-side paths: torch integer ops, and the one fused Triton kernel
  (run here by Triton's CPU interpreter, TRITON_INTERPRET=1): they change the speed of the reference leg,
  not one bit of what it computes.
The same checks run on a GPU from scripts/gpu-check (TANDEM_TEST_DEVICE=cuda:N; the Triton kernel compiled)."""
import os
import sys

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SOURCE_DIR, "sdk", "python"))

from tandem_leg.torch import MaskContext, SharedMaskDropout, install_shared_masks, shared_dropout as sd  # noqa: E402

DEVICE = os.environ.get("TANDEM_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the fused kernel on the CPU: Triton's interpreter
IMPLEMENTATIONS = ["torch", "fused"]


def _triton_present():
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request, monkeypatch):
    """Which device-side path apply_shared_dropout takes: torch ops, or the fused Triton kernel."""
    if request.param == "fused":
        if not _triton_present():
            pytest.fail("Triton is not importable here: the fused shared-dropout kernel cannot be tested "
                        "(PyTorch's CUDA wheels bring it; scripts/setup installs them)")
        monkeypatch.delenv("TANDEM_SHARED_DROPOUT", raising=False)
    else:
        monkeypatch.setenv("TANDEM_SHARED_DROPOUT", "torch")
    return request.param
KEYS = [0, 1, 0x7FFFFFFFFFFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF, 0x9E3779B97F4A7C15,
        sd.shared_key(1234, 0, 0, 0, "q_proj"), sd.shared_key(2 ** 64 - 1, 10535, 7, 27, "down_proj")]
PS = [0.0, 0.05, 0.5, 0.999]
# (first flat index, n): from 0, straddling 2**31 and 2**32, and far beyond (a 2**40-element tensor's tail)
SPANS = [(0, 1), (0, 4099), (2 ** 31 - 7, 1000), (2 ** 32 - 513, 1024), (2 ** 40 + 3, 777), (2 ** 62, 64)]


@pytest.mark.parametrize("key", KEYS, ids=lambda k: f"{k:#x}")
@pytest.mark.parametrize("p", PS)
def test_device_generator_equals_the_numpy_and_python_definitions(key, p):
    for first, n in SPANS:
        ours = sd.keep_mask_torch(key, n, p, device=DEVICE, first=first).cpu().numpy()
        assert ours.dtype == np.bool_ and ours.shape == (n,)
        np.testing.assert_array_equal(ours, sd.keep_mask(key, n, p, first=first), err_msg=f"first={first} n={n}")
        k = min(n, 200)
        assert ours[:k].tolist() == sd.keep_mask_python(key, k, p, first=first), f"first={first}"
    # the kept fraction is 1 - p (a generator that kept everything would pass equality to a broken oracle)
    big = sd.keep_mask_torch(key, 200_000, p, device=DEVICE).float().mean().item()
    assert abs(big - (1.0 - p)) < 0.01 + 1e-9


def test_threshold_is_the_float_comparison_at_every_edge():
    # u = t * 2**-24 >= p  <=>  t >= ceil(p * 2**24), checked for p exactly on a grid point and between two
    for t in (0, 1, 838860, 838861, 16777215):
        for p in (t / 16777216.0, (t + 0.5) / 16777216.0, np.nextafter(t / 16777216.0, 1.0)):
            if p >= 1.0:
                continue
            thr = sd.keep_threshold(p)
            assert (t >= thr) == (t * (1.0 / 16777216.0) >= p), (t, p)


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 5, 7), (3, 37, 64), (2, 129, 96)])
@pytest.mark.parametrize("p", PS[1:])
def test_shared_mask_dropout_equals_the_host_multiplier(shape, p, implementation):
    ctx = MaskContext()
    ctx.update, ctx.micro_batch = 7, 3
    gen = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=gen).to(DEVICE).requires_grad_(True)
    assert sd.fused_available(x) == (implementation == "fused")
    layer, projection = 2, "gate_proj"
    y = SharedMaskDropout(ctx, 99, layer, projection, p)(x)
    multiplier = torch.as_tensor(sd.shared_multiplier(99, 7, 3, layer, projection, shape, p), dtype=x.dtype,
                                 device=x.device)
    old = x.detach() * multiplier
    assert y.device == x.device and y.dtype == x.dtype
    assert torch.equal(y.detach(), old)
    grad = torch.randn(shape, generator=gen).to(DEVICE)
    y.backward(grad)
    assert torch.equal(x.grad, grad * multiplier)  # what autograd computes for x * multiplier
    assert torch.equal(y.detach() == 0, x.new_tensor(~sd.keep_mask(sd.shared_key(99, 7, 3, layer, projection),
                                                           x.numel(), p).reshape(shape), dtype=torch.bool))


class _HostPathDropout(torch.nn.Module):
    """The generator as it was before it moved to the device: numpy on the host, then a copy."""

    def __init__(self, shared):
        super().__init__()
        self.shared = shared

    def forward(self, x):
        s = self.shared
        if not self.training or s.p == 0.0:
            return x
        mask = sd.shared_multiplier(s.seed, s.context.update, s.context.micro_batch, s.layer, s.projection,
                                    tuple(x.shape), s.p)
        return x * torch.as_tensor(mask, dtype=x.dtype, device=x.device)


def _one_paired_update(host_path):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                         tie_word_embeddings=True)
    model = Qwen3ForCausalLM(config)
    targets = list(sd.PROJECTIONS)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.25, target_modules=targets,
                                             use_rslora=True, init_lora_weights=False)).to(DEVICE)
    ctx, n = install_shared_masks(model, 4321, 0.25)
    assert n == 2 * len(targets)
    if host_path:
        for module in list(model.modules()):
            for key, child in list(getattr(module, "lora_dropout", {}).items()) if hasattr(module, "lora_dropout") else []:
                module.lora_dropout[key] = _HostPathDropout(child)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.0)
    gen = torch.Generator().manual_seed(5)
    losses = []
    for mb in range(2):
        ctx.update, ctx.micro_batch = 0, mb
        ids = torch.randint(0, 512, (2, 33), generator=gen).to(DEVICE)
        loss = model(input_ids=ids, labels=ids).loss / 2
        loss.backward()
        losses.append(loss.detach())
    grads = [p.grad.detach().clone() for p in params]
    opt.step()
    return losses, grads, [p.detach().clone() for p in params]


def test_float16_and_bfloat16_take_the_torch_path_with_the_same_mask():
    x = torch.randn(2, 9, 40).to(DEVICE)
    for dtype in (torch.float16, torch.bfloat16):
        h = x.to(dtype)
        assert not sd.fused_available(h)
        y = sd.apply_shared_dropout(h, 5, 1, 0, 3, "q_proj", 0.5)
        expect = h * torch.as_tensor(sd.shared_multiplier(5, 1, 0, 3, "q_proj", tuple(h.shape), 0.5), dtype=dtype,
                                     device=h.device)
        assert y.dtype == dtype and torch.equal(y, expect)


def test_a_paired_update_is_bit_identical_to_the_host_path(implementation):
    new_losses, new_grads, new_params = _one_paired_update(host_path=False)
    old_losses, old_grads, old_params = _one_paired_update(host_path=True)
    assert all(torch.equal(a, b) for a, b in zip(new_losses, old_losses))
    assert len(new_grads) == len(old_grads) > 0
    assert all(torch.equal(a, b) for a, b in zip(new_grads, old_grads))
    assert all(torch.equal(a, b) for a, b in zip(new_params, old_params))
    # the masks mattered: a run without dropout computes other gradients
    assert any(float(g.abs().sum()) > 0 for g in new_grads)
