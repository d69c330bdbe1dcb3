"""`TandemCallback`: a HuggingFace `transformers.TrainerCallback` that turns a `Trainer` (or TRL
`SFTTrainer`) run into a tandem leg (docs/legs.md). Needs transformers and torch (the rest of
tandem_leg does not).

    args = tandem_leg.parse_leg_args()
    run = tandem_leg.RunFolder(args.run)
    cb = TandemCallback(run, args, implementation="hf-trainer", heldout=my_heldout_ce)  # writes hello
    cb.l3(records)                        # your data pipeline's first K records (tandem_leg.tokens.Encoded-like)
    trainer = Trainer(..., args=TrainingArguments(..., logging_steps=1), callbacks=[cb])
    trainer.train()                       # l2, l1, eval, step, timing, memory, done

What it reports, and from where:
- l2 at train begin: the model's parameters as loaded — base weights under the names of
  base/model.safetensors, the adapter under peft's file names (get_peft_model_state_dict) — as float32;
- l1 and eval: `heldout(model) -> (token-weighted CE, supervised tokens)` when given, before training
  and every `eval.interval` updates and after the last; without it, the Trainer's own `eval_loss`
  (on_evaluate; whatever normalisation the Trainer uses — tandem then measures it at L1/L4);
- step per optimizer update from the Trainer's logs (set `logging_steps=1`): loss, grad_norm (pre-clip),
  learning_rate (the one the update used), wall time between step begin and end; `tokens` from
  `tokens_per_update` when given (else 0);
- done at train end, after saving the adapter to legs/<leg>/final/.
"""
import os
import platform
import time

from transformers import TrainerCallback

from . import __version__, digest, peak_host_rss_bytes
from .protocol import EventWriter, claim_stdout


def l2_digests(model, run):
    """L2 digests of a peft model as loaded: base tensors named as in base/model.safetensors (peft wraps
    adapted layers as <module>.base_layer.weight), then the adapter under peft's file names."""
    from peft import get_peft_model_state_dict

    from .safetensors import read_header

    header, _, _ = read_header(os.path.join(run.base_dir, "model.safetensors"))
    base_sd = model.get_base_model().state_dict()
    out = []
    for name in sorted(header):
        t = base_sd.get(name)
        if t is None:
            head, _, leaf = name.rpartition(".")
            t = base_sd[f"{head}.base_layer.{leaf}"]
        out.append(digest(name, "base", list(t.shape), t.detach().float().contiguous().cpu().numpy().tobytes()))
    adapter = get_peft_model_state_dict(model)
    for name in sorted(adapter):
        t = adapter[name]
        out.append(digest(name, "adapter", list(t.shape), t.detach().float().contiguous().cpu().numpy().tobytes()))
    return out


class TandemCallback(TrainerCallback):
    def __init__(self, run, args, implementation="hf-trainer", stack=None, heldout=None, tokens_per_update=None,
                 events=None, versions=None):
        import torch
        import transformers

        self.run, self.leg = run, args.leg
        # The Trainer prints its log dicts to stdout: the protocol keeps stdout to itself.
        self.events = events or EventWriter(claim_stdout())
        self.heldout = heldout
        self.tokens_per_update = tokens_per_update
        self.eval_interval = int(run.spec["eval"]["interval"])
        self.t_start = time.perf_counter()
        self.model_load_s = self.tokenize_s = 0.0
        self._step_t0 = None
        self._lr = None
        self._train_s = 0.0
        self._l1_done = False
        v = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
             "tandem_leg": __version__}
        v.update(versions or {})
        self.events.emit("hello", implementation=implementation, leg=self.leg, language="python",
                         stack=stack or "HuggingFace transformers Trainer (tandem_leg.hf.TandemCallback)", versions=v,
                         device=args.device, device_name=platform.processor() or platform.machine(),
                         threads=max(0, args.threads), pid=os.getpid(), spec_sha256=run.spec_sha256,
                         resume=bool(args.resume))

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

    # ---- Trainer events --------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kw):
        self.events.emit("l2", tensors=l2_digests(model, self.run))
        if self.heldout is not None:
            was_training = model.training
            model.eval()
            self._eval(model, 0)
            model.train(was_training)
        self.events.emit("timing", phase="setup", model_load_s=self.model_load_s, tokenize_s=self.tokenize_s,
                         setup_s=time.perf_counter() - self.t_start)

    def on_step_begin(self, args, state, control, lr_scheduler=None, **kw):
        self._step_t0 = time.perf_counter()
        self._lr = lr_scheduler.get_last_lr()[0] if lr_scheduler is not None else None

    def on_step_end(self, args, state, control, **kw):
        if self._step_t0 is not None:
            self._wall = time.perf_counter() - self._step_t0
            self._train_s += self._wall

    def on_log(self, args, state, control, logs=None, model=None, **kw):
        logs = logs or {}
        if "loss" not in logs:
            return
        u = state.global_step - 1
        lr = logs.get("learning_rate", self._lr)
        tokens = int(self.tokens_per_update[u]) if self.tokens_per_update else 0
        self.events.emit("step", update=u, loss=float(logs["loss"]), grad_norm=float(logs.get("grad_norm", float("nan"))),
                         lr=float(lr), tokens=tokens, wall_s=getattr(self, "_wall", 0.0))
        done = state.global_step
        if self.heldout is not None and (done % self.eval_interval == 0 or done == state.max_steps):
            was_training = model.training
            model.eval()
            self._eval(model, done)
            model.train(was_training)

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
        self.events.emit("timing", phase="train", train_s=self._train_s, total_s=time.perf_counter() - self.t_start)
        self.events.emit("memory", peak_host_rss_bytes=peak_host_rss_bytes(), peak_device_bytes=None)
        self.events.emit("done", updates=state.global_step, final=os.path.relpath(final, self.run.path))
