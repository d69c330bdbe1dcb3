"""Fingerprints and evaluation observables (docs/observables.md), Python side.

The twin of engine/include/tandem/engine/observe.h: the same counter-based Gaussian sketch, the same
point names, and the hooks that record them on the real transformers + peft modules — of the reference
leg (experiments/legs/reference_leg.py) and of any PyTorch leg paired through tandem_leg.torch.pair. A point is (layer, op, pass); its summary is count, L2 norm, mean, max |x| (float64) and

    sketch[k] = sum_r sum_c g(k, r) * g(16 + k, c) * X[r, c]        k = 0..15

over the tensor X viewed as rows x width (token tensors: only the real tokens, in (sequence,
position) order), with g(stream, i) the Box-Muller normal of mix64(mix64(0x736B65746368 ^ stream) ^ i).
"""
import math

import numpy as np

SKETCH = 16
SKETCH_SEED = 0x736B65746368
PROBE_COUNT = 16
PROBE_TOP_K = 32
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

_M64 = (1 << 64) - 1


def mix64_int(z):
    """SplitMix64's finaliser on a Python int (mod 2^64): the definition."""
    z = (z + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def mix64(z):
    """mix64 over a numpy uint64 array (wrapping arithmetic)."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def sketch_gaussian(stream, index):
    """g(stream, index) for an array of indices: float64 standard normals, as the engine draws them."""
    key = np.uint64(mix64_int(SKETCH_SEED ^ int(stream)))
    h = mix64(np.asarray(index, dtype=np.uint64) ^ key)
    u1 = ((h >> np.uint64(32)).astype(np.float64) + 0.5) * 2.0 ** -32
    u2 = ((h & np.uint64(0xFFFFFFFF)).astype(np.float64) + 0.5) * 2.0 ** -32
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * math.pi * u2)


class Sketcher:
    """Summaries of 2-D tensors with cached Gaussian tables (rows: streams 0..15, columns 16..31)."""

    def __init__(self):
        self._rows = np.zeros((0, SKETCH))
        self._cols = np.zeros((0, SKETCH))
        self._torch_cache = {}

    @staticmethod
    def _table(n, first_stream):
        idx = np.arange(n, dtype=np.uint64)
        return np.stack([sketch_gaussian(first_stream + k, idx) for k in range(SKETCH)], axis=1)

    def _ensure(self, rows, cols):
        if rows > len(self._rows):
            self._rows = self._table(max(rows, 2 * len(self._rows)), 0)
            self._torch_cache.clear()
        if cols > len(self._cols):
            self._cols = self._table(max(cols, 2 * len(self._cols)), SKETCH)
            self._torch_cache.clear()

    def summarize_numpy(self, x):
        """x: a 2-D array (any float dtype) -> the summary dict."""
        x = np.asarray(x, dtype=np.float64)
        rows, cols = x.shape
        self._ensure(rows, cols)
        sk = (self._rows[:rows] * (x @ self._cols[:cols])).sum(axis=0) if x.size else np.zeros(SKETCH)
        return summary(x.size, float(np.sqrt((x * x).sum())), float(x.mean()) if x.size else 0.0,
                       float(np.abs(x).max()) if x.size else 0.0, sk)

    def summarize_torch(self, torch, x):
        """x: a 2-D torch tensor (any device); computed in float64 on the tensor's device."""
        x = x.detach().to(torch.float64)
        rows, cols = x.shape
        self._ensure(rows, cols)
        key = (x.device, len(self._rows), len(self._cols))
        if key not in self._torch_cache:
            self._torch_cache[key] = (torch.as_tensor(self._rows, device=x.device),
                                      torch.as_tensor(self._cols, device=x.device))
        rg, cg = self._torch_cache[key]
        if x.numel() == 0:
            return summary(0, 0.0, 0.0, 0.0, np.zeros(SKETCH))
        sk = (rg[:rows] * (x @ cg[:cols])).sum(dim=0)
        return summary(x.numel(), float(torch.sqrt((x * x).sum())), float(x.mean()), float(x.abs().max()),
                       sk.cpu().numpy())


def _finite(v):
    """A float for the protocol: non-finite values spelled "NaN" / "Infinity" / "-Infinity"."""
    v = float(v)
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def summary(count, norm, mean, maxabs, sketch):
    return {"count": int(count), "norm": _finite(norm), "mean": _finite(mean), "maxabs": _finite(maxabs),
            "sketch": [_finite(v) for v in sketch]}


# --- the reference leg's hooks --------------------------------------------------------------------

# Projections whose output gradient is a point of the backward pass (the others equal a residual's).
_BACKWARD_OUTPUTS = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"}


class FingerprintHooks:
    """Records the points of one training update on a peft-wrapped transformers Qwen3 model.

    attach() installs forward hooks (and, through them, tensor hooks for the backward) on the real
    modules, parameter post-accumulate-grad hooks on every LoRA A/B, and wraps transformers'
    apply_rotary_pos_emb (a function, not a module) to see RoPE's outputs; detach() removes them all,
    so an update that is not observed runs exactly the unhooked model.

    The head's points (final_norm at the supervised rows, the micro-batch's sum of token losses):
    a loop that computes its own loss hands them over with record_head() (the reference leg); with
    head_hooks=True they are taken by hooks on the final norm and the LM head instead, for a model
    whose forward computes the loss itself (a Trainer's): the supervised rows come from the labels
    given to begin_micro_batch, and the loss sum is the float32 cross-entropy of those rows' logits."""

    def __init__(self, torch, model, head_hooks=False):
        self.torch = torch
        self.model = model
        self.base = model.get_base_model()
        self.head_hooks = head_hooks
        self.sketcher = Sketcher()
        self.points = []
        self.update = 0
        self.micro_batch = 0
        self.valid = None          # flattened bool mask of the micro-batch's real tokens
        self.labels = None         # the micro-batch's labels (-100: not supervised), for the head hooks
        self.layer = None          # decoder layer whose attention runs (for the RoPE wrapper)
        self._handles = []
        self._rope = None

    # -- recording
    def _add(self, layer, op, pass_, s):
        s.update({"micro_batch": -1 if pass_ == "optimizer" else self.micro_batch, "layer": layer, "op": op,
                  "pass": pass_})
        self.points.append(s)

    def record_tokens(self, layer, op, pass_, t):
        """t: [batch, seq, ...] over the micro-batch's positions: only real tokens are summarised."""
        x = t.detach().reshape(self.valid.numel(), -1)[self.valid]
        self._add(layer, op, pass_, self.sketcher.summarize_torch(self.torch, x))

    def record_rows(self, layer, op, pass_, t):
        x = t.detach()
        x = x.reshape(1, 1) if x.dim() == 0 else x.reshape(x.shape[0], -1)
        self._add(layer, op, pass_, self.sketcher.summarize_torch(self.torch, x))

    def begin_update(self, update):
        self.update = update
        self.points = []

    def begin_micro_batch(self, index, ids, attn, labels):
        """attn None: every position is a real token; labels None: no labels point (and no head points
        from the head hooks)."""
        self.micro_batch = index
        self.valid = (attn.reshape(-1).bool() if attn is not None
                      else self.torch.ones(ids.numel(), dtype=self.torch.bool, device=ids.device))
        self.labels = labels
        self._add(-1, "tokens", "forward",
                  self.sketcher.summarize_numpy(ids.reshape(-1)[self.valid].cpu().numpy().reshape(-1, 1)))
        if labels is not None:
            lab = labels[:, 1:]
            self._add(-1, "labels", "forward",
                      self.sketcher.summarize_numpy(lab[lab != -100].cpu().numpy().reshape(-1, 1)))

    def record_optimizer(self):
        for layer, name, module in self._lora_modules():
            self.record_rows(layer, f"{name}.lora_A", "optimizer", module.lora_A["default"].weight)
            self.record_rows(layer, f"{name}.lora_B", "optimizer", module.lora_B["default"].weight)

    # -- hooks
    def _lora_modules(self):
        for l, layer in enumerate(self.base.model.layers):
            for name in PROJECTIONS:
                parent = layer.self_attn if name in ("q_proj", "k_proj", "v_proj", "o_proj") else layer.mlp
                module = getattr(parent, name)
                if hasattr(module, "lora_A") and "default" in module.lora_A:
                    yield l, name, module

    def _grad_hook(self, t, layer, op, tokens=True):
        if not t.requires_grad:
            return
        rec = self.record_tokens if tokens else self.record_rows
        t.register_hook(lambda g: rec(layer, op, "backward", g))

    def _out(self, layer, op, backward):
        def hook(_module, _inputs, output):
            out = output[0] if isinstance(output, tuple) else output
            self.record_tokens(layer, op, "forward", out)
            if backward:
                self._grad_hook(out, layer, op)
        return hook

    def _in(self, layer, op):
        def hook(_module, inputs):
            self.record_tokens(layer, op, "forward", inputs[0])
            self._grad_hook(inputs[0], layer, op)
        return hook

    def attach(self):
        torch = self.torch
        h = self._handles

        def embed_hook(_m, _i, out):
            self.record_tokens(-1, "embed", "forward", out)
            if not out.requires_grad:
                out.requires_grad_(True)  # a leaf: the gradient reaching the embedding (frozen) is observed
            self._grad_hook(out, -1, "embed")
            return out
        h.append(self.base.model.embed_tokens.register_forward_hook(embed_hook))
        for l, layer in enumerate(self.base.model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            h.append(layer.input_layernorm.register_forward_hook(self._out(l, "input_norm", True)))
            h.append(attn.register_forward_pre_hook(lambda _m, _i, l=l: setattr(self, "layer", l)))
            for name in PROJECTIONS:
                module = getattr(attn if name in ("q_proj", "k_proj", "v_proj", "o_proj") else mlp, name)
                if hasattr(module, "base_layer"):
                    h.append(module.base_layer.register_forward_hook(self._out(l, f"{name}.base", False)))
                    if "default" in module.lora_A:
                        h.append(module.lora_A["default"].register_forward_hook(self._out(l, f"{name}.lora_A.out", False)))
                        # peft: result + lora_B(lora_A(dropout(x))) * scaling: the output before the scaling
                        h.append(module.lora_B["default"].register_forward_hook(self._out(l, f"{name}.lora_B.out", False)))
                else:  # not adapted: a plain linear is its own base
                    h.append(module.register_forward_hook(self._out(l, f"{name}.base", False)))
                h.append(module.register_forward_hook(self._out(l, name, name in _BACKWARD_OUTPUTS)))
            h.append(attn.q_norm.register_forward_hook(self._out(l, "q_norm", True)))
            h.append(attn.k_norm.register_forward_hook(self._out(l, "k_norm", True)))
            h.append(attn.o_proj.register_forward_pre_hook(self._in(l, "attention")))
            h.append(layer.post_attention_layernorm.register_forward_pre_hook(self._in(l, "attn_residual")))
            h.append(layer.post_attention_layernorm.register_forward_hook(self._out(l, "post_norm", True)))
            h.append(mlp.down_proj.register_forward_pre_hook(self._in(l, "mlp_act")))
            h.append(layer.register_forward_hook(self._out(l, "mlp_residual", True)))
        for l, name, module in self._lora_modules():
            for part in ("A", "B"):
                p = getattr(module, f"lora_{part}")["default"].weight
                h.append(p.register_post_accumulate_grad_hook(
                    lambda p, l=l, op=f"{name}.lora_{part}": self.record_rows(l, op, "backward", p.grad)))
        # RoPE is a function of modeling_qwen3, looked up at call time: wrap it while attached.
        import transformers.models.qwen3.modeling_qwen3 as qwen3
        original = qwen3.apply_rotary_pos_emb
        self._rope = (qwen3, original)

        def rope(q, k, cos, sin, *args, **kwargs):
            q_e, k_e = original(q, k, cos, sin, *args, **kwargs)
            l = self.layer
            for op, t in (("q_rope", q_e), ("k_rope", k_e)):
                # [batch, heads, seq, dim] -> [batch, seq, heads, dim]: the engine's layout
                self.record_tokens(l, op, "forward", t.transpose(1, 2))
                if t.requires_grad:  # the hook sits on the tensor attention reads; its gradient transposed
                    t.register_hook(lambda g, l=l, op=op: self.record_tokens(l, op, "backward", g.transpose(1, 2)))
            return q_e, k_e
        qwen3.apply_rotary_pos_emb = rope
        if self.head_hooks:
            h.append(self.base.model.norm.register_forward_hook(self._head_norm))
            h.append(self.base.lm_head.register_forward_hook(self._head_logits))
        del torch

    def _supervised_rows(self):
        return None if self.labels is None else self.labels[:, 1:] != -100

    def _head_norm(self, _module, _inputs, out):
        """The final norm's output [batch, seq, hidden]: its supervised rows (the hidden state at t
        predicts labels[t + 1]), forward and backward, as record_head takes them."""
        rows = self._supervised_rows()
        if rows is None or out.dim() != 3:
            return
        self.record_rows(-1, "final_norm", "forward", out[:, :-1, :][rows])
        if out.requires_grad:
            out.register_hook(lambda g, rows=rows: self.record_rows(-1, "final_norm", "backward", g[:, :-1, :][rows]))

    def _head_logits(self, _module, _inputs, out):
        """The LM head's logits (all positions, or already the supervised rows): the float32 sum of
        the supervised rows' token losses."""
        rows = self._supervised_rows()
        if rows is None:
            return
        torch = self.torch
        with torch.no_grad():
            logits = out[:, :-1, :][rows] if out.dim() == 3 else out
            loss_sum = torch.nn.functional.cross_entropy(logits.float(), self.labels[:, 1:][rows], reduction="sum")
        self.record_rows(-1, "ce", "forward", loss_sum)

    def detach(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if self._rope is not None:
            module, original = self._rope
            module.apply_rotary_pos_emb = original
            self._rope = None

    def record_head(self, selected, loss_sum):
        """The final norm's output at the supervised rows and the micro-batch's sum of token losses."""
        self.record_rows(-1, "final_norm", "forward", selected)
        self._grad_hook(selected, -1, "final_norm", tokens=False)
        self.record_rows(-1, "ce", "forward", loss_sum)


# --- evaluation observables ----------------------------------------------------------------------

def adapter_norms(torch, model, update):
    """|A|, |B| and |B A| * scaling (via the r x r Gram matrices, float64) of every adapted projection;
    the scaling is peft's own (module.scaling)."""
    base = model.get_base_model()
    out = []
    for l, layer in enumerate(base.model.layers):
        for name in PROJECTIONS:
            module = getattr(layer.self_attn if name in ("q_proj", "k_proj", "v_proj", "o_proj") else layer.mlp, name)
            if not hasattr(module, "lora_A") or "default" not in module.lora_A:
                continue
            a = module.lora_A["default"].weight.detach().to(torch.float64)
            b = module.lora_B["default"].weight.detach().to(torch.float64)
            scaling = float(module.scaling["default"])
            sq = float(((b.T @ b) * (a @ a.T)).sum())
            out.append({"layer": l, "projection": name, "a_norm": _finite(torch.linalg.norm(a)),
                        "b_norm": _finite(torch.linalg.norm(b)), "delta_norm": _finite(math.sqrt(max(0.0, sq)) * scaling)})
    return out


def probe_set(encoded_eval):
    """[(probe index, record, position)] for the first PROBE_COUNT records of the eval prefix: the position
    before each record's first kept supervised token (records without one are left out)."""
    probes = []
    for k, e in enumerate(encoded_eval[:PROBE_COUNT]):
        for t in range(1, len(e.supervised)):
            if e.supervised[t]:
                probes.append((k, e, t - 1))
                break
    return probes


def probe_rows(torch, model, probes, pad_id, micro_batch, device, logits_file=None):
    """The next-token distribution of every probe: top-k ids and probabilities from the float32 logits
    (softmax in float64), adapter on, dropout off. With logits_file, the float32 logits [probes, vocab]
    are also written there (raw little-endian, probe order), as the engine leg writes them."""
    all_logits = []
    base = model.get_base_model()
    was_training = model.training
    model.eval()
    rows = []
    with torch.no_grad():
        for i in range(0, len(probes), micro_batch):
            chunk = probes[i:i + micro_batch]
            width = max(len(e.ids) for _, e, _ in chunk)
            ids = torch.full((len(chunk), width), pad_id, dtype=torch.long)
            attn = torch.zeros((len(chunk), width), dtype=torch.long)
            for b, (_, e, _) in enumerate(chunk):
                ids[b, :len(e.ids)] = torch.tensor(e.ids, dtype=torch.long)
                attn[b, :len(e.ids)] = 1
            hidden = base.model(input_ids=ids.to(device), attention_mask=attn.to(device)).last_hidden_state
            sel = torch.stack([hidden[b, pos] for b, (_, _, pos) in enumerate(chunk)])
            logits32 = base.lm_head(sel).to(torch.float32).cpu().numpy()
            all_logits.append(logits32)
            logits = logits32.astype(np.float64)
            for b, (k, e, pos) in enumerate(chunk):
                z = logits[b]
                m = z.max()
                lse = m + math.log(np.exp(z - m).sum())
                order = np.lexsort((np.arange(len(z)), -z))[:PROBE_TOP_K]  # logit descending, then id
                rows.append({"probe": k, "record": e.index, "position": pos, "ids": [int(v) for v in order],
                             "probs": [_finite(math.exp(z[v] - lse)) for v in order]})
    if was_training:
        model.train()
    if logits_file is not None and all_logits:
        import os
        os.makedirs(os.path.dirname(logits_file), exist_ok=True)
        tmp = logits_file + ".tmp"
        np.concatenate(all_logits).astype("<f4").tofile(tmp)
        os.replace(tmp, logits_file)
    return rows
