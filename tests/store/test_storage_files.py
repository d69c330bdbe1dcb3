"""Storage cross-checks with independent readers and writers (run by ctest with the reference env).

- h5py reads back, value for value, what the C++ RunFileWriter wrote (values chosen here, in Python).
- the C++ RunFileReader reads back a file h5py wrote in the documented layout (docs/hdf5-layout.md).
- h5dump reads the C++ file.
- `tandem probe` writes a file h5py reads and a catalog row Python's sqlite3 reads, with equal figures.
- bad input to `tandem probe` gives a one-line error naming the path/value, a non-zero exit, and leaves
  every existing file byte-for-byte as it was.
- `tandem doctor` reports the reference environment this very interpreter is, and exits 3 when told
  to look for assets or a reference environment where there are none.
"""
import json
import math
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

TOOL = os.environ.get("TANDEM_STORAGE_TOOL")
TANDEM = os.environ.get("TANDEM_BIN")


def tool(*args, check=True):
    assert TOOL and Path(TOOL).exists(), f"storage_tool not built: {TOOL}"
    return subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, check=check)


def tandem(*args, env=None, cwd=None):
    assert TANDEM and Path(TANDEM).exists(), f"tandem binary not built: {TANDEM}"
    return subprocess.run([TANDEM, *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def known_values():
    rng = random.Random(20261129)
    steps = [[u, rng.uniform(0, 12), math.exp(rng.uniform(-3, 3)), 1e-4 * rng.random(), rng.randint(100, 9000),
              rng.uniform(0.01, 3), rng.uniform(0.01, 6)] for u in range(37)]  # ..., wall_s, cpu_s
    return {
        "host": {"cpu_model": "Test CPU µ-arch @ 3.0GHz", "logical_cores": 96, "physical_cores": 48,
                 "memory_total_bytes": 2 ** 40 + 17, "memory_available_bytes": 2 ** 39, "llc_bytes": 36 * 2 ** 20,
                 "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "Linux 6.1.0", "machine": "x86_64",
                 "hostname": "héte", "tandem_version": "9.8.7", "built_with_cuda": 1},
        "experiment": {"name": "clinical-tiny", "spec_json": json.dumps({"seed": 1234, "lora": {"r": 16}}),
                       "spec_sha256": "ab" * 32, "tandem_version": "9.8.7", "run_id": "clinical-tiny-20261129-101500"},
        "probes": [
            {"device": "cuda:0", "device_name": "NVIDIA H200", "bytes": 256000000, "repeats": 20, "warmup": 3,
             "method": "events", "timestamp": "2026-11-29T10:15:00Z", "pcie_link": "Gen5 x16", "pcie_source": "nvml",
             "directions": [
                 {"name": n, "bytes_counted": c, "best_seconds": t, "median_seconds": t * 1.01, "gbps": c / t / 1e9}
                 for n, c, t in [("h2d", 256000000, 0.00497), ("d2h", 256000000, 0.00481), ("d2d", 512000000, 0.000197)]]},
            {"device": "cpu", "device_name": "Test CPU", "bytes": 268435456, "repeats": 10, "warmup": 2,
             "method": "memcpy", "timestamp": "2026-11-29T10:15:01Z", "pcie_link": "", "pcie_source": "",
             "directions": [{"name": "memcpy", "bytes_counted": 536870912, "best_seconds": 0.0411,
                             "median_seconds": 0.0433, "gbps": 536870912 / 0.0411 / 1e9}]},
        ],
        "legs": {
            "engine-cpu": {
                "attributes": {"implementation": "engine", "device": "cpu", "threads": 2},
                "steps": steps,
                "eval": [[0, 11.9321], [250, 2.5123456789], [500, 2.25]],
                "timing": {"model_load_s": 1.25, "tokenize_s": 0.5, "median_update_s": 0.731, "window_first": 101,
                           "window_last": 500, "tokens_per_s": 1234.5, "total_s": 400.0},
                "memory": {"peak_device_bytes": -1, "peak_host_bytes": 3 * 2 ** 30},
                "checks": {"l1": json.dumps({"heldout_ce": 11.9321}), "l2": json.dumps({"t": ["x" * 40] * 2000})},
            },
        },
        "comparisons": [{"a": "engine-cpu", "b": "reference-cpu", "series": "heldout_ce",
                         "points": [[0, 11.9321, 11.9320, 1e-4], [250, 2.5, 2.6, -0.1]],
                         "summary": {"mean_abs_diff": 0.05005, "sign_changes": 1},
                         "attributes": {"level": "L4"}}],
    }


def test_h5py_reads_what_cpp_wrote(tmp_path):
    values = known_values()
    (tmp_path / "in.json").write_text(json.dumps(values))
    out = tmp_path / "run.h5"
    tool("write-from-json", tmp_path / "in.json", out)
    with h5py.File(out, "r") as f:
        assert f.attrs["format"] == "tandem-run"
        assert f.attrs["format_version"] == 1
        for key, value in values["host"].items():
            assert f["host"].attrs[key] == value, key
        for key, value in values["experiment"].items():
            assert f["experiment"].attrs[key] == value, key
        assert sorted(f["probes"].keys()) == ["cpu", "cuda:0"]
        for probe in values["probes"]:
            a = f["probes"][probe["device"]].attrs
            for key in ("device", "device_name", "bytes", "repeats", "warmup", "method", "timestamp", "pcie_link",
                        "pcie_source"):
                assert a[key] == probe[key], key
            assert a["directions"] == ",".join(d["name"] for d in probe["directions"])
            for d in probe["directions"]:
                assert a["gbps_" + d["name"]] == d["gbps"]
                assert a["best_s_" + d["name"]] == d["best_seconds"]
                assert a["median_s_" + d["name"]] == d["median_seconds"]
                assert a["bytes_counted_" + d["name"]] == d["bytes_counted"]
        leg = values["legs"]["engine-cpu"]
        g = f["legs"]["engine-cpu"]
        for key, value in leg["attributes"].items():
            assert g.attrs[key] == value
        steps = g["steps"]
        assert steps.dtype.names == ("update", "loss", "grad_norm", "lr", "tokens", "wall_s", "cpu_s")
        assert [steps.dtype[n] for n in steps.dtype.names] == [np.dtype("<i8"), np.dtype("<f8"), np.dtype("<f8"),
                                                               np.dtype("<f8"), np.dtype("<i8"), np.dtype("<f8"),
                                                               np.dtype("<f8")]
        assert steps.maxshape == (None,)
        got = steps[()]
        assert len(got) == len(leg["steps"])
        for row, want in zip(got, leg["steps"]):
            assert [row[n].item() for n in steps.dtype.names] == want  # bit-exact float64
        ev = g["eval"][()]
        assert ev.dtype.names == ("update", "heldout_ce")
        assert [[r["update"].item(), r["heldout_ce"].item()] for r in ev] == leg["eval"]
        for key, value in leg["timing"].items():
            assert g["timing"].attrs[key] == value, key
        for key, value in leg["memory"].items():
            assert g["memory"].attrs[key] == value, key
        for level, text in leg["checks"].items():
            assert g["checks"][level].asstr()[()] == text
        assert "l3" not in g["checks"]
        c = values["comparisons"][0]
        cg = f["comparisons"][c["a"] + "~" + c["b"]]
        assert cg.attrs["level"] == "L4"
        pts = cg[c["series"]][()]
        assert pts.dtype.names == ("update", "a", "b", "diff")
        assert [[p[n].item() for n in pts.dtype.names] for p in pts] == c["points"]
        for key, value in c["summary"].items():
            assert cg[c["series"]].attrs[key] == value


def documented_columns(dataset):
    """The columns docs/hdf5-layout.md gives a leg's table (`name <type` in its row), in order."""
    doc = (Path(os.environ["TANDEM_SOURCE_DIR"]) / "docs" / "hdf5-layout.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith(f"| `/legs/<leg>/{dataset}` |"))
    return [(name, np.dtype(kind)) for name, kind in re.findall(r"`(\w+) (<[if]8)`", row)]


def test_the_layout_doc_names_every_column_the_writer_writes(tmp_path):
    """docs/hdf5-layout.md is part of the "add an observable" recipe (docs/architecture.md): a column
    added to row_columns.h and not to the doc fails here, against the file the C++ writer wrote."""
    (tmp_path / "in.json").write_text(json.dumps(known_values()))
    tool("write-from-json", tmp_path / "in.json", tmp_path / "run.h5")
    with h5py.File(tmp_path / "run.h5", "r") as f:
        g = f["legs"]["engine-cpu"]
        for dataset in ("steps", "eval"):
            written = [(n, g[dataset].dtype[n]) for n in g[dataset].dtype.names]
            assert documented_columns(dataset) == written, dataset


def test_cpp_reader_reads_what_h5py_wrote(tmp_path):
    """An independent writer (h5py) following docs/hdf5-layout.md; the C++ reader must agree."""
    values = known_values()
    path = tmp_path / "h5py-written.h5"
    with h5py.File(path, "w") as f:
        f.attrs["format"] = "tandem-run"
        f.attrs["format_version"] = 1
        for key, value in values["host"].items():
            f.require_group("host").attrs[key] = value
        for key, value in values["experiment"].items():
            f.require_group("experiment").attrs[key] = value
        for probe in values["probes"]:
            g = f.require_group("probes").create_group(probe["device"])
            for key in ("device", "device_name", "bytes", "repeats", "warmup", "method", "timestamp", "pcie_link",
                        "pcie_source"):
                g.attrs[key] = probe[key]
            g.attrs["directions"] = ",".join(d["name"] for d in probe["directions"])
            for d in probe["directions"]:
                g.attrs["gbps_" + d["name"]] = d["gbps"]
                g.attrs["best_s_" + d["name"]] = d["best_seconds"]
                g.attrs["median_s_" + d["name"]] = d["median_seconds"]
                g.attrs["bytes_counted_" + d["name"]] = np.int64(d["bytes_counted"])
        for name, leg in values["legs"].items():
            g = f.require_group("legs").create_group(name)
            for key, value in leg["attributes"].items():
                g.attrs[key] = value
            step_dtype = np.dtype([("update", "<i8"), ("loss", "<f8"), ("grad_norm", "<f8"), ("lr", "<f8"),
                                   ("tokens", "<i8"), ("wall_s", "<f8")])
            # The layout before cpu_s was kept (a file written then): the reader gives cpu_s NaN.
            g.create_dataset("steps", data=np.array([tuple(s[:6]) for s in leg["steps"]], dtype=step_dtype),
                             maxshape=(None,), chunks=(1024,))
            g.create_dataset("eval", data=np.array([tuple(e) for e in leg["eval"]],
                                                   dtype=[("update", "<i8"), ("heldout_ce", "<f8")]),
                             maxshape=(None,), chunks=(64,))
            for key, value in leg["timing"].items():
                g.require_group("timing").attrs[key] = value
            for key, value in leg["memory"].items():
                g.require_group("memory").attrs[key] = np.int64(value)
            for level, text in leg["checks"].items():
                g.require_group("checks").create_dataset(level, data=text, dtype=h5py.string_dtype())
        for c in values["comparisons"]:
            cg = f.require_group("comparisons").create_group(c["a"] + "~" + c["b"])
            for key, value in c["attributes"].items():
                cg.attrs[key] = value
            ds = cg.create_dataset(c["series"], data=np.array([tuple(p) for p in c["points"]], dtype=[
                ("update", "<i8"), ("a", "<f8"), ("b", "<f8"), ("diff", "<f8")]), maxshape=(None,), chunks=(256,))
            for key, value in c["summary"].items():
                ds.attrs[key] = value
    got = json.loads(tool("read-to-json", path).stdout)
    assert got["host"] == values["host"]
    assert got["experiment"] == values["experiment"]
    assert sorted(got["probes"], key=lambda p: p["device"]) == sorted(values["probes"], key=lambda p: p["device"])
    for leg in values["legs"].values():
        leg["steps"] = [s[:6] + [None] for s in leg["steps"]]  # no cpu_s column: NaN, dumped as null
    assert got["legs"] == values["legs"]
    assert got["comparisons"] == values["comparisons"]


def test_h5dump_reads_the_cpp_file(tmp_path):
    (tmp_path / "in.json").write_text(json.dumps(known_values()))
    out = tmp_path / "run.h5"
    tool("write-from-json", tmp_path / "in.json", out)
    h5dump = shutil.which("h5dump")
    assert h5dump, "h5dump not installed (scripts/setup installs hdf5-tools)"
    dump = subprocess.run([h5dump, str(out)], capture_output=True, text=True)
    assert dump.returncode == 0, dump.stderr
    assert 'DATASET "steps"' in dump.stdout and "H5T_COMPOUND" in dump.stdout
    assert "NVIDIA H200" in dump.stdout and "grad_norm" in dump.stdout


def cpu_model_from_proc():
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return ""


def test_probe_cpu_writes_h5_and_catalog_that_agree(tmp_path):
    out, db = tmp_path / "x.h5", tmp_path / "c.db"
    r = tandem("probe", "--device", "cpu", "--out", out, "--catalog", db)
    assert r.returncode == 0, r.stderr
    assert "memcpy" in r.stdout
    with h5py.File(out, "r") as f:
        a = f["probes/cpu"].attrs
        gbps = a["gbps_memcpy"]
        assert 0.5 <= gbps <= 500, gbps
        assert a["bytes_counted_memcpy"] == 2 * a["bytes"]
        # max(256 MiB, 8 x LLC), or each buffer capped at MemAvailable / 8 (docs/cli.md "probe"), as method says
        method = a["method"].decode() if isinstance(a["method"], bytes) else a["method"]
        assert a["bytes"] >= 256 * 2 ** 20 or "capped at MemAvailable" in method, method
        copy_bytes = int(a["bytes"])
        assert gbps == pytest.approx(a["bytes_counted_memcpy"] / a["best_s_memcpy"] / 1e9, rel=1e-12)
        assert a["best_s_memcpy"] <= a["median_s_memcpy"]
        assert f["host"].attrs["cpu_model"] == cpu_model_from_proc()
        assert f["host"].attrs["logical_cores"] == os.cpu_count()
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == 7
        assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        rows = c.execute("SELECT device, gbps_memcpy, gbps_h2d, bytes, run_file FROM probes").fetchall()
    assert rows == [("cpu", gbps, None, copy_bytes, str(out))]
    # Again into the same files: the run file keeps one /probes/cpu, the catalog gains a row.
    r = tandem("probe", "--device", "cpu", "--out", out, "--catalog", db)
    assert r.returncode == 0, r.stderr
    with h5py.File(out, "r") as f:
        assert list(f["probes"].keys()) == ["cpu"]
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM probes").fetchone()[0] == 2


def snapshot(*paths):
    return {p: (p.read_bytes() if p.exists() else None) for p in paths}


def assert_one_line_error(r, *needles, code=1):
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert err, "no error message"
    first = err.splitlines()[0]
    for needle in needles:
        assert str(needle) in first, (needle, err)
    if code == 1:
        assert len(err.splitlines()) == 1, err


@pytest.fixture
def existing_files(tmp_path):
    """An existing run file and catalog made by a good probe run, to check nothing touches them."""
    out, db = tmp_path / "good.h5", tmp_path / "good.db"
    (tmp_path / "notes.txt").write_text("my notes, not a database and not HDF5\n" * 10)
    r = tandem("probe", "--device", "cpu", "--out", out, "--catalog", db)
    assert r.returncode == 0, r.stderr
    with sqlite3.connect(db) as c:  # fold the WAL into the main file so its bytes are comparable
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return out, db, tmp_path / "notes.txt"


def test_probe_refuses_unwritable_out(tmp_path, existing_files):
    out, db, notes = existing_files
    before = snapshot(out, db, notes)
    missing = tmp_path / "no-such-folder" / "x.h5"
    assert_one_line_error(tandem("probe", "--device", "cpu", "--out", missing, "--catalog", db), missing)
    assert_one_line_error(tandem("probe", "--device", "cpu", "--out", notes, "--catalog", db), notes, "not an HDF5")
    assert_one_line_error(tandem("probe", "--device", "cpu", "--out", tmp_path, "--catalog", db), tmp_path)
    assert snapshot(out, db, notes) == before
    assert not missing.parent.exists()


def test_probe_refuses_a_catalog_that_is_not_sqlite(tmp_path, existing_files):
    out, db, notes = existing_files
    before = snapshot(out, db, notes)
    r = tandem("probe", "--device", "cpu", "--out", out, "--catalog", notes)
    assert_one_line_error(r, notes, "not an SQLite database")
    assert snapshot(out, db, notes) == before
    fresh_out = tmp_path / "fresh.h5"
    assert_one_line_error(tandem("probe", "--device", "cpu", "--out", fresh_out, "--catalog", notes), notes)
    assert not fresh_out.exists(), "the run file was written although the catalog was refused"
    assert not Path(str(notes) + "-wal").exists()


def test_probe_refuses_unknown_devices(tmp_path, existing_files):
    out, db, notes = existing_files
    before = snapshot(out, db, notes)
    # A well-formed device this machine does not have: exit 1, naming it.
    assert_one_line_error(tandem("probe", "--device", "cuda:7", "--out", out, "--catalog", db), "cuda:7")
    # Malformed values are usage errors: exit 2, naming the value.
    for bad in ("gpu", "cuda:", "cuda:x"):
        assert_one_line_error(tandem("probe", "--device", bad, "--out", out, "--catalog", db), f"'{bad}'", code=2)
    assert snapshot(out, db, notes) == before
    fresh_db = tmp_path / "fresh.db"
    assert_one_line_error(tandem("probe", "--device", "cuda:7", "--out", out, "--catalog", fresh_db), "cuda:7")
    assert not fresh_db.exists(), "the catalog was created although the device was refused"


def test_doctor_reports_this_reference_environment_and_missing_things(tmp_path):
    import peft
    import torch
    import transformers

    env = dict(os.environ)
    env["TANDEM_REFENV"] = str(Path(sys.executable).parent.parent)
    env.pop("TANDEM_ASSETS", None)
    r = tandem("doctor", env=env)
    assert r.returncode in (0, 3), r.stderr
    ref_line = next(l for l in r.stdout.splitlines() if "reference env" in l)
    assert f"torch {torch.__version__}" in ref_line, ref_line
    assert f"transformers {transformers.__version__}" in ref_line
    assert f"peft {peft.__version__}" in ref_line
    assert any(l.startswith("[  OK") and "CPU" in l and cpu_model_from_proc() in l for l in r.stdout.splitlines())
    shared = Path(os.environ.get("TANDEM_SOURCE_DIR", ".")).parent / "shared"
    if (shared / "assets/qwen3-tokenizer/tokenizer.json").exists():
        assert r.returncode == 0, r.stdout  # everything for CPU runs is here: reference env + assets

    # Assets where there are none: MISSING naming the folder, exit 3.
    bogus = tmp_path / "no-assets"
    bogus.mkdir()
    r = tandem("doctor", "--assets", bogus, env=env)
    assert r.returncode == 3, r.stdout
    assert any("MISSING" in l and str(bogus) in l for l in r.stdout.splitlines()), r.stdout

    # A reference environment that is not there: MISSING with the fix, exit 3.
    env["TANDEM_REFENV"] = str(tmp_path / "no-refenv")
    r = tandem("doctor", env=env)
    assert r.returncode == 3
    line = next(l for l in r.stdout.splitlines() if "reference env" in l)
    assert "MISSING" in line and "scripts/setup" in line and str(tmp_path / "no-refenv") in line
