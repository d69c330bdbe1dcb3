"""Atomic multi-file checkpoints for the reference leg (docs/leg-protocol.md, "Checkpoints").

A checkpoint is a folder legs/<leg>/ckpt-<update:06d>/ written as ckpt-<update>.tmp/ first; every
file is fsynced, then manifest.json (format, update, spec sha256, file sizes and sha256) is written
last, then the folder is renamed into place and its parent fsynced. Resume takes the newest
checkpoint whose manifest verifies and falls back to older ones; it never silently restarts.
"""
import hashlib
import json
import os
import re
import shutil

FORMAT = 1
_CKPT = re.compile(r"^ckpt-(\d{6})$")


def _fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path):
    _fsync_file(path)


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_checkpoint(leg_dir, update, spec_sha256, write_files):
    """write_files(tmp_dir) writes the payload; returns the committed folder's path."""
    final = os.path.join(leg_dir, f"ckpt-{update:06d}")
    tmp = final + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    write_files(tmp)
    files = {}
    for name in sorted(os.listdir(tmp)):
        p = os.path.join(tmp, name)
        _fsync_file(p)
        files[name] = {"size": os.path.getsize(p), "sha256": _sha256(p)}
    manifest = {"format": FORMAT, "update": update, "spec_sha256": spec_sha256, "files": files}
    mpath = os.path.join(tmp, "manifest.json")
    with open(mpath, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(leg_dir)
    return final


def verify_checkpoint(path, spec_sha256):
    """Returns (manifest, None) when valid, else (None, reason)."""
    mpath = os.path.join(path, "manifest.json")
    if not os.path.exists(mpath):
        return None, "no manifest.json"
    try:
        with open(mpath, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"manifest.json unreadable: {e}"
    if manifest.get("format") != FORMAT:
        return None, f"manifest format {manifest.get('format')!r}, expected {FORMAT}"
    if manifest.get("spec_sha256") != spec_sha256:
        return None, "written for a different experiment spec (spec_sha256 differs)"
    for name, meta in manifest.get("files", {}).items():
        p = os.path.join(path, name)
        if not os.path.exists(p):
            return None, f"file {name} missing"
        if os.path.getsize(p) != meta["size"] or _sha256(p) != meta["sha256"]:
            return None, f"file {name} does not match its manifest entry"
    return manifest, None


def newest_valid_checkpoint(leg_dir, spec_sha256, log=None):
    """(path, manifest) of the newest valid checkpoint, or (None, None) when there is none."""
    if not os.path.isdir(leg_dir):
        return None, None
    names = sorted((n for n in os.listdir(leg_dir) if _CKPT.match(n)), reverse=True)
    for name in names:
        path = os.path.join(leg_dir, name)
        manifest, reason = verify_checkpoint(path, spec_sha256)
        if manifest is not None:
            return path, manifest
        if log:
            log(f"skipping checkpoint {path}: {reason}")
    return None, None
