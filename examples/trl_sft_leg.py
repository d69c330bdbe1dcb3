#!/usr/bin/env python3
"""A TRL SFTTrainer run as a tandem leg, paired with the reference (docs/legs.md "Pair your trainer").

    python examples/trl_sft_leg.py --run RUN_DIR --leg trl --device cpu [--threads N]

The same recipe as examples/hf_trainer_leg.py on TRL's SFTTrainer: the script tokenizes the records
itself (the chat template, docs/spec.md §Supervision supervision as `labels`) and hands SFTTrainer a processed dataset
(`skip_prepare_dataset`), one row per record in record order, so `plan_sampler(run)` can feed plan.json;
TRL's own collator pads on the right with the tokenizer's pad token (<|endoftext|>) and its fused LM
head computes the loss (sum of token losses / the update's supervised tokens). TandemCallback(pair=True)
puts tandem's shared dropout masks on the LoRA layers and checks every micro-batch against the plan.
Fingerprints: TRL's fused head computes the logits without calling the LM head module, so this leg
records every point but the head's `ce` (tandem localise lists it as recorded by one leg only).
"""
import os
import sys
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tandem_leg  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_trainer_leg import batch_recipe, encode  # noqa: E402  (the same data pipeline as the Trainer example)


def main():
    args = tandem_leg.parse_leg_args(description=__doc__.splitlines()[0])
    run = tandem_leg.RunFolder(args.run)
    spec = run.spec

    import datasets
    import torch
    import trl
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from tandem_leg.hf import TandemCallback, plan_sampler

    micro, accumulation, max_len, updates, prefix = batch_recipe(run, args.threads)

    def heldout(model):
        """Token-weighted held-out CE over the eval prefix, in chunks of micro_batch (the SPEC's L1 / L4)."""
        total, n = 0.0, 0
        with torch.no_grad():
            for k in range(0, len(prefix), micro):
                rows = [by_record[i] for i in prefix[k:k + micro]]
                batch = trainer.data_collator(rows)
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
                labels = batch["labels"][:, 1:]
                total += float(torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                                 labels.reshape(-1), ignore_index=-100, reduction="sum"))
                n += int((labels != -100).sum())
        return total / n, n

    cb = TandemCallback(run, args, implementation="trl-sft", stack="TRL SFTTrainer (tandem_leg.hf.TandemCallback)",
                        heldout=heldout, pair=True, versions={"trl": trl.__version__})
    try:
        tok = AutoTokenizer.from_pretrained(run.tokenizer_dir, local_files_only=True)
        tok.pad_token = "<|endoftext|>"
        records = run.records()
        encoded = [encode(tok, r, max_len) for r in records]  # every record: row i = record i

        def labels_of(e):
            return [-100] + [t if s else -100 for t, s in zip(e.ids[1:], e.supervised[1:])]

        by_record = datasets.Dataset.from_list([{"input_ids": e.ids, "labels": labels_of(e)} for e in encoded])
        cb.tokens_per_update = [sum(sum(1 for t in by_record[i]["labels"] if t != -100) for mb in u for i in mb)
                                for u in updates]
        base = AutoModelForCausalLM.from_pretrained(run.base_dir, dtype=torch.float32, local_files_only=True)
        model = PeftModel.from_pretrained(base, run.init_dir, is_trainable=True)
        cb.l3([encoded[i] for i in range(run.l3_count())])

        class PlanSFTTrainer(SFTTrainer):
            def _get_train_sampler(self, *a, **k):  # micro-batch m of update u = plan.json's updates[u][m]
                return plan_sampler(run)

        opt, total = spec["optimizer"], len(updates)
        config = SFTConfig(
            output_dir=os.path.join(run.leg_dir(args.leg), "trainer"), per_device_train_batch_size=micro,
            gradient_accumulation_steps=accumulation, max_steps=total, learning_rate=float(opt["lr"]),
            adam_beta1=float(opt["betas"][0]), adam_beta2=float(opt["betas"][1]), adam_epsilon=float(opt["eps"]),
            weight_decay=float(opt["weight_decay"]), optim="adamw_torch", lr_scheduler_type="cosine",
            warmup_steps=tandem_leg.warmup_updates(spec["schedule"]["warmup_fraction"], total),
            max_grad_norm=float(spec["clip"]), logging_steps=1, save_strategy="no", report_to=[],
            max_length=max_len, packing=False, padding_free=False, dataset_kwargs={"skip_prepare_dataset": True},
            # SFTConfig's defaults are bf16 autocast and gradient checkpointing: the experiment computes in float32
            # (left on, tandem names it: L1 6.7e-5, first divergence update 0, layer 0, q_proj.base, 203x its
            # bound), and a checkpointed layer's forward runs twice (its fingerprint points would be recorded twice)
            bf16=False, gradient_checkpointing=False,
            remove_unused_columns=False, use_cpu=args.device == "cpu", seed=run.seed("dropout"), disable_tqdm=True)
        trainer = PlanSFTTrainer(model=model, args=config, train_dataset=by_record, processing_class=tok,
                                 callbacks=[cb])
        trainer.train()
    except Exception as e:
        traceback.print_exc()
        cb.error(str(e) if type(e).__name__ == "PairingError" else f"{type(e).__name__}: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
