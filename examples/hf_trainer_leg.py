#!/usr/bin/env python3
"""A HuggingFace Trainer run as a tandem leg, with tandem_leg.hf.TandemCallback (docs/legs.md).

    python examples/hf_trainer_leg.py --run RUN_DIR --leg hf --device cpu [--threads N] [--trainer-eval]

An ordinary Trainer fine-tuning script: transformers + peft load the run folder's base and initial
adapter; the script's own data pipeline renders each record with the tokenizer's chat template and
masks the prompt (docs/spec.md §Supervision: supervised = the tokens from the end of the prompt up to and including the
first <|im_end|>); a sequential sampler feeds the run's shared plan (plan.json) micro-batch by
micro-batch; the Trainer's AdamW, cosine schedule with warmup and gradient clipping do the updates.
The callback reports what tandem compares. Held-out CE is token-weighted over the run's eval prefix
(docs/spec.md's definition); --trainer-eval reports the Trainer's own eval_loss instead, whose
normalisation (a mean of per-batch means) differs: the known difference tandem flags at L1.

Dropout: peft's own (native) masks, so the experiment gives this leg
`"overrides": {"<leg>": {"dropout_masks": "native"}}`; its L4 is then reported, not gated.
"""
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tandem_leg  # noqa: E402
from tandem_leg.tokens import Encoded  # noqa: E402


def encode(tok, record, max_len):
    """This script's data pipeline: the chat template, offsets, docs/spec.md §Supervision supervision, right truncation."""
    messages = record["messages"]
    prompt = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    full = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    ids, im_end = list(enc["input_ids"]), tok.convert_tokens_to_ids("<|im_end|>")
    sup, boundary = [False] * len(ids), -1
    for i, (start, _end) in enumerate(enc["offset_mapping"]):
        if start >= len(prompt):
            boundary = i if boundary < 0 else boundary
            sup[i] = True
            if ids[i] == im_end:
                break
    return Encoded(index=record["index"], id=record["id"], ids=ids[:max_len], supervised=sup[:max_len],
                   full_length=len(ids), boundary=boundary, supervised_count=sum(sup[:max_len]), text=full)


def main():
    ap = tandem_leg.leg_arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--trainer-eval", action="store_true", help="held-out loss from Trainer.evaluate (eval_loss)")
    args = ap.parse_args()
    run = tandem_leg.RunFolder(args.run)
    spec = run.spec

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from tandem_leg.hf import TandemCallback

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    micro, accumulation = int(spec["batch"]["micro_batch"]), int(spec["batch"]["accumulation"])
    max_len = int(spec["sequence"]["max_len"])
    updates, prefix = run.plan_updates(), run.eval_prefix()

    t0 = time.perf_counter()
    tok = AutoTokenizer.from_pretrained(run.tokenizer_dir, local_files_only=True)
    pad_id = tok.convert_tokens_to_ids("<|endoftext|>")
    records = run.records()
    needed = {i for u in updates for mb in u for i in mb} | set(prefix) | set(range(run.l3_count()))
    encoded = {i: encode(tok, records[i], max_len) for i in sorted(needed)}
    tokenize_s = time.perf_counter() - t0

    def example(i):
        e = encoded[i]
        labels = [t if s else -100 for t, s in zip(e.ids, e.supervised)]
        labels[0] = -100  # nothing predicts token 0
        return {"input_ids": e.ids, "labels": labels}

    def collate(examples):  # right padding with <|endoftext|>, never a label
        width = max(len(x["input_ids"]) for x in examples)
        ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
        att = torch.zeros((len(examples), width), dtype=torch.long)
        lab = torch.full((len(examples), width), -100, dtype=torch.long)
        for b, x in enumerate(examples):
            n = len(x["input_ids"])
            ids[b, :n], att[b, :n], lab[b, :n] = torch.tensor(x["input_ids"]), 1, torch.tensor(x["labels"])
        return {"input_ids": ids, "attention_mask": att, "labels": lab}

    def heldout(model):
        """Token-weighted held-out CE over the eval prefix, in chunks of micro_batch (docs/spec.md's L1 / L4)."""
        total, n = 0.0, 0
        with torch.no_grad():
            for k in range(0, len(prefix), micro):
                b = collate([example(i) for i in prefix[k:k + micro]])
                logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1].float()
                labels = b["labels"][:, 1:]
                total += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                                 labels.reshape(-1), ignore_index=-100, reduction="sum"))
                n += int((labels != -100).sum())
        return total / n, n

    labels_per_update = [sum(sum(1 for t in example(i)["labels"] if t != -100) for mb in u for i in mb) for u in updates]
    cb = TandemCallback(run, args, implementation="hf-trainer", heldout=None if args.trainer_eval else heldout,
                        tokens_per_update=labels_per_update)
    try:
        if any(len(mb) != micro for u in updates for mb in u) or any(len(u) != accumulation for u in updates):
            raise ValueError("the plan has a short micro-batch or update; the Trainer's fixed batch size cannot "
                             "follow it (cut the run with batch.max_updates)")
        t1 = time.perf_counter()
        base = AutoModelForCausalLM.from_pretrained(run.base_dir, dtype=torch.float32, local_files_only=True)
        model = PeftModel.from_pretrained(base, run.init_dir, is_trainable=True)
        cb.model_load_s, cb.tokenize_s = time.perf_counter() - t1, tokenize_s
        cb.l3([encoded[i] for i in range(run.l3_count())])

        class PlanTrainer(Trainer):
            def _get_train_sampler(self, *a, **k):  # the run's plan, in order
                return torch.utils.data.SequentialSampler(self.train_dataset)

        opt, total = spec["optimizer"], len(updates)
        targs = TrainingArguments(
            output_dir=os.path.join(run.leg_dir(args.leg), "trainer"), per_device_train_batch_size=micro,
            per_device_eval_batch_size=micro, gradient_accumulation_steps=accumulation, max_steps=total,
            learning_rate=float(opt["lr"]), adam_beta1=float(opt["betas"][0]), adam_beta2=float(opt["betas"][1]),
            adam_epsilon=float(opt["eps"]), weight_decay=float(opt["weight_decay"]), optim="adamw_torch",
            lr_scheduler_type="cosine",
            warmup_steps=tandem_leg.warmup_updates(spec["schedule"]["warmup_fraction"], total),
            max_grad_norm=float(spec["clip"]), logging_steps=1, save_strategy="no", report_to=[],
            eval_strategy="steps" if args.trainer_eval else "no", eval_steps=int(spec["eval"]["interval"]),
            remove_unused_columns=False, use_cpu=args.device == "cpu", seed=int(spec["seed"]), disable_tqdm=True)
        trainer = PlanTrainer(model=model, args=targs, data_collator=collate,
                              train_dataset=[example(i) for u in updates for mb in u for i in mb],
                              eval_dataset=[example(i) for i in prefix], callbacks=[cb])
        if args.trainer_eval:
            trainer.evaluate()  # the Trainer's own held-out loss before training: this leg's L1
        trainer.train()
    except Exception as e:
        traceback.print_exc()
        cb.error(f"{type(e).__name__}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
