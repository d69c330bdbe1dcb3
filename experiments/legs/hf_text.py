"""The reference leg's text: records turned into token sequences the HuggingFace way — the model's own
chat template through tokenizer.apply_chat_template, ids and character offsets from the `tokenizers`
library, supervision per docs/spec.md §Supervision computed from the offsets. (The run folder itself is read with
tandem_leg.RunFolder; an encoded record is a tandem_leg.tokens.Encoded.)

This is the reference side of the L3 cross-check: it must never share code with tandem's tokenizer
(tandem_leg.tokens drives tandem's; only the Encoded record type is shared).
"""
from tandem_leg.tokens import Encoded

IM_END = "<|im_end|>"

# A generic ChatML layout, for the L3 fault test (an implementation that ignores the model's own
# template). It renders no reasoning block.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def load_tokenizer(run, template):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(run.tokenizer_dir, local_files_only=True)
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
