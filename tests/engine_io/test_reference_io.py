"""Engine I/O against the reference stack: safetensors files both ways, HF checkpoints (bf16, sharded),
config.json both ways, the generated base checkpoint loaded by transformers, and peft adapters both
ways. Run by ctest with the reference environment's Python; the C++ side is engine_io_tool."""
import json
import math
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

TOOL = os.environ.get("TANDEM_ENGINE_IO_TOOL") or str(
    Path(os.environ.get("TANDEM_BINARY_DIR", "build")) / "tests/engine_io/engine_io_tool")
TANDEM = os.environ.get("TANDEM_BIN") or str(Path(os.environ.get("TANDEM_BINARY_DIR", "build")) / "app/tandem")

SMALL = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "vocab_size": 1000, "hidden_size": 64,
         "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": True,
         "initializer_range": 0.02, "max_position_embeddings": 512}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def tool(*args):
    assert Path(TOOL).exists(), f"engine_io_tool not built at {TOOL}"
    r = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def small_config(tmp_path, **over):
    c = dict(SMALL, **over)
    p = tmp_path / "small-config.json"
    p.write_text(json.dumps(c))
    return p


def bits_equal(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype == torch.float32
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


# ---- the generator, re-implemented from its documentation (generate.h / docs/engine-io.md) ----------
M64 = (1 << 64) - 1


def mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for c in s.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return h


def key(seed, domain, name):
    return mix(seed ^ fnv1a64(domain + "/" + name))


def value(k, i):
    return mix((k + (i + 1) * 0x9E3779B97F4A7C15) & M64)


def unit(x):
    return (x >> 11) * 2.0 ** -53


def py_normal(n, std, k):
    out = np.empty(n, dtype=np.float32)
    for j in range((n + 1) // 2):
        u1 = 1.0 - unit(value(k, 2 * j))
        u2 = unit(value(k, 2 * j + 1))
        r = math.sqrt(-2.0 * math.log(u1))
        out[2 * j] = np.float32(std * r * math.cos(2.0 * math.pi * u2))
        if 2 * j + 1 < n:
            out[2 * j + 1] = np.float32(std * r * math.sin(2.0 * math.pi * u2))
    return torch.from_numpy(out)


def py_uniform(n, lo, hi, k):
    return torch.tensor([np.float32(lo + (hi - lo) * unit(value(k, i))) for i in range(n)], dtype=torch.float32)


# ---- safetensors ------------------------------------------------------------------------------------
def test_torch_written_dtypes_are_read_exactly(tmp_path):
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, -0.0, 1.0, -2.5, 65504.0, 6e-8, 1e-5, 3.0e38, float("inf"), -float("inf"), 1e-40])
    tensors = {}
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        name = str(dt).split(".")[1]
        tensors[f"{name}.random"] = (torch.randn(37, 5, generator=g) * 3).to(dt)
        tensors[f"{name}.special"] = special.to(dt)
        tensors[f"{name}.scalar"] = torch.tensor(1.5, dtype=dt)
        tensors[f"{name}.empty"] = torch.zeros(0, 3, dtype=dt)
    src, out = tmp_path / "torch.safetensors", tmp_path / "ours.safetensors"
    save_file(tensors, src, metadata={"format": "pt", "k": "v"})
    meta = json.loads(tool("read", src, out))
    assert meta == {"format": "pt", "k": "v"}
    ours = load_file(out)
    assert set(ours) == set(tensors)
    for n, t in tensors.items():
        assert bits_equal(ours[n], t.to(torch.float32)), n  # torch's own conversion is the oracle


def test_our_files_are_read_by_safetensors_and_match_the_documented_generator(tmp_path):
    cfg = small_config(tmp_path)
    d = tmp_path / "base"
    tool("gen-base", d, cfg, 1234)
    raw = (d / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    assert (8 + n) % 8 == 0, "data must start 8-byte aligned"
    with safe_open(d / "model.safetensors", "pt") as f:
        meta = f.metadata()
        assert meta["format"] == "pt" and meta["tandem_seed"] == "1234"
        names = list(f.keys())
        for name in names:
            t = f.get_tensor(name)
            assert t.dtype == torch.float32
            if t.dim() == 1:
                assert torch.all(t == 1.0), name
            else:
                ref = py_normal(t.numel(), 0.02, key(1234, "tandem.base", name)).view(t.shape)
                assert bits_equal(t, ref), name
    assert "lm_head.weight" not in names  # tied


@pytest.mark.parametrize("tied", [True, False])
def test_generated_base_loads_in_transformers(tmp_path, tied):
    from transformers import Qwen3ForCausalLM
    d = tmp_path / "base"
    tool("gen-base", d, small_config(tmp_path, tie_word_embeddings=tied), 7)
    model, info = Qwen3ForCausalLM.from_pretrained(d, output_loading_info=True, dtype=torch.float32)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"], info
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
            c.intermediate_size, c.vocab_size, c.tie_word_embeddings) == (64, 2, 4, 2, 16, 128, 1000, tied)
    assert c.rope_parameters["rope_theta"] == 1e6 and c.rms_norm_eps == 1e-6
    file = load_file(d / "model.safetensors")
    sd = model.state_dict()
    for name, t in file.items():
        assert bits_equal(sd[name], t), name
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr() if tied else True
    ours = sum(t.numel() for t in file.values())
    assert model.num_parameters() == ours
    out = json.loads(tandem("inspect", "--model", d, "--json"))
    assert out["parameters"]["total"] == model.num_parameters()
    assert out["parameters"]["lm_head"] == (0 if tied else 1000 * 64)
    assert f"{model.num_parameters():,}" in tandem("inspect", "--model", d)


def tandem(*args):
    assert Path(TANDEM).exists(), f"tandem not built at {TANDEM}"
    r = subprocess.run([TANDEM, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_inspect_prints_the_spec_counts_for_qwen3_06b():
    # docs/spec.md §Recipe: 596,049,920 parameters; rsLoRA r 16 on all seven projections: 10,092,544 (1.693%).
    out = tandem("inspect", "--config", "qwen3-0.6b", "--lora-rank", "16", "--lora-alpha", "32")
    assert "596,049,920" in out and "10,092,544" in out and "1.693%" in out, out
    # Same numbers from transformers' and peft's own counting of a meta-device model (no weights).
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3Config, Qwen3ForCausalLM
    cfg = Qwen3Config(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                      num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True)
    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg)
    base_total = model.num_parameters()
    assert base_total == 596049920
    pm = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, use_rslora=True, target_modules=TARGETS))
    trainable, _ = pm.get_nb_trainable_parameters()
    assert trainable == 10092544
    j = json.loads(tandem("inspect", "--config", "qwen3-0.6b", "--lora-rank", "16", "--json"))
    assert j["parameters"]["total"] == base_total and j["trainable"] == trainable


def test_hf_bf16_sharded_checkpoint_loads_exactly(tmp_path):
    from transformers import Qwen3Config, Qwen3ForCausalLM
    torch.manual_seed(3)
    cfg = Qwen3Config(**{k: v for k, v in SMALL.items() if k not in ("model_type", "architectures", "rope_theta")},
                      rope_parameters={"rope_theta": 1e6, "rope_type": "default"})
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    d = tmp_path / "hf"
    model.save_pretrained(d, max_shard_size="100KB")
    assert (d / "model.safetensors.index.json").exists(), "expected a sharded checkpoint"
    out = tmp_path / "ours.safetensors"
    ours_cfg = json.loads(tool("load-hf", d, out))
    assert ours_cfg["hidden_size"] == 64 and ours_cfg["rope_parameters"]["rope_theta"] == 1e6
    assert ours_cfg["tie_word_embeddings"] is True
    ours = load_file(out)
    sd = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    assert set(ours) == set(sd)
    for name, t in sd.items():
        assert bits_equal(ours[name], t.to(torch.float32)), name
    # inspect reads only the shard headers and counts what transformers counts.
    assert json.loads(tandem("inspect", "--model", d, "--json"))["parameters"]["total"] == model.num_parameters()


def test_every_bf16_bit_pattern_upcasts_as_torch_does(tmp_path):
    # All 65,536 bfloat16 values (zeros, subnormals, normals, infinities, every NaN payload): the
    # engine's float32 after loading must be torch's .float() of the same file, byte for byte (L2
    # compares these bytes).
    every = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    src, out = tmp_path / "bf16.safetensors", tmp_path / "ours.safetensors"
    save_file({"every": every.reshape(256, 256)}, src)
    tool("read", src, out)
    ours = load_file(out)["every"]
    with safe_open(src, framework="pt") as f:
        theirs = f.get_tensor("every").float()
    assert ours.numpy().tobytes() == theirs.numpy().tobytes()


def shipped_base():
    root = Path(os.environ["TANDEM_ASSETS"]) if os.environ.get("TANDEM_ASSETS") else \
        Path(os.environ.get("TANDEM_SOURCE_DIR", Path(__file__).parents[2])).resolve().parent / "shared"
    d = root / "assets" / "qwen3-tiny-clinical"
    assert (d / "model.safetensors").is_file(), f"the shipped base is not at {d} (set TANDEM_ASSETS)"
    return d


def test_shipped_bf16_base_loads_identically_in_both_legs(tmp_path):
    # The main job's base (../shared/assets/qwen3-tiny-clinical, bfloat16): what the engine leg loads
    # (load_hf_checkpoint) against torch's .float() of each tensor and against what the reference leg
    # loads (AutoModelForCausalLM.from_pretrained(dtype=float32), its state dict), byte for byte.
    from transformers import AutoModelForCausalLM
    d = shipped_base()
    out = tmp_path / "ours.safetensors"
    cfg = json.loads(tool("load-hf", d, out))
    assert cfg["num_hidden_layers"] == 4 and cfg["hidden_size"] == 128 and cfg["tie_word_embeddings"] is True
    ours = load_file(out)
    with safe_open(d / "model.safetensors", framework="pt") as f:
        names = sorted(f.keys())
        raw = {n: f.get_tensor(n) for n in names}
    assert sorted(ours) == names and len(names) == 46
    assert all(t.dtype == torch.bfloat16 for t in raw.values())
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32, local_files_only=True)
    sd = model.state_dict()
    for n in names:
        b = ours[n].numpy().tobytes()
        assert b == raw[n].float().numpy().tobytes(), n
        assert b == sd[n].numpy().tobytes(), n
    # Tied embeddings: the reference's LM head is the embedding the engine loaded.
    assert sd["lm_head.weight"].numpy().tobytes() == ours["model.embed_tokens.weight"].numpy().tobytes()


def test_config_json_both_ways(tmp_path):
    from transformers import AutoConfig
    ours = json.loads(tool("parse-config", "tiny"))
    d = tmp_path / "cfg"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(ours))
    hf = AutoConfig.from_pretrained(d)
    assert type(hf).__name__ == "Qwen3Config" and hf.architectures == ["Qwen3ForCausalLM"]
    for f in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
              "intermediate_size", "vocab_size", "tie_word_embeddings", "rms_norm_eps", "max_position_embeddings",
              "initializer_range"):
        assert getattr(hf, f) == ours[f], f
    assert hf.rope_parameters["rope_theta"] == 1e6
    # transformers' own file, read back by us, keeps every field.
    d2 = tmp_path / "cfg2"
    hf.save_pretrained(d2)
    again = json.loads(tool("parse-config", d2 / "config.json"))
    assert again == ours


# ---- peft adapters ----------------------------------------------------------------------------------
def small_base(tmp_path):
    from transformers import Qwen3ForCausalLM
    d = tmp_path / "base"
    if not d.exists():
        tool("gen-base", d, small_config(tmp_path), 11)
    return d, Qwen3ForCausalLM.from_pretrained(d, dtype=torch.float32)


@pytest.mark.parametrize("targets", [TARGETS, ["q_proj", "v_proj", "down_proj"]])
def test_generated_initial_adapter_loads_in_peft(tmp_path, targets):
    from peft import PeftModel
    base_dir, base = small_base(tmp_path)
    ad = tmp_path / "init"
    tool("gen-adapter", ad, base_dir / "config.json", 1234, 4, 8, ",".join(targets))
    cfg = json.loads((ad / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 8 and cfg["use_rslora"] is True and cfg["peft_type"] == "LORA"
    model = PeftModel.from_pretrained(base, ad)
    file = load_file(ad / "adapter_model.safetensors")
    seen = 0
    for mod_name, mod in model.named_modules():
        if hasattr(mod, "lora_A") and "default" in mod.lora_A:
            seen += 1
            assert mod.scaling["default"] == pytest.approx(8 / math.sqrt(4), rel=0, abs=0)
            prefix = mod_name  # base_model.model.model.layers.N.<block>.<proj>
            a, b = file[prefix + ".lora_A.weight"], file[prefix + ".lora_B.weight"]
            assert bits_equal(mod.lora_A["default"].weight.detach(), a), prefix
            assert bits_equal(mod.lora_B["default"].weight.detach(), b), prefix
            assert torch.all(b == 0)
            ref = py_uniform(a.numel(), -1 / math.sqrt(a.shape[1]), 1 / math.sqrt(a.shape[1]),
                             key(1234, "tandem.lora-init", prefix + ".lora_A.weight")).view(a.shape)
            assert bits_equal(a, ref), prefix
    assert seen == 2 * len(targets) == len(file) // 2


def test_peft_written_adapter_loads_in_ours(tmp_path):
    from peft import LoraConfig, get_peft_model
    base_dir, base = small_base(tmp_path)
    torch.manual_seed(5)
    pm = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, use_rslora=True, lora_dropout=0.05,
                                         target_modules=["gate_proj", "k_proj", "o_proj"], init_lora_weights=False,
                                         task_type="CAUSAL_LM"))
    d = tmp_path / "peft"
    pm.save_pretrained(d)
    out = tmp_path / "ours.safetensors"
    cfg = json.loads(tool("load-adapter", d, base_dir / "config.json", out))
    assert cfg["r"] == 8 and cfg["lora_alpha"] == 16 and cfg["use_rslora"] is True and cfg["lora_dropout"] == 0.05
    assert cfg["target_modules"] == ["k_proj", "o_proj", "gate_proj"]
    trainable, _ = pm.get_nb_trainable_parameters()
    j = json.loads(tandem("inspect", "--model", base_dir, "--adapter", d, "--json"))
    assert j["trainable"] == trainable and j["lora"]["r"] == 8
    ref, ours = load_file(d / "adapter_model.safetensors"), load_file(out)
    assert set(ref) == set(ours) and len(ref) == 2 * 2 * 3
    for n in ref:
        assert bits_equal(ours[n], ref[n]), n
