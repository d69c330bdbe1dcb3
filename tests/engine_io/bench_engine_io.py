"""Benchmark (not a test): loading a HuggingFace checkpoint folder into float32 host memory, tandem's
engine I/O (load_hf_checkpoint: mmap, validation, conversion, shape checks) against the reference
(safetensors.torch.load_file, then a float32 copy of each tensor: .to(float32, copy=True)), same file, same machine, best of N, page cache
warm for both. Usage:
    python bench_engine_io.py [--config bench-cpu] [--repeats 3]
with TANDEM_BINARY_DIR (or TANDEM_ENGINE_IO_TOOL) pointing at the build."""
import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

TOOL = os.environ.get("TANDEM_ENGINE_IO_TOOL") or str(
    Path(os.environ.get("TANDEM_BINARY_DIR", "build")) / "tests/engine_io/engine_io_tool")


def ours(d, repeats):
    out = subprocess.run([TOOL, "time-load", str(d), str(repeats)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["seconds"]


def reference(d, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        # A materialised float32 copy of every tensor, as tandem makes (load_file alone maps F32 lazily).
        sd = {k: v.to(torch.float32, copy=True) for k, v in load_file(d / "model.safetensors").items()}
        best = min(best, time.perf_counter() - t0)
        del sd
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="bench-cpu")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        f32 = Path(tmp) / "f32"
        t0 = time.perf_counter()
        subprocess.run([TOOL, "gen-base", str(f32), a.config, "1"], check=True)
        gen = time.perf_counter() - t0
        bf16 = Path(tmp) / "bf16"
        bf16.mkdir()
        (bf16 / "config.json").write_text((f32 / "config.json").read_text())
        save_file({k: v.to(torch.bfloat16) for k, v in load_file(f32 / "model.safetensors").items()},
                  bf16 / "model.safetensors", metadata={"format": "pt"})
        size = (f32 / "model.safetensors").stat().st_size
        print(f"config {a.config}: {size / 1e6:.0f} MB as F32; generated in {gen:.2f} s (tandem gen-base); "
              f"torch threads {torch.get_num_threads()}")
        for name, d in (("F32", f32), ("BF16", bf16)):
            reference(d, 1), ours(d, 1)  # warm the page cache for both
            r, o = reference(d, a.repeats), ours(d, a.repeats)
            print(f"  {name:4s} load to float32: tandem {o:.3f} s, safetensors+torch {r:.3f} s, "
                  f"ratio (reference / tandem) {r / o:.2f}x")


if __name__ == "__main__":
    main()
