#!/usr/bin/env python3
"""HuggingFace side of `tandem bench tokenizer`: loads tokenizer.json with `tokenizers`, encodes
the texts of a JSON Lines file ({"text": ...}) with encode_batch, and prints one JSON line:
{"load_s", "encode_s" (best of --repeat), "first_encode_s" (the first pass, cache cold), "tokens",
"threads"}. The thread count is fixed through
RAYON_NUM_THREADS, which the caller sets before this process starts (rayon reads it once)."""
import argparse
import json
import os
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-json", required=True)
    ap.add_argument("--texts", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with open(args.texts, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f if line.strip()]
    from tokenizers import Tokenizer
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(args.tokenizer_json)
    load_s = time.perf_counter() - t0
    # encode_batch_fast (tokenizers >= 0.20) skips offset tracking, like tandem's encode(): the
    # fastest path HF offers; fall back to encode_batch on older versions.
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    best, first, tokens = float("inf"), None, 0
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        encs = encode(texts, add_special_tokens=False)
        s = time.perf_counter() - t0
        first = s if first is None else first
        best = min(best, s)
        tokens = sum(len(e.ids) for e in encs)
    print(json.dumps({"load_s": load_s, "encode_s": best, "first_encode_s": first, "tokens": tokens,
                      "threads": int(os.environ.get("RAYON_NUM_THREADS", "0")),
                      "method": encode.__name__}))


if __name__ == "__main__":
    main()
