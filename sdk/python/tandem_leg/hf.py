"""`TandemCallback`: a HuggingFace `transformers.TrainerCallback` that turns a `Trainer` (or TRL
`SFTTrainer`) run into a tandem leg (docs/legs.md); `plan_sampler(run)`: the run's plan as the Trainer's
train sampler. Needs transformers and torch (the rest of tandem_leg does not).

    args = tandem_leg.parse_leg_args()
    run = tandem_leg.RunFolder(args.run)
    cb = TandemCallback(run, args, implementation="hf-trainer", heldout=my_heldout_ce, pair=True)  # hello
    ... load the model, tokenize (the callback times both itself) ...
    cb.l3(records)                        # your data pipeline's first K records (tandem_leg.tokens.Encoded-like)

    class PlanTrainer(Trainer):           # micro-batch m of update u = plan.json's updates[u][m]
        def _get_train_sampler(self, *a, **k):
            return plan_sampler(run)
    trainer = PlanTrainer(..., train_dataset=ds,  # ds[i] = record i's example
                          args=TrainingArguments(..., logging_steps=1), callbacks=[cb])
    trainer.train()                       # l2, l1, eval, step, fingerprints, timing, memory, done

What it reports, and from where:
- l2 at train begin: the model's parameters as loaded (tandem_leg.torch.l2_digests);
- l1 and eval: `heldout(model) -> (token-weighted CE, supervised tokens)` when given, before training
  and every `eval.interval` updates and after the last; without it, the Trainer's own `eval_loss`
  (on_evaluate; whatever normalisation the Trainer uses — tandem then measures it at L1/L4);
- step per optimizer update from the Trainer's logs (set `logging_steps=1`): loss, grad_norm (pre-clip),
  learning_rate (the one the update used), wall time between step begin and end; `tokens` from
  `tokens_per_update` when given (else 0);
- settings at train begin: the optimizer the Trainer built (per parameter group lr, betas, eps, weight
  decay, its tensors; the schedule and its warmup; max_grad_norm), which tandem compares with the spec
  before update 0 (settings=False leaves it out);
- fingerprints (pair=True) on the experiment's `observe` updates, after that update's step;
- timing: model_load_s and tokenize_s measured by the callback itself — the time spent inside
  `from_pretrained` (transformers models, peft adapters) and inside the tokenizer's `__call__` /
  `apply_chat_template` between the callback's construction and train begin (construct it first);
- done at train end, after saving the adapter to legs/<leg>/final/.

pair=True: the leg is paired with the reference (tandem_leg.torch.pair: the shared dropout masks when
the leg's dropout_masks is shared; every micro-batch checked against plan.json when its plan is
shared: the batch's rows must be train_dataset[r] for the plan's records r, right-padded to the
longest). pair=False on a leg the experiment pairs (shared masks or dropout 0, shared plan) is refused
at train begin: its numbers would be judged by the float32 bound without the masks or the plan shared.
"""
import contextlib
import os
import platform
import sys
import time

from transformers import TrainerCallback

from . import __version__, peak_host_rss_bytes, process_age_s, stack_versions
from .protocol import EventWriter, claim_stdout
from .torch import PairingError, l2_digests, optimizer_settings, pair as pair_model  # noqa: F401 (l2_digests: tandem_leg.hf's name too)


def plan_micro_batches(run):
    """plan.json's micro-batches in order (update by update): the record indices of each, for a pipeline
    that feeds ready-made micro-batches (an IterableDataset yielding one padded batch per item)."""
    return [[int(i) for i in mb] for u in run.plan_updates() for mb in u]


def plan_sampler(run):
    """A torch Sampler yielding plan.json's record indices in order, micro-batch by micro-batch: with the
    Trainer's batch size = batch.micro_batch and gradient accumulation = batch.accumulation, micro-batch m
    of update u is updates[u][m]. The dataset must be indexed by record index (dataset[i] = record i).
    Refuses (PairingError) a plan a fixed batch size cannot follow (a short micro-batch or update)."""
    import torch

    spec = run.spec
    micro, accumulation = int(spec["batch"]["micro_batch"]), int(spec["batch"]["accumulation"])
    updates = run.plan_updates()
    for u, mbs in enumerate(updates):
        if len(mbs) != accumulation or any(len(mb) != micro for mb in mbs):
            raise PairingError(f"plan.json update {u} has micro-batches of {[len(mb) for mb in mbs]} records, not "
                               f"{accumulation} of {micro}: a Trainer's fixed batch size cannot follow it (cut the "
                               "run with batch.max_updates)")
    order = [int(i) for mbs in updates for mb in mbs for i in mb]

    class PlanSampler(torch.utils.data.Sampler):
        def __iter__(self):
            return iter(order)

        def __len__(self):
            return len(order)

    return PlanSampler()


class _SetupTimer:
    """Time spent inside model loading and tokenization while it is installed: wraps
    PreTrainedModel.from_pretrained, peft's PeftModel.from_pretrained and the tokenizer's __call__ and
    apply_chat_template (counting a nested call once); remove() puts the originals back."""

    def __init__(self):
        self.seconds = {"model_load": 0.0, "tokenize": 0.0}
        self._depth = {"model_load": 0, "tokenize": 0}
        self._restore = []
        try:
            from transformers import PreTrainedModel
            from transformers.tokenization_utils_base import PreTrainedTokenizerBase
            self._wrap(PreTrainedModel, "from_pretrained", "model_load", classmethod_=True)
            self._wrap(PreTrainedTokenizerBase, "__call__", "tokenize")
            self._wrap(PreTrainedTokenizerBase, "apply_chat_template", "tokenize")
        except (ImportError, AttributeError) as e:  # measured as 0 then; said on stderr
            print(f"tandem_leg.hf: setup times not measured ({e})", file=sys.stderr)
        try:
            from peft import PeftModel
            self._wrap(PeftModel, "from_pretrained", "model_load", classmethod_=True)
        except (ImportError, AttributeError):
            pass

    @contextlib.contextmanager
    def _timed(self, what):
        self._depth[what] += 1
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._depth[what] -= 1
            if self._depth[what] == 0:
                self.seconds[what] += time.perf_counter() - t0

    def _wrap(self, cls, name, what, classmethod_=False):
        original = cls.__dict__[name]
        timed = self._timed
        if classmethod_:
            func = original.__func__

            def wrapper(klass, *a, **k):
                with timed(what):
                    return func(klass, *a, **k)
            setattr(cls, name, classmethod(wrapper))
        else:
            def wrapper(self_, *a, **k):
                with timed(what):
                    return original(self_, *a, **k)
            setattr(cls, name, wrapper)
        self._restore.append((cls, name, original))

    def remove(self):
        for cls, name, original in reversed(self._restore):
            setattr(cls, name, original)
        self._restore = []


def _leg_is_paired(run, leg):
    """The experiment judges this leg paired (docs/thresholds.md, legs_are_paired): shared masks or no
    dropout, and the shared plan."""
    masks_shared = float(run.spec["lora"]["dropout"]) == 0.0 or run.leg_setting(leg, "dropout_masks") == "shared"
    return masks_shared and run.leg_setting(leg, "plan") == "shared"


class TandemCallback(TrainerCallback):
    def __init__(self, run, args, implementation="hf-trainer", stack=None, heldout=None, tokens_per_update=None,
                 events=None, versions=None, pair=False, hello_fields=None, settings=True,
                 replay=True, example_ids=None):
        import torch
        import transformers

        self.run, self.leg = run, args.leg
        # The Trainer prints its log dicts to stdout: the protocol keeps stdout to itself.
        self.events = events or EventWriter(claim_stdout())
        self.heldout = heldout
        self.tokens_per_update = tokens_per_update
        self.pair = pair
        self.pairing = None
        # settings=False: no `settings` event (tandem then judges the optimizer by its numbers alone)
        self.settings = settings
        self.replay = replay
        # record index -> the token ids your pipeline feeds for it: what the plan check compares each row
        # with; None: train_dataset[i]["input_ids"] (a dataset indexed by record)
        self.example_ids = example_ids
        self.eval_interval = int(run.spec["eval"]["interval"])
        self._timer = _SetupTimer()
        # None: what the callback measured; a number set by the script wins.
        self.model_load_s = self.tokenize_s = None
        self._step_t0 = None
        self._lr = None
        self._train_s = 0.0
        self._l1_done = False
        v = stack_versions(args.device)
        v["tandem_leg"] = __version__
        v.update(versions or {})
        self.events.emit("hello", implementation=implementation, leg=self.leg, language="python",
                         stack=stack or "HuggingFace transformers Trainer (tandem_leg.hf.TandemCallback)", versions=v,
                         device=args.device, device_name=platform.processor() or platform.machine(),
                         threads=max(0, args.threads), pid=os.getpid(), spec_sha256=run.spec_sha256,
                         resume=bool(args.resume), paired=bool(pair), **(hello_fields or {}))

    # ---- what the script reports itself --------------------------------------------------------------
    def l3(self, records, template=None):
        """records: the first K records as the script's own pipeline renders and tokenizes them (objects
        with an l3_record() method, or dicts with the l3 fields)."""
        self.events.emit("l3", template=template or self.run.leg_setting(self.leg, "template"),
                         max_len=int(self.run.spec["sequence"]["max_len"]),
                         records=[r.l3_record() if hasattr(r, "l3_record") else r for r in records])

    def error(self, message):
        self.events.emit("error", message=str(message).replace("\n", " ") or "failed")

    def _eval(self, model, update):
        ce, n = self.heldout(model)
        if update == 0 and not self._l1_done:
            self.events.emit("l1", heldout_ce=ce, tokens=n, examples=len(self.run.eval_prefix()))
            self._l1_done = True
        self.events.emit("eval", update=update, heldout_ce=ce, tokens=n)

    def _evaluate_now(self, model, update):
        was_training = model.training
        model.eval()
        try:
            self._eval(model, update)
        finally:
            model.train(was_training)

    # ---- pairing -------------------------------------------------------------------------------------
    def _pair(self, model, train_dataloader):
        if not self.pair:
            if _leg_is_paired(self.run, self.leg):
                raise PairingError(
                    f"leg {self.leg}: the experiment pairs this leg with the reference (dropout_masks "
                    f"{self.run.leg_setting(self.leg, 'dropout_masks')}, plan {self.run.leg_setting(self.leg, 'plan')}) "
                    "but TandemCallback(pair=False) shares neither the masks nor the plan: pass pair=True (with "
                    "tandem_leg.hf.plan_sampler(run) as the train sampler), or give the leg \"dropout_masks\": "
                    "\"native\" in the experiment's overrides")
            return
        self.pairing = pair_model(model, self.run, self.leg)
        dataset = getattr(train_dataloader, "dataset", None)
        if self.pairing.updates is not None:
            if self.example_ids is not None:
                self.pairing.example_ids = self.example_ids
                return
            import torch

            if dataset is None or isinstance(dataset, torch.utils.data.IterableDataset):
                raise PairingError(f"leg {self.leg}: the train dataset is not indexed by record (an IterableDataset, "
                                   "or none): pass TandemCallback(example_ids=...) (record index -> the token ids you "
                                   "feed for it) so every micro-batch can be checked against plan.json")
            self.pairing.example_ids = lambda i: dataset[i]["input_ids"]

    # ---- Trainer events --------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, optimizer=None,
                       lr_scheduler=None, **kw):
        self._timer.remove()
        self._pair(model, train_dataloader)
        self.events.emit("l2", tensors=l2_digests(model, self.run))
        if self.settings and optimizer is not None:
            # the optimizer the Trainer built from TrainingArguments, before update 0 (max_grad_norm 0: no clip)
            self.events.emit("settings", **optimizer_settings(model, optimizer, lr_scheduler, clip=args.max_grad_norm))
        if self.heldout is not None:
            self._evaluate_now(model, 0)
        measured = self._timer.seconds
        self.events.emit("timing", phase="setup",
                         model_load_s=measured["model_load"] if self.model_load_s is None else self.model_load_s,
                         tokenize_s=measured["tokenize"] if self.tokenize_s is None else self.tokenize_s,
                         setup_s=process_age_s())

    def on_step_begin(self, args, state, control, lr_scheduler=None, **kw):
        if self.pairing is not None:
            self.pairing.begin_update(state.global_step)
        self._step_t0 = time.perf_counter()
        self._step_c0 = time.process_time()  # CPU time: the gate's step-time measure (docs/gate.md)
        self._lr = lr_scheduler.get_last_lr()[0] if lr_scheduler is not None else None

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kw):
        if self.pairing is not None:
            self.pairing.end_backward()
            if optimizer is not None and self.replay:  # the Trainer has clipped: the step's own operands
                self.pairing.before_optimizer_step(optimizer)

    def on_optimizer_step(self, args, state, control, **kw):
        if self.pairing is not None:
            self.pairing.end_update()

    def on_step_end(self, args, state, control, **kw):
        if self._step_t0 is not None:
            self._wall = time.perf_counter() - self._step_t0
            self._cpu = time.process_time() - self._step_c0
            self._train_s += self._wall

    def on_log(self, args, state, control, logs=None, model=None, **kw):
        logs = logs or {}
        if "loss" not in logs:
            return
        u = state.global_step - 1
        lr = logs.get("learning_rate", self._lr)
        tokens = int(self.tokens_per_update[u]) if self.tokens_per_update else 0
        self.events.emit("step", update=u, loss=float(logs["loss"]), grad_norm=float(logs.get("grad_norm", float("nan"))),
                         lr=float(lr), tokens=tokens, wall_s=getattr(self, "_wall", 0.0),
                         **({"cpu_s": self._cpu} if getattr(self, "_cpu", None) is not None else {}))
        if self.pairing is not None:
            self.pairing.emit_fingerprints(self.events)
        done = state.global_step
        if self.heldout is not None and (done % self.eval_interval == 0 or done == state.max_steps):
            self._evaluate_now(model, done)

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        if self.heldout is not None or not metrics or "eval_loss" not in metrics:
            return
        update = state.global_step
        if update == 0 and not self._l1_done:
            self.events.emit("l1", heldout_ce=float(metrics["eval_loss"]), tokens=0, examples=len(self.run.eval_prefix()))
            self._l1_done = True
        self.events.emit("eval", update=update, heldout_ce=float(metrics["eval_loss"]), tokens=0)

    def on_train_end(self, args, state, control, model=None, **kw):
        final = os.path.join(self.run.leg_dir(self.leg), "final")
        model.save_pretrained(final)
        self.events.emit("timing", phase="train", train_s=self._train_s, total_s=process_age_s())
        self.events.emit("memory", peak_host_rss_bytes=peak_host_rss_bytes(), peak_device_bytes=None)
        self.events.emit("done", updates=state.global_step, final=os.path.relpath(final, self.run.path))
