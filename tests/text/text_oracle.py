"""Shared helpers for tandem's tokenizer/template tests against HuggingFace (the oracle).

Finds the assets (TANDEM_ASSETS, else ../shared next to the source checkout), runs the tandem CLI
(TANDEM_BIN) on JSON Lines, and builds the texts the tests compare: every corpus row rendered as a
chat, every string field of every row, and the adversarial strings of adversarial_strings.py.
"""
import gzip
import json
import os
import pathlib
import subprocess

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = pathlib.Path(__file__).resolve().parent


def source_dir():
    return pathlib.Path(os.environ.get("TANDEM_SOURCE_DIR", HERE.parent.parent))


def asset_root():
    if os.environ.get("TANDEM_ASSETS"):
        return pathlib.Path(os.environ["TANDEM_ASSETS"])
    return source_dir().parent / "shared"


def tokenizer_dir():
    d = asset_root() / "assets" / "qwen3-tokenizer"
    assert (d / "tokenizer.json").is_file(), f"tokenizer not found at {d} (set TANDEM_ASSETS)"
    return d


def corpora_dir():
    d = asset_root() / "data" / "corpora"
    assert d.is_dir(), f"corpora not found at {d} (set TANDEM_ASSETS)"
    return d


def tandem_bin():
    b = os.environ.get("TANDEM_BIN")
    assert b and os.path.exists(b), "TANDEM_BIN must point at the tandem binary (ctest sets it)"
    return b


def run_jsonl(args, records, check=True):
    """Runs `tandem ARGS` with one JSON line per record; returns (outputs, stderr, returncode)."""
    payload = "".join(json.dumps(r) + "\n" for r in records)
    p = subprocess.run([tandem_bin(), *args], input=payload.encode(), capture_output=True, timeout=1200)
    # split on "\n" only: str.splitlines() would also split inside texts holding U+2028, U+0085, ...
    out = [json.loads(line) for line in p.stdout.decode().split("\n") if line]
    if check:
        assert p.returncode == 0, f"tandem {' '.join(args)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}"
        assert len(out) == len(records), f"{len(out)} output lines for {len(records)} input lines"
    return out, p.stderr.decode(), p.returncode


def hf_tokenizer():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(tokenizer_dir() / "tokenizer.json"))


def hf_auto_tokenizer():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(tokenizer_dir()), local_files_only=True)


# ---- corpus rows -> chat messages (a simple converter owned by these tests; the real one is
# tandem's corpus builder, checked separately) ------------------------------------------------

def _options_block(options):
    return "\n".join(f"{k}. {v}" for k, v in options)


def corpus_rows():
    """Yields (source, row_id, row dict) for every row of the three corpora."""
    root = corpora_dir()
    pqal = json.loads((root / "pubmedqa" / "ori_pqal.json").read_text())
    for pmid, row in pqal.items():
        yield "pubmedqa", pmid, row
    for name in ("medmcqa_validation.parsed.jsonl", "medmcqa_train_first100single.parsed.jsonl", "examples.jsonl"):
        for i, line in enumerate((root / "medmcqa" / name).read_text().split("\n")):
            if line.strip():
                yield "medmcqa/" + name, str(i), json.loads(line)
    with gzip.open(root / "medmcqa" / "medmcqa_validation_part_00000.jsonl.gz", "rt") as f:
        for i, line in enumerate(f):
            if line.strip():
                yield "medmcqa/part_00000", str(i), json.loads(line)
    for i, line in enumerate((root / "medqa_usmle" / "test.jsonl").read_text().split("\n")):
        if line.strip():
            yield "medqa", str(i), json.loads(line)


def row_messages(source, row, with_system):
    """Chat messages for a row, or None when the row has no question/answer shape."""
    if source == "pubmedqa":
        user = row["QUESTION"] + "\n\nContext:\n" + "\n".join(row["CONTEXTS"])
        answer = row["LONG_ANSWER"]
    elif "question" in row and "opa" in row:
        opts = [("A", row["opa"]), ("B", row["opb"]), ("C", row["opc"]), ("D", row["opd"])]
        user = row["question"] + "\n\n" + _options_block(opts)
        answer = row["exp"] if row.get("exp") else opts[row["cop"]][1]
    elif "question" in row and "options" in row:
        user = row["question"] + "\n\n" + _options_block(sorted(row["options"].items()))
        answer = "The answer is: " + row["answer"] + "."
    elif "text" in row:
        user, answer = row["text"], "Answer noted."
    else:
        return None
    msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    if with_system:
        msgs.insert(0, {"role": "system", "content": "You are a careful clinical tutor. Explain your answer."})
    return msgs


def string_fields(value):
    """Every string inside a JSON value (keys excluded), depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from string_fields(v)
    elif isinstance(value, list):
        for v in value:
            yield from string_fields(v)
