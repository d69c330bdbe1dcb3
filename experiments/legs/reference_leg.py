#!/usr/bin/env python3
"""The reference leg: the experiment's fine-tuning run on PyTorch + transformers + peft.

    python reference_leg.py --run RUN_DIR --leg NAME --device cpu|cuda:N [--resume] [--threads N]
                            [--devices cpu,cpu | cuda:0,cuda:1,...]

An explicit training loop (no Trainer) so that every choice that decides the arithmetic is visible:
torch.optim.AdamW (foreach=False, fused=False), torch.nn.utils.clip_grad_norm_ (foreach=False),
transformers' get_cosine_schedule_with_warmup, float32, TF32 off, deterministic algorithms. Data,
plan, base weights and initial adapter come from the run folder (docs/run-folder.md); the text is
rendered and tokenized with HuggingFace's own tokenizer and chat template. Events go to stdout as
JSON Lines (docs/leg-protocol.md); diagnostics go to stderr.

With --devices (two or more), the leg runs data-parallel with torch.distributed: one process (rank)
per device, gloo on the CPU and NCCL on GPUs. Micro-batch m of an update runs on rank m mod R; the
gradients are summed over the ranks (all-reduce) before clipping and the optimizer step, which every
rank takes on identical gradients, so the update equals single-process accumulation over the same
micro-batches. Rank 0 speaks the protocol and writes checkpoints; evaluation chunks are spread over
the ranks and their float64 sums added.
"""
import argparse
import json
import math
import os
import platform
import random
import sys
import time
import traceback

# Deterministic cuBLAS needs this before CUDA is initialised (torch docs, "Reproducibility").
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

_HERE = os.path.dirname(os.path.abspath(__file__))


def _sdk_python_dir(here):
    """The tandem_leg package beside this leg: <checkout>/sdk/python next to <checkout>/experiments/legs,
    or <datadir>/tandem/sdk/python next to the installed <datadir>/tandem/legs (the .deb); None when
    neither holds it (then an installed `tandem_leg` is used: scripts/setup puts one in the reference
    environment). The tree's own copy comes first, so a checkout never runs another checkout's."""
    for candidate in (os.path.join(here, "..", "..", "sdk", "python"), os.path.join(here, "..", "sdk", "python")):
        if os.path.isfile(os.path.join(candidate, "tandem_leg", "__init__.py")):
            return os.path.abspath(candidate)
    return None


sys.path.insert(0, _HERE)
if _sdk_python_dir(_HERE):
    sys.path.insert(0, _sdk_python_dir(_HERE))

from leg_protocol import emit as emit_events, emit_together  # noqa: E402
from hf_text import encode_record, load_tokenizer  # noqa: E402
from tandem_leg import (RunFolder, checkpoint as leg_checkpoint, needed_records, peak_host_rss_bytes,  # noqa: E402
                        stack_versions, warmup_updates)


def log(msg):
    print(f"reference_leg: {msg}", file=sys.stderr, flush=True)


class LegFailure(Exception):
    """A failure this leg reports as its one-line error message, as the engine leg words it."""


class ReportedFailure(LegFailure):
    """A failure whose error event is already written."""


def emit_or_stop(events, failure, lead=True):
    """Writes the events; with a failure, the events and the error in one write, then stops (the
    runner's live gate may stop this leg the moment it reads a NaN: the error must be there).
    Only the lead rank of a data-parallel leg speaks the protocol; every rank stops."""
    if not failure:
        if lead:
            for event, fields in events:
                emit_events(event, **fields)
        return
    if lead:
        log(f"error: {failure}")
        emit_together(*events, ("error", {"message": failure}))
    raise ReportedFailure(failure)


def number_text(x):
    """nan, inf, -inf or 9 significant digits (the engine leg's number_text)."""
    return f"{float(x):.9g}"


def non_finite_step(leg, update, loss, grad_norm):
    """The failure of a non-finite loss or grad norm (docs/leg-protocol.md, non-finite numbers), worded as the engine leg's;
    "" when both are finite."""
    what = "loss" if not math.isfinite(loss) else "grad norm" if not math.isfinite(grad_norm) else None
    if not what:
        return ""
    return f"leg {leg}: non-finite {what} at update {update} (loss {number_text(loss)}, grad norm {number_text(grad_norm)})"


def non_finite_eval(leg, update, heldout_ce):
    if math.isfinite(heldout_ce):
        return ""
    return f"leg {leg}: non-finite held-out loss at update {update} (held-out CE {number_text(heldout_ce)})"


def check_finite(torch, path):
    """Names the first tensor (in name order) of a safetensors file holding a NaN or an infinity,
    worded as the engine's loader does (engine/include/tandem/engine/io.h check_finite). One tensor
    in memory at a time."""
    from safetensors import safe_open

    with safe_open(path, framework="pt") as f:
        for name in sorted(f.keys()):
            _check_tensor_finite(torch, name, f.get_tensor(name), path)


def _check_tensor_finite(torch, name, t, source):
    t = t.detach()
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        flat = bad.reshape(-1)
        nan = int(torch.isnan(t).sum().item())
        raise LegFailure(f"{source}: tensor '{name}' holds non-finite values ({nan} NaN, {int(flat.sum().item()) - nan} "
                         f"infinite of {t.numel()}; first at flat index {int(flat.nonzero()[0].item())})")


def base_safetensors_files(base_dir):
    """model.safetensors, or the shards a model.safetensors.index.json names (sorted)."""
    single = os.path.join(base_dir, "model.safetensors")
    if os.path.exists(single):
        return [single]
    with open(os.path.join(base_dir, "model.safetensors.index.json")) as f:
        return [os.path.join(base_dir, s) for s in sorted(set(json.load(f)["weight_map"].values()))]


# --- batching ------------------------------------------------------------------------------------

def collate(torch, encoded, pad_id, device):
    """Right padding to the longest sequence of the micro-batch; labels -100 where not supervised
    or padding (transformers' shift: the loss at position t uses labels[t+1])."""
    width = max(len(e.ids) for e in encoded)
    ids = torch.full((len(encoded), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(encoded), width), dtype=torch.long)
    labels = torch.full((len(encoded), width), -100, dtype=torch.long)
    for b, e in enumerate(encoded):
        n = len(e.ids)
        ids[b, :n] = torch.tensor(e.ids, dtype=torch.long)
        attn[b, :n] = 1
        sup = torch.tensor(e.supervised, dtype=torch.bool)
        labels[b, :n] = torch.where(sup, ids[b, :n], torch.full_like(ids[b, :n], -100))
    return ids.to(device), attn.to(device), labels.to(device)


def summed_loss(torch, model, ids, attn, labels, hooks=None):
    """Sum of token cross-entropies over supervised label positions, and their count.

    transformers' shift: the hidden state at t predicts labels[t+1]. The LM head is applied only to
    the rows whose next token is a label: the same per-row arithmetic as the full logits (the
    logits of other rows never reach the loss), without materialising [batch, seq, vocab] floats,
    which dominates the cost on a CPU with the real 151,936-row vocabulary."""
    base = model.get_base_model()  # Qwen3ForCausalLM with peft's LoRA layers injected
    hidden = base.model(input_ids=ids, attention_mask=attn).last_hidden_state
    shift_labels = labels[:, 1:]
    rows = shift_labels != -100
    selected = hidden[:, :-1, :][rows]
    logits = base.lm_head(selected)
    loss_sum = torch.nn.functional.cross_entropy(logits, shift_labels[rows], reduction="sum")
    if hooks is not None:  # fingerprints (docs/observables.md): the head's points
        hooks.record_head(selected, loss_sum)
    return loss_sum, int(rows.sum().item())


def evaluate(torch, model, encoded, micro_batch, pad_id, device, ranks):
    """Token-weighted mean CE over every supervised token of the eval prefix; adapter on, dropout
    off. Per-chunk sums are float32 (as computed), accumulated across chunks in float64 (chunk k on
    rank k mod R, the ranks' sums added)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for k, i in enumerate(range(0, len(encoded), micro_batch)):
            if not ranks.mine(k):
                continue
            ids, attn, labels = collate(torch, encoded[i:i + micro_batch], pad_id, device)
            s, n = summed_loss(torch, model, ids, attn, labels)
            total += float(s.item())
            count += n
    total, count = ranks.sum_float64([total, count])
    if was_training:
        model.train()
    return total / max(1, count), int(count)


class Ranks:
    """The data-parallel group a leg runs in (torch.distributed), or the stand-in for one process."""

    def __init__(self, torch, rank=0, world=1):
        self.torch, self.rank, self.world = torch, rank, world

    @property
    def lead(self):
        return self.rank == 0

    def mine(self, index):
        """Whether micro-batch (or evaluation chunk) `index` runs on this rank."""
        return index % self.world == self.rank

    def sum_float64(self, values):
        if self.world == 1:
            return values
        t = self.torch.tensor([float(v) for v in values], dtype=self.torch.float64)
        self.torch.distributed.all_reduce(t)
        return t.tolist()

    def sum_grads(self, params, device):
        """Every parameter's gradient summed over the ranks, in one flat all-reduce (a rank that ran
        no micro-batch of this update contributes zeros)."""
        if self.world == 1:
            return
        torch = self.torch
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
        torch.distributed.all_reduce(flat)
        offset = 0
        for p in params:
            n = p.numel()
            p.grad = flat[offset:offset + n].view_as(p).clone()
            offset += n


def native_plan(torch, train_indices, micro_batch, accumulation, epochs, seed):
    """The reference leg's own sampler (plan = "native"): a seeded permutation per epoch cut into
    micro-batches; used to exercise sampler code, not expected to match another leg's plan."""
    g = torch.Generator().manual_seed(seed)
    updates, current = [], []
    for _ in range(epochs):
        perm = torch.randperm(len(train_indices), generator=g).tolist()
        order = [train_indices[i] for i in perm]
        for i in range(0, len(order), micro_batch):
            current.append(order[i:i + micro_batch])
            if len(current) == accumulation:
                updates.append(current)
                current = []
    if current:
        updates.append(current)
    return updates


# --- the run -------------------------------------------------------------------------------------

def set_determinism(torch, device):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.set_float32_matmul_precision("highest")
    # Strict on the CPU (every op used has a deterministic path there, tested). On CUDA an op
    # without a deterministic kernel warns (to stderr.log) instead of stopping the leg.
    torch.use_deterministic_algorithms(True, warn_only=(device.type == "cuda"))


def rng_state(torch, device):
    import numpy as np

    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(torch, device, state):
    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"], device)


class ReferenceLeg:
    """The reference leg as named steps, in the order its events come (docs/leg-protocol.md), as the
    engine leg's EngineLeg::run (experiments/legs/src/engine_leg.cpp): import the stack, open (the
    device, determinism, the seeds, hello, the checkpoint to resume from), load the model and its
    dropout masks, encode the data, build the trainer and the observables, then either resume or report the checks (L2, settings,
    L3, then L1 with the first evaluation), the update loop (step, fingerprints, optimizer check,
    evaluate, checkpoint) and finish (the adapter, timing, memory, done). The steps run in the
    order of the single function they came from: every RNG draw (seeds, LoRA init, dropout masks,
    the native plan) comes in the same order."""

    def __init__(self, args, rank=0, world=1):
        self.args, self.rank, self.world = args, rank, world

    def run(self):
        self.t_start = time.perf_counter()
        self.import_stack()
        self.open()
        self.load_model()
        self.install_dropout_masks()
        self.encode_data()
        self.build_trainer()
        self.build_observables()
        self.start_update = 0
        if self.resume_path is not None:
            self.resume()
        elif self.ranks.lead:
            self.report_checks()
        self.model.train()
        if self.start_update == 0:
            self.report_l1()
        self.emit("timing", phase="setup", model_load_s=self.model_load_s, tokenize_s=self.tokenize_s,
                  setup_s=time.perf_counter() - self.t_start)
        self.train()
        self.finish()

    # --- set-up ----------------------------------------------------------------------------------

    def import_stack(self):
        """Everything the steps use of the stack, imported here as one block before hello, as always:
        setup_s counts the imports, a package that does not import stops the leg before its first
        event, and stack_versions finds them loaded. The steps import again what they use (a lookup)."""
        import numpy as np  # noqa: F401
        import torch
        import transformers  # noqa: F401
        import peft  # noqa: F401
        from peft import PeftModel, get_peft_model_state_dict, set_peft_model_state_dict  # noqa: F401
        from safetensors.torch import save_file, load_file  # noqa: F401
        from transformers import AutoModelForCausalLM, get_cosine_schedule_with_warmup  # noqa: F401

        # The shared dropout masks, the fingerprint hooks and the L2 digests: the same code a paired user
        # leg runs (tandem_leg.torch, docs/legs.md).
        from tandem_leg.torch import (MaskContext, fingerprint, install_shared_masks, l2_digests,  # noqa: F401
                                      optimizer_settings)
        from tandem_leg.torch.replay import OptimizerReplay  # noqa: F401
        self.torch = torch

    def open(self):
        """The device and its threads, determinism, the seeds, hello, and the checkpoint to resume from."""
        import numpy as np

        torch, args, world = self.torch, self.args, self.world
        self.run_folder = run = RunFolder(args.run)
        self.spec, self.leg = run.spec, args.leg
        self.ranks = Ranks(torch, self.rank, world)
        self.device = device = torch.device(args.devices[self.rank] if world > 1 else args.device)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        if args.threads:
            torch.set_num_threads(max(1, args.threads // world))  # the leg's threads, split over its ranks
        # Only rank 0 speaks the protocol; the other ranks compute.
        self.emit = emit_events if self.ranks.lead else (lambda *a, **k: None)
        set_determinism(torch, device)
        self.seed = seed = run.seed("dropout")  # the dropout masks and the native RNG (docs/experiment-format.md "seeds")
        torch.manual_seed(seed)
        random.seed(seed)
        np.random.seed(seed % (2 ** 32))
        self.emit_hello()
        self.leg_dir = run.leg_dir(self.leg)
        self.resume_path, self.resume_manifest = None, None
        if args.resume:
            self.resume_path, self.resume_manifest = leg_checkpoint.resume_checkpoint(self.leg_dir, run.spec_sha256, log)

    def emit_hello(self):
        torch, device, args, world = self.torch, self.device, self.args, self.world
        self.emit("hello", implementation="reference", leg=self.leg, language="python",
                  stack="torch + transformers + peft",
                  versions=stack_versions(device),
                  device=str(device), device_name=(torch.cuda.get_device_name(device) if device.type == "cuda"
                                                   else platform.processor() or platform.machine()),
                  threads=torch.get_num_threads(), pid=os.getpid(), spec_sha256=self.run_folder.spec_sha256,
                  resume=bool(args.resume), ranks=world, devices=(args.devices if world > 1 else [str(device)]))

    def load_model(self):
        """Base weights + the shared initial adapter, float32, each file checked finite first."""
        from peft import PeftModel
        from transformers import AutoModelForCausalLM

        torch, run, device = self.torch, self.run_folder, self.device
        t0 = time.perf_counter()
        base = AutoModelForCausalLM.from_pretrained(run.file("base"), dtype=torch.float32,
                                                    attn_implementation="eager", local_files_only=True)
        # Weights as stored (the engine's loader checks the same files): a NaN is named here, not
        # found later as a NaN loss.
        for shard in base_safetensors_files(run.file("base")):
            check_finite(torch, shard)
        check_finite(torch, run.file("init", "adapter_model.safetensors"))
        self.model = PeftModel.from_pretrained(base, run.file("init"), is_trainable=True)
        self.model.to(device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        self.model_load_s = time.perf_counter() - t0

    def install_dropout_masks(self):
        """The shared dropout masks when the leg's dropout_masks is "shared" (and dropout is on)."""
        from tandem_leg.torch import MaskContext, install_shared_masks

        dropout_masks = self.run_folder.leg_setting(self.leg, "dropout_masks")
        lora = self.spec["lora"]
        self.masks = MaskContext()  # which (update, micro-batch) the shared masks are drawn for
        if dropout_masks == "shared" and float(lora["dropout"]) > 0:
            _, n = install_shared_masks(self.model, self.seed, float(lora["dropout"]), self.masks)
            log(f"shared dropout masks on {n} LoRA modules")

    def encode_data(self):
        """Renders and tokenizes every record this leg needs, the HF way; the updates of the plan
        (plan.json's, or with plan "native" this leg's own sampler cut to as many updates)."""
        torch, run, spec = self.torch, self.run_folder, self.spec
        t0 = time.perf_counter()
        self.template = run.leg_setting(self.leg, "template")
        tok = load_tokenizer(run, self.template)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
        self.max_len = int(spec["sequence"]["max_len"])
        records = run.records()
        plan_mode = run.leg_setting(self.leg, "plan")
        plan = run.plan()
        self.updates = plan["updates"]
        if plan_mode == "native":
            self.updates = native_plan(torch, run.split()["train"], int(spec["batch"]["micro_batch"]),
                                       int(spec["batch"]["accumulation"]), int(spec["batch"].get("epochs") or 1),
                                       run.seed("plan"))[:len(plan["updates"])]
        self.eval_indices = run.eval_prefix()
        self.l3_count = run.l3_count()
        needed = needed_records(self.updates, self.eval_indices, self.l3_count)
        self.encoded = {i: encode_record(tok, records[i], self.max_len) for i in sorted(needed)}
        self.tokenize_s = time.perf_counter() - t0

    def build_trainer(self):
        """AdamW (foreach=False, fused=False), the cosine schedule with warmup, clipping, the optimizer
        replay, and the intervals of evaluation and checkpoints."""
        from transformers import get_cosine_schedule_with_warmup
        from tandem_leg.torch.replay import OptimizerReplay

        torch, spec, model = self.torch, self.spec, self.model
        self.total_updates = len(self.updates)
        warmup = warmup_updates(spec["schedule"]["warmup_fraction"], self.total_updates)
        opt_spec = spec["optimizer"]
        self.params = [p for _, p in model.named_parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=float(opt_spec["lr"]), betas=tuple(opt_spec["betas"]),
                                           eps=float(opt_spec["eps"]), weight_decay=float(opt_spec["weight_decay"]),
                                           foreach=False, fused=False)
        self.scheduler = get_cosine_schedule_with_warmup(self.optimizer, warmup, self.total_updates)
        self.clip = float(spec["clip"])
        # the step replayed with the spec's AdamW on this leg's own operands (docs/thresholds.md)
        self.replay = OptimizerReplay(model, spec)
        self.eval_interval = int(spec["eval"]["interval"])
        self.ckpt_interval = int(spec.get("checkpoint", {}).get("interval", 0) or 0)
        self.micro_batch = int(spec["batch"]["micro_batch"])
        self.eval_set = [self.encoded[i] for i in self.eval_indices]

    def build_observables(self):
        """Fingerprints and evaluation observables (docs/observables.md): the updates observed, the
        hooks and the probes."""
        from tandem_leg.torch import fingerprint

        observe = self.spec.get("observe") or {}
        self.observe_updates = set(int(x) for x in observe.get("updates", []))
        self.observe_every = int(observe.get("every", 0) or 0)
        # A data-parallel leg (world > 1) records no fingerprints: each rank sees only its micro-batches
        # (docs/observables.md); its lead rank still emits the evaluation observables.
        self.hooks = (fingerprint.FingerprintHooks(self.torch, self.model)
                      if (self.observe_updates or self.observe_every > 0) and self.world == 1 else None)
        self.probes = fingerprint.probe_set(self.eval_set)

    def observes(self, update):
        return update in self.observe_updates or (self.observe_every > 0 and update % self.observe_every == 0)

    def emit_observables(self, update):
        from tandem_leg.torch import fingerprint

        if not self.ranks.lead:
            return
        torch, model = self.torch, self.model
        self.emit("observables", update=update, adapter=fingerprint.adapter_norms(torch, model, update),
                  probes=fingerprint.probe_rows(torch, model, self.probes, self.pad_id, self.micro_batch, self.device,
                                                os.path.join(self.leg_dir, "next_token", f"update-{update}.f32")
                                                if self.hooks is not None else None))

    # --- resume, or the checks -------------------------------------------------------------------

    def resume(self):
        """The adapter, the optimizer, the schedule and the RNG states of the checkpoint."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        torch, path = self.torch, self.resume_path
        set_peft_model_state_dict(self.model, load_file(os.path.join(path, "adapter_model.safetensors")))
        self.optimizer.load_state_dict(torch.load(os.path.join(path, "optimizer.pt"), weights_only=False))
        self.scheduler.load_state_dict(torch.load(os.path.join(path, "scheduler.pt"), weights_only=False))
        set_rng_state(torch, self.device, torch.load(os.path.join(path, "rng.pt"), weights_only=False))
        self.start_update = int(self.resume_manifest["update"])
        self.emit("resume", update=self.start_update, path=os.path.relpath(path, self.run_folder.path))

    def report_checks(self):
        """L2, the optimizer's settings and L3 (the lead rank; a fresh start)."""
        from tandem_leg.torch import l2_digests, optimizer_settings

        # L2: every tensor after load, in the files' names, sorted; base weights then adapter.
        self.emit("l2", tensors=l2_digests(self.model, self.run_folder))
        # the optimizer as built (checked against the spec like every leg's; docs/leg-protocol.md "settings")
        self.emit("settings", **optimizer_settings(self.model, self.optimizer, self.scheduler, clip=self.clip))
        # L3: the first K records of records.jsonl as this leg renders and tokenizes them.
        l3 = [self.encoded[i].l3_record() for i in range(self.l3_count)]
        self.emit("l3", max_len=self.max_len, template=self.template, records=l3)

    def report_l1(self):
        """L1: the held-out CE of the initial adapter, which is also the evaluation at update 0."""
        ce, n = self.evaluate()
        emit_or_stop([("l1", dict(heldout_ce=ce, tokens=n, examples=len(self.eval_set))),
                      ("eval", dict(update=0, heldout_ce=ce, tokens=n))], non_finite_eval(self.leg, 0, ce),
                     self.ranks.lead)
        self.emit_observables(0)

    def evaluate(self):
        return evaluate(self.torch, self.model, self.eval_set, self.micro_batch, self.pad_id, self.device, self.ranks)

    # --- the update loop -------------------------------------------------------------------------

    def train(self):
        self.train_s = 0.0
        inject = os.environ.get("TANDEM_TEST_NONFINITE_LOSS_AT", "")
        self.inject_at = int(inject) if inject.isdigit() else -1
        for u in range(self.start_update, self.total_updates):
            self.train_update(u)
            done = u + 1
            if done % self.eval_interval == 0 or done == self.total_updates:
                self.report_eval(done)
            if self.ckpt_interval and done % self.ckpt_interval == 0 and done < self.total_updates and self.ranks.lead:
                self.write_checkpoint(done)

    def train_update(self, u):
        """Update u: its micro-batches' gradients, the optimizer step, then step, fingerprints and
        optimizer_check."""
        torch, device = self.torch, self.device
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        c0 = time.process_time()  # the process's CPU time, every thread: the step-time flag's measure (docs/gate.md)
        self.optimizer.zero_grad(set_to_none=True)
        batches = [[self.encoded[i] for i in mb] for mb in self.updates[u]]
        collated = [collate(torch, mb, self.pad_id, device) for mb in batches]
        n_update = sum(int((lab[:, 1:] != -100).sum().item()) for _, _, lab in collated)
        input_tokens = sum(int(a.sum().item()) for _, a, _ in collated)
        self.masks.update = u
        observed = self.hooks is not None and self.observes(u)
        loss_total = self.accumulate_gradients(u, collated, n_update, observed)
        grad_norm, lr, check = self.optimizer_step(u, observed)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        self.train_s += wall
        loss = loss_total / max(1, n_update)
        if u == self.inject_at:  # test-only fault injection, as in the engine leg (docs/leg-protocol.md)
            loss = float("nan")
        gn = float(grad_norm.item())
        emit_or_stop([("step", dict(update=u, loss=loss, grad_norm=gn, lr=lr, tokens=n_update,
                                    input_tokens=input_tokens, wall_s=wall, cpu_s=cpu))],
                     non_finite_step(self.leg, u, loss, gn), self.ranks.lead)
        if observed:
            self.emit("fingerprints", update=u, points=self.hooks.points)
        if check is not None:
            self.emit("optimizer_check", **check)

    def accumulate_gradients(self, u, collated, n_update, observed):
        """This rank's micro-batches of update u, forward and backward (each loss sum over the update's
        label count), the gradients then summed over the ranks; the update's summed loss."""
        torch, hooks = self.torch, self.hooks
        loss_total = 0.0
        if observed:
            hooks.begin_update(u)
            hooks.attach()
        try:
            for m, (ids, attn, labels) in enumerate(collated):
                if not self.ranks.mine(m):
                    continue
                self.masks.micro_batch = m
                if observed:
                    hooks.begin_micro_batch(m, ids, attn, labels)
                s, _ = summed_loss(torch, self.model, ids, attn, labels, hooks if observed else None)
                (s / max(1, n_update)).backward()
                loss_total += float(s.item())
        finally:
            if observed:
                hooks.detach()
        self.ranks.sum_grads(self.params, self.device)
        (loss_total,) = self.ranks.sum_float64([loss_total])
        return loss_total

    def optimizer_step(self, u, observed):
        """Clipping, AdamW (replayed on the updates the pairing replays) and the schedule's step; the
        grad norm before clipping, the learning rate of this update and the replay's check (or None)."""
        grad_norm = self.torch.nn.utils.clip_grad_norm_(self.params, self.clip, foreach=False)
        lr = self.scheduler.get_last_lr()[0]
        replayed = self.ranks.lead and (u <= 1 or self.observes(u))  # as tandem_leg.torch.Pairing replays
        if replayed:
            self.replay.before_step(self.optimizer, u, lr)
        self.optimizer.step()
        check = self.replay.after_step() if replayed else None
        self.scheduler.step()
        if observed:
            self.hooks.record_optimizer()
        return grad_norm, lr, check

    def report_eval(self, done):
        ce, n = self.evaluate()
        emit_or_stop([("eval", dict(update=done, heldout_ce=ce, tokens=n))], non_finite_eval(self.leg, done, ce),
                     self.ranks.lead)
        self.emit_observables(done)

    def write_checkpoint(self, done):
        """The adapter, the optimizer, the schedule, the RNG states and the cursor after `done` updates,
        committed by manifest (tandem_leg.checkpoint)."""
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        torch, model, device = self.torch, self.model, self.device

        def write(tmp):
            save_file({k: v.detach().contiguous().cpu() for k, v in get_peft_model_state_dict(model).items()},
                      os.path.join(tmp, "adapter_model.safetensors"))
            torch.save(self.optimizer.state_dict(), os.path.join(tmp, "optimizer.pt"))
            torch.save(self.scheduler.state_dict(), os.path.join(tmp, "scheduler.pt"))
            torch.save(rng_state(torch, device), os.path.join(tmp, "rng.pt"))
            with open(os.path.join(tmp, "cursor.json"), "w") as f:
                json.dump({"next_update": done}, f)
        path = leg_checkpoint.write_checkpoint(self.leg_dir, done, self.run_folder.spec_sha256, write)
        self.emit("checkpoint", update=done, path=os.path.relpath(path, self.run_folder.path))

    # --- the end ---------------------------------------------------------------------------------

    def finish(self):
        """The final adapter, timing, memory and done (the lead rank)."""
        torch, device = self.torch, self.device
        final = os.path.join(self.leg_dir, "final")
        if not self.ranks.lead:
            return
        self.model.save_pretrained(final)
        self.emit("timing", phase="train", train_s=self.train_s, total_s=time.perf_counter() - self.t_start)
        peak_dev = int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None
        self.emit("memory", peak_host_rss_bytes=peak_host_rss_bytes(), peak_device_bytes=peak_dev)
        self.emit("done", updates=self.total_updates, final=os.path.relpath(final, self.run_folder.path))


def run_leg(args, rank=0, world=1):
    ReferenceLeg(args, rank, world).run()


def _rank_main(rank, args, store_dir):
    """One data-parallel rank (a child of the leg's process, started by torch.multiprocessing)."""
    import ctypes
    import signal

    # A rank must not outlive the leg's process (which dies with the runner, docs/leg-protocol.md).
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    import datetime
    import torch
    import torch.distributed as dist

    world = len(args.devices)
    backend = "gloo" if args.devices[0] == "cpu" else "nccl"
    dist.init_process_group(backend, init_method="file://" + os.path.join(store_dir, "rendezvous"),
                            rank=rank, world_size=world, timeout=datetime.timedelta(hours=2))
    try:
        run_leg(args, rank, world)
    finally:
        dist.destroy_process_group()


def run_ranks(args):
    """Runs the leg on len(args.devices) ranks and waits for them; an exception of any rank is raised
    here (its traceback is on stderr)."""
    import shutil
    import tempfile
    import torch.multiprocessing as mp

    store_dir = tempfile.mkdtemp(prefix="tandem-ranks-")  # the ranks' rendezvous (one machine)
    try:
        # fork: this process has imported torch but run nothing on it, and forking skips a second
        # interpreter start and torch import per rank.
        mp.start_processes(_rank_main, args=(args, store_dir), nprocs=len(args.devices), join=True,
                           start_method="fork")
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)


def source_of(run_dir, path):
    """The asset a run-folder copy came from: <run>/base/X -> <source>/X, the source read from
    prepare.json's `base` ("assets:NAME (PATH)" or a path); any other path is returned as given."""
    path = os.path.abspath(path)
    base = os.path.join(os.path.abspath(run_dir), "base")
    if not path.startswith(base + os.sep):
        return path
    try:
        with open(os.path.join(run_dir, "prepare.json")) as f:
            src = json.load(f).get("base", "")
    except (OSError, ValueError):
        return path
    if src.endswith(")") and "(" in src:
        src = src[src.rindex("(") + 1:-1]
    return os.path.join(src, os.path.relpath(path, base)) if src else path


def known_failure(e, run_dir):
    """One line `FILE: what is wrong` for the Python exceptions this leg knows (docs/legs.md "Errors"),
    naming an asset by its source, not its copy in the run folder; None for any other exception."""
    name = type(e).__name__
    base = os.path.join(run_dir, "base")
    if isinstance(e, IndexError) and "index out of range" in str(e):
        cfg = os.path.join(base, "config.json")
        try:
            with open(cfg) as f:
                vocab = json.load(f).get("vocab_size")
        except (OSError, ValueError):
            vocab = "?"
        return (f"{source_of(run_dir, cfg)}: vocab_size {vocab} is smaller than a token id of the tokenizer "
                f"(an embedding lookup went past the table); vocab_size must exceed the tokenizer's largest id")
    if name == "SafetensorError" or "safetensors" in name.lower() or "deserializing header" in str(e):
        from safetensors import safe_open
        try:
            shards = base_safetensors_files(base)
        except (OSError, ValueError):
            shards = []
        for shard in shards + [os.path.join(run_dir, "init", "adapter_model.safetensors")]:
            try:
                with safe_open(shard, framework="pt") as f:
                    for k in f.keys():
                        f.get_slice(k)
            except Exception as inner:  # the damaged one
                return f"{source_of(run_dir, shard)}: not a valid safetensors file ({str(inner).splitlines()[0]})"
        return f"a safetensors file is damaged: {str(e).splitlines()[0]}"
    if isinstance(e, json.JSONDecodeError):
        return f"JSON input: line {e.lineno}, column {e.colno}: {e.msg}"
    if isinstance(e, OSError) and e.filename:
        return f"{source_of(run_dir, e.filename)}: {e.strerror or str(e)}"
    if name == "OutOfMemoryError" or (isinstance(e, RuntimeError) and "out of memory" in str(e).lower()):
        return f"out of memory: {str(e).splitlines()[0]} (fewer --threads, a smaller micro-batch or another device)"
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="the run folder prepared by `tandem run`")
    ap.add_argument("--leg", required=True, help="this leg's name (legs/<name>/ in the run folder)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda:N")
    ap.add_argument("--resume", action="store_true", help="continue from the newest valid checkpoint")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    ap.add_argument("--devices", default="",
                    help="data-parallel ranks, one per device: cpu,cpu (gloo) or cuda:0,cuda:1 (NCCL)")
    args = ap.parse_args(argv)
    args.devices = [d for d in args.devices.split(",") if d]
    if len(args.devices) == 1:
        args.device, args.devices = args.devices[0], []
    try:
        if args.devices:
            if any(d != "cpu" and not d.startswith("cuda:") for d in args.devices) or \
                    len({d == "cpu" for d in args.devices}) > 1:
                raise ValueError(f"--devices {','.join(args.devices)}: all cpu or all cuda:N")
            run_ranks(args)
        else:
            run_leg(args)
    except KeyboardInterrupt:
        emit_events("error", message="interrupted")
        return 130
    except ReportedFailure:
        return 1
    except LegFailure as e:  # worded for the user: no traceback, no exception type
        log(f"error: {e}")
        emit_events("error", message=str(e))
        return 1
    except Exception as e:  # the runner records the message; the traceback goes to stderr.log
        if type(e).__name__ == "ProcessRaisedException" and "ReportedFailure" in str(e):
            return 1  # a rank stopped at a non-finite value; rank 0 already wrote the error event
        traceback.print_exc()  # to the leg's stderr.log only; the runner shows the one-line message
        message = known_failure(e, args.run) or f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        if type(e).__name__ == "ProcessRaisedException":  # a rank's exception: its last line says what
            message = [ln for ln in str(e).strip().splitlines() if ln.strip()][-1]
        emit_events("error", message=message)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
