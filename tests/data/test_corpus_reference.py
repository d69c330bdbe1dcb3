"""Corpus build, supervision, split and batch plan against independent Python oracles (docs/data-corpus.md).

The oracle side never calls tandem code: HuggingFace `transformers` renders the chat template,
`tokenizers` gives ids and character offsets, hashlib recomputes the split, and the source files are
re-read with `json`. tandem is driven through its CLI (TANDEM_BIN).
"""
import hashlib
import json
import os
import shutil
import subprocess

import pytest

SOURCE_DIR = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
TANDEM = os.environ.get("TANDEM_BIN", "tandem")
SHARED = os.path.join(SOURCE_DIR, "..", "shared")
CORPORA = os.path.join(SHARED, "data", "corpora")
TOKENIZER = os.path.join(SHARED, "assets", "qwen3-tokenizer")
SEED = 1234
FRACTION = 0.15
IM_END = "<|im_end|>"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def run_tandem(*args, check=True):
    proc = subprocess.run([TANDEM, *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"tandem {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def build(sources, out, *extra):
    run_tandem("corpus", "build", "--sources", sources, "--out", out, "--seed", str(SEED),
               "--heldout-fraction", str(FRACTION), "--tokenizer", TOKENIZER, *extra)
    with open(os.path.join(out, "records.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    with open(os.path.join(out, "accounting.json"), encoding="utf-8") as f:
        accounting = json.load(f)
    with open(os.path.join(out, "split.json"), encoding="utf-8") as f:
        split = json.load(f)
    return records, accounting, split


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("corpus"))
    records, accounting, split = build(CORPORA, out)
    return out, records, accounting, split


@pytest.fixture(scope="module")
def hf():
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    auto = AutoTokenizer.from_pretrained(TOKENIZER, local_files_only=True)
    chatml = AutoTokenizer.from_pretrained(TOKENIZER, local_files_only=True)
    chatml.chat_template = CHATML
    raw = Tokenizer.from_file(os.path.join(TOKENIZER, "tokenizer.json"))
    return {"qwen3": auto, "chatml": chatml, "raw": raw}


def source_rows():
    """Independent count of input rows per source, and MedMCQA rows without an explanation."""
    with open(os.path.join(CORPORA, "pubmedqa", "ori_pqal.json"), encoding="utf-8") as f:
        pubmedqa = len(json.load(f))
    medmcqa, no_exp = 0, 0
    for name in sorted(os.listdir(os.path.join(CORPORA, "medmcqa"))):
        if name.endswith(".parsed.jsonl"):
            with open(os.path.join(CORPORA, "medmcqa", name), encoding="utf-8") as f:
                for line in f:
                    if line.strip():
                        medmcqa += 1
                        exp = json.loads(line).get("exp")
                        no_exp += not (exp or "").strip()
    with open(os.path.join(CORPORA, "medqa_usmle", "test.jsonl"), encoding="utf-8") as f:
        medqa = sum(1 for line in f if line.strip())
    return {"pubmedqa": pubmedqa, "medmcqa": medmcqa, "medqa": medqa}, no_exp


def hf_encode(hf, messages, template, max_len):
    """docs/spec.md §Supervision the HuggingFace way: template via apply_chat_template, ids and character offsets via
    tokenizers, supervised = span start >= len(prompt_text) through the first <|im_end|>."""
    tok = hf[template]
    prompt = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True, enable_thinking=False)
    full = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert full.startswith(prompt)
    enc = hf["raw"].encode(full, add_special_tokens=False)
    ids = enc.ids
    im_end = hf["raw"].token_to_id(IM_END)
    sup = [0] * len(ids)
    boundary = None
    for i, (start, _end) in enumerate(enc.offsets):
        if start >= len(prompt):
            if boundary is None:
                boundary = i
            sup[i] = 1
            if ids[i] == im_end:
                break
    n = min(len(ids), max_len) if max_len else len(ids)
    return {"ids": ids[:n], "supervised": sup[:n], "boundary": boundary, "full_length": len(ids), "full_text": full,
            "supervised_count": sum(sup[:n])}


def tandem_all(corpus_dir, template, max_len):
    proc = run_tandem("tokens", "show", "--corpus", corpus_dir, "--all", "--json", "--template", template,
                      "--max-len", str(max_len), "--tokenizer", TOKENIZER)
    return [json.loads(line) for line in proc.stdout.split("\n") if line]  # not splitlines(): U+2028 etc.


# --- accounting -------------------------------------------------------------------------------------

def test_accounting_sums_to_the_input_count(corpus):
    out, records, accounting, _ = corpus
    expected_inputs, no_exp = source_rows()
    total = 0
    for s in accounting["sources"]:
        assert s["input"] == expected_inputs[s["source"]], s
        assert s["converted"] + s["duplicate"] + s["rejected"] == s["input"], s
        assert sum(s["rejected_by_reason"].values()) == s["rejected"]
        total += s["input"]
    assert accounting["total"]["input"] == total == 6556
    t = accounting["total"]
    assert t["converted"] + t["duplicate"] + t["rejected"] == t["input"]
    assert t["converted"] == len(records)
    medmcqa = next(s for s in accounting["sources"] if s["source"] == "medmcqa")
    assert medmcqa["rejected_by_reason"].get("no explanation", 0) == no_exp == 1977
    with open(os.path.join(out, "not_converted.jsonl"), encoding="utf-8") as f:
        notes = [json.loads(line) for line in f]
    assert len(notes) == t["duplicate"] + t["rejected"]
    assert len({r["id"] for r in records} | {n["id"] for n in notes}) == t["input"]  # ids unique, every row named
    with open(os.path.join(out, "accounting.txt"), encoding="utf-8") as f:
        assert f"accounted for: {total} of {total} input rows (100.0%)" in f.read()


def test_records_file_shape(corpus):
    _, records, _, _ = corpus
    sources = [r["source"] for r in records]
    order = {"pubmedqa": 0, "medmcqa": 1, "medqa": 2}
    assert sources == sorted(sources, key=order.get)  # pubmedqa, medmcqa, medqa
    for i, r in enumerate(records):
        assert r["index"] == i
        assert r["id"].startswith(r["source"] + ":")
        assert [m["role"] for m in r["messages"]] == ["user", "assistant"]
        assert r["tokens"]["supervised"] > 0
        target = r["messages"][1]["content"]
        assert len(target) > 1 and target not in ("A", "B", "C", "D", "(a)", "(b)", "(c)", "(d)")


# --- supervision and ids against HuggingFace, every record -----------------------------------------

@pytest.mark.parametrize("template,max_len", [("qwen3", 512), ("qwen3", 64), ("chatml", 512)])
def test_every_record_matches_huggingface(corpus, hf, template, max_len):
    out, records, _, _ = corpus
    ours = tandem_all(out, template, max_len)
    assert len(ours) == len(records)
    mismatches = []
    truncated = 0
    for rec, t in zip(records, ours):
        ref = hf_encode(hf, rec["messages"], template, max_len)
        truncated += ref["full_length"] > max_len
        for key in ("full_text", "ids", "supervised", "boundary", "full_length", "supervised_count"):
            if t[key] != ref[key]:
                mismatches.append((rec["id"], key))
                break
        assert t["truncated_length"] == min(ref["full_length"], max_len)
    assert not mismatches, f"{len(mismatches)} records differ from HF, first: {mismatches[:5]}"
    if max_len == 64:
        assert truncated > 0.95 * len(records)  # truncation really exercised (a few records are shorter)
    if template == "qwen3" and max_len == 512:
        # The build-time counts in records.jsonl are the same figures.
        for rec, t in zip(records, ours):
            assert rec["tokens"] == {"full_length": t["full_length"], "length": t["truncated_length"],
                                     "boundary": t["boundary"], "supervised": t["supervised_count"]}


# --- split ------------------------------------------------------------------------------------------

def heldout_by_hash(record_id, seed=SEED, fraction=FRACTION):
    u = int(hashlib.sha256(f"{seed}:{record_id}".encode("utf-8")).hexdigest()[:16], 16)
    return u < fraction * 2 ** 64


def test_split_is_the_documented_hash(corpus):
    _, records, _, split = corpus
    assert split["seed"] == SEED and split["heldout_fraction"] == FRACTION
    heldout = [r["index"] for r in records if heldout_by_hash(r["id"])]
    assert split["heldout"] == heldout
    assert split["train"] == [r["index"] for r in records if not heldout_by_hash(r["id"])]
    assert all(r["split"] == ("heldout" if heldout_by_hash(r["id"]) else "train") for r in records)
    assert len(split["heldout"]) >= 512  # docs/spec.md's eval prefix fits at the default fraction


def drop_every_tenth(src, dst):
    """A copy of the sources with every 10th row of every file removed (10% of rows)."""
    shutil.copytree(src, dst)
    for root, dirs, files in os.walk(dst):  # the shared copy is read-only
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    pq = os.path.join(dst, "pubmedqa", "ori_pqal.json")
    with open(pq, encoding="utf-8") as f:
        rows = json.load(f)
    kept = {k: v for i, (k, v) in enumerate(rows.items()) if i % 10 != 9}
    with open(pq, "w", encoding="utf-8") as f:
        json.dump(kept, f)
    dropped = len(rows) - len(kept)
    for folder in ("medmcqa", "medqa_usmle"):
        for name in os.listdir(os.path.join(dst, folder)):
            if not (name.endswith(".parsed.jsonl") if folder == "medmcqa" else name.endswith(".jsonl")):
                continue  # only the files tandem reads (docs/data-corpus.md)
            path = os.path.join(dst, folder, name)
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(l for i, l in enumerate(lines) if i % 10 != 9)
            dropped += sum(1 for i in range(len(lines)) if i % 10 == 9)
    return dropped


def test_split_keeps_every_record_on_its_side_when_10_percent_are_removed(corpus, tmp_path):
    _, records, accounting, _ = corpus
    side = {r["id"]: r["split"] for r in records}
    dropped = drop_every_tenth(CORPORA, str(tmp_path / "sources"))
    fewer, acc2, split2 = build(str(tmp_path / "sources"), str(tmp_path / "out"))
    assert acc2["total"]["input"] == accounting["total"]["input"] - dropped
    assert 0.09 < dropped / accounting["total"]["input"] < 0.11
    assert len(fewer) < len(records)
    for r in fewer:
        assert r["id"] in side
        assert r["split"] == side[r["id"]], r["id"]
    assert [r["index"] for r in fewer if r["split"] == "heldout"] == split2["heldout"]


# --- batch plan -------------------------------------------------------------------------------------

def plan(corpus_dir, path, seed, *extra):
    run_tandem("corpus", "plan", "--corpus", corpus_dir, "--out", path, "--seed", str(seed), *extra)
    with open(path, "rb") as f:
        return f.read()


def test_batch_plan_is_deterministic_and_covers_the_train_split(corpus, tmp_path):
    out, records, _, split = corpus
    a = plan(out, str(tmp_path / "a.json"), 7)
    b = plan(out, str(tmp_path / "b.json"), 7)
    c = plan(out, str(tmp_path / "c.json"), 8)
    assert a == b  # same seed, two processes: byte-identical
    assert a != c
    p = json.loads(a)
    assert (p["version"], p["seed"], p["micro_batch"], p["accumulation"], p["max_len"]) == (1, 7, 2, 8, 512)
    flat = [i for u in p["updates"] for mb in u for i in mb]
    assert sorted(flat) == sorted(split["train"])  # every train record exactly once
    n_mb = -(-len(split["train"]) // 2)
    assert len(p["updates"]) == -(-n_mb // 8)
    assert all(len(u) == 8 for u in p["updates"][:-1]) and all(len(mb) == 2 for u in p["updates"] for mb in u[:-1])
    # Buckets of 2*8*4 = 64 records are sorted longest first.
    lengths = [records[i]["tokens"]["length"] for i in flat]
    for start in range(0, len(lengths), 64):
        chunk = lengths[start:start + 64]
        assert chunk == sorted(chunk, reverse=True), start
    two = json.loads(plan(out, str(tmp_path / "e.json"), 7, "--epochs", "2"))
    flat2 = [i for u in two["updates"] for mb in u for i in mb]
    assert sorted(flat2) == sorted(split["train"] * 2)


# --- converter edge cases through the CLI -----------------------------------------------------------

def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def mcq(row_id, question, exp, opa="a"):
    return json.dumps({"row_id": row_id, "question": question, "opa": opa, "opb": "b", "opc": "c", "opd": "d",
                       "cop": 0, "exp": exp}) + "\n"


def test_duplicates_and_missing_explanations(tmp_path):
    src = tmp_path / "src"
    write(str(src / "medmcqa" / "m_train.parsed.jsonl"),
          mcq("r1", "What is X?", "X is Y.") +
          mcq("r2", "what   is x?", "x is y.", opa="other options do not matter") +  # duplicate of r1
          mcq("r3", "What is X?", "X is Z.") +  # same question, other target: kept
          mcq("r4", "What is W?", None) +
          mcq("r5", "What is V?", "  "))
    write(str(src / "medqa_usmle" / "test.jsonl"),
          json.dumps({"question": "What is X?", "options": {"A": "Y", "B": "Q"}, "answer_idx": "A", "answer": "Y"}) + "\n")
    records, acc, _ = build(str(src), str(tmp_path / "out"))
    by = {s["source"]: s for s in acc["sources"]}
    assert by["medmcqa"]["input"] == 5
    assert (by["medmcqa"]["converted"], by["medmcqa"]["duplicate"]) == (2, 1)
    assert by["medmcqa"]["rejected_by_reason"] == {"no explanation": 2}
    assert by["pubmedqa"]["input"] == 0 and by["pubmedqa"]["files"] == []
    assert [r["id"] for r in records] == ["medmcqa:train/r1", "medmcqa:train/r3", "medqa:test/0"]
    with open(tmp_path / "out" / "not_converted.jsonl", encoding="utf-8") as f:
        notes = [json.loads(line) for line in f]
    assert {"id": "medmcqa:train/r2", "file": "medmcqa/m_train.parsed.jsonl", "line": 2, "outcome": "duplicate",
            "reason": "duplicate of medmcqa:train/r1"} in notes


def test_malformed_line_names_file_line_and_field(tmp_path):
    src = tmp_path / "src"
    write(str(src / "medmcqa" / "x_train.parsed.jsonl"), mcq("r1", "Q?", "E.") + '{"row_id": "r2", "question": \n')
    proc = run_tandem("corpus", "build", "--sources", str(src), "--out", str(tmp_path / "out"), "--tokenizer", TOKENIZER,
                      check=False)
    assert proc.returncode == 1
    assert "medmcqa/x_train.parsed.jsonl: line 2: malformed JSON" in proc.stderr
    write(str(src / "medmcqa" / "x_train.parsed.jsonl"), mcq("r1", "Q?", "E.").replace('"opc": "c", ', ""))
    proc = run_tandem("corpus", "build", "--sources", str(src), "--out", str(tmp_path / "out"), "--tokenizer", TOKENIZER,
                      check=False)
    assert proc.returncode == 1
    assert 'medmcqa/x_train.parsed.jsonl: line 1: field "opc": missing' in proc.stderr
    assert not os.path.exists(tmp_path / "out" / "records.jsonl")  # nothing half-written


# --- tokens diff against the reference and a file of ids --------------------------------------------

def test_tokens_diff_points_at_the_first_mismatch(corpus, hf, tmp_path):
    out, records, _, _ = corpus
    rec = records[5]
    ref = hf_encode(hf, rec["messages"], "qwen3", 512)
    ids = list(ref["ids"])
    ids_file = tmp_path / "ids.json"
    ids_file.write_text(json.dumps({"ids": ids, "supervised": ref["supervised"]}))
    same = run_tandem("tokens", "diff", "--corpus", out, "--index", "5", "--ids-b", str(ids_file), "--tokenizer", TOKENIZER,
                      check=False)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "identical" in same.stdout
    ids[17] += 1
    ids_file.write_text(json.dumps(ids))
    diff = run_tandem("tokens", "diff", "--corpus", out, "--index", "5", "--ids-b", str(ids_file), "--tokenizer", TOKENIZER,
                      check=False)
    assert diff.returncode == 3
    assert "first mismatch at token 17 (id)" in diff.stdout
    assert "<== first mismatch" in diff.stdout
    # Qwen3 vs ChatML: they part where Qwen3 writes its empty reasoning block.
    chat = run_tandem("tokens", "diff", "--corpus", out, "--index", "5", "--template-b", "chatml", "--tokenizer", TOKENIZER,
                      check=False)
    assert chat.returncode == 3
    think = hf["raw"].token_to_id("<think>")
    assert f"first mismatch at token {ref['ids'].index(think)} (id)" in chat.stdout


def test_tokens_diff_against_the_reference_environment(corpus):
    out, records, _, _ = corpus
    # A truncated PubMedQA record: the hardest case (long text, supervision cut by max_len).
    idx = next(r["index"] for r in records if r["tokens"]["full_length"] > 512)
    proc = run_tandem("tokens", "diff", "--corpus", out, "--index", str(idx), "--reference", "--tokenizer", TOKENIZER,
                      "--python", os.environ.get("TANDEM_REFENV_PYTHON", __import__("sys").executable), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "identical: ids and supervision agree on all 512 tokens" in proc.stdout


def test_tokens_show_marks_boundary_and_truncation(corpus, hf):
    out, records, _, _ = corpus
    rec = next(r for r in records if r["tokens"]["full_length"] > 512 and r["tokens"]["boundary"] < 500)
    ref = hf_encode(hf, rec["messages"], "qwen3", 512)
    text = run_tandem("tokens", "show", "--corpus", out, "--id", rec["id"], "--tokenizer", TOKENIZER).stdout
    assert f"boundary {ref['boundary']}" in text
    assert f"supervision starts (boundary {ref['boundary']})" in text
    assert f"truncated at 512 (max_len 512): {ref['full_length'] - 512} tokens dropped" in text
    assert "[[SUPERVISED>>" in text and "[[TRUNCATED>>" in text and "\x1b[" not in text  # no colours off a terminal
    token_lines = [l for l in text.split("\n") if l[:6].strip().isdigit()]
    assert len(token_lines) == 512
    assert [int(l.split()[1]) for l in token_lines] == ref["ids"]
    assert [l.split()[2] == "S" for l in token_lines] == [bool(s) for s in ref["supervised"]]
