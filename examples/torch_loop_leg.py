#!/usr/bin/env python3
"""A plain PyTorch training loop as a tandem leg (docs/legs.md): the smallest complete example of
what a leg does, with tandem_leg for the run folder and the events, paired with the reference.

    python examples/torch_loop_leg.py --run RUN_DIR --leg loop --device cpu [--threads N]

transformers + peft load the run folder's base and initial adapter; the records are rendered with the
tokenizer's chat template and masked per docs/spec.md §Supervision; the loop follows the shared plan (plan.json): per
update, every micro-batch's summed token loss divided by the update's supervised tokens is
backpropagated, the global gradient norm is clipped, AdamW steps with the cosine-with-warmup lr.
tandem_leg.torch.pair puts tandem's shared dropout masks on the LoRA layers, checks each micro-batch
against the plan and records fingerprints on the experiment's `observe` updates, so the leg is judged
by the float32 error-model bound and `tandem localise` can compare it with the reference point by point.
"""
import math
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import tandem_leg  # noqa: E402


def main():
    args = tandem_leg.parse_leg_args(description=__doc__.splitlines()[0])
    events = tandem_leg.EventWriter(tandem_leg.claim_stdout())
    t_start = time.perf_counter()
    run = tandem_leg.RunFolder(args.run)
    spec = run.spec

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

    from tandem_leg.torch import l2_digests, pair

    events.emit("hello", implementation="torch-loop", leg=args.leg, language="python",
                stack="PyTorch loop (examples/torch_loop_leg.py)",
                versions=tandem_leg.stack_versions(args.device),
                device=args.device, device_name="cpu", threads=max(0, args.threads), pid=os.getpid(),
                spec_sha256=run.spec_sha256, resume=bool(args.resume))
    try:
        if args.device != "cpu":
            raise ValueError(f"--device {args.device}: this example runs on the CPU")
        if args.threads > 0:
            torch.set_num_threads(args.threads)
        t0 = time.perf_counter()
        model = PeftModel.from_pretrained(
            AutoModelForCausalLM.from_pretrained(run.base_dir, dtype=torch.float32, local_files_only=True),
            run.init_dir, is_trainable=True)
        model_load_s = time.perf_counter() - t0
        pairing = pair(model, run, args.leg)  # shared masks, the plan check, fingerprints

        # Data: the chat template, docs/spec.md §Supervision supervision, right truncation, right padding.
        t0 = time.perf_counter()
        tok = AutoTokenizer.from_pretrained(run.tokenizer_dir, local_files_only=True)
        pad, im_end = tok.convert_tokens_to_ids("<|endoftext|>"), tok.convert_tokens_to_ids("<|im_end|>")
        max_len, micro = int(spec["sequence"]["max_len"]), int(spec["batch"]["micro_batch"])
        updates, prefix, records = run.plan_updates(), run.eval_prefix(), run.records()
        enc = {}
        for i in sorted({i for u in updates for mb in u for i in mb} | set(prefix) | set(range(run.l3_count()))):
            m = records[i]["messages"]
            prompt = tok.apply_chat_template(m[:-1], tokenize=False, add_generation_prompt=True, enable_thinking=False)
            full = tok.apply_chat_template(m, tokenize=False, add_generation_prompt=False)
            e = tok(full, add_special_tokens=False, return_offsets_mapping=True)
            ids, sup, boundary = list(e["input_ids"]), [False] * len(e["input_ids"]), -1
            for t, (start, _end) in enumerate(e["offset_mapping"]):
                if start >= len(prompt):
                    boundary = t if boundary < 0 else boundary
                    sup[t] = True
                    if ids[t] == im_end:
                        break
            enc[i] = {"index": i, "id": records[i]["id"], "ids": ids[:max_len], "sup": sup[:max_len],
                      "full_length": len(ids), "boundary": boundary, "text": full}
        tokenize_s = time.perf_counter() - t0

        def batch(indices):
            width = max(len(enc[i]["ids"]) for i in indices)
            ids = torch.full((len(indices), width), pad, dtype=torch.long)
            att = torch.zeros((len(indices), width), dtype=torch.long)
            lab = torch.full((len(indices), width), -100, dtype=torch.long)
            for b, i in enumerate(indices):
                n = len(enc[i]["ids"])
                ids[b, :n], att[b, :n] = torch.tensor(enc[i]["ids"]), 1
                lab[b, 1:n] = torch.where(torch.tensor(enc[i]["sup"][1:]), ids[b, 1:n], torch.tensor(-100))
            return ids, att, lab

        def summed_loss(ids, att, lab):
            logits = model(input_ids=ids, attention_mask=att).logits[:, :-1].float()
            target = lab[:, 1:]
            return (torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                      ignore_index=-100, reduction="sum"), int((target != -100).sum()))

        def heldout():
            model.eval()
            total, n = 0.0, 0
            with torch.no_grad():
                for k in range(0, len(prefix), micro):
                    s, c = summed_loss(*batch(prefix[k:k + micro]))
                    total, n = total + float(s), n + c
            model.train()
            return total / n, n

        events.emit("l2", tensors=l2_digests(model, run))
        events.emit("l3", template=run.leg_setting(args.leg, "template"), max_len=max_len,
                    records=[{"index": r["index"], "id": r["id"], "ids": r["ids"], "boundary": r["boundary"],
                              "supervised_count": sum(r["sup"]), "full_length": r["full_length"],
                              "truncated_at": len(r["ids"]) if r["full_length"] > len(r["ids"]) else None,
                              "text": r["text"]} for r in (enc[i] for i in range(run.l3_count()))])
        ce, n = heldout()
        events.emit("l1", heldout_ce=ce, tokens=n, examples=len(prefix))
        events.emit("eval", update=0, heldout_ce=ce, tokens=n)
        events.emit("timing", phase="setup", model_load_s=model_load_s, tokenize_s=tokenize_s,
                    setup_s=time.perf_counter() - t_start)

        opt = spec["optimizer"]
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=float(opt["lr"]), betas=tuple(opt["betas"]), eps=float(opt["eps"]),
                                      weight_decay=float(opt["weight_decay"]))
        total = len(updates)
        scheduler = get_cosine_schedule_with_warmup(optimizer, math.ceil(spec["schedule"]["warmup_fraction"] * total), total)
        # what this loop actually built (tandem compares it with the spec before update 0)
        pairing.report_settings(events, optimizer, scheduler, clip=float(spec["clip"]))
        model.train()
        train_s = 0.0
        for u, micro_batches in enumerate(updates):
            t0 = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            batches = [batch(mb) for mb in micro_batches]
            n_update = sum(int((lab[:, 1:] != -100).sum()) for _, _, lab in batches)
            loss = 0.0
            pairing.begin_update(u)
            for mb, b in zip(micro_batches, batches):
                pairing.begin_micro_batch(*b, records=mb)  # the mask key (u, m); the plan check
                s, _ = summed_loss(*b)
                (s / n_update).backward()
                loss += float(s)
            pairing.end_backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, float(spec["clip"])))
            lr = scheduler.get_last_lr()[0]
            pairing.before_optimizer_step(optimizer)  # the step's operands, replayed with the spec's AdamW
            optimizer.step()
            pairing.end_update()
            scheduler.step()
            wall = time.perf_counter() - t0
            train_s += wall
            events.emit("step", update=u, loss=loss / n_update, grad_norm=grad_norm, lr=lr, tokens=n_update,
                        input_tokens=sum(int(a.sum()) for _, a, _ in batches), wall_s=wall)
            pairing.emit_fingerprints(events)  # on the experiment's observe updates
            if (u + 1) % int(spec["eval"]["interval"]) == 0 or u + 1 == total:
                ce, n = heldout()
                events.emit("eval", update=u + 1, heldout_ce=ce, tokens=n)
        final = os.path.join(run.leg_dir(args.leg), "final")
        model.save_pretrained(final)
        events.emit("timing", phase="train", train_s=train_s, total_s=time.perf_counter() - t_start)
        events.emit("memory", peak_host_rss_bytes=tandem_leg.peak_host_rss_bytes(), peak_device_bytes=None)
        events.emit("done", updates=total, final=os.path.relpath(final, run.path))
    except Exception as e:
        traceback.print_exc()
        message = str(e) if type(e).__name__ == "PairingError" else f"{type(e).__name__}: {e}"
        events.emit("error", message=message.replace("\n", " "))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
