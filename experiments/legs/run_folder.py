"""Reading the run folder (docs/run-folder.md) and turning records into token sequences the
HuggingFace way: the model's own chat template through tokenizer.apply_chat_template, ids and
character offsets from the `tokenizers` library, supervision per docs/spec.md §Supervision computed from the offsets.

This is the reference side of the L3 cross-check: it must never share code with tandem's tokenizer.
"""
import json
import os
from dataclasses import dataclass, field

IM_END = "<|im_end|>"

# A generic ChatML layout, for the L3 fault test (an implementation that ignores the model's own
# template). It renders no reasoning block.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


class RunFolder:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        with open(self.file("experiment.json"), encoding="utf-8") as f:
            doc = json.load(f)
        self.spec = doc["spec"]
        self.spec_sha256 = doc["spec_sha256"]
        self._records = None

    def file(self, *parts):
        return os.path.join(self.path, *parts)

    def leg_setting(self, leg, key):
        """A spec field with the leg's override applied (spec["overrides"][leg][key])."""
        overrides = self.spec.get("overrides", {}).get(leg, {})
        return overrides.get(key, self.spec[key])

    def seed(self, name):
        """What seed `name` (split, base, adapter, plan, dropout) is: spec["seeds"][name], else the
        experiment's `seed` (docs/experiment-format.md "seeds"; `seeds` is absent when all equal it)."""
        return int(self.spec.get("seeds", {}).get(name, self.spec["seed"]))

    def records(self):
        if self._records is None:
            with open(self.file("corpus", "records.jsonl"), encoding="utf-8") as f:
                self._records = [json.loads(line) for line in f if line.strip()]
        return self._records

    def split(self):
        with open(self.file("corpus", "split.json"), encoding="utf-8") as f:
            return json.load(f)

    def eval_prefix(self):
        with open(self.file("corpus", "eval_prefix.json"), encoding="utf-8") as f:
            return json.load(f)["indices"]

    def plan(self):
        with open(self.file("plan.json"), encoding="utf-8") as f:
            return json.load(f)

    def leg_dir(self, leg):
        d = self.file("legs", leg)
        os.makedirs(d, exist_ok=True)
        return d


@dataclass
class Encoded:
    index: int
    id: str
    ids: list            # after truncation
    supervised: list     # bools, same length as ids
    full_length: int     # token count before truncation
    boundary: int        # first supervised token index (before truncation), -1 if none
    supervised_count: int  # after truncation
    text: str = field(default="", repr=False)


def load_tokenizer(run, template):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(run.file("tokenizer"), local_files_only=True)
    if template == "chatml":
        tok.chat_template = CHATML_TEMPLATE
    elif template != "qwen3":
        raise ValueError(f"experiment field template: unknown template {template!r} (qwen3|chatml)")
    return tok


def encode_record(tok, record, max_len):
    """docs/spec.md §Supervision: prompt_text / full_text through the chat template, ids with special tokens
    recognised, supervised = tokens whose span starts at or after len(prompt_text) up to and
    including the first <|im_end|> after it; then truncation on the right to max_len."""
    messages = record["messages"]
    if not messages or messages[-1]["role"] != "assistant":
        raise ValueError(f"record {record['id']}: last message is not an assistant turn")
    prompt_text = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True,
                                          enable_thinking=False)
    full_text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    if not full_text.startswith(prompt_text):
        raise ValueError(f"record {record['id']}: rendered conversation does not start with its prompt")
    enc = tok(full_text, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(enc["input_ids"])
    offsets = enc["offset_mapping"]
    im_end = tok.convert_tokens_to_ids(IM_END)
    boundary_char = len(prompt_text)
    supervised = [False] * len(ids)
    boundary = -1
    for i, (start, _end) in enumerate(offsets):
        if start >= boundary_char:
            if boundary < 0:
                boundary = i
            supervised[i] = True
            if ids[i] == im_end:
                break
    full_length = len(ids)
    ids = ids[:max_len]
    supervised = supervised[:max_len]
    return Encoded(index=record["index"], id=record["id"], ids=ids, supervised=supervised,
                   full_length=full_length, boundary=boundary, supervised_count=sum(supervised),
                   text=full_text)
