"""Paired mode for PyTorch legs: tandem's shared dropout masks, the run's plan checked micro-batch by
micro-batch, and fingerprints on the experiment's `observe` updates (docs/legs.md "Pair your trainer").

A leg is *paired* with the reference when both draw the same dropout masks and train on the same plan
(`dropout_masks: shared`, `plan: shared`, the experiment's defaults): the two then compute the same
function in a different order of float32 operations, and tandem judges them with the float32
error-model bound (docs/thresholds.md) instead of a seed envelope. `pair(model, run, leg)` makes a
transformers + peft model such a leg:

- every peft LoRA layer's dropout becomes `SharedMaskDropout`: the mask experiments' shared generator
  draws for (seed, update, micro-batch, layer, projection) (tandem_leg.torch.shared_dropout, the one
  definition the reference leg uses too; engine/include/tandem/engine/dropout.h is its C++ twin);
- a forward pre-hook on the model (and a guard on its decoder) keeps the (update, micro-batch) of every
  training forward pass, and checks it against plan.json: the micro-batch's records (from the records
  you pass, or from your dataset's token ids), its size, the update's micro-batch count, right padding
  to the longest sequence (the masks are drawn over that padded layout). Wrong wiring raises
  `PairingError` naming the update, micro-batch and what differs, at the first micro-batch it shows —
  never a silently unpaired leg;
- on the updates the experiment's `observe` selects, the reference leg's fingerprint hooks
  (tandem_leg.torch.fingerprint) record the same named points, so `tandem localise` compares the leg
  with the reference point by point.

A HuggingFace Trainer gets all of it from `tandem_leg.hf.TandemCallback(pair=True)` and
`tandem_leg.hf.plan_sampler(run)`. A plain loop calls it itself:

    pairing = tandem_leg.torch.pair(model, run, args.leg)
    for u, micro_batches in enumerate(run.plan_updates()):
        pairing.begin_update(u)
        for records in micro_batches:
            ids, attn, labels = my_batch(records)
            pairing.begin_micro_batch(ids, attn, labels, records=records)
            ...forward, backward...
        pairing.end_backward()
        ...clip...
        pairing.before_optimizer_step(optimizer)   # the step's operands, replayed after it
        optimizer.step()
        pairing.end_update()
        events.emit("step", ...)
    # once, before update 0: pairing.report_settings(events, optimizer, scheduler, clip=...)
        pairing.emit_fingerprints(events)     # after the step, on observed updates

Needs torch, numpy and peft (the rest of tandem_leg does not).
"""
import os

import torch

from .. import digest
from . import fingerprint, replay, shared_dropout

__all__ = ["PairingError", "MaskContext", "SharedMaskDropout", "install_shared_masks", "lora_dropouts",
           "unpaired_dropouts", "pair", "Pairing", "l2_digests", "optimizer_settings", "fingerprint", "shared_dropout"]


def l2_digests(model, run):
    """L2 digests of a peft model as loaded (the `l2` event): base tensors named as in
    base/model.safetensors (peft wraps adapted layers as <module>.base_layer.weight), sorted, then the
    adapter under peft's file names (get_peft_model_state_dict), sorted; all as float32."""
    from peft import get_peft_model_state_dict

    from ..safetensors import read_header

    header, _, _ = read_header(os.path.join(run.base_dir, "model.safetensors"))
    base_sd = model.get_base_model().state_dict()
    out = []
    for name in sorted(header):
        t = base_sd.get(name)
        if t is None:
            head, _, leaf = name.rpartition(".")
            t = base_sd[f"{head}.base_layer.{leaf}"]
        out.append(digest(name, "base", list(t.shape), t.detach().float().cpu().numpy()))
    adapter = get_peft_model_state_dict(model)
    for name in sorted(adapter):
        t = adapter[name]
        out.append(digest(name, "adapter", list(t.shape), t.detach().float().cpu().numpy()))
    return out


# transformers' schedule functions (get_scheduler's lambdas) -> the schedule's name in the settings event
_SCHEDULE_LAMBDAS = {
    "_get_cosine_schedule_with_warmup_lr_lambda": "cosine",
    "_get_linear_schedule_with_warmup_lr_lambda": "linear",
    "_get_constant_schedule_with_warmup_lr_lambda": "constant_with_warmup",
    "_get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda": "cosine_with_restarts",
    "_get_polynomial_decay_schedule_with_warmup_lr_lambda": "polynomial",
    "_get_inverse_sqrt_schedule_lr_lambda": "inverse_sqrt",
    "_get_wsd_scheduling_lr_lambda": "warmup_stable_decay",
}


def _schedule_of(lr_scheduler):
    """(name, warmup updates, total updates) of a scheduler built by transformers' schedule functions
    (a LambdaLR over a functools.partial); ("none", None, None) without a scheduler, ("unknown", ...)
    for any other. A cosine with num_cycles other than 0.5 is not the spec's curve: named with it."""
    if lr_scheduler is None:
        return "none", None, None
    while not hasattr(lr_scheduler, "lr_lambdas") and hasattr(lr_scheduler, "scheduler"):  # accelerate's wrapper
        lr_scheduler = lr_scheduler.scheduler
    lambdas = getattr(lr_scheduler, "lr_lambdas", None) or [None]
    fn = lambdas[0]
    name = _SCHEDULE_LAMBDAS.get(getattr(getattr(fn, "func", None), "__name__", ""), None)
    if name is None:
        return f"unknown ({type(lr_scheduler).__name__})", None, None
    kw = getattr(fn, "keywords", {}) or {}
    if name == "cosine" and float(kw.get("num_cycles", 0.5)) != 0.5:
        name = f"cosine (num_cycles {float(kw['num_cycles']):g})"
    warmup, total = kw.get("num_warmup_steps"), kw.get("num_training_steps")
    return name, (int(warmup) if warmup is not None else None), (int(total) if total is not None else None)


def unwrap_optimizer(optimizer):
    """The torch optimizer inside a wrapper (accelerate's AcceleratedOptimizer, which a Trainer hands its
    callbacks, keeps it as .optimizer)."""
    # AcceleratedOptimizer is itself a torch Optimizer subclass: unwrap while it holds one
    while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
        optimizer = optimizer.optimizer
    return optimizer


def optimizer_settings(model, optimizer, lr_scheduler=None, clip=None, schedule=None, warmup_updates=None):
    """The optimizer as the leg built it, as the `settings` event's fields (docs/leg-protocol.md): per
    parameter group its base lr, the lr it holds for update 0 (the scheduler has set it), betas, eps,
    weight decay and the names of its tensors; the optimizer's class, whether its weight decay is
    decoupled (AdamW) and amsgrad; the schedule (read from a transformers scheduler, or `schedule` /
    `warmup_updates` given); the clip value (None: no clipping); trainable tensors in no group. Call it
    before the first optimizer.step(). tandem compares it with the spec before update 0: the settings
    a Trainer takes from TrainingArguments (weight_decay, adam_epsilon, ...) move the first updates by
    less than any float32 bound can see, so they are read, not inferred."""
    optimizer = unwrap_optimizer(optimizer)
    names = {id(p): n for n, p in model.named_parameters()}
    groups, optimized = [], set()
    first = optimizer.param_groups[0] if optimizer.param_groups else {}
    for g in optimizer.param_groups:
        params = list(g["params"])
        optimized.update(id(p) for p in params)
        betas = g.get("betas", (float("nan"), float("nan")))
        groups.append({"lr": float(g.get("initial_lr", g["lr"])), "lr_update0": float(g["lr"]),
                       "betas": [float(betas[0]), float(betas[1])], "eps": float(g.get("eps", float("nan"))),
                       "weight_decay": float(g.get("weight_decay", 0.0)),
                       "tensors": [names.get(id(p), f"<unnamed {tuple(p.shape)}>") for p in params]})
    kind, warmup, total = _schedule_of(lr_scheduler)
    if schedule is not None:
        kind = schedule
    if warmup_updates is not None:
        warmup = int(warmup_updates)
    decoupled = bool(first.get("decoupled_weight_decay", isinstance(optimizer, torch.optim.AdamW)))
    out = {"optimizer": type(optimizer).__name__, "groups": groups,
           "clip": None if clip is None or not float(clip) > 0 or float(clip) == float("inf") else float(clip),
           "schedule": kind, "warmup_updates": warmup, "total_updates": total, "decoupled_weight_decay": decoupled,
           "amsgrad": bool(first.get("amsgrad", False)),
           "not_optimized": [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in optimized]}
    return out


class PairingError(RuntimeError):
    """Wiring that would leave a leg unpaired while the experiment judges it paired (the message names
    the update, micro-batch, module or setting)."""


class MaskContext:
    """Which (update, micro-batch) the current forward pass belongs to; read by SharedMaskDropout."""

    def __init__(self):
        self.update = 0
        self.micro_batch = 0


class SharedMaskDropout(torch.nn.Module):
    """peft's lora_dropout replaced: the adapter input times the mask shared_dropout draws for (seed,
    update, micro-batch, layer, projection) over the input's [batch, seq, in] layout, so every leg that
    uses the generator (the engine, the reference, a paired user leg) draws the very same mask.
    Evaluation (module.eval()) and p = 0 pass the input through."""

    def __init__(self, context, seed, layer, projection, p):
        super().__init__()
        self.context, self.seed, self.layer, self.projection, self.p = context, seed, layer, projection, p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        return shared_dropout.apply_shared_dropout(x, self.seed, self.context.update, self.context.micro_batch,
                                                   self.layer, self.projection, self.p)

    def extra_repr(self):
        return f"shared mask, layer={self.layer}, projection={self.projection}, p={self.p}"


def lora_dropouts(model):
    """(name, layer, projection, container, adapter) of every peft LoRA layer's dropout module, in
    module order: container[adapter] is the module (peft keeps one per adapter in a ModuleDict)."""
    out = []
    for name, module in model.named_modules():
        if not hasattr(module, "lora_dropout") or not hasattr(module, "lora_A"):
            continue
        parts = name.split(".")
        if "layers" not in parts:
            raise PairingError(f"LoRA layer {name}: not inside a decoder layer (no 'layers.<n>' in its name)")
        layer = int(parts[parts.index("layers") + 1])
        projection = parts[-1]
        if projection not in shared_dropout.PROJECTIONS:
            raise PairingError(f"LoRA layer {name}: projection '{projection}' has no shared mask "
                               f"(one of {', '.join(shared_dropout.PROJECTIONS)})")
        for adapter in list(module.lora_dropout.keys()):
            out.append((f"{name}.lora_dropout.{adapter}", layer, projection, module.lora_dropout, adapter))
    return out


def unpaired_dropouts(model):
    """Names (with the module) of the LoRA dropout modules that are not tandem's shared masks."""
    return [(name, c[a]) for name, _, _, c, a in lora_dropouts(model) if not isinstance(c[a], SharedMaskDropout)]


def install_shared_masks(model, seed, p, context=None):
    """Replaces every LoRA layer's dropout with SharedMaskDropout(context, seed, layer, projection, p).
    Returns (context, how many were replaced); raises PairingError when the model has no LoRA dropout."""
    context = context or MaskContext()
    found = lora_dropouts(model)
    if not found:
        raise PairingError("shared dropout masks requested but the model has no peft LoRA dropout module")
    for _name, layer, projection, container, adapter in found:
        container[adapter] = SharedMaskDropout(context, seed, layer, projection, p)
    return context, len(found)


def _dropout_p(module):
    if isinstance(module, torch.nn.Dropout):
        return float(module.p)
    if isinstance(module, torch.nn.Identity):
        return 0.0
    return None


def _observes(spec):
    observe = spec.get("observe") or {}
    updates = {int(x) for x in observe.get("updates", [])}
    every = int(observe.get("every", 0) or 0)
    if not updates and every <= 0:
        return None
    return lambda u: u in updates or (every > 0 and u % every == 0)


def _decoder(model):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model if hasattr(base, "model") else base.get_decoder()


class Pairing:
    """The paired state of one model in one leg (made by `pair`)."""

    def __init__(self, model, run, leg):
        self.model, self.run, self.leg = model, run, leg
        spec = run.spec
        self.p = float(spec["lora"]["dropout"])
        self.masks = run.leg_setting(leg, "dropout_masks")
        self.plan = run.leg_setting(leg, "plan")
        self.seed = run.seed("dropout")
        self.updates = run.plan_updates() if self.plan == "shared" else None
        self.context = MaskContext()
        # record index -> the leg's own token ids of that record (its dataset), for the plan check
        self.example_ids = None
        observes = _observes(spec)
        self.observes = observes or (lambda u: False)
        self.hooks = fingerprint.FingerprintHooks(torch, model, head_hooks=True) if observes else None
        self._update = None        # the update running, None before the first begin_update
        self._next_micro = 0
        self._explicit = None      # begin_micro_batch called for the next forward pass
        self._labels = None        # labels of the forward pass the model hook saw
        self._observing = False
        self._attached = False
        self._points = None        # (update, points) waiting for emit_fingerprints
        self._checked_modules = False
        self._settings_reported = False
        # The optimizer step replayed with the spec's AdamW on the first two updates (update 0 runs with
        # lr 0 under warmup; update 1 is the first that moves the adapter) and the observed ones.
        self.replay = replay.OptimizerReplay(model, spec)
        self.replays = lambda u: u <= 1 or self.observes(u)
        self._checks = []          # optimizer_check events waiting for emit_fingerprints
        self._handles = [
            model.register_forward_pre_hook(self._model_hook, with_kwargs=True),
            _decoder(model).register_forward_pre_hook(self._decoder_hook, with_kwargs=True),
        ]

    # ---- wiring checks -------------------------------------------------------------------------------
    def _fail(self, what):
        raise PairingError(f"leg {self.leg}: {what}")

    def check_modules(self):
        """Every LoRA dropout is a shared mask (when the leg declares shared masks and p > 0)."""
        if self.masks != "shared" or self.p == 0.0:
            return
        bad = unpaired_dropouts(self.model)
        if bad:
            name, module = bad[0]
            self._fail(f"dropout_masks is shared but {len(bad)} LoRA dropout module(s) are not tandem's shared "
                       f"masks (first: {name}, {module.__class__.__name__}): call tandem_leg.torch.pair(model, run, "
                       f"leg) on the model you train, after the last change to its adapters")

    def _check_padding(self, attn, u, m, real=None):
        """real: the rows' real lengths (the plan's records, from the dataset) when known; else the
        attention mask says where each row's tokens are."""
        if real is not None:
            width = attn.shape[1] if attn is not None else None
            if width is not None and max(real) != width:
                self._fail(f"update {u} micro-batch {m} is padded to {width} positions but its longest sequence has "
                           f"{max(real)} tokens: pad to the micro-batch's longest sequence (shared masks are drawn "
                           "over that layout, docs/leg-protocol.md)")
            return
        if attn is None:
            return
        a = attn.detach().to("cpu").bool()
        lengths = a.sum(dim=1)
        width = a.shape[1]
        for b in range(a.shape[0]):
            n = int(lengths[b])
            if not bool(a[b, :n].all()):
                self._fail(f"update {u} micro-batch {m} row {b} is not right-padded (padding before its tokens): "
                           "shared masks are drawn over the right-padded [batch, seq] layout (docs/leg-protocol.md)")
        if int(lengths.max()) != width:
            self._fail(f"update {u} micro-batch {m} is padded to {width} positions but its longest sequence has "
                       f"{int(lengths.max())} tokens: pad to the micro-batch's longest sequence (shared masks are "
                       "drawn over that layout, docs/leg-protocol.md)")

    def _check_plan(self, ids, attn, u, m, records):
        """Checks the micro-batch against plan.json; returns the rows' real lengths (the records' token
        counts in the leg's dataset) when the dataset is known, else None."""
        if self.updates is None:
            return None
        if u >= len(self.updates):
            self._fail(f"update {u} is beyond plan.json's {len(self.updates)} updates")
        planned = self.updates[u]
        if m >= len(planned):
            self._fail(f"update {u} runs a micro-batch {m + 1} but plan.json gives it {len(planned)}: gradient "
                       "accumulation must run the plan's micro-batches per update (batch.accumulation)")
        expected = planned[m]
        if records is not None and [int(r) for r in records] != [int(r) for r in expected]:
            self._fail(f"update {u} micro-batch {m} holds records {list(records)}, plan.json's are {list(expected)}: "
                       "the loop does not follow the plan")
        if ids.shape[0] != len(expected):
            self._fail(f"update {u} micro-batch {m} has {ids.shape[0]} rows, plan.json's has {len(expected)} records")
        if self.example_ids is None:
            return None
        # The tokens fed are compared up to each record's own length (the dataset's), not the attention
        # mask's: a mask of ones over right padding feeds the same tokens (a causal model's real positions
        # never see the padding after them); a mask that hides tokens of the record is named as such.
        rows = ids.detach().to("cpu").tolist()
        mask = attn.detach().to("cpu").tolist() if attn is not None else None
        real = []
        for b, r in enumerate(expected):
            try:
                want = [int(t) for t in self.example_ids(int(r))]
            except (IndexError, KeyError) as e:
                self._fail(f"the training dataset has no example for record {r} ({type(e).__name__}): "
                           "train_dataset[i] must be record i's example (plan_sampler yields record indices)")
            if rows[b][:len(want)] != want:
                self._fail(f"update {u} micro-batch {m} row {b} is not record {r} of plan.json (its tokens differ "
                           f"from train_dataset[{r}]'s): the DataLoader does not follow the plan (a shuffling "
                           "sampler?); use tandem_leg.hf.plan_sampler(run) as the train sampler and make "
                           "train_dataset[i] record i's example")
            if mask is not None:
                hidden = [i for i, a in enumerate(mask[b][:len(want)]) if not a]
                if hidden:
                    self._fail(f"update {u} micro-batch {m} row {b} holds record {r}'s {len(want)} tokens but its "
                               f"attention mask hides {len(hidden)} of them (first at position {hidden[0]}): the "
                               "attention mask differs, not the tokens (padding is on the right, after the record's "
                               "tokens; a mask of ones over that padding is harmless)")
            real.append(len(want))
        return real

    # ---- the update ----------------------------------------------------------------------------------
    def begin_update(self, update):
        """Update `update` (0-based) starts: its micro-batches follow. On an observed update the
        fingerprint hooks are attached."""
        if not self._checked_modules:
            self.check_modules()
            self._checked_modules = True
        if self._update is not None and self.updates is not None and self._next_micro != len(self.updates[self._update]):
            self._fail(f"update {self._update} ran {self._next_micro} micro-batch(es), plan.json gives it "
                       f"{len(self.updates[self._update])}")
        if self._update is not None and update != self._update + 1:
            self._fail(f"update {update} follows update {self._update}")
        self._update, self._next_micro = int(update), 0
        self._observing = self.hooks is not None and self.observes(self._update)
        if self._observing:
            self.hooks.begin_update(self._update)
            self.hooks.attach()
            self._attached = True

    def begin_micro_batch(self, input_ids, attention_mask=None, labels=None, records=None):
        """The next training forward pass is the update's next micro-batch: sets the mask key, checks it
        against plan.json (`records`: the record indices the loop batched), starts its fingerprints."""
        if self._update is None:
            self._fail("a training forward pass before begin_update (TandemCallback(pair=True) calls it; a plain "
                       "loop calls pairing.begin_update(u) first)")
        u, m = self._update, self._next_micro
        real = self._check_plan(input_ids, attention_mask, u, m, records)
        if self.masks == "shared":
            self._check_padding(attention_mask, u, m, real)
        self._next_micro += 1
        self.context.update, self.context.micro_batch = u, m
        if self._observing:
            # the fingerprints summarise the records' own tokens (the plan's lengths when known), as the
            # reference's do, whatever the attention mask holds over the padding
            valid = attention_mask
            if real is not None:
                pos = torch.arange(input_ids.shape[1], device=input_ids.device)
                valid = (pos[None, :] < torch.tensor(real, device=input_ids.device)[:, None]).to(torch.long)
            self.hooks.begin_micro_batch(m, input_ids, valid, labels)
        self._explicit = (u, m)

    def end_backward(self):
        """Every micro-batch of the update is done (before clipping and the optimizer): hooks off."""
        if self._attached:
            self.hooks.detach()
            self._attached = False

    def before_optimizer_step(self, optimizer):
        """After clipping, right before optimizer.step(): on a replayed update, snapshots the step's
        operands (parameters, gradients, moments) so end_update can replay the spec's AdamW on them."""
        if self._update is None or not self.replays(self._update):
            return
        from .. import cosine_with_warmup_lr, warmup_updates

        spec = self.run.spec
        total = len(self.updates) if self.updates is not None else len(self.run.plan_updates())
        lr = cosine_with_warmup_lr(float(spec["optimizer"]["lr"]), self._update,
                                   warmup_updates(spec["schedule"]["warmup_fraction"], total), total)
        self.replay.before_step(unwrap_optimizer(optimizer), self._update, lr)

    def end_update(self):
        """After optimizer.step(): the optimizer's points of an observed update, kept for emit_fingerprints;
        the replayed step's check (before_optimizer_step), kept likewise."""
        self.end_backward()
        check = self.replay.after_step()
        if check is not None:
            self._checks.append(check)
        if self._observing:
            self.hooks.record_optimizer()
            self._points = (self._update, self.hooks.points)
            self.hooks.points = []
            self._observing = False

    def report_settings(self, events, optimizer, lr_scheduler=None, clip=None, schedule=None, warmup_updates=None):
        """Writes the `settings` event (optimizer_settings) once, before update 0 steps: tandem compares
        the optimizer's actual settings with the spec's and names each difference."""
        if self._settings_reported:
            return
        events.emit("settings", **optimizer_settings(self.model, optimizer, lr_scheduler, clip, schedule,
                                                     warmup_updates))
        self._settings_reported = True

    def take_fingerprints(self):
        """(update, points) of the last observed update, once; None when there is none."""
        p, self._points = self._points, None
        return p

    def emit_fingerprints(self, events):
        """Writes the `fingerprints` event of the update just stepped and its `optimizer_check` (the replayed
        step, before_optimizer_step) when it has them (call after its `step` event)."""
        p = self.take_fingerprints()
        if p is not None:
            events.emit("fingerprints", update=p[0], points=p[1])
        checks, self._checks = self._checks, []
        for c in checks:
            events.emit("optimizer_check", **c)

    def remove(self):
        """Removes the pairing's hooks (the shared masks stay)."""
        self.end_backward()
        for h in self._handles:
            h.remove()
        self._handles = []

    # ---- hooks: a model that is called with input_ids/attention_mask(/labels) keyword arguments ------
    @staticmethod
    def _inputs(args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        return ids, kwargs.get("attention_mask"), kwargs.get("labels")

    def _model_hook(self, module, args, kwargs):
        if not module.training:
            return
        ids, attn, labels = self._inputs(args, kwargs)
        self._labels = labels
        if self._explicit is None and ids is not None:
            self.begin_micro_batch(ids, attn, labels)

    def _decoder_hook(self, module, args, kwargs):
        if not module.training:
            return
        if self._explicit is None:
            ids, attn, _ = self._inputs(args, kwargs)
            if ids is None:
                self._fail("a training forward pass without input_ids and without pairing.begin_micro_batch(...)")
            self.begin_micro_batch(ids, attn, self._labels)
        self._explicit = None
        self._labels = None


def pair(model, run, leg):
    """Makes `model` (a peft model of the run's base) a paired leg `leg` of `run` (a RunFolder): shared
    dropout masks when the leg's dropout_masks is shared (the experiment's setting for this leg; with
    native masks peft's dropout stays), the plan check when its plan is shared, fingerprints on the
    observe updates. Refuses (PairingError) a model whose LoRA dropout p differs from the experiment's
    lora.dropout. Returns the Pairing (also kept as model.tandem_pairing); pairing a model twice
    returns the first one."""
    existing = getattr(model, "tandem_pairing", None)
    if existing is not None:
        return existing
    p = float(run.spec["lora"]["dropout"])
    for name, _layer, _proj, container, adapter in lora_dropouts(model):
        have = _dropout_p(container[adapter])
        if have is not None and abs(have - p) > 1e-12:
            raise PairingError(f"leg {leg}: {name} has dropout p {have:g}, the experiment's lora.dropout is {p:g}")
    pairing = Pairing(model, run, leg)
    if pairing.masks == "shared" and p > 0:
        install_shared_masks(model, pairing.seed, p, pairing.context)
    model.tandem_pairing = pairing
    return pairing
