"""The optimizer step replayed on the leg's own operands (docs/thresholds.md "The optimizer step").

AdamW is elementwise: given the gradient the optimizer received, its moments and the parameters before
the step, the parameters after it are fixed to a few float32 ulp. Two legs' steps cannot be compared that
closely (their gradients already differ by the backward pass's rounding), but each leg's step can be
compared with the spec's AdamW applied to that leg's own operands. `OptimizerReplay` snapshots the
operands before `optimizer.step()` and, after it, replays the spec's step in float64 and measures every
element's difference against

    bound_i = ulp(p1_i)                                       (the step's last rounding, to float32: 1/2 ulp, doubled)
              + K eps32 (lr/bc1 (b1 |m_i| + (1 - b1) |g_i|) / (sqrt(v1_i / bc2) + eps) + lr wd |p0_i|)
              + ulp(p0_i) when the spec decays                (p0 times the float32 factor 1 - lr wd)

with K = REPLAY_K: the rounding of the moments, the square root, the division and the products, each
at most an ulp of its operands. A clean float32 AdamW stays within half of it (the last rounding is at
most half an ulp); a weight decay the spec does not have moves an element by lr wd |p0|, 8.4 to 16.8
ulp of it at lr 1e-4, wd 0.01; an eps of 1e-6 instead of 1e-8 moves the step by (1e-6 - 1e-8) /
sqrt(v) of itself. tandem judges the reported largest ratio (> 1: `different`).
"""
import math

import torch

# The ulp count of the step's own arithmetic (moments 2, square root and its scale 2, eps, the division,
# the product with the step size): 8, doubled for the order of operations a stack may choose.
REPLAY_K = 16
EPS32 = 2.0 ** -23


def _ulp(x):
    """ulp of float32 values x (as float64): the gap to the next float32 away from zero."""
    x32 = x.to(torch.float32).abs()
    up = torch.nextafter(x32, torch.full_like(x32, math.inf))
    return (up - x32).to(torch.float64)


def adamw_step_ratio(p0, g, m, v, step, p1, lr, betas, eps, wd):
    """(largest |p1 - replay| / bound, elements over the bound, the largest's flat index) for one tensor:
    the spec's AdamW (PyTorch semantics, bias-corrected) on the leg's float32 operands, in float64.
    `step`: the optimizer's step count before this step (0 at the first)."""
    f = torch.float64
    p0, g, m, v, p1 = (t.detach().to(f) for t in (p0, g, m, v, p1))
    b1, b2 = float(betas[0]), float(betas[1])
    t = step + 1
    m1 = b1 * m + (1 - b1) * g
    v1 = b2 * v + (1 - b2) * g * g
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    denom = torch.sqrt(v1) / math.sqrt(bc2) + eps
    step_size = lr / bc1
    want = p0 * (1 - lr * wd) - step_size * m1 / denom
    terms = step_size * (b1 * m.abs() + (1 - b1) * g.abs()) / denom + lr * wd * p0.abs()
    bound = _ulp(p1) + REPLAY_K * EPS32 * terms
    if wd != 0:
        bound = bound + _ulp(p0)
    d = (p1 - want).abs()
    # a zero bound (p1 exactly 0 and nothing to round) holds only an exact 0
    ratio = torch.where(bound > 0, d / bound.clamp_min(1e-300), torch.where(d > 0, torch.full_like(d, math.inf),
                                                                            torch.zeros_like(d)))
    ratio = torch.where(torch.isfinite(p1), ratio, torch.full_like(ratio, math.inf))
    worst = int(torch.argmax(ratio)) if ratio.numel() else 0
    return (float(ratio.reshape(-1)[worst]) if ratio.numel() else 0.0), int((ratio > 1).sum()), worst


class OptimizerReplay:
    """Snapshots the trainable tensors, their gradients and the optimizer's moments before a step
    (`before_step`) and measures the step against the spec's AdamW after it (`after_step` -> the
    `optimizer_check` event's fields). `spec`: the run's experiment (its optimizer and schedule); `lr`:
    the lr the spec's schedule gives the update (tandem_leg.cosine_with_warmup_lr)."""

    def __init__(self, model, spec):
        self.model = model
        opt = spec["optimizer"]
        self.betas = (float(opt["betas"][0]), float(opt["betas"][1]))
        self.eps, self.wd = float(opt["eps"]), float(opt["weight_decay"])
        self._snap = None

    def before_step(self, optimizer, update, lr):
        """Call after clipping, right before optimizer.step(): the operands of update `update`'s step."""
        snap = []
        for name, p in self.model.named_parameters():
            if not p.requires_grad or p.grad is None:
                continue
            state = optimizer.state.get(p, {})
            m = state.get("exp_avg")
            v = state.get("exp_avg_sq")
            step = state.get("step", 0)
            step = int(step.item()) if torch.is_tensor(step) else int(step)
            snap.append((name, p, p.detach().clone(), p.grad.detach().clone(),
                         m.detach().clone() if m is not None else torch.zeros_like(p),
                         v.detach().clone() if v is not None else torch.zeros_like(p), step))
        self._snap = (int(update), float(lr), snap)

    def after_step(self):
        """The step just taken against the spec's replay: {update, max_ratio, tensor, over, elements,
        tensors, bound}; None without a snapshot."""
        if self._snap is None:
            return None
        update, lr, snap = self._snap
        self._snap = None
        worst, at, over, elements = 0.0, "", 0, 0
        for name, p, p0, g, m, v, step in snap:
            r, n_over, _ = adamw_step_ratio(p0, g, m, v, step, p.detach(), lr, self.betas, self.eps, self.wd)
            over += n_over
            elements += p0.numel()
            if not (r <= worst):
                worst, at = r, name
        return {"update": update, "max_ratio": worst if math.isfinite(worst) else "Infinity", "tensor": at or "-",
                "over": over, "elements": elements, "tensors": len(snap),
                "bound": f"ulp(p1) + {REPLAY_K} eps32 x the step's terms (the spec's AdamW replayed in float64)"}
