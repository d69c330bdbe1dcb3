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

from . import __version__, cosine_with_warmup_lr, digest, parse_leg_args, peak_host_rss_bytes, warmup_updates
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


def run_leg(args, events):
    t_start = time.perf_counter()
    run = RunFolder(args.run)
    spec, leg = run.spec, args.leg
    events.emit("hello", implementation=IMPLEMENTATION, leg=leg, language="python",
                stack="tandem engine via its C ABI (ctypes); loop, adapter, AdamW, schedule, clipping and "
                      "checkpoints in Python (standard library)",
                versions={"python": platform.python_version(), "tandem_engine": engine.version(),
                          "tandem_leg": __version__},
                device=args.device, device_name=platform.processor() or platform.machine(),
                threads=max(0, args.threads), pid=os.getpid(), spec_sha256=run.spec_sha256,
                resume=bool(args.resume))
    if args.device != "cpu":
        raise LegError(f"--device {args.device}: the sdk-python leg runs on the CPU (the C ABI's model has no device choice)")
    if run.leg_setting(leg, "plan") != "shared":
        raise LegError(f"experiment field plan: the sdk-python leg follows plan.json (plan 'shared'), not "
                       f"{run.leg_setting(leg, 'plan')!r}")
    leg_dir = run.leg_dir(leg)
    resume_path = resume_manifest = None
    if args.resume:
        resume_path, resume_manifest = ckpt.newest_valid_checkpoint(leg_dir, run.spec_sha256, log)
        if resume_path is None:
            log("no valid checkpoint: starting from the beginning (resume requested)")

    # ---- model: the engine loads the base; the adapter is built here --------------------------------
    t0 = time.perf_counter()
    lora = spec["lora"]
    masks = run.leg_setting(leg, "dropout_masks")
    model = engine.Model(run.base_dir, int(lora["rank"]), float(lora["alpha"]), bool(lora["use_rslora"]),
                         float(lora["dropout"]), list(lora["targets"]),
                         engine.DROPOUT_SHARED if masks == "shared" else engine.DROPOUT_NATIVE,
                         args.threads, int(spec["seed"]))
    params = build_adapter(model, run.init_dir, spec)
    model_load_s = time.perf_counter() - t0

    # ---- data: tandem's template + tokenizer (CLI), docs/spec.md §Supervision rules here -------------------------------
    t0 = time.perf_counter()
    text = TandemText(engine.find_tandem_cli(), run.tokenizer_dir, run.leg_setting(leg, "template"))
    records = run.records()
    updates = run.plan_updates()
    eval_indices = run.eval_prefix()
    l3_count = run.l3_count()
    needed = set(eval_indices) | set(range(l3_count))
    for u in updates:
        for mb in u:
            needed.update(mb)
    max_len = int(spec["sequence"]["max_len"])
    encoded = encode_records(text, records, needed, max_len)
    pad_id = text.token_id("<|endoftext|>")
    tokenize_s = time.perf_counter() - t0

    micro = int(spec["batch"]["micro_batch"])
    eval_batches = [engine.c_micro_batch(*micro_batch([encoded[i] for i in eval_indices[k:k + micro]], pad_id))
                    for k in range(0, len(eval_indices), micro)]

    def evaluate():
        model.set_params(params)
        total, tokens = 0.0, 0
        for mb in eval_batches:
            s, n = model.loss(mb)
            total += s  # per-chunk sums in float64, divided once (docs/leg-protocol.md)
            tokens += n
        return (total / tokens if tokens else float("nan")), tokens

    total_updates = len(updates)
    warmup = warmup_updates(spec["schedule"]["warmup_fraction"], total_updates)
    opt = spec["optimizer"]
    adamw = AdamW(model.num_params, opt["betas"], opt["eps"], opt["weight_decay"])
    base_lr, clip = float(opt["lr"]), float(spec["clip"])
    eval_interval = int(spec["eval"]["interval"])
    ckpt_interval = int((spec.get("checkpoint") or {}).get("interval", 0) or 0)

    start = 0
    if resume_path is not None:
        st = safetensors.read(os.path.join(resume_path, "adapter_model.safetensors"))
        mv = safetensors.read(os.path.join(resume_path, "optimizer.safetensors"))
        with open(os.path.join(resume_path, "state.json"), encoding="utf-8") as f:
            state = json.load(f)
        for t in model.adapter:
            params[t.offset:t.offset + t.count] = st[t.name][1]
            adamw.m[t.offset:t.offset + t.count] = mv["exp_avg." + t.name][1]
            adamw.v[t.offset:t.offset + t.count] = mv["exp_avg_sq." + t.name][1]
        adamw.step = int(state["step"])
        model.dropout_counter = int(state["dropout_counter"])
        start = int(resume_manifest["update"])
        if start != adamw.step:
            raise LegError(f"{resume_path}/state.json: step {adamw.step} but the manifest says update {start}")
        events.emit("resume", update=start, path=os.path.relpath(resume_path, run.path))
    else:
        adapter_digests = [digest(name, "adapter", shape, values)
                           for name, (shape, values) in sorted(adapter_tensors(model, params).items())]
        events.emit("l2", tensors=model.base_digests() + adapter_digests)
        events.emit("l3", template=run.leg_setting(leg, "template"), max_len=max_len,
                    records=[encoded[i].l3_record() for i in range(l3_count)])
        ce, n = evaluate()
        events.emit("l1", heldout_ce=ce, tokens=n, examples=len(eval_indices))
        events.emit("eval", update=0, heldout_ce=ce, tokens=n)
    events.emit("timing", phase="setup", model_load_s=model_load_s, tokenize_s=tokenize_s,
                setup_s=time.perf_counter() - t_start)

    grads = array.array("f", bytes(4 * model.num_params))
    train_s = 0.0
    for u in range(start, total_updates):
        t0 = time.perf_counter()
        c0 = time.process_time()  # CPU time: the gate's step-time measure (docs/gate.md)
        batches = [micro_batch([encoded[i] for i in mb], pad_id) for mb in updates[u]]
        n_update = sum(sum(b[3]) for b in batches)
        input_tokens = sum(sum(b[4]) for b in batches)
        if n_update == 0:
            raise LegError(f"plan.json: update {u} has no supervised token")
        model.set_params(params)
        acc, loss_total = None, 0.0
        for m, b in enumerate(batches):
            # grad_scale 1/N: every micro-batch backpropagates (sum of its token losses) / (labels of the update).
            s, _ = model.forward_backward(engine.c_micro_batch(*b), u, m, 1.0 / n_update, grads)
            loss_total += s
            acc = array.array("d", grads) if acc is None else array.array("d", map(operator.add, acc, grads))
        grad_norm = math.sqrt(sum(map(operator.mul, acc, acc)))
        coef = min(1.0, clip / (grad_norm + 1e-6))  # clip_grad_norm_
        clipped = array.array("f", [g * coef for g in acc]) if coef < 1.0 else array.array("f", acc)
        lr = cosine_with_warmup_lr(base_lr, u, warmup, total_updates)
        params = adamw.update(params, clipped, lr)
        wall = time.perf_counter() - t0
        train_s += wall
        events.emit("step", update=u, loss=loss_total / n_update, grad_norm=grad_norm, lr=lr, tokens=n_update,
                    input_tokens=input_tokens, wall_s=wall, cpu_s=time.process_time() - c0)
        done = u + 1
        if done % eval_interval == 0 or done == total_updates:
            ce, n = evaluate()
            events.emit("eval", update=done, heldout_ce=ce, tokens=n)
        if ckpt_interval and done % ckpt_interval == 0 and done < total_updates:
            def write(tmp, _done=done):
                names = adapter_tensors(model, params)
                safetensors.write(os.path.join(tmp, "adapter_model.safetensors"), names)
                moments = {}
                for t in model.adapter:
                    moments["exp_avg." + t.name] = (t.shape, adamw.m[t.offset:t.offset + t.count])
                    moments["exp_avg_sq." + t.name] = (t.shape, adamw.v[t.offset:t.offset + t.count])
                safetensors.write(os.path.join(tmp, "optimizer.safetensors"), moments)
                with open(os.path.join(tmp, "state.json"), "w", encoding="utf-8") as f:
                    json.dump({"step": adamw.step, "next_update": _done, "dropout_counter": str(model.dropout_counter),
                               "spec_sha256": run.spec_sha256, "writer": IMPLEMENTATION}, f)
            path = ckpt.write_checkpoint(leg_dir, done, run.spec_sha256, write)
            events.emit("checkpoint", update=done, path=os.path.relpath(path, run.path))

    final = os.path.join(leg_dir, "final")
    os.makedirs(final, exist_ok=True)
    safetensors.write(os.path.join(final, "adapter_model.safetensors"), adapter_tensors(model, params),
                      metadata={"format": "pt"})
    with open(os.path.join(run.init_dir, "adapter_config.json"), encoding="utf-8") as f:
        config_text = f.read()
    with open(os.path.join(final, "adapter_config.json"), "w", encoding="utf-8") as f:
        f.write(config_text)
    events.emit("timing", phase="train", train_s=train_s, total_s=time.perf_counter() - t_start)
    events.emit("memory", peak_host_rss_bytes=peak_host_rss_bytes(), peak_device_bytes=None)
    events.emit("done", updates=total_updates, final=os.path.relpath(final, run.path))


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
