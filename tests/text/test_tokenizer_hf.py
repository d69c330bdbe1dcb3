"""tandem's tokenizer (`tandem tokens encode`) against HuggingFace tokenizers (Tokenizer.from_file):
ids and offsets on every corpus text, every string field, >= 500 adversarial strings and every
Unicode code point. Offsets: tandem reports byte offsets into the UTF-8 text; HF's character
offsets are converted to bytes for the comparison (docs/data-text.md)."""
import json

import pytest

import text_oracle as oracle
from adversarial_strings import adversarial_strings


@pytest.fixture(scope="module")
def hf():
    return oracle.hf_tokenizer()


def char_to_byte_offsets(text):
    table = [0]
    for ch in text:
        table.append(table[-1] + len(ch.encode("utf-8")))
    return table


def compare(texts, hf, what, check_offsets=True):
    outs, _, _ = oracle.run_jsonl(["tokens", "encode", "--tokenizer", str(oracle.tokenizer_dir()), "--offsets"],
                                  [{"text": t} for t in texts])
    encs = hf.encode_batch(texts, add_special_tokens=False)
    mismatches, n_tokens = [], 0
    for i, (text, ours, ref) in enumerate(zip(texts, outs, encs)):
        n_tokens += len(ref.ids)
        if ours["ids"] != ref.ids:
            k = next((j for j, (a, b) in enumerate(zip(ours["ids"], ref.ids)) if a != b), min(len(ours["ids"]), len(ref.ids)))
            mismatches.append(f"{what} #{i} ids differ at token {k}: tandem {ours['ids'][max(0, k-3):k+4]} "
                              f"hf {ref.ids[max(0, k-3):k+4]} hf tokens {ref.tokens[max(0, k-3):k+4]} text {text[:200]!r}")
            continue
        if check_offsets:
            b = char_to_byte_offsets(text)
            ref_offs = [[b[s], b[e]] for s, e in ref.offsets]
            if ours["offsets"] != ref_offs:
                k = next(j for j, (x, y) in enumerate(zip(ours["offsets"], ref_offs)) if x != y)
                mismatches.append(f"{what} #{i} offsets differ at token {k}: tandem {ours['offsets'][max(0, k-2):k+3]} "
                                  f"hf(bytes) {ref_offs[max(0, k-2):k+3]} tokens {ref.tokens[max(0, k-2):k+3]} text {text[:200]!r}")
    print(f"{what}: {len(texts)} texts, {n_tokens} tokens, {len(mismatches)} mismatching")
    assert not mismatches, f"{len(mismatches)} of {len(texts)} {what} differ; first ones:\n" + "\n".join(mismatches[:10])
    return n_tokens


def test_adversarial_strings(hf):
    texts = adversarial_strings()
    assert len(texts) >= 500
    compare(texts, hf, "adversarial strings")


def test_every_corpus_row_rendered_with_the_chat_template(hf):
    tok = oracle.hf_auto_tokenizer()
    texts = []
    for n, (source, _, row) in enumerate(oracle.corpus_rows()):
        msgs = oracle.row_messages(source, row, with_system=(n % 3 == 0))
        if msgs is not None:
            texts.append(tok.apply_chat_template(msgs, tokenize=False))
    assert len(texts) > 6000
    compare(texts, hf, "rendered corpus rows")


def test_every_string_field_of_every_corpus_row(hf):
    texts = [s for _, _, row in oracle.corpus_rows() for s in oracle.string_fields(row)]
    assert len(texts) > 20000
    compare(texts, hf, "corpus string fields")


def test_malformed_lines_are_reported_with_line_and_field():
    args = ["tokens", "encode", "--tokenizer", str(oracle.tokenizer_dir())]
    records = [{"text": "ok"}, {"txt": "wrong field"}, {"text": 5}, {"text": "fine"}]
    outs, err, rc = oracle.run_jsonl(args, records, check=False)
    assert rc == 1 and len(outs) == 1, (rc, outs)  # stops at the first bad line without --keep-going
    assert "line 2" in err and "'text'" in err, err
    outs, err, rc = oracle.run_jsonl(args + ["--keep-going"], records, check=False)
    assert rc == 1 and len(outs) == 4
    assert "line 2" in err and "line 3" in err
    assert "error" in outs[1] and "error" in outs[2] and outs[3]["ids"] == oracle.hf_tokenizer().encode("fine").ids
