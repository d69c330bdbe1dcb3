"""Rendering and tokenizing records with tandem's tokenizer and chat template, through the `tandem`
command line (`tandem template render`, `tandem tokens encode --offsets`: JSON Lines in, JSON Lines
out, one process each for all records), and the token-level rules of docs/spec.md §Supervision applied here:
supervision from the byte offsets, truncation, padding. Standard library only.

This is what an SDK leg that has no tokenizer of its own uses; L3 then compares tandem's tokenizer
(as the engine leg does) with the reference's HuggingFace one, and the supervision, truncation and
padding code written here.
"""
import json
import subprocess
from dataclasses import dataclass, field


class TokenizeError(RuntimeError):
    pass


@dataclass
class Encoded:
    index: int
    id: str
    ids: list                  # after truncation
    supervised: list           # bools, same length as ids
    full_length: int           # tokens before truncation
    boundary: int              # first supervised token (untruncated), -1 if none
    supervised_count: int      # after truncation
    text: str = field(default="", repr=False)

    def l3_record(self):
        """This record as the l3 event carries it."""
        return {"index": self.index, "id": self.id, "ids": self.ids, "boundary": self.boundary,
                "supervised_count": self.supervised_count, "full_length": self.full_length,
                "truncated_at": len(self.ids) if self.full_length > len(self.ids) else None, "text": self.text}


class TandemText:
    """tandem's tokenizer and template (the `tandem` binary) on a run folder's tokenizer/."""

    def __init__(self, tandem_bin, tokenizer_dir, template="qwen3"):
        if template not in ("qwen3", "chatml"):
            raise ValueError(f"experiment field template: unknown template {template!r} (qwen3|chatml)")
        self.tandem, self.tokenizer_dir, self.template = tandem_bin, tokenizer_dir, template

    def _jsonl(self, args, requests, what):
        payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests)
        p = subprocess.run([self.tandem, *args, "--tokenizer", self.tokenizer_dir], input=payload.encode("utf-8"),
                           capture_output=True)
        if p.returncode != 0:
            err = p.stderr.decode("utf-8", "replace").strip().splitlines()
            raise TokenizeError(f"`tandem {' '.join(args)}` failed ({what}): {err[-1] if err else 'exit ' + str(p.returncode)}")
        lines = p.stdout.decode("utf-8").splitlines()
        if len(lines) != len(requests):
            raise TokenizeError(f"`tandem {' '.join(args)}` answered {len(lines)} lines for {len(requests)} {what}")
        return [json.loads(line) for line in lines]

    def render(self, requests):
        """[{"messages", "add_generation_prompt", "enable_thinking"}] -> rendered texts."""
        return [r["text"] for r in self._jsonl(["template", "render", "--template", self.template], requests,
                                               "renderings")]

    def encode(self, texts):
        """texts -> [(ids, [[begin, end] byte offsets])] with special tokens recognised."""
        out = self._jsonl(["tokens", "encode", "--offsets"], [{"text": t} for t in texts], "texts")
        return [(o["ids"], o["offsets"]) for o in out]

    def token_id(self, token):
        ids, _ = self.encode([token])[0]
        if len(ids) != 1:
            raise TokenizeError(f"{token!r} is not one token of this tokenizer")
        return ids[0]


def encode_records(text, records, indices, max_len):
    """{index: Encoded} for records[i], i in indices, per docs/spec.md §Supervision: prompt_text = template(messages
    without the assistant turn, add_generation_prompt, enable_thinking false), full_text =
    template(all messages); token i is supervised when its span starts at or after prompt_text's
    end, up to and including the first <|im_end|> after it; truncation to max_len on the right."""
    indices = sorted(set(indices))
    requests = []
    for i in indices:
        messages = records[i]["messages"]
        if not messages or messages[-1]["role"] != "assistant":
            raise TokenizeError(f"record {records[i]['id']}: last message is not an assistant turn")
        requests.append({"messages": messages[:-1], "add_generation_prompt": True, "enable_thinking": False})
        requests.append({"messages": messages, "add_generation_prompt": False, "enable_thinking": None})
    rendered = text.render(requests)
    prompts, fulls = rendered[0::2], rendered[1::2]
    encoded_full = text.encode(fulls)
    im_end = text.token_id("<|im_end|>")
    out = {}
    for i, prompt, full, (ids, offsets) in zip(indices, prompts, fulls, encoded_full):
        if not full.startswith(prompt):
            raise TokenizeError(f"record {records[i]['id']}: the rendered conversation does not start with its prompt")
        boundary_byte = len(prompt.encode("utf-8"))  # tandem's offsets count UTF-8 bytes
        supervised = [False] * len(ids)
        boundary = -1
        for t, (begin, _end) in enumerate(offsets):
            if begin >= boundary_byte:
                if boundary < 0:
                    boundary = t
                supervised[t] = True
                if ids[t] == im_end:
                    break
        kept_ids, kept_sup = ids[:max_len], supervised[:max_len]
        out[i] = Encoded(index=records[i]["index"], id=records[i]["id"], ids=kept_ids, supervised=kept_sup,
                         full_length=len(ids), boundary=boundary, supervised_count=sum(kept_sup), text=full)
    return out


def micro_batch(encoded, pad_id):
    """Right-pads sequences to the longest one (the pad is never a label; token 0 is never a label:
    nothing predicts it). Returns (batch, seq, ids, supervised 0/1, lengths) as flat int lists."""
    batch = len(encoded)
    seq = max(len(e.ids) for e in encoded)
    ids = [pad_id] * (batch * seq)
    sup = [0] * (batch * seq)
    lengths = []
    for b, e in enumerate(encoded):
        ids[b * seq:b * seq + len(e.ids)] = e.ids
        for t in range(1, len(e.supervised)):
            if e.supervised[t]:
                sup[b * seq + t] = 1
        lengths.append(len(e.ids))
    return batch, seq, ids, sup, lengths
