"""The sdk-python leg: the experiment's training loop written in Python over tandem's engine C ABI.

    python3 -m tandem_leg.sdk_leg --run RUN_DIR --leg NAME --device cpu [--threads N] [--resume]
    (or sdk/python/sdk_leg.py, which needs no install)

The engine computes (the frozen base, the forward pass, the fused cross-entropy and the backward
pass into the LoRA parameters of one micro-batch: `tandem_model_*`); everything else is written
here, independently of the engine's own trainer, with the standard library only: the adapter is
built from the run folder's init/adapter_model.safetensors by this package's own reader and laid
out in the engine's flat order by name, the gradient is accumulated over the micro-batches of an
update (docs/spec.md §Recipe's per-update token normalisation), its global norm is taken and clipped as
torch.nn.utils.clip_grad_norm_ does, AdamW (torch semantics, float32 state) and transformers'
cosine-with-warmup schedule step the parameters, and checkpoints are this leg's own files
(adapter, AdamW moments, cursor) committed by manifest. Text: tandem's tokenizer and template via
the `tandem` command line (tandem_leg.tokens), with docs/spec.md §Supervision's supervision, truncation and padding
written here. Events: tandem_leg.protocol, validated as they are written.
"""
import array
import json
import math
import operator
import os
import platform
import sys
import time
import traceback

from . import (__version__, cosine_with_warmup_lr, digest, needed_records, parse_leg_args, peak_host_rss_bytes,
               warmup_updates)
from . import checkpoint as ckpt
from . import engine
from . import safetensors
from .protocol import EventWriter, claim_stdout
from .run_folder import RunFolder
from .tokens import TandemText, encode_records, micro_batch

IMPLEMENTATION = "sdk-python"


class LegError(RuntimeError):
    pass


def log(msg):
    print(f"sdk-python leg: {msg}", file=sys.stderr, flush=True)


def build_adapter(model, init_dir, spec):
    """The flat parameter vector in the engine's layout, filled by name from the initial adapter file
    (read here, not by the engine); the file's config must be the experiment's."""
    cfg_path = os.path.join(init_dir, "adapter_config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    lora = spec["lora"]
    for key, want in (("r", int(lora["rank"])), ("lora_alpha", float(lora["alpha"])),
                      ("use_rslora", bool(lora["use_rslora"]))):
        if cfg.get(key) != want:
            raise LegError(f"{cfg_path}: {key} is {cfg.get(key)!r}, the experiment says {want!r}")
    tensors = safetensors.read(os.path.join(init_dir, "adapter_model.safetensors"))
    params = array.array("f", bytes(4 * model.num_params))
    wanted = set()
    for t in model.adapter:
        wanted.add(t.name)
        if t.name not in tensors:
            raise LegError(f"{init_dir}/adapter_model.safetensors: tensor {t.name} missing")
        shape, values = tensors[t.name]
        if shape != t.shape:
            raise LegError(f"{init_dir}/adapter_model.safetensors: tensor {t.name} has shape {shape}, expected {t.shape}")
        params[t.offset:t.offset + t.count] = values
    extra = sorted(set(tensors) - wanted)
    if extra:
        raise LegError(f"{init_dir}/adapter_model.safetensors: unexpected tensor {extra[0]} (other targets or rank?)")
    return params


def adapter_tensors(model, flat):
    return {t.name: (t.shape, flat[t.offset:t.offset + t.count]) for t in model.adapter}


class AdamW:
    """torch.optim.AdamW (single-tensor, non-capturable) on float32 state, element by element:
    p *= 1 - lr*wd; m += (1-b1)*(g-m); v = v*b2 + ((1-b2)*g)*g;
    p += -(lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps), t the 1-based step."""

    def __init__(self, n, betas, eps, weight_decay):
        self.b1, self.b2 = float(betas[0]), float(betas[1])
        self.eps, self.wd = float(eps), float(weight_decay)
        self.m = array.array("f", bytes(4 * n))
        self.v = array.array("f", bytes(4 * n))
        self.step = 0

    def update(self, params, grads, lr):
        self.step += 1
        b1, b2, eps = self.b1, self.b2, self.eps
        w1, w2 = 1.0 - b1, 1.0 - b2
        step_size = -(lr / (1.0 - b1 ** self.step))
        bc2_sqrt = math.sqrt(1.0 - b2 ** self.step)
        if self.wd != 0.0:
            decay = 1.0 - lr * self.wd
            params = array.array("f", [p * decay for p in params])
        # array('f') rounds every stored value to float32, as torch's float32 state does.
        self.m = m = array.array("f", [mi + w1 * (g - mi) for mi, g in zip(self.m, grads)])
        self.v = v = array.array("f", [vi * b2 + (w2 * g) * g for vi, g in zip(self.v, grads)])
        sqrt = math.sqrt
        return array.array("f", [p + step_size * (mi / (sqrt(vi) / bc2_sqrt + eps))
                                 for p, mi, vi in zip(params, m, v)])


class SdkLeg:
    """The sdk-python leg as named steps, in the order its events come (docs/leg-protocol.md), as the
    engine leg's EngineLeg::run (experiments/legs/src/engine_leg.cpp): open (hello, the device and
    plan it accepts, the checkpoint to resume from), load the model (the engine's base, this leg's
    adapter), encode the data, build the trainer, then either resume or report the checks (L2, L3,
    then L1 with the first evaluation), the update loop (step, evaluate, checkpoint) and finish (the
    adapter, timing, memory, done)."""

    def __init__(self, args, events):
        self.args, self.events = args, events

    def run(self):
        self.t_start = time.perf_counter()
        self.open()
        self.load_model()
        self.encode_data()
        self.build_trainer()
        if self.resume_path is not None:
            self.resume()
        else:
            self.report_checks()
        self.events.emit("timing", phase="setup", model_load_s=self.model_load_s, tokenize_s=self.tokenize_s,
                         setup_s=time.perf_counter() - self.t_start)
        self.train()
        self.finish()

    # ---- set-up ----------------------------------------------------------------------------------------

    def open(self):
        """hello, then the device and plan this leg accepts, and the checkpoint to resume from."""
        args = self.args
        self.run_folder = run = RunFolder(args.run)
        self.spec, self.leg = run.spec, args.leg
        self.events.emit("hello", implementation=IMPLEMENTATION, leg=self.leg, language="python",
                         stack="tandem engine via its C ABI (ctypes); loop, adapter, AdamW, schedule, clipping and "
                               "checkpoints in Python (standard library)",
                         versions={"python": platform.python_version(), "tandem_engine": engine.version(),
                                   "tandem_leg": __version__},
                         device=args.device, device_name=platform.processor() or platform.machine(),
                         threads=max(0, args.threads), pid=os.getpid(), spec_sha256=run.spec_sha256,
                         resume=bool(args.resume))
        if args.device != "cpu":
            raise LegError(f"--device {args.device}: the sdk-python leg runs on the CPU (the C ABI's model has no device choice)")
        if run.leg_setting(self.leg, "plan") != "shared":
            raise LegError(f"experiment field plan: the sdk-python leg follows plan.json (plan 'shared'), not "
                           f"{run.leg_setting(self.leg, 'plan')!r}")
        self.leg_dir = run.leg_dir(self.leg)
        self.resume_path = self.resume_manifest = None
        if args.resume:
            self.resume_path, self.resume_manifest = ckpt.resume_checkpoint(self.leg_dir, run.spec_sha256, log)

    def load_model(self):
        """The engine loads the base; the adapter is built here."""
        t0 = time.perf_counter()
        run, lora = self.run_folder, self.spec["lora"]
        masks = run.leg_setting(self.leg, "dropout_masks")
        self.model = engine.Model(run.base_dir, int(lora["rank"]), float(lora["alpha"]), bool(lora["use_rslora"]),
                                  float(lora["dropout"]), list(lora["targets"]),
                                  engine.DROPOUT_SHARED if masks == "shared" else engine.DROPOUT_NATIVE,
                                  self.args.threads, int(self.spec["seed"]))
        self.params = build_adapter(self.model, run.init_dir, self.spec)
        self.model_load_s = time.perf_counter() - t0

    def encode_data(self):
        """tandem's template + tokenizer (CLI), docs/spec.md §Supervision rules here; the evaluation
        prefix cut into the engine's micro-batches."""
        t0 = time.perf_counter()
        run = self.run_folder
        text = TandemText(engine.find_tandem_cli(), run.tokenizer_dir, run.leg_setting(self.leg, "template"))
        records = run.records()
        self.updates = run.plan_updates()
        self.eval_indices = eval_indices = run.eval_prefix()
        self.l3_count = run.l3_count()
        needed = needed_records(self.updates, eval_indices, self.l3_count)
        self.max_len = int(self.spec["sequence"]["max_len"])
        self.encoded = encode_records(text, records, needed, self.max_len)
        self.pad_id = text.token_id("<|endoftext|>")
        self.tokenize_s = time.perf_counter() - t0

        micro = int(self.spec["batch"]["micro_batch"])
        self.eval_batches = [engine.c_micro_batch(*micro_batch([self.encoded[i] for i in eval_indices[k:k + micro]],
                                                               self.pad_id))
                             for k in range(0, len(eval_indices), micro)]

    def build_trainer(self):
        """AdamW, the schedule's warmup, clipping, and the intervals of evaluation and checkpoints."""
        spec = self.spec
        self.total_updates = len(self.updates)
        self.warmup = warmup_updates(spec["schedule"]["warmup_fraction"], self.total_updates)
        opt = spec["optimizer"]
        self.adamw = AdamW(self.model.num_params, opt["betas"], opt["eps"], opt["weight_decay"])
        self.base_lr, self.clip = float(opt["lr"]), float(spec["clip"])
        self.eval_interval = int(spec["eval"]["interval"])
        self.ckpt_interval = int((spec.get("checkpoint") or {}).get("interval", 0) or 0)
        self.start = 0

    def evaluate(self):
        self.model.set_params(self.params)
        total, tokens = 0.0, 0
        for mb in self.eval_batches:
            s, n = self.model.loss(mb)
            total += s  # per-chunk sums in float64, divided once (docs/leg-protocol.md)
            tokens += n
        return (total / tokens if tokens else float("nan")), tokens

    # ---- resume, or the checks -------------------------------------------------------------------------

    def resume(self):
        """The adapter, the AdamW moments and step, and the dropout counter of the checkpoint."""
        path, model, adamw = self.resume_path, self.model, self.adamw
        st = safetensors.read(os.path.join(path, "adapter_model.safetensors"))
        mv = safetensors.read(os.path.join(path, "optimizer.safetensors"))
        with open(os.path.join(path, "state.json"), encoding="utf-8") as f:
            state = json.load(f)
        for t in model.adapter:
            self.params[t.offset:t.offset + t.count] = st[t.name][1]
            adamw.m[t.offset:t.offset + t.count] = mv["exp_avg." + t.name][1]
            adamw.v[t.offset:t.offset + t.count] = mv["exp_avg_sq." + t.name][1]
        adamw.step = int(state["step"])
        model.dropout_counter = int(state["dropout_counter"])
        self.start = int(self.resume_manifest["update"])
        if self.start != adamw.step:
            raise LegError(f"{path}/state.json: step {adamw.step} but the manifest says update {self.start}")
        self.events.emit("resume", update=self.start, path=os.path.relpath(path, self.run_folder.path))

    def report_checks(self):
        """L2 (the engine's base digests, this leg's adapter), L3, and L1 with the evaluation at update 0."""
        adapter_digests = [digest(name, "adapter", shape, values)
                           for name, (shape, values) in sorted(adapter_tensors(self.model, self.params).items())]
        self.events.emit("l2", tensors=self.model.base_digests() + adapter_digests)
        self.events.emit("l3", template=self.run_folder.leg_setting(self.leg, "template"), max_len=self.max_len,
                         records=[self.encoded[i].l3_record() for i in range(self.l3_count)])
        ce, n = self.evaluate()
        self.events.emit("l1", heldout_ce=ce, tokens=n, examples=len(self.eval_indices))
        self.events.emit("eval", update=0, heldout_ce=ce, tokens=n)

    # ---- the update loop -------------------------------------------------------------------------------

    def train(self):
        self.grads = array.array("f", bytes(4 * self.model.num_params))
        self.train_s = 0.0
        for u in range(self.start, self.total_updates):
            self.train_update(u)
            done = u + 1
            if done % self.eval_interval == 0 or done == self.total_updates:
                ce, n = self.evaluate()
                self.events.emit("eval", update=done, heldout_ce=ce, tokens=n)
            if self.ckpt_interval and done % self.ckpt_interval == 0 and done < self.total_updates:
                self.write_checkpoint(done)

    def train_update(self, u):
        """Update u: the gradient accumulated over its micro-batches, clipped, AdamW at the schedule's
        learning rate; then its step event."""
        t0 = time.perf_counter()
        c0 = time.process_time()  # CPU time: the gate's step-time measure (docs/gate.md)
        batches = [micro_batch([self.encoded[i] for i in mb], self.pad_id) for mb in self.updates[u]]
        n_update = sum(sum(b[3]) for b in batches)
        input_tokens = sum(sum(b[4]) for b in batches)
        if n_update == 0:
            raise LegError(f"plan.json: update {u} has no supervised token")
        acc, loss_total = self.accumulate_gradients(u, batches, n_update)
        grad_norm = math.sqrt(sum(map(operator.mul, acc, acc)))
        coef = min(1.0, self.clip / (grad_norm + 1e-6))  # clip_grad_norm_
        clipped = array.array("f", [g * coef for g in acc]) if coef < 1.0 else array.array("f", acc)
        lr = cosine_with_warmup_lr(self.base_lr, u, self.warmup, self.total_updates)
        self.params = self.adamw.update(self.params, clipped, lr)
        wall = time.perf_counter() - t0
        self.train_s += wall
        self.events.emit("step", update=u, loss=loss_total / n_update, grad_norm=grad_norm, lr=lr, tokens=n_update,
                         input_tokens=input_tokens, wall_s=wall, cpu_s=time.process_time() - c0)

    def accumulate_gradients(self, u, batches, n_update):
        """The update's gradient summed in float64 over its micro-batches, and its summed loss."""
        self.model.set_params(self.params)
        acc, loss_total = None, 0.0
        for m, b in enumerate(batches):
            # grad_scale 1/N: every micro-batch backpropagates (sum of its token losses) / (labels of the update).
            s, _ = self.model.forward_backward(engine.c_micro_batch(*b), u, m, 1.0 / n_update, self.grads)
            loss_total += s
            acc = array.array("d", self.grads) if acc is None else array.array("d", map(operator.add, acc, self.grads))
        return acc, loss_total

    def write_checkpoint(self, done):
        """This leg's own files (adapter, AdamW moments, state) after `done` updates, committed by manifest."""
        model, adamw, params, run = self.model, self.adamw, self.params, self.run_folder

        def write(tmp):
            names = adapter_tensors(model, params)
            safetensors.write(os.path.join(tmp, "adapter_model.safetensors"), names)
            moments = {}
            for t in model.adapter:
                moments["exp_avg." + t.name] = (t.shape, adamw.m[t.offset:t.offset + t.count])
                moments["exp_avg_sq." + t.name] = (t.shape, adamw.v[t.offset:t.offset + t.count])
            safetensors.write(os.path.join(tmp, "optimizer.safetensors"), moments)
            with open(os.path.join(tmp, "state.json"), "w", encoding="utf-8") as f:
                json.dump({"step": adamw.step, "next_update": done, "dropout_counter": str(model.dropout_counter),
                           "spec_sha256": run.spec_sha256, "writer": IMPLEMENTATION}, f)
        path = ckpt.write_checkpoint(self.leg_dir, done, run.spec_sha256, write)
        self.events.emit("checkpoint", update=done, path=os.path.relpath(path, run.path))

    # ---- the end ---------------------------------------------------------------------------------------

    def finish(self):
        """The final adapter (with the initial adapter's config), timing, memory and done."""
        run = self.run_folder
        final = os.path.join(self.leg_dir, "final")
        os.makedirs(final, exist_ok=True)
        safetensors.write(os.path.join(final, "adapter_model.safetensors"), adapter_tensors(self.model, self.params),
                          metadata={"format": "pt"})
        with open(os.path.join(run.init_dir, "adapter_config.json"), encoding="utf-8") as f:
            config_text = f.read()
        with open(os.path.join(final, "adapter_config.json"), "w", encoding="utf-8") as f:
            f.write(config_text)
        self.events.emit("timing", phase="train", train_s=self.train_s, total_s=time.perf_counter() - self.t_start)
        self.events.emit("memory", peak_host_rss_bytes=peak_host_rss_bytes(), peak_device_bytes=None)
        self.events.emit("done", updates=self.total_updates, final=os.path.relpath(final, run.path))


def run_leg(args, events):
    SdkLeg(args, events).run()


def main(argv=None):
    args = parse_leg_args(argv, description=__doc__.splitlines()[0])
    events = EventWriter(claim_stdout())  # nothing else may write to the protocol's stdout
    try:
        run_leg(args, events)
    except KeyboardInterrupt:
        events.emit("error", message="interrupted")
        return 130
    except Exception as e:  # the runner records the message; the traceback goes to stderr.log
        traceback.print_exc()
        message = f"{type(e).__name__}: {e}".replace("\n", " ")
        try:
            events.emit("error", message=message)
        except Exception:
            pass
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
