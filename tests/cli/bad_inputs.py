#!/usr/bin/env python3
"""The bad-input suite (docs/fuzzing.md): every hostile input below must give a clear
one-line error naming the file or field, with the documented exit code -- never "internal error",
never a crash, never exit 0. Prints the totals line
    N bad inputs, N clear errors, 0 internal errors, 0 crashes, 0 silent acceptances
and exits 1 unless every case is a clear error.

    python tests/cli/bad_inputs.py [--verbose] [--only SUBSTRING] [--jobs N]

Cases are grouped by the input they attack: experiment files (every field: wrong type, out of
range, null, duplicated, unknown), `tandem run` options and run folders, reports and run files,
tokenizer folders, corpora, safetensors checkpoints and adapters, the catalog, `--out` paths, and
stdin JSON Lines with invalid UTF-8. Runner kills live in a separate file of this folder.
"""
import argparse
import copy
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile as F  # noqa: E402
from hostile import TINY_EXPERIMENT, Case  # noqa: E402

# A valid experiment that runs in seconds (the engine leg alone on a tiny model): every experiment
# case breaks exactly one thing in it.
GOOD = dict(TINY_EXPERIMENT, name="faults")
DELETE = object()


def run_args(experiment="{dir}/x.json", *extra, **options):
    """`tandem run` on the case's files; options (legs="...", out="...") replace the defaults."""
    opts = {"legs": "engine", "out": "{dir}/runs", "catalog": "{dir}/c.db", "assets": "{shared}"}
    opts.update(options)
    argv = ["run", experiment, "--no-probe", "--quiet"]
    for k, v in opts.items():
        argv += [f"--{k}", v]
    return argv + list(extra)


def _set_field(spec, path, value):
    """Set (or, with DELETE, remove) one dotted field of spec in place."""
    *parents, leaf = path.split(".")
    node = spec
    for p in parents:
        node = node.setdefault(p, {})
    if value is DELETE:
        del node[leaf]
    else:
        node[leaf] = value


def spec_with(path, value):
    spec = copy.deepcopy(GOOD)
    _set_field(spec, path, value)
    return spec


def field_case(path, value, message, label=None, rc=1):
    """The experiment with one field set to `value`; the error must name the field."""
    shown = "deleted" if value is DELETE else json.dumps(value)
    return Case(f"experiment: {label or path} = {shown}", run_args(),
                expect=f"x.json: field {path}: {message}" if message is not None else f"x.json: field {path}",
                files={"x.json": json.dumps(spec_with(path, value))}, expect_rc=rc)


def text_case(label, text, expect, rc=1):
    return Case(f"experiment: {label}", run_args(), expect=expect, files={"x.json": text}, expect_rc=rc)


GOOD_TEXT = json.dumps(GOOD, indent=1)
NULL = "is null (give a value, or leave the field out to use its default)"
DUP = "duplicate key (an object may name a field once)"


def experiment_cases():
    c = []
    # -- the file itself
    c.append(Case("experiment: file missing", run_args("{dir}/missing.json"), expect="missing.json"))
    c.append(Case("experiment: path is a folder", run_args("{dir}"), expect="{dir}",
                  setup=lambda d: None))
    c.append(text_case("empty file", "", "x.json: not valid JSON"))
    c.append(text_case("only whitespace", " \n\t\n", "x.json: not valid JSON"))
    c.append(text_case("truncated", GOOD_TEXT[: len(GOOD_TEXT) // 2], "x.json: not valid JSON"))
    c.append(text_case("garbage", "this is not json", "x.json: not valid JSON"))
    c.append(text_case("trailing comma", GOOD_TEXT.rstrip()[:-1].rstrip() + ",}", "x.json: not valid JSON"))
    c.append(text_case("two documents", GOOD_TEXT + "\n" + GOOD_TEXT, "x.json: not valid JSON"))
    c.append(text_case("top level is a list", "[" + GOOD_TEXT + "]", "x.json: field (top level): must be an object"))
    c.append(text_case("top level is a string", '"faults"', "x.json: field (top level): must be an object"))
    c.append(text_case("top level is null", "null", "x.json: field (top level): must be an object"))
    c.append(Case("experiment: invalid UTF-8 in a string", run_args(), expect="x.json: not valid JSON",
                  files={"x.json": GOOD_TEXT.replace('"faults"', '"fa\\u0000ults"').encode().replace(b"\\u0000", b"\xff\xfe")}))
    c.append(Case("experiment: NUL byte", run_args(), expect="x.json: not valid JSON",
                  files={"x.json": GOOD_TEXT.encode()[:20] + b"\x00" + GOOD_TEXT.encode()[20:]}))
    c.append(text_case("lone surrogate escape", GOOD_TEXT.replace('"faults"', '"\\ud800"'), "x.json: not valid JSON"))
    c.append(text_case("nested 100000 deep", '{"name": "x", "description": ' + "[" * 100000 + "]" * 100000 + "}",
                       "x.json: field description: must be a string"))
    # -- top-level fields
    c.append(field_case("name", DELETE, "is required"))
    c.append(field_case("name", None, NULL))
    c.append(field_case("name", "", "must be non-empty"))
    c.append(field_case("name", "../escape", "must be non-empty and use only letters"))
    c.append(field_case("name", "a b", "must be non-empty and use only letters"))
    c.append(field_case("name", 12, "must be a string"))
    c.append(field_case("description", 5, "must be a string"))
    c.append(field_case("description", None, NULL))
    c.append(field_case("seed", -1, "must be a non-negative integer"))
    c.append(field_case("seed", 1.5, "must be a non-negative integer"))
    c.append(field_case("seed", "7", "must be a non-negative integer"))
    c.append(field_case("seed", 18446744073709551615, "is too large"))
    c.append(text_case("seed 1e400", GOOD_TEXT.replace('"seed": 7', '"seed": 1e400'),
                       "x.json: field seed: number out of range (1e400 does not fit a double)"))
    c.append(field_case("seed", None, NULL))
    # -- model
    c.append(field_case("model", DELETE, "is required"))
    c.append(field_case("model", None, NULL))
    c.append(field_case("model", "tiny", "must be an object"))
    c.append(field_case("model", {}, "needs exactly one of config"))
    c.append(field_case("model", {"config": "tiny", "base": "/tmp"}, "needs exactly one of config"))
    c.append(field_case("model.config", 3, "must be a config name or an object"))
    c.append(field_case("model.config", "", "must name a config"))
    # Found when the model is resolved (the message names the value or the config field).
    c.append(text_case("model.config unknown name", json.dumps(spec_with("model.config", "qwen9-huge")), "'qwen9-huge'"))
    c.append(text_case("model.config inline wrong type", json.dumps(spec_with("model.config", {"hidden_size": "wide"})),
                       "model.config: field 'hidden_size': must be an integer"))
    c.append(text_case("model.config inline negative", json.dumps(spec_with("model.config", {"hidden_size": -8})),
                       "model.config: field 'hidden_size': must be positive"))
    c.append(text_case("model.config inline 2^62 layers", json.dumps(spec_with("model.config", {"num_hidden_layers": 2**62})),
                       "model.config: field 'num_hidden_layers': must be at most"))
    c.append(field_case("model.base", "", "must be a non-empty path", label="model.base empty"))
    c.append(Case("experiment: model.base folder does not exist", run_args(), expect="{dir}/nowhere",
                  files={"x.json": json.dumps(spec_with("model", {"base": "{dir}/nowhere"}))}))
    c.append(Case("experiment: model.base is a file", run_args(), expect="{dir}/file.bin",
                  files={"x.json": json.dumps(spec_with("model", {"base": "{dir}/file.bin"})), "file.bin": "x"}))
    c.append(field_case("model.extra", 1, "unknown field"))
    # -- lora
    for v, m in ((0, "must be a positive integer"), (-1, "must be a positive integer"), (1.5, "must be a positive integer"),
                 ("16", "must be a positive integer"), (None, NULL), (9223372036854775808, "is too large")):
        c.append(field_case("lora.rank", v, m))
    for v, m in ((0, "must be a number in (0, 1e9]"), (-2, "must be a number in (0, 1e9]"), ("4", "must be a number"), (None, NULL)):
        c.append(field_case("lora.alpha", v, m))
    c.append(field_case("lora.use_rslora", "yes", "must be true or false"))
    c.append(field_case("lora.use_rslora", 1, "must be true or false"))
    c.append(field_case("lora.dropout", 1, "must be in [0, 1)"))
    c.append(field_case("lora.dropout", -0.1, "must be in [0, 1)"))
    c.append(field_case("lora.targets", [], "must be a non-empty list of strings"))
    c.append(field_case("lora.targets", "q_proj", "must be a non-empty list of strings"))
    c.append(field_case("lora.targets", ["q_proj", 3], "must be a non-empty list of strings"))
    c.append(field_case("lora.targets", ["q_proj", "qq_proj"], "unknown entry 'qq_proj'"))
    c.append(field_case("lora.targets", ["q_proj", "q_proj"], "entry 'q_proj' repeated"))
    c.append(field_case("lora.targets", [None], "must be a non-empty list of strings"))
    c.append(field_case("lora.rnak", 4, "unknown field"))
    c.append(field_case("lora", [1, 2], "must be an object"))
    # -- optimizer, schedule, clip
    c.append(field_case("optimizer.name", "sgd", "must be one of adamw"))
    for v, m in ((0, "must be"), (-1, "must be"), (None, NULL), ("1e-4", "must be a number"), (100, "must be a number in (0, 10]"),
                 (float("inf"), None), (True, "must be a number")):
        if v == float("inf"):
            continue  # json.dumps writes Infinity, which is not JSON: covered by the raw-text case below
        c.append(field_case("optimizer.lr", v, m))
    c.append(text_case("optimizer.lr = 1e400", GOOD_TEXT.replace('"lr": 0.0001', '"lr": 1e400'),
                       "x.json: field optimizer.lr: number out of range (1e400 does not fit a double)"))
    c.append(text_case("optimizer.lr = Infinity", GOOD_TEXT.replace('"lr": 0.0001', '"lr": Infinity'),
                       "x.json: not valid JSON (near field optimizer.lr)"))
    c.append(text_case("optimizer.lr = NaN", GOOD_TEXT.replace('"lr": 0.0001', '"lr": NaN'),
                       "x.json: not valid JSON (near field optimizer.lr)"))
    c.append(text_case("optimizer.lr duplicated", GOOD_TEXT.replace('"lr": 0.0001', '"lr": 0.0001, "lr": 5'),
                       f"x.json: field optimizer.lr: {DUP}"))
    c.append(text_case("optimizer.lr = 4.9e-324 (denormal)", GOOD_TEXT.replace('"lr": 0.0001', '"lr": 1e-400'),
                       "x.json: field optimizer.lr: must be"))
    c.append(field_case("optimizer.betas", [0.9], "must be two numbers in [0, 1)"))
    c.append(field_case("optimizer.betas", [1, 0.999], "must be two numbers in [0, 1)"))
    c.append(field_case("optimizer.betas", "0.9,0.999", "must be two numbers in [0, 1)"))
    c.append(field_case("optimizer.betas", [None, 0.9], "must be two numbers in [0, 1)"))
    c.append(field_case("optimizer.eps", 0, "must be a number in (0, 1]"))
    c.append(field_case("optimizer.weight_decay", 2, "must be in [0, 1]"))
    c.append(field_case("optimizer.momentum", 0.9, "unknown field"))
    c.append(field_case("schedule.name", "linear", "must be one of cosine_with_warmup"))
    c.append(field_case("schedule.warmup_fraction", 2, "must be in [0, 1]"))
    c.append(field_case("schedule.warmup_fraction", None, NULL))
    c.append(field_case("clip", 0, "must be a number in (0, 1e9]"))
    c.append(field_case("clip", -1, "must be a number in (0, 1e9]"))
    c.append(field_case("clip", True, "must be a number"))
    # -- batch, sequence, corpus, eval, checkpoint
    for f, v, m in (("batch.micro_batch", 0, "must be a positive integer"), ("batch.micro_batch", "2", "must be a positive integer"),
                    ("batch.micro_batch", 1e12, "must be a positive integer"), ("batch.accumulation", -2, "must be a positive integer"),
                    ("batch.epochs", 0, "must be a positive integer"), ("batch.max_updates", -1, "must be a non-negative integer"),
                    ("batch.max_updates", None, NULL), ("batch.micro", 2, "unknown field"),
                    ("sequence.max_len", 1, "must be an integer >= 2"), ("sequence.max_len", 0, "must be an integer >= 2"),
                    ("sequence.max_len", 64.5, "must be an integer >= 2"),
                    ("corpus.sources", [], "must be a non-empty list of strings"), ("corpus.sources", ["wiki"], "unknown entry 'wiki'"),
                    ("corpus.sources", ["medqa", "medqa"], "entry 'medqa' repeated"),
                    ("corpus.heldout_fraction", 0, "must be in (0, 1)"), ("corpus.heldout_fraction", 1, "must be in (0, 1)"),
                    ("corpus.max_records_per_source", -5, "must be a non-negative integer"),
                    ("eval.interval", 0, "must be a positive integer"), ("eval.prefix_size", 0, "must be a positive integer"),
                    ("eval.interval", None, NULL), ("checkpoint.interval", -1, "must be a non-negative integer"),
                    ("checkpoint.every", 1, "unknown field")):
        c.append(field_case(f, v, m))
    # -- enumerations, overrides, unknown and duplicated fields
    c.append(field_case("dropout_masks", "random", "must be one of native|shared"))
    c.append(field_case("plan", "random", "must be one of shared|native"))
    c.append(field_case("template", "llama", "must be one of qwen3|chatml"))
    c.append(field_case("l3_records", -1, "must be a non-negative integer"))
    c.append(field_case("overrides", [], "must be an object"))
    c.append(field_case("overrides", {"engine": {"lr": 1}}, None, label="overrides.engine.lr (not per-leg)"))
    c.append(field_case("overrides", {"engine": None}, None, label="overrides.engine null"))
    c.append(field_case("overrides", {"engine": {"template": None}}, None, label="overrides.engine.template null"))
    c.append(field_case("learning_rate", 1e-3, "unknown field"))
    c.append(text_case("name duplicated", GOOD_TEXT.replace('"name": "faults"', '"name": "faults", "name": "other"'),
                       f"x.json: field name: {DUP}"))
    c.append(text_case("batch duplicated", GOOD_TEXT.replace('"clip": 1.0', '"clip": 1.0, "batch": {"micro_batch": 4}'),
                       f"x.json: field batch: {DUP}"))
    return c


def run_option_cases():
    exp = {"x.json": GOOD_TEXT}
    c = []
    c.append(Case("run: --legs unknown implementation", run_args(legs="engine,jax"), expect="--legs", files=exp))
    c.append(Case("run: --legs name twice", run_args(legs="engine,engine"), expect="--legs", files=exp))
    c.append(Case("run: --legs bad name", run_args(legs="a/b=engine"), expect="a/b", files=exp))
    c.append(Case("run: --devices gpu", run_args("{dir}/x.json", "--devices", "gpu"), expect="--devices", files=exp))
    c.append(Case("run: --format xml", run_args("{dir}/x.json", "--format", "xml"), expect="xml", files=exp))
    c.append(Case("run: --threads -3", run_args("{dir}/x.json", "--threads", "-3"), expect="--threads", files=exp, expect_rc=2))
    c.append(Case("run: experiment and --resume", run_args("{dir}/x.json", "--resume", "{dir}"), expect="not both",
                  files=exp, expect_rc=2))
    c.append(Case("run: neither experiment nor --resume", ["run"], expect="--resume", expect_rc=2))
    c.append(Case("run: --out is a file", run_args(out="{dir}/x.json"),
                  expect="{dir}/x.json", files=exp, expect_rc=2))
    c.append(Case("run: --out below a file", run_args(out="{dir}/x.json/runs"),
                  expect="{dir}/x.json", files=exp))
    c.append(Case("run: --catalog is not a database", run_args(catalog="{dir}/notes.txt"),
                  expect="notes.txt", files=dict(exp, **{"notes.txt": "just some notes\n" * 100})))
    c.append(Case("run: --catalog is a folder", run_args(catalog="{dir}"),
                  expect="{dir}", files=exp))
    c.append(Case("run: --catalog below a file", run_args(catalog="{dir}/x.json/c.db"),
                  expect="{dir}/x.json", files=exp))
    c.append(Case("run: --assets folder does not exist", run_args(assets="{dir}/no-assets"),
                  expect="{dir}/no-assets", files=exp))
    c.append(Case("run: --assets without corpora", run_args(assets="{dir}/assets-root"),
                  expect="{dir}/assets-root", files=exp, setup=lambda d: F.asset_root_with(d, corpora=False)))
    return c


def resume_cases():
    def broken(rel, content):
        def setup(d):
            F.link_tree(F.PLACEHOLDERS["{fixture}"], os.path.join(d, "run"))
            p = os.path.join(d, "run", rel)
            if content is None:
                os.remove(p)
            else:
                with open(p, "wb") as f:
                    f.write(content if isinstance(content, bytes) else content.encode())
        return setup

    def resume(label, rel, content, expect):
        return Case(f"resume: {label}", ["run", "--resume", "{dir}/run", "--catalog", "{dir}/c.db", "--no-probe", "--quiet"],
                    expect=expect, setup=broken(rel, content))

    c = [Case("resume: folder does not exist", ["run", "--resume", "{dir}/nothing", "--catalog", "{dir}/c.db"], expect="{dir}/nothing"),
         Case("resume: an empty folder", ["run", "--resume", "{dir}", "--catalog", "{dir}/c.db"], expect="{dir}"),
         Case("resume: a file", ["run", "--resume", "{dir}/f", "--catalog", "{dir}/c.db"], expect="{dir}/f", files={"f": "x"})]
    c.append(resume("experiment.json not JSON", "experiment.json", "{oops", "experiment.json: not valid JSON"))
    c.append(resume("experiment.json empty", "experiment.json", "", "experiment.json: not valid JSON"))
    c.append(resume("experiment.json without spec", "experiment.json", '{"spec_sha256": "00"}', "experiment.json: missing field spec"))
    c.append(resume("experiment.json sha256 a number", "experiment.json", '{"spec": {}, "spec_sha256": 5}', "experiment.json"))
    c.append(resume("experiment.json spec edited", "experiment.json", None, "spec_sha256 does not match"))
    # (the last one is rewritten below: the spec with one value changed, the hash kept)
    c[-1].setup = _edited_spec_setup
    c.append(resume("prepare.json not JSON", "prepare.json", "{", "prepare.json"))
    c.append(resume("prepare.json a list", "prepare.json", "[1, 2]", "prepare.json"))
    c.append(resume("legs.json missing", "legs.json", None, "legs.json"))
    c.append(resume("legs.json not JSON", "legs.json", "[{", "legs.json"))
    c.append(resume("legs.json entry without name", "legs.json", '[{"implementation": "engine", "device": "cpu"}]', "legs.json"))
    c.append(resume("legs.json an object", "legs.json", '{"name": "engine"}', "legs.json"))
    c.append(resume("run.h5 is text", "run.h5", "not hdf5\n", "run.h5"))
    c.append(resume("run.h5 truncated", "run.h5", b"\x89HDF\r\n\x1a\n" + b"\0" * 64, "run.h5"))
    return c


def _edited_spec_setup(d):
    F.link_tree(F.PLACEHOLDERS["{fixture}"], os.path.join(d, "run"))
    p = os.path.join(d, "run", "experiment.json")
    doc = json.load(open(p))
    doc["spec"]["optimizer"]["lr"] = 0.5
    with open(p, "w") as f:
        json.dump(doc, f)


def report_cases():
    c = [Case("report: run does not exist", ["report", "{dir}/none"], expect="{dir}/none"),
         Case("report: an empty folder", ["report", "{dir}"], expect="{dir}"),
         Case("report: run.h5 is text", ["report", "{dir}/run.h5"], expect="run.h5", files={"run.h5": "hello\n"}),
         Case("report: run.h5 is empty", ["report", "{dir}/run.h5"], expect="run.h5", files={"run.h5": ""}),
         Case("report: run.h5 truncated", ["report", "{dir}/run.h5"], expect="run.h5",
              setup=lambda d: _truncated_copy(os.path.join(F.PLACEHOLDERS["{fixture}"], "run.h5"), os.path.join(d, "run.h5"))),
         Case("report: --format xml", ["report", "{fixture}", "--format", "xml"], expect="xml"),
         Case("report: --out is a folder", ["report", "{fixture}", "--out", "{dir}"], expect="{dir}"),
         Case("report: --out folder does not exist", ["report", "{fixture}", "--out", "{dir}/no/such/r.md"], expect="{dir}/no/such"),
         Case("report: --out below a file", ["report", "{fixture}", "--out", "{dir}/f/r.md"], expect="{dir}/f", files={"f": "x"}),
         Case("report: probe file without legs", ["report", "{dir}/p.h5"], expect="p.h5", setup=_probe_file)]
    # A real run file with one stored record replaced (h5py): what tandem wrote must still be read
    # with errors naming the file and the object.
    for label, path, value, expect in (
            ("check l1 not JSON", "legs/engine/checks/l1", "{oops", "checks/l1"),
            ("check l2 a number", "legs/engine/checks/l2", "5", "run.h5"),
            ("check l3 with 1e400", "legs/engine/checks/l3", '{"records": [{"index": 1e400}]}', "checks/l3"),
            ("spec_json not JSON", "experiment@spec_json", "{", "spec"),
            ("spec_json with a null lr", "experiment@spec_json", None, "optimizer.lr")):
        c.append(Case(f"report: run.h5 {label}", ["report", "{dir}/run.h5"], expect=expect,
                      setup=lambda d, path=path, value=value: _edited_run_file(d, path, value)))
    return c


def _edited_run_file(d, path, value):
    import h5py

    dst = os.path.join(d, "run.h5")
    shutil.copy(os.path.join(F.PLACEHOLDERS["{fixture}"], "run.h5"), dst)
    with h5py.File(dst, "r+") as f:
        if "@" in path:
            obj, attr = path.split("@")
            if value is None:  # the spec with optimizer.lr set to null
                spec = json.loads(f[obj].attrs[attr])
                spec["optimizer"]["lr"] = None
                value = json.dumps(spec)
            f[obj].attrs[attr] = value
        else:
            del f[path]
            f[path] = value


def _truncated_copy(src, dst):
    data = F.read_bytes(src)
    with open(dst, "wb") as f:
        f.write(data[: len(data) // 2])


def _probe_file(d):
    # A real HDF5 file tandem wrote that is not a run: /host and /probes only.
    subprocess.run([F.TANDEM, "probe", "--device", "cpu", "--out", os.path.join(d, "p.h5"), "--catalog",
                    os.path.join(d, "probe.db")], capture_output=True, check=True, cwd=d)


def stdin_cases():
    enc = ["tokens", "encode", "--tokenizer", "{tok}", "--keep-going"]
    ren = ["template", "render", "--tokenizer", "{tok}", "--keep-going"]

    def went_on(n_lines):
        def check(r):
            lines = r.stdout.splitlines()
            if len(lines) != n_lines:
                return f"--keep-going wrote {len(lines)} output lines for {n_lines} input lines"
            return None
        return check

    good_msg = b'{"messages": [{"role": "user", "content": "hi"}]}\n'
    c = [Case("tokens encode: invalid UTF-8 with --keep-going", enc, expect="line 2",
              stdin=b'{"text": "a"}\n{"text": "\xff\xfe"}\n{"text": "b"}\n', check=went_on(3)),
         Case("tokens encode: truncated UTF-8 sequence", enc, expect="line 1", stdin=b'{"text": "\xe2\x82"}\n{"text": "b"}\n',
              check=went_on(2)),
         Case("tokens encode: overlong UTF-8", enc, expect="line 1", stdin=b'{"text": "\xc0\xaf"}\n', check=went_on(1)),
         Case("tokens encode: UTF-8 surrogate bytes", enc, expect="line 1", stdin=b'{"text": "\xed\xa0\x80"}\n', check=went_on(1)),
         Case("tokens encode: invalid UTF-8 without --keep-going", enc[:-1], expect="line 1", stdin=b'{"text": "\xff"}\n'),
         Case("tokens encode: not JSON", enc, expect="line 1", stdin=b"text\n{\"text\": \"b\"}\n", check=went_on(2)),
         Case("tokens encode: text missing", enc, expect="field 'text'", stdin=b'{"txt": "a"}\n'),
         Case("tokens encode: text a number", enc, expect="field 'text'", stdin=b'{"text": 5}\n'),
         Case("tokens encode: line a list", enc, expect="line 1", stdin=b'["a"]\n'),
         Case("tokens encode: lone surrogate escape", enc, expect="line 1", stdin=b'{"text": "\\udc80"}\n'),
         Case("template render: invalid UTF-8 with --keep-going", ren, expect="line 1",
              stdin=b'{"messages": [{"role": "user", "content": "\xff"}]}\n' + good_msg, check=went_on(2)),
         Case("template render: invalid UTF-8 in the role", ren, expect="line 1",
              stdin=b'{"messages": [{"role": "us\xc3er", "content": "x"}]}\n' + good_msg, check=went_on(2)),
         Case("template render: messages not a list", ren, expect="field 'messages'", stdin=b'{"messages": {}}\n'),
         Case("template render: message without role", ren, expect="messages[0].role", stdin=b'{"messages": [{"content": "x"}]}\n'),
         Case("template render: content a number", ren, expect="messages[0].content",
              stdin=b'{"messages": [{"role": "user", "content": 3}]}\n'),
         Case("template render: enable_thinking a string", ren, expect="enable_thinking",
              stdin=b'{"messages": [{"role": "user", "content": "x"}], "enable_thinking": "yes"}\n'),
         Case("template render: empty messages", ren, expect="field 'messages'", stdin=b'{"messages": []}\n')]
    return c


def tokenizer_cases():
    tok_json = F.read_bytes(os.path.join(F.TOKENIZER_DIR, "tokenizer.json"))
    cfg_json = F.read_bytes(os.path.join(F.TOKENIZER_DIR, "tokenizer_config.json"))
    tj = json.loads(tok_json)

    def variant(**changes):
        j = copy.deepcopy(tj)
        for k, v in changes.items():
            node = j
            *parents, leaf = k.split("__")
            for p in parents:
                node = node[p]
            node[leaf] = v
        return json.dumps(j).encode()

    bad_tokenizers = [
        ("empty", b"", "tokenizer.json"),
        ("truncated", tok_json[: len(tok_json) // 3], "tokenizer.json"),
        ("a list", b"[]", "tokenizer.json"),
        ("not JSON", b"<html>not found</html>", "tokenizer.json"),
        ("model.type WordPiece", variant(model__type="WordPiece"), "tokenizer.json model: field 'type'"),
        ("normalizer null", variant(normalizer=None), "tokenizer.json: field 'normalizer'"),
        ("vocab empty", variant(model__vocab={}), "model.vocab"),
        ("vocab id negative", variant(model__vocab=dict(list(tj["model"]["vocab"].items())[:300] + [("zz", -4)])), "negative id"),
        ("vocab id a string", variant(model__vocab=dict(list(tj["model"]["vocab"].items())[:300] + [("zz", "4")])), "tokenizer.json"),
        ("vocab id 2^31-1", variant(model__vocab=dict(list(tj["model"]["vocab"].items())[:300] + [("zz", 2147483647)])), "tokenizer.json"),
        ("vocab id 1e12", variant(model__vocab=dict(list(tj["model"]["vocab"].items())[:300] + [("zz", 10**12)])), "tokenizer.json"),
        ("merge with unknown token", variant(model__merges=[["Ġ", "qqqq"]]), "merge #0"),
        ("merges a string", variant(model__merges="a b"), "tokenizer.json"),
        ("added token id a string", variant(added_tokens=[{"id": "x", "content": "<a>"}]), "tokenizer.json"),
        ("added token id negative", variant(added_tokens=[{"id": -1, "content": "<a>"}]), "tokenizer.json"),
        ("added token without content", variant(added_tokens=[{"id": 5}]), "tokenizer.json"),
        ("added tokens an object", variant(added_tokens={"id": 5}), "tokenizer.json"),
        ("dropout a string", variant(model__dropout="0.1"), "tokenizer.json"),
        ("pre_tokenizer missing", variant(pre_tokenizer=None), "pre_tokenizer"),
    ]
    c = []
    for label, content, expect in bad_tokenizers:
        c.append(Case(f"tokens encode: tokenizer.json {label}", ["tokens", "encode", "--tokenizer", "{dir}/tok"], expect=expect,
                      files={"tok/tokenizer.json": content, "tok/tokenizer_config.json": cfg_json}, stdin=b'{"text": "a"}\n'))
    c.append(Case("tokens encode: tokenizer folder does not exist", ["tokens", "encode", "--tokenizer", "{dir}/none"],
                  expect="{dir}/none", stdin=b'{"text": "a"}\n'))
    c.append(Case("tokens encode: tokenizer.json is a folder", ["tokens", "encode", "--tokenizer", "{dir}/tok"],
                  expect="tokenizer.json", setup=lambda d: os.makedirs(os.path.join(d, "tok", "tokenizer.json"))))
    c.append(Case("template render: tokenizer_config.json not JSON", ["template", "render", "--tokenizer", "{dir}/tok"],
                  expect="tokenizer_config.json", files={"tok/tokenizer_config.json": "{chat"}, stdin=b'{"messages": []}\n'))
    c.append(Case("template render: chat_template not Qwen3's", ["template", "render", "--tokenizer", "{dir}/tok"],
                  expect="tokenizer_config.json", files={"tok/tokenizer_config.json": '{"chat_template": "{{ x }}"}'},
                  stdin=b'{"messages": []}\n'))
    # doctor parses what it checks: a broken tokenizer is MISSING (exit 3) with the file named.
    # (TANDEM_REFENV: a stand-in reference environment with the pinned versions, so the tokenizer
    # is the only thing missing and the case takes milliseconds, not the 10-30 s of importing torch.)
    def doctor_case(label, expect, setup):
        def full_setup(d):
            setup(d)
            F.fake_reference_env(d)
        return Case(f"doctor: {label}", ["doctor", "--assets", "{dir}/assets-root"], expect_rc=3, expect=expect,
                    setup=full_setup, env={"TANDEM_REFENV": "{dir}/fake-refenv"},
                    check=lambda r: None if r.stdout.count("[MISSING]") == 1 else "more than the one MISSING line")

    for label, content in (("empty", b""), ("truncated", tok_json[:5000]), ("not JSON", b"\x00\x01garbage")):
        c.append(doctor_case(f"tokenizer.json {label}", "[MISSING] tokenizer              {dir}/assets-root/assets/qwen3-tokenizer/tokenizer.json",
                             lambda d, content=content: F.asset_root_with(d, tokenizer_json=content)))
    c.append(doctor_case("tokenizer_config.json truncated", "tokenizer_config.json: not valid JSON",
                         lambda d: F.asset_root_with(d, tokenizer_config=cfg_json[:100])))
    c.append(doctor_case("corpora file truncated", "ori_pqal.json", _assets_with_truncated_corpus))
    # A run on a tokenizer with two vocabulary ids swapped: both legs would agree (they read the
    # same file), so the run must say loudly that the tokenizer is not the shipped Qwen3 one.
    return c


def _assets_with_truncated_corpus(d):
    root = F.asset_root_with(d, corpora=False)
    corpora = os.path.join(root, "data", "corpora")
    F.link_tree(F.CORPORA_DIR, corpora, copy_below=0)
    p = os.path.join(corpora, "pubmedqa", "ori_pqal.json")
    data = F.read_bytes(p)
    os.remove(p)
    with open(p, "wb") as f:
        f.write(data[:1000])


def corpus_cases():
    c = [Case("corpus build: --sources does not exist", ["corpus", "build", "--sources", "{dir}/none", "--out", "{dir}/o",
                                                         "--tokenizer", "{tok}"], expect="{dir}/none"),
         Case("corpus build: --sources is a file", ["corpus", "build", "--sources", "{dir}/f", "--out", "{dir}/o",
                                                    "--tokenizer", "{tok}"], expect="{dir}/f", files={"f": "x"}),
         Case("corpus build: --out is a file", ["corpus", "build", "--out", "{dir}/f", "--tokenizer", "{tok}"],
              expect="{dir}/f", files={"f": "x"}, expect_rc=2)]

    def corpora_with(rel, content):
        def setup(d):
            root = os.path.join(d, "corpora")
            F.link_tree(F.CORPORA_DIR, root, copy_below=0)
            p = os.path.join(root, rel)
            os.remove(p)
            if content is not None:
                with open(p, "wb") as f:
                    f.write(content)
        return setup

    pqal = F.read_bytes(os.path.join(F.CORPORA_DIR, "pubmedqa", "ori_pqal.json"))
    mcqa = F.read_bytes(os.path.join(F.CORPORA_DIR, "medmcqa", "medmcqa_validation.parsed.jsonl"))
    for label, rel, content, expect in (
            ("pubmedqa truncated", "pubmedqa/ori_pqal.json", pqal[: len(pqal) // 2], "ori_pqal.json"),
            ("pubmedqa a list", "pubmedqa/ori_pqal.json", b"[1, 2, 3]", "ori_pqal.json"),
            ("pubmedqa invalid UTF-8", "pubmedqa/ori_pqal.json", pqal[:1000].replace(b'"', b'"\xff', 1) + pqal[1000:], "ori_pqal.json"),
            ("medmcqa line not JSON", "medmcqa/medmcqa_validation.parsed.jsonl", b"{broken\n" + mcqa, "medmcqa_validation.parsed.jsonl"),
            ("medmcqa line a number", "medmcqa/medmcqa_validation.parsed.jsonl", b"5\n" + mcqa, "medmcqa_validation.parsed.jsonl"),
            ("medqa empty line object", "medqa_usmle/test.jsonl", b'{"question": 5}\n', "test.jsonl")):
        c.append(Case(f"corpus build: {label}", ["corpus", "build", "--sources", "{dir}/corpora", "--out", "{dir}/o",
                                                 "--tokenizer", "{tok}"], expect=expect, setup=corpora_with(rel, content)))

    def corpus_dir(records=None, split=None):
        def setup(d):
            src = os.path.join(F.PLACEHOLDERS["{fixture}"], "corpus")
            F.link_tree(src, os.path.join(d, "c"), copy_below=1 << 30)
            for name, content in (("records.jsonl", records), ("split.json", split)):
                if content is not None:
                    with open(os.path.join(d, "c", name), "wb") as f:
                        f.write(content)
        return setup

    recs = F.read_bytes(os.path.join(F.PLACEHOLDERS["{fixture}"], "corpus", "records.jsonl"))
    c += [Case("corpus plan: --corpus does not exist", ["corpus", "plan", "--corpus", "{dir}/none", "--out", "{dir}/p.json"],
               expect="{dir}/none"),
          Case("corpus plan: records.jsonl truncated", ["corpus", "plan", "--corpus", "{dir}/c", "--out", "{dir}/p.json"],
               expect="records.jsonl", setup=corpus_dir(records=recs[: len(recs) // 2 + 7])),
          Case("corpus plan: split.json index out of range", ["corpus", "plan", "--corpus", "{dir}/c", "--out", "{dir}/p.json"],
               expect="split.json", setup=corpus_dir(split=b'{"train": [999999], "heldout": []}')),
          Case("corpus plan: split.json train a string", ["corpus", "plan", "--corpus", "{dir}/c", "--out", "{dir}/p.json"],
               expect="split.json", setup=corpus_dir(split=b'{"train": "all", "heldout": []}')),
          Case("corpus plan: split.json index 1e400", ["corpus", "plan", "--corpus", "{dir}/c", "--out", "{dir}/p.json"],
               expect="split.json", setup=corpus_dir(split=b'{"train": [1e400], "heldout": []}')),
          Case("tokens show: records.jsonl number 1e400", ["tokens", "show", "--corpus", "{dir}/c", "--index", "0",
                                                            "--tokenizer", "{tok}"],
               expect="records.jsonl", setup=corpus_dir(records=recs.replace(b'"index":', b'"index":1e400,"x":', 1))),
          Case("corpus plan: --out is a folder", ["corpus", "plan", "--corpus", "{fixture}", "--out", "{dir}"], expect="{dir}"),
          Case("corpus plan: --micro-batch 0", ["corpus", "plan", "--corpus", "{fixture}", "--out", "{dir}/p.json", "--micro-batch", "0"],
               expect="micro_batch"),
          Case("tokens show: --index out of range", ["tokens", "show", "--corpus", "{fixture}", "--index", "999999", "--tokenizer", "{tok}"],
               expect="999999"),
          Case("tokens show: --id unknown", ["tokens", "show", "--corpus", "{fixture}", "--id", "nope:1", "--tokenizer", "{tok}"],
               expect="nope:1"),
          Case("tokens show: records.jsonl invalid UTF-8", ["tokens", "show", "--corpus", "{dir}/c", "--index", "0", "--tokenizer", "{tok}"],
               expect="records.jsonl", setup=corpus_dir(records=recs.replace(b'"', b'"\xff', 1))),
          Case("tokens diff: --ids-b not JSON", ["tokens", "diff", "--corpus", "{fixture}", "--index", "0", "--tokenizer", "{tok}",
                                                  "--ids-b", "{dir}/ids.json"], expect="ids.json", files={"ids.json": "[1, 2"}),
          Case("tokens diff: --ids-b strings", ["tokens", "diff", "--corpus", "{fixture}", "--index", "0", "--tokenizer", "{tok}",
                                                 "--ids-b", "{dir}/ids.json"], expect="ids.json", files={"ids.json": '["a", "b"]'}),
          Case("tokens diff: --ids-b huge id", ["tokens", "diff", "--corpus", "{fixture}", "--index", "0", "--tokenizer", "{tok}",
                                                 "--ids-b", "{dir}/ids.json"], expect="ids.json", files={"ids.json": "[1e400]"})]
    return c


def safetensors_bytes(header, data=b""):
    h = json.dumps(header).encode() if not isinstance(header, bytes) else header
    return struct.pack("<Q", len(h)) + h + data


def checkpoint_cases():
    cfg = json.load(open(os.path.join(F.PLACEHOLDERS["{fixture}"], "base", "config.json")))

    def model_dir(st=None, config=None):
        def setup(d):
            m = os.path.join(d, "m")
            os.makedirs(m)
            with open(os.path.join(m, "config.json"), "w") as f:
                f.write(config if isinstance(config, str) else json.dumps(config or cfg))
            if st is not None:
                with open(os.path.join(m, "model.safetensors"), "wb") as f:
                    f.write(st)
        return setup

    inspect = ["inspect", "--model", "{dir}/m"]
    real = F.read_bytes(os.path.join(F.PLACEHOLDERS["{fixture}"], "base", "model.safetensors"))
    c = []
    for label, st, expect in (
            ("empty", b"", "model.safetensors"),
            ("4 bytes", b"\x01\x02\x03\x04", "model.safetensors"),
            ("header length huge", struct.pack("<Q", 2**63) + b"{}", "model.safetensors"),
            ("header length past the end", struct.pack("<Q", 1000) + b"{}", "model.safetensors"),
            ("header not JSON", safetensors_bytes(b"{nope"), "model.safetensors"),
            ("header a list", safetensors_bytes(b"[1]     "), "model.safetensors"),
            ("dtype unknown", safetensors_bytes({"w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "'w'"),
            ("offsets past the buffer", safetensors_bytes({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 4), "'w'"),
            ("shape overflows", safetensors_bytes({"w": {"dtype": "F32", "shape": [2**62, 2**62], "data_offsets": [0, 4]}}, b"\0" * 4), "'w'"),
            ("shape negative", safetensors_bytes({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4), "'w'"),
            ("duplicate tensor", safetensors_bytes(b'{"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}', b"\0" * 4), "duplicate"),
            ("overlapping tensors", safetensors_bytes({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "overlaps"),
            ("truncated data", real[: len(real) - 1000], "model.safetensors"),
            ("wrong tensor set", safetensors_bytes({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4), "{dir}/m")):
        c.append(Case(f"inspect: model.safetensors {label}", inspect, expect=expect, setup=model_dir(st=st)))
    c.append(Case("inspect: config.json not JSON", inspect, expect="config.json", setup=model_dir(st=real, config="{")))
    c.append(Case("inspect: config.json hidden_size negative", inspect, expect="hidden_size",
                  setup=model_dir(st=real, config=dict(cfg, hidden_size=-128))))
    c.append(Case("inspect: config.json hidden_size a string", inspect, expect="hidden_size",
                  setup=model_dir(st=real, config=dict(cfg, hidden_size="128"))))
    c.append(Case("inspect: config.json vocab_size 1e400", inspect, expect="config.json",
                  setup=model_dir(st=real, config=json.dumps(cfg).replace('"vocab_size": 151936', '"vocab_size": 1e400'))))
    c.append(Case("inspect: config.json num_hidden_layers 2^62", inspect, expect="num_hidden_layers",
                  setup=model_dir(st=real, config=dict(cfg, num_hidden_layers=2**62))))
    c.append(Case("inspect: --model folder does not exist", ["inspect", "--model", "{dir}/none"], expect="none", expect_rc=2))
    c.append(Case("inspect: no safetensors", inspect, expect="{dir}/m", setup=model_dir()))
    c.append(Case("inspect: --config unknown", ["inspect", "--config", "qwen9"], expect="qwen9"))
    c.append(Case("inspect: --adapter config not JSON", ["inspect", "--config", "tiny", "--adapter", "{dir}/a"],
                  expect="adapter_config.json", files={"a/adapter_config.json": "{"}))
    c.append(Case("inspect: --adapter rank a string", ["inspect", "--config", "tiny", "--adapter", "{dir}/a"],
                  expect="adapter_config.json", files={"a/adapter_config.json": '{"r": "8", "lora_alpha": 16, "target_modules": ["q_proj"]}'}))
    # A NaN in the base weights: the loader names the tensor (both legs; here the engine's loader
    # through the engine leg of a run on model.base).
    return c


def probe_catalog_cases():
    return [Case("probe: --out is a text file", ["probe", "--device", "cpu", "--out", "{dir}/t.txt", "--catalog", "{dir}/c.db"],
                 expect="t.txt", files={"t.txt": "hello"}),
            Case("probe: --catalog not SQLite", ["probe", "--device", "cpu", "--out", "{dir}/p.h5", "--catalog", "{dir}/c.db"],
                 expect="c.db", files={"c.db": "SQLite format 2\0 not really"}),
            Case("probe: --device gpu", ["probe", "--device", "gpu"], expect="--device", expect_rc=2),
            Case("leg engine: --run does not exist", ["leg", "engine", "--run", "{dir}/none", "--leg", "engine"], expect="{dir}/none")]


# ---- outputs never replace a run (docs/cli.md "Outputs") -----------------------------------------
# Every --out that names a run folder's file, an HDF5 file or a catalog is refused with exit 2
# unless --force, and the file is byte-identical afterwards (sha256 before and after: the oracle).

def _sha(path):
    import hashlib

    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _protected_setup(d):
    """{dir}/r: a copy of the fixture run folder; {dir}/c.db a real SQLite catalog (sqlite3);
    {dir}/other.h5 a real HDF5 file (h5py); {dir}/link.h5 a symlink to r/run.h5. Their digests go
    to {dir}/digests.json for the check."""
    import h5py
    import sqlite3

    shutil.copytree(F.PLACEHOLDERS["{fixture}"], os.path.join(d, "r"), symlinks=True)
    with sqlite3.connect(os.path.join(d, "c.db")) as db:
        db.execute("CREATE TABLE t (x)")
    with h5py.File(os.path.join(d, "other.h5"), "w") as f:
        f["x"] = [1, 2, 3]
    os.symlink(os.path.join(d, "r", "run.h5"), os.path.join(d, "link.h5"))
    files = ["r/run.h5", "r/legs.json", "r/experiment.json", "r/legs/engine/events.jsonl", "c.db", "other.h5"]
    with open(os.path.join(d, "digests.json"), "w") as f:
        json.dump({p: _sha(os.path.join(d, p)) for p in files}, f)


def _unchanged(result):
    digests = json.load(open(os.path.join(result.case_dir, "digests.json")))
    changed = [p for p, h in digests.items() if _sha(os.path.join(result.case_dir, p)) != h]
    return f"changed: {changed}" if changed else None


def out_guard_cases():
    c = []
    targets = (("run.h5 of a run", "{dir}/r/run.h5", "run.h5 of the run folder"),
               ("legs.json of a run", "{dir}/r/legs.json", "legs.json of the run folder"),
               ("a leg's events of a run", "{dir}/r/legs/engine/events.jsonl", "events.jsonl of the run folder"),
               ("a symlink to run.h5", "{dir}/link.h5", "of the run folder"),
               ("an HDF5 file", "{dir}/other.h5", "an HDF5 file"),
               ("a catalog", "{dir}/c.db", "an SQLite database"))
    commands = (("report", ["report", "{fixture}"]),
                ("compare", ["compare", "{fixture}:engine", "{fixture}:engine"]),
                ("corpus plan", ["corpus", "plan", "--corpus", "{fixture}"]))
    for cmd_label, argv in commands:
        for label, path, expect in targets:
            c.append(Case(f"{cmd_label}: --out is {label}", argv + ["--out", path], expect_rc=2, expect=expect,
                          setup=_protected_setup, check=_unchanged))
    c += [Case("probe: --out is run.h5 of a run", ["probe", "--device", "cpu", "--out", "{dir}/r/run.h5", "--catalog", "{dir}/p.db"],
               expect_rc=2, expect="run.h5 of the run folder", setup=_protected_setup, check=_unchanged),
          Case("probe: --out is an HDF5 file that is not a probe file", ["probe", "--device", "cpu", "--out", "{dir}/other.h5",
               "--catalog", "{dir}/p.db"], expect_rc=2, expect="not a probe file", setup=_protected_setup, check=_unchanged),
          Case("probe: --out is a catalog", ["probe", "--device", "cpu", "--out", "{dir}/c.db", "--catalog", "{dir}/p.db"],
               expect_rc=2, expect="an SQLite database", setup=_protected_setup, check=_unchanged),
          Case("corpus build: --out is a run folder", ["corpus", "build", "--out", "{dir}/r", "--tokenizer", "{tok}"],
               expect_rc=2, expect="inside the run folder", setup=_protected_setup, check=_unchanged),
          Case("corpus build: --out is a run's corpus folder", ["corpus", "build", "--out", "{dir}/r/corpus", "--tokenizer", "{tok}"],
               expect_rc=2, expect="inside the run folder", setup=_protected_setup, check=_unchanged),
          Case("envelope: --out is run.h5", ["envelope", "{dir}/x.json", "--out", "{dir}/r/run.h5"], expect_rc=2,
               expect="not a folder", setup=_protected_setup, check=_unchanged, files={"x.json": json.dumps(GOOD)}),
          Case("faults: --out is run.h5", ["faults", "--out", "{dir}/r/run.h5"], expect_rc=2,
               expect="not a folder", setup=_protected_setup, check=_unchanged),
          Case("run: --out is run.h5 of a run", run_args(out="{dir}/r/run.h5"), expect_rc=2, expect="not a folder",
               setup=_protected_setup, check=_unchanged, files={"x.json": json.dumps(GOOD)})]
    return c


# ---- the environment and odd experiment files -----------------------------------------

def environment_cases():
    good = json.dumps(GOOD)
    bad_lr = json.dumps(dict(GOOD, optimizer=dict(GOOD["optimizer"], lr=None)))
    ren = ["template", "render", "--tokenizer", "{tok}"]
    enc = ["tokens", "encode", "--tokenizer", "{tok}"]
    return [
        Case("run: experiment file is a FIFO", run_args("{dir}/fifo.json"), expect="fifo.json: not a regular file",
             setup=lambda d: os.mkfifo(os.path.join(d, "fifo.json")), timeout=60),
        Case("run: experiment file is /dev/zero", run_args("/dev/zero"), expect="/dev/zero: not a regular file", timeout=60),
        Case("run: experiment file is /dev/null", run_args("/dev/null"), expect="/dev/null: not a regular file"),
        Case("run: experiment file is a symlink loop", run_args("{dir}/loop1"), expect="loop1: cannot read the experiment file",
             setup=lambda d: (os.symlink("loop2", os.path.join(d, "loop1")), os.symlink("loop1", os.path.join(d, "loop2")))),
        Case("run: experiment file a dangling symlink", run_args("{dir}/dangling.json"), expect="dangling.json: no such experiment file",
             setup=lambda d: os.symlink("nowhere.json", os.path.join(d, "dangling.json"))),
        Case("run: a path with spaces and non-ASCII", run_args("{dir}/my runs/résumé ü.json"),
             expect="my runs/résumé ü.json: field optimizer.lr", files={"my runs/résumé ü.json": bad_lr}),
        Case("run: HOME unset", run_args(), expect="x.json: field optimizer.lr", files={"x.json": bad_lr}, env={"HOME": ""}),
        Case("run: a misspelt leg name", run_args(legs="engin"), expect="'engin': not a leg the experiment defines",
             files={"x.json": good}),
        Case("template render: a user message without content", ren, expect="messages[0].content",
             stdin=b'{"messages": [{"role": "user"}]}\n'),
        Case("template render: a system message with content null", ren, expect="messages[0].content",
             stdin=b'{"messages": [{"role": "system", "content": null}, {"role": "user", "content": "x"}]}\n'),
        Case("template render: the second message without content", ren, expect="messages[1].content",
             stdin=b'{"messages": [{"role": "user", "content": "x"}, {"role": "assistant"}]}\n'),
        Case("template render: not JSON names no library", ren, expect="line 1: field '(line)': not valid JSON: parse error",
             stdin=b'{"messages": x}\n'),
        Case("tokens encode: not JSON names no library", enc, expect="line 1: field '(line)': not valid JSON: parse error",
             stdin=b'{"text": x}\n'),
        Case("tokens encode: a JSON string line", enc, expect="line 1", stdin=b'"text"\n'),
    ]


# ---- validation before a run folder (docs/decisions.md "Validation before a run folder") ------------

def _no_run_folder(result):
    """The refusal came before any run folder was made (or the half-made one was removed)."""
    runs = os.path.join(result.case_dir, "runs")
    left = os.listdir(runs) if os.path.isdir(runs) else []
    return f"run folder(s) left behind: {left}" if left else None


def _spec(**edits):
    """GOOD with several dotted fields set (spec_with sets one)."""
    spec = copy.deepcopy(GOOD)
    for path, value in edits.items():
        _set_field(spec, path, value)
    return spec


def _write_json(name, spec):
    def setup(d):
        with open(os.path.join(d, name), "w") as f:
            json.dump(spec(d) if callable(spec) else spec, f)
    return setup


def _base_with_truncated_weights(keep):
    """{dir}/base: the shipped pretrained base with model.safetensors cut to `keep` bytes (or a fraction)."""
    def setup(d):
        src = os.path.join(F.SHARED, "assets", "qwen3-tiny-clinical")
        dst = os.path.join(d, "base")
        os.makedirs(dst)
        shutil.copy(os.path.join(src, "config.json"), dst)
        st = os.path.join(src, "model.safetensors")
        n = keep if isinstance(keep, int) else int(os.path.getsize(st) * keep)
        with open(st, "rb") as f, open(os.path.join(dst, "model.safetensors"), "wb") as g:
            g.write(f.read(n))
        spec = _spec(**{"model.config": DELETE, "model.base": dst})
        with open(os.path.join(d, "x.json"), "w") as f:
            json.dump(spec, f)
    return setup


_TOKENIZER_FILES = {"tokenizer_json": "tokenizer.json", "tokenizer_config": "tokenizer_config.json"}


def _asset_tokenizer_case(label, expect, **files):
    """A run on an asset folder whose tokenizer is damaged: the message names the asset's file (its copy in
    the run folder would leave with the folder) and no run folder is made."""
    def setup(d):
        _write_json("x.json", GOOD)(d)
        root = F.asset_root_with(d, **{k: v for k, v in files.items() if v is not None})
        for arg, content in files.items():  # None: the file is missing
            if content is None:
                os.remove(os.path.join(root, "assets", "qwen3-tokenizer", _TOKENIZER_FILES[arg]))

    def check(result):
        errors = [line for line in (result.stdout + result.stderr).splitlines() if "error:" in line]
        if any(os.path.join(result.case_dir, "runs") + "/" in line for line in errors):
            return "the message names the run folder's copy, not the asset"
        return _no_run_folder(result)
    return Case(f"validation: asset tokenizer {label}", run_args(assets="{dir}/assets-root"), expect=expect, setup=setup, check=check)


def asset_tokenizer_cases():
    tok = os.path.join("{dir}", "assets-root", "assets", "qwen3-tokenizer")
    tok_json = F.read_bytes(os.path.join(F.TOKENIZER_DIR, "tokenizer.json"))
    cfg_json = F.read_bytes(os.path.join(F.TOKENIZER_DIR, "tokenizer_config.json"))
    return [
        _asset_tokenizer_case("tokenizer.json truncated", tok + "/tokenizer.json: not valid JSON", tokenizer_json=tok_json[:5000]),
        _asset_tokenizer_case("tokenizer.json empty", tok + "/tokenizer.json", tokenizer_json=b""),
        _asset_tokenizer_case("tokenizer.json missing", "assets-root (from --assets) has no assets/qwen3-tokenizer/tokenizer.json",
                              tokenizer_json=None),
        _asset_tokenizer_case("tokenizer_config.json truncated", tok + "/tokenizer_config.json: not valid JSON",
                              tokenizer_config=cfg_json[:100]),
        _asset_tokenizer_case("tokenizer_config.json missing", tok + "/tokenizer_config.json: missing", tokenizer_config=None),
    ]


def validation_cases():
    V = lambda name, expect, spec, **kw: Case(f"validation: {name}", run_args(), expect=expect,  # noqa: E731
                                             setup=_write_json("x.json", spec), check=_no_run_folder, **kw)
    return [
        # The run file stores the resolved spec as one HDF5 attribute (at most 60000 bytes).
        V("a 100 MB description", "x.json: field description: the experiment is", lambda d: _spec(description="x" * (100 << 20)),
          timeout=300),
        V("a 70 kB description", "x.json: field description: the experiment is", _spec(description="d" * 70000)),
        V("sequence.max_len 2", "field sequence.max_len: 2 is shorter than the shortest possible supervised record",
          _spec(**{"sequence.max_len": 2})),
        V("sequence.max_len 8", "field sequence.max_len: 8 is shorter than the shortest possible supervised record",
          _spec(**{"sequence.max_len": 8})),
        V("model.config.vocab_size 100", "field model.config.vocab_size: 100 is below the tokenizer's",
          _spec(**{"model.config": {"vocab_size": 100}})),
        V("model.config.vocab_size 151000", "field model.config.vocab_size: 151000 is below the tokenizer's",
          _spec(**{"model.config": {"vocab_size": 151000}})),
        Case("validation: a base whose model.safetensors is cut to 1000 bytes", run_args(),
             expect="field model.base: {dir}/base/model.safetensors: malformed safetensors file",
             setup=_base_with_truncated_weights(1000), check=_no_run_folder),
        Case("validation: a base whose model.safetensors is cut in half", run_args(),
             expect="field model.base: {dir}/base/model.safetensors", setup=_base_with_truncated_weights(0.5),
             check=_no_run_folder),
        V("observe.updates past batch.max_updates", "x.json: field observe.updates: update 50 is beyond the plan",
          _spec(observe={"updates": [0, 50]})),
        V("observe.updates at batch.max_updates", "x.json: field observe.updates: update 2 is beyond the plan",
          _spec(observe={"updates": [2]})),
        V("observe.updates past the plan's updates", "field observe.updates: update 40 is beyond the plan",
          _spec(**{"batch.max_updates": 0, "observe": {"updates": [40]}})),
        V("overrides for a misspelt leg", "x.json: field overrides.engin: 'engin' is not a leg",
          _spec(overrides={"engin": {"template": "chatml"}})),
        V("overrides for a leg kind misspelt in case", "x.json: field overrides.Reference",
          _spec(overrides={"Reference": {"plan": "native"}})),
        V("batch.accumulation 100 on 12 records", "field batch.accumulation: 100 micro-batches per update",
          _spec(**{"batch.accumulation": 100})),
        V("batch.accumulation 6 x micro_batch 2 on 12 records", "field batch.accumulation: 6 micro-batches per update",
          _spec(**{"batch.accumulation": 6, "batch.micro_batch": 2})),
    ]


def _import_case(label, text, expect):
    def setup(d):
        shutil.copytree(F.PLACEHOLDERS["{fixture}"], os.path.join(d, "run"), symlinks=True)
    return Case(f"import csv: {label}", ["import", "csv", "{dir}/l.csv", "--into", "{dir}/run", "--as", "imp",
                                         "--catalog", "{dir}/c.db"], expect=expect, files={"l.csv": text}, setup=setup)


def _imported_non_finite_case(label, text, expect):
    """A CSV with nan/inf is imported (its values kept out and named), and the run's report says incomplete."""
    def setup(d):
        shutil.copytree(F.PLACEHOLDERS["{fixture}"], os.path.join(d, "run"), symlinks=True)
        with open(os.path.join(d, "l.csv"), "w") as f:
            f.write(text)
        p = subprocess.run([F.TANDEM, "import", "csv", os.path.join(d, "l.csv"), "--into", os.path.join(d, "run"), "--as", "imp"],
                           capture_output=True, text=True)
        if p.returncode != 0 or "WARNING: " not in p.stdout:
            raise SystemExit(f"import csv of {label}: exit {p.returncode}, no WARNING line:\n{p.stdout}\n{p.stderr}")
    return Case(f"import csv then report: {label}", ["report", "{dir}/run"], expect=expect, expect_rc=3, setup=setup)


def import_cases():
    return [
        _imported_non_finite_case("a nan loss", "step,loss\n1,2.5\n2,nan\n3,2.4\n",
                                  "incomplete: imp: 1 non-finite value kept out of statistics: loss at step 2"),
        _imported_non_finite_case("an inf loss", "step,loss\n1,2.5\n2,inf\n",
                                  "incomplete: imp: 1 non-finite value kept out of statistics: loss at step 2"),
        _imported_non_finite_case("a -inf eval loss", "step,loss,eval_loss\n1,2.5,\n2,2.4,-inf\n",
                                  "incomplete: imp: 1 non-finite value kept out of statistics: eval_loss at step 2"),
        _imported_non_finite_case("a NaN grad norm", "step,loss,grad_norm\n1,2.5,NaN\n",
                                  "incomplete: imp: 1 non-finite value kept out of statistics: grad_norm at step 1"),
        _import_case("a repeated step", "step,loss\n1,2.5\n2,2.4\n2,2.3\n", "l.csv: line 4: column loss: step 2 repeats the step"),
        _import_case("a descending step", "step,loss\n1,2.5\n3,2.4\n2,2.3\n", "l.csv: line 4: column loss: step 2 comes after step 3"),
    ]


# ---- more of the environment: a read-only current folder, command legs that misbehave -------------

def _command_leg(script):
    return _spec(legs={"mine": {"implementation": "command", "command": ["/bin/sh", "-c", script]}})


def environment_more_cases():
    ro = lambda d: (os.makedirs(os.path.join(d, "ro")), os.chmod(os.path.join(d, "ro"), 0o555))  # noqa: E731
    bad_lr = json.dumps(_spec(**{"optimizer.lr": None}))
    return [
        Case("run: read-only current folder, default --out", ["run", "{dir}/x.json", "--legs", "engine", "--no-probe", "--quiet",
                                                              "--catalog", "{dir}/c.db", "--assets", "{shared}"],
             expect="x.json: field optimizer.lr", files={"x.json": bad_lr}, setup=ro, cwd="ro"),
        Case("run: a non-ASCII --out folder that is a file", run_args(out="{dir}/sortie é"), expect="sortie é: is a file, not a folder", expect_rc=2,
             files={"x.json": json.dumps(GOOD), "sortie é": "not a folder"}),
        Case("run: experiment path with a tab and emoji", run_args("{dir}/exp\t\U0001F600.json"), expect="exp\t\U0001F600.json: field optimizer.lr",
             files={"exp\t\U0001F600.json": bad_lr}),
        Case("run: a command leg that prints garbage", run_args(legs="mine"), expect="leg mine failed", expect_rc=1,
             files={"x.json": json.dumps(_command_leg("echo 'garbage {not json'; head -c 300 /dev/urandom; echo; exit 0"))}),
        Case("run: a command leg that exits early", run_args(legs="mine"), expect="leg mine failed", expect_rc=1,
             files={"x.json": json.dumps(_command_leg("exit 7"))}),
    ]


# ---- a leg that never started, a base at odds with its config, a swapped run folder, a live run,
# a full disk, messages that blamed the wrong thing -----------------------------------------------

NEVER_SAID = ("different", "localise", "observe", "tensor(s)")


def _never_different(result):
    """A leg that never ran is missing, not different: no word of a difference or a localisation."""
    text = (result.stdout + result.stderr).lower()
    said = [w for w in NEVER_SAID if w in text]
    return f"a leg that never started is spoken of as {said}" if said else None


def _never_started_case(label, legs, expect, spec=None, extra=(), env=None):
    return Case(f"never started: {label}", run_args("{dir}/x.json", *extra, legs=legs), expect=expect,
                files={"x.json": json.dumps(spec or GOOD)}, env=env or {}, check=_never_different, timeout=300)


def _base_with_config(**config_changes):
    """{dir}/base: the shipped tiny base's weights (linked) with config.json fields changed."""
    def setup(d):
        src = os.path.join(F.SHARED, "assets", "qwen3-tiny-clinical")
        dst = os.path.join(d, "base")
        os.makedirs(dst)
        cfg = json.load(open(os.path.join(src, "config.json")))
        cfg.update(config_changes)
        with open(os.path.join(dst, "config.json"), "w") as f:
            json.dump(cfg, f)
        os.symlink(os.path.join(src, "model.safetensors"), os.path.join(dst, "model.safetensors"))
        with open(os.path.join(d, "x.json"), "w") as f:
            json.dump(_spec(**{"model.config": DELETE, "model.base": dst}), f)
    return setup


def _swapped(rel, edit):
    """{dir}/run: a copy of the fixture run with `rel` replaced by edit(old bytes) -> new bytes."""
    def setup(d):
        F.link_tree(F.PLACEHOLDERS["{fixture}"], os.path.join(d, "run"))
        p = os.path.join(d, "run", rel)
        data = F.read_bytes(p)
        os.remove(p)  # a copy, never the fixture's (link_tree may have linked it)
        with open(p, "wb") as f:
            f.write(edit(data))
    return setup


def _other_experiment(data):
    """experiment.json of another experiment whose spec_sha256 is consistent (tandem's hash: sha256 of
    the spec's compact JSON with sorted keys)."""
    import hashlib
    doc = json.loads(data)
    doc["spec"]["optimizer"]["lr"] = 0.0002
    doc["spec"]["name"] = "swapped"
    doc["spec_sha256"] = hashlib.sha256(json.dumps(doc["spec"], separators=(",", ":"), sort_keys=True,
                                                   ensure_ascii=False).encode()).hexdigest()
    return json.dumps(doc, indent=2).encode()


def _unchanged_run_file(result):
    """A refused resume leaves run.h5 as it was (compared with the fixture's)."""
    if _sha(os.path.join(result.case_dir, "run", "run.h5")) != _sha(os.path.join(F.PLACEHOLDERS["{fixture}"], "run.h5")):
        return "the refused resume changed run.h5"
    return None


def _held_lock(d):
    """{dir}/run: a copy of the fixture run whose lock a process holds (flock(1)), as a live runner does."""
    F.link_tree(F.PLACEHOLDERS["{fixture}"], os.path.join(d, "run"))
    lock = os.path.join(d, "run", ".runner.lock")
    with open(lock, "w") as f:
        f.write("pid 4242 on testhost\n")
    p = subprocess.Popen(["flock", "-x", lock, "sleep", "60"], start_new_session=True)
    for _ in range(100):  # until flock holds it
        if subprocess.run(["flock", "-n", "-s", lock, "true"]).returncode != 0:
            break
        time.sleep(0.05)
    with open(os.path.join(d, "holder.pid"), "w") as f:
        f.write(str(p.pid))


def _release_lock(result):
    try:
        os.killpg(int(open(os.path.join(result.case_dir, "holder.pid")).read()), 9)  # flock and its sleep
    except (OSError, ValueError):
        pass
    return None


def _full_disk(folder="full"):
    def setup(d):
        if not F.small_filesystem(os.path.join(d, folder)):
            raise SystemExit("bad-input suite: cannot mount a small tmpfs (the full-disk cases need root)")
    return setup


def _nothing_left(folder="full"):
    def check(result):
        left = [f for f in os.listdir(os.path.join(result.case_dir, folder)) if f != "filler"]
        return f"a failed write left {left} on the full disk" if left else None
    return check


def reliability_cases():
    mine = lambda script: _spec(legs={"mine": {"implementation": "command", "command": ["/bin/sh", "-c", script]}})  # noqa: E731
    resume = ["run", "--resume", "{dir}/run", "--catalog", "{dir}/c.db", "--no-probe", "--quiet"]
    gpu = os.path.exists("/dev/nvidiactl")
    c = [
        # -- a leg that fails before its first event: incomplete, with its own failure line, never "different"
        _never_started_case("reference environment missing", "engine,reference", "leg reference failed",
                            env={"TANDEM_REFENV_PYTHON": "{dir}/no-refenv/bin/python"}),
        _never_started_case("command leg program missing", "engine,mine", "leg mine failed", spec=mine("exec {dir}/no-such-program")),
        _never_started_case("command leg prints nothing", "engine,mine", "leg mine failed", spec=mine("exit 0")),
        _never_started_case("command leg prints non-JSON", "engine,mine", "leg mine failed", spec=mine("echo 'not json {'; exit 0")),
        _never_started_case("command leg prints non-JSON and fails", "engine,mine", "leg mine failed",
                            spec=mine("echo 'Traceback? no: plain words'; exit 3")),
    ]
    if not gpu:
        c.append(_never_started_case("a cuda:0 leg without a GPU", "engine,other=engine", "leg other failed",
                                     extra=("--devices", "cpu,cuda:0")))
    # -- a base whose config.json disagrees with its tensors: refused at preflight, no run folder
    for label, changes, expect in (("intermediate_size", {"intermediate_size": 256}, "intermediate_size 256"),
                                   ("hidden_size", {"hidden_size": 64, "head_dim": 16}, "hidden_size 64"),
                                   ("more layers than the weights", {"num_hidden_layers": 6}, "is missing"),
                                   ("fewer layers than the weights", {"num_hidden_layers": 2}, "is not part of the model"),
                                   ("num_key_value_heads", {"num_key_value_heads": 4}, "num_key_value_heads 4")):
        c.append(Case(f"preflight: base config {label} disagrees with the weights", run_args(), expect=expect,
                      setup=_base_with_config(**changes), check=lambda r: _no_run_folder(r) or _never_different(r)))
    # -- a run folder changed under a resume: refused before anything is written
    c += [
        Case("resume: experiment.json swapped (hash consistent)", resume, expect="is not the one run.h5 recorded",
             setup=_swapped("experiment.json", _other_experiment), check=_unchanged_run_file),
        Case("resume: plan.json edited", resume, expect="{dir}/run/plan.json: sha256",
             setup=_swapped("plan.json", lambda b: json.dumps(dict(json.loads(b), updates=json.loads(b)["updates"][::-1])).encode()),
             check=_unchanged_run_file),
        Case("resume: corpus records edited", resume, expect="{dir}/run/corpus/records.jsonl: sha256",
             setup=_swapped("corpus/records.jsonl", lambda b: b.replace(b"heldout", b"train", 1)), check=_unchanged_run_file),
        Case("resume: prepare.json total_updates edited", resume, expect="prepare.json: total_updates",
             setup=_swapped("prepare.json", lambda b: json.dumps(dict(json.loads(b), total_updates=5)).encode()),
             check=_unchanged_run_file),
        Case("resume: tokenizer replaced", resume, expect="{dir}/run/tokenizer/tokenizer_config.json: sha256",
             setup=_swapped("tokenizer/tokenizer_config.json", lambda b: b + b"\n"), check=_unchanged_run_file),
    ]
    # -- a live run (a runner holds the folder's lock): said, and export refused
    c += [
        Case("export: a live run", ["export", "tensorboard", "{dir}/run", "{dir}/tb"], expect="{dir}/run is live",
             setup=_held_lock, check=lambda r: _release_lock(r) or (None if not os.path.exists(os.path.join(r.case_dir, "tb"))
                                                                   else "a refused export wrote {dir}/tb")),
    ]
    # -- a full disk: one line naming the output, nothing half-written
    c += [
        Case("full disk: report --out", ["report", "{fixture}", "--out", "{dir}/full/r.md"], expect="{dir}/full/r.md: No space left",
             setup=_full_disk(), check=_nothing_left()),
        Case("full disk: corpus plan --out", ["corpus", "plan", "--corpus", "{fixture}", "--out", "{dir}/full/p.json"],
             expect="{dir}/full/p.json: No space left", setup=_full_disk(), check=_nothing_left()),
        Case("full disk: export tensorboard", ["export", "tensorboard", "{fixture}", "{dir}/full/tb"],
             expect="cannot write {dir}/full/tb/", setup=_full_disk(), check=_nothing_left(), timeout=300),
    ]
    # -- messages that blamed the wrong thing
    c += [
        text_case("seed 2^64", GOOD_TEXT.replace('"seed": 7', '"seed": 18446744073709551616'), "x.json: field seed: is too large"),
        text_case("seed 10^30", GOOD_TEXT.replace('"seed": 7', '"seed": 1000000000000000000000000000000'),
                  "x.json: field seed: is too large"),
        _import_case("UTF-16 with a byte-order mark", "step,loss\n1,2.5\n".encode("utf-16"), "l.csv: the file is UTF-16 little-endian"),
        _import_case("UTF-16 big-endian", "\ufeffstep,loss\n1,2.5\n".encode("utf-16-be"), "l.csv: the file is UTF-16 big-endian"),
        Case("template render: a role the template does not render", ["template", "render", "--tokenizer", "{tok}"],
             expect="field 'messages[1].role': 'narrator' is not a role the qwen3 template renders",
             stdin=b'{"messages": [{"role": "user", "content": "hi"}, {"role": "narrator", "content": "x"}]}\n'),
    ]
    return c


def all_cases():
    return (experiment_cases() + run_option_cases() + resume_cases() + report_cases() + stdin_cases() +
            tokenizer_cases() + corpus_cases() + checkpoint_cases() + probe_catalog_cases() + out_guard_cases() +
            environment_cases() + validation_cases() + asset_tokenizer_cases() + import_cases() + environment_more_cases() +
            reliability_cases())


def prepare_fixture(root):
    """One real run folder (engine leg, 2 updates, seconds) for the cases that corrupt a copy of it."""
    spec = os.path.join(root, "fixture.json")
    with open(spec, "w") as f:
        json.dump(dict(GOOD, name="fixture"), f)
    p = subprocess.run([F.TANDEM, "run", spec, "--legs", "engine", "--no-probe", "--quiet", "--out", os.path.join(root, "runs"),
                        "--catalog", os.path.join(root, "c.db"), "--assets", F.SHARED], capture_output=True, text=True, cwd=root)
    if p.returncode != 0:
        raise SystemExit(f"bad-input suite: the fixture run failed (exit {p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    runs = os.listdir(os.path.join(root, "runs"))
    return os.path.join(root, "runs", runs[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verbose", action="store_true", help="one line per case, not only the failures")
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="tandem-faults-fixture-")
    try:
        F.PLACEHOLDERS["{fixture}"] = prepare_fixture(root)
        cases = [c for c in all_cases() if args.only in c.name]
        _, ok = F.run_cases(cases, jobs=args.jobs, verbose=args.verbose)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
