#!/usr/bin/env python3
"""A HuggingFace Trainer run as a tandem leg, paired with the reference (docs/legs.md "Pair your trainer").

    python examples/hf_trainer_leg.py --run RUN_DIR --leg hf --device cpu [--threads N] [--trainer-eval]

An ordinary Trainer fine-tuning script: transformers + peft load the run folder's base and initial
adapter; the script's own data pipeline renders each record with the tokenizer's chat template and
masks the prompt (docs/spec.md §Supervision: supervised = the tokens from the end of the prompt up to and including the
first <|im_end|>); the Trainer's AdamW, cosine schedule with warmup and gradient clipping do the updates.
tandem_leg pairs it with the reference: `TandemCallback(pair=True)` puts tandem's shared dropout masks
on every LoRA layer (tandem_leg.torch.pair) and checks every micro-batch against plan.json, which
`plan_sampler(run)` feeds micro-batch by micro-batch; so the leg keeps the experiment's
`dropout_masks: shared`, `plan: shared` and is judged by the float32 error-model bound. (With
`"dropout_masks": "native"` in the experiment's overrides the same script keeps peft's own masks.)
Held-out CE is token-weighted over the run's eval prefix (docs/spec.md's definition); --trainer-eval reports
the Trainer's own eval_loss instead, whose normalisation (a mean of per-batch means) differs: the known
difference tandem flags at L1.

TEST ONLY: --test-bug NAME makes this script commit one known bug of real training stacks, for the
user-stack fault matrix (tests/sdk/test_user_faults.py, docs/legs.md "Bugs tandem catches in a
Trainer leg"); off by default, and announced in the hello event (`test_fault`) when on.
"""
import contextlib
import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tandem_leg  # noqa: E402
from tandem_leg.tokens import Encoded  # noqa: E402

# The test-only bugs: name -> what the script then does wrong.
TEST_BUGS = {
    "ga-mean-of-means": "gradient accumulation as the mean of per-micro-batch means (model_accepts_loss_kwargs=False, "
                        "the 2024 Trainer bug)",
    "rslora-off": "the adapter loaded with use_rslora=False (scaling alpha/r instead of alpha/sqrt(r))",
    "generic-template": "a generic ChatML template without the think block instead of the tokenizer's own",
    "boundary-off-by-one": "supervision starts one token late (the answer's first token is not a label)",
    "linear-schedule": "linear decay after warm-up instead of cosine",
    "warmup-plus-one": "one warm-up update more than ceil(warmup_fraction * updates)",
    "eval-without-adapter": "held-out CE computed with the adapter disabled",
    "clip-per-micro-batch": "the gradient clipped after every micro-batch instead of once per update",
    "adamw-eps-x100": "AdamW eps 100 times the experiment's",
    "pad-labelled": "padding tokens are labels",
    "weight-decay": "AdamW weight decay 0.01 where the experiment says 0",
    "label-smoothing": "label_smoothing_factor 0.1 (the Trainer's label smoother takes the labels before the model sees them)",
    # harmless: the same numbers, which pairing must not refuse
    "attention-mask-all-ones": "an attention mask of ones over the right padding too (a causal model's real "
                               "positions never see the padding after them)",
    # wiring that would leave the leg unpaired: refused at the first update, never judged as paired
    "shuffled-sampler": "the Trainer's own shuffling sampler instead of plan_sampler(run)",
    "pair-off": "TandemCallback(pair=False) on a leg the experiment pairs (peft's own dropout, no plan check)",
}

GENERIC_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def encode(tok, record, max_len, late=0):
    """This script's data pipeline: the chat template, offsets, docs/spec.md §Supervision supervision, right truncation.
    late: supervision starts that many tokens after the boundary (a test-only bug)."""
    messages = record["messages"]
    prompt = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    full = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    ids, im_end = list(enc["input_ids"]), tok.convert_tokens_to_ids("<|im_end|>")
    sup, boundary = [False] * len(ids), -1
    for i, (start, _end) in enumerate(enc["offset_mapping"]):
        if start >= len(prompt):
            boundary = i if boundary < 0 else boundary
            sup[i] = i >= boundary + late
            if ids[i] == im_end:
                break
    if late and boundary >= 0:
        boundary += late
    return Encoded(index=record["index"], id=record["id"], ids=ids[:max_len], supervised=sup[:max_len],
                   full_length=len(ids), boundary=boundary, supervised_count=sum(sup[:max_len]), text=full)


def batch_recipe(run, threads):
    """What both HF examples (this one and trl_sft_leg.py) read before they build a trainer, torch set to the
    leg's --threads: (micro-batch size, gradient accumulation, max_len, plan.json's updates, the eval prefix)."""
    import torch

    if threads > 0:
        torch.set_num_threads(threads)
    spec = run.spec
    return (int(spec["batch"]["micro_batch"]), int(spec["batch"]["accumulation"]), int(spec["sequence"]["max_len"]),
            run.plan_updates(), run.eval_prefix())


def main():
    ap = tandem_leg.leg_arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--trainer-eval", action="store_true", help="held-out loss from Trainer.evaluate (eval_loss)")
    ap.add_argument("--test-bug", choices=sorted(TEST_BUGS), default=None,
                    help="TEST ONLY: commit one known training bug (the user-stack fault matrix)")
    ap.add_argument("--micro-batch-dataset", action="store_true",
                    help="feed ready-made micro-batches (an IterableDataset in plan.json's order) instead of a "
                         "dataset indexed by record")
    ap.add_argument("--test-no-settings", action="store_true",
                    help="TEST ONLY: no settings event (what the numbers alone catch)")
    args = ap.parse_args()
    bug = args.test_bug
    run = tandem_leg.RunFolder(args.run)
    spec = run.spec

    import torch
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from tandem_leg.hf import TandemCallback, plan_micro_batches, plan_sampler

    micro, accumulation, max_len, updates, prefix = batch_recipe(run, args.threads)

    def example(i):
        if i not in encoded:  # a record outside the plan and the prefix (only a sampler off the plan asks)
            encoded[i] = encode(tok, records[i], max_len, late=1 if bug == "boundary-off-by-one" else 0)
        e = encoded[i]
        labels = [t if s else -100 for t, s in zip(e.ids, e.supervised)]
        labels[0] = -100  # nothing predicts token 0
        return {"input_ids": e.ids, "labels": labels}

    def collate(examples):  # right padding with <|endoftext|>, never a label
        width = max(len(x["input_ids"]) for x in examples)
        ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
        att = torch.zeros((len(examples), width), dtype=torch.long)
        lab = torch.full((len(examples), width), pad_id if bug == "pad-labelled" else -100, dtype=torch.long)
        for b, x in enumerate(examples):
            n = len(x["input_ids"])
            ids[b, :n], att[b, :n], lab[b, :n] = torch.tensor(x["input_ids"]), 1, torch.tensor(x["labels"])
        if bug == "attention-mask-all-ones":
            att[:] = 1
        return {"input_ids": ids, "attention_mask": att, "labels": lab}

    def heldout(model):
        """Token-weighted held-out CE over the eval prefix, in chunks of micro_batch (docs/spec.md's L1 / L4)."""
        total, n = 0.0, 0
        with torch.no_grad(), (model.disable_adapter() if bug == "eval-without-adapter" else contextlib.nullcontext()):
            for k in range(0, len(prefix), micro):
                b = collate([example(i) for i in prefix[k:k + micro]])
                logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits[:, :-1].float()
                labels = b["labels"][:, 1:]
                total += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                                 labels.reshape(-1), ignore_index=-100, reduction="sum"))
                n += int((labels != -100).sum())
        return total / n, n

    # First, so that it times the model load and the tokenization itself; pair=True: shared masks + plan.
    cb = TandemCallback(run, args, implementation="hf-trainer", heldout=None if args.trainer_eval else heldout,
                        pair=bug != "pair-off", hello_fields={"test_fault": bug} if bug else None,
                        settings=not args.test_no_settings)
    try:
        tok = AutoTokenizer.from_pretrained(run.tokenizer_dir, local_files_only=True)
        if bug == "generic-template":
            tok.chat_template = GENERIC_CHATML
        pad_id = tok.convert_tokens_to_ids("<|endoftext|>")
        records = run.records()
        needed = {i for u in updates for mb in u for i in mb} | set(prefix) | set(range(run.l3_count()))
        encoded = {i: encode(tok, records[i], max_len, late=1 if bug == "boundary-off-by-one" else 0)
                   for i in sorted(needed)}
        cb.tokens_per_update = [sum(sum(1 for t in example(i)["labels"] if t != -100) for mb in u for i in mb)
                                for u in updates]

        base = AutoModelForCausalLM.from_pretrained(run.base_dir, dtype=torch.float32, local_files_only=True)
        config = PeftConfig.from_pretrained(run.init_dir)
        if bug == "rslora-off":
            config.use_rslora = False
        model = PeftModel.from_pretrained(base, run.init_dir, config=config, is_trainable=True)
        cb.l3([encoded[i] for i in range(run.l3_count())])

        class ByRecord(torch.utils.data.Dataset):  # dataset[i] = record i's example: what plan_sampler indexes
            def __getitem__(self, i):
                return example(i)

            def __len__(self):
                return len(records)

        class PlanTrainer(Trainer):
            def _get_train_sampler(self, *a, **k):  # micro-batch m of update u = plan.json's updates[u][m]
                return super()._get_train_sampler(*a, **k) if bug == "shuffled-sampler" else plan_sampler(run)

            def training_step(self, model, inputs, num_items_in_batch=None):
                loss = super().training_step(model, inputs, num_items_in_batch)
                if bug == "clip-per-micro-batch":
                    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad],
                                                   self.args.max_grad_norm)
                return loss

        train_dataset, collator, per_device = ByRecord(), collate, micro
        if args.micro_batch_dataset:
            class MicroBatches(torch.utils.data.IterableDataset):  # one ready-made micro-batch per item, in plan order
                def __iter__(self):
                    for mb in plan_micro_batches(run):
                        yield collate([example(i) for i in mb])

            # the Trainer batches items by 1 and the collator unwraps: each item is already a micro-batch
            train_dataset, collator, per_device = MicroBatches(), (lambda items: items[0]), 1
            cb.example_ids = lambda i: example(i)["input_ids"]  # what the plan check compares each row with

        opt, total = spec["optimizer"], len(updates)
        warmup = tandem_leg.warmup_updates(spec["schedule"]["warmup_fraction"], total)
        targs = TrainingArguments(
            output_dir=os.path.join(run.leg_dir(args.leg), "trainer"), per_device_train_batch_size=per_device,
            per_device_eval_batch_size=micro, gradient_accumulation_steps=accumulation, max_steps=total,
            learning_rate=float(opt["lr"]), adam_beta1=float(opt["betas"][0]), adam_beta2=float(opt["betas"][1]),
            adam_epsilon=float(opt["eps"]) * (100 if bug == "adamw-eps-x100" else 1),
            weight_decay=0.01 if bug == "weight-decay" else float(opt["weight_decay"]), optim="adamw_torch",
            lr_scheduler_type="linear" if bug == "linear-schedule" else "cosine",
            warmup_steps=warmup + (1 if bug == "warmup-plus-one" else 0),
            max_grad_norm=float(spec["clip"]), logging_steps=1,
            label_smoothing_factor=0.1 if bug == "label-smoothing" else 0.0, save_strategy="no", report_to=[],
            eval_strategy="steps" if args.trainer_eval else "no", eval_steps=int(spec["eval"]["interval"]),
            remove_unused_columns=False, use_cpu=args.device == "cpu", seed=run.seed("dropout"), disable_tqdm=True)
        trainer = PlanTrainer(model=model, args=targs, data_collator=collator, train_dataset=train_dataset,
                              eval_dataset=[example(i) for i in prefix], callbacks=[cb])
        if bug == "ga-mean-of-means":
            trainer.model_accepts_loss_kwargs = False  # the Trainer then divides each micro-batch's mean by GA
        if args.trainer_eval:
            trainer.evaluate()  # the Trainer's own held-out loss before training: this leg's L1
        trainer.train()
    except Exception as e:
        traceback.print_exc()
        cb.error(str(e) if isinstance(e, tandem_leg.ProtocolError) or type(e).__name__ == "PairingError"
                 else f"{type(e).__name__}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
