"""Atomic multi-file checkpoints in the run folder's layout (docs/leg-protocol.md, "Checkpoints"):
legs/<leg>/ckpt-<update:06d>/ written as ckpt-<update>.tmp/, every payload file fsynced, then
manifest.json (format 1, update, spec sha256, every file's size and sha256) written LAST, then the
folder renamed into place and the parent fsynced. Resume takes the newest checkpoint whose
manifest verifies and falls back to older ones. The same format as the reference and engine legs.
"""
import hashlib
import json
import os
import re
import shutil

FORMAT = 1
_CKPT = re.compile(r"^ckpt-(\d{6})$")


def _fsync(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_sha256(path):
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
        _fsync(p)
        files[name] = {"size": os.path.getsize(p), "sha256": file_sha256(p)}
    manifest = {"format": FORMAT, "update": update, "spec_sha256": spec_sha256, "files": files}
    with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    _fsync(tmp)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync(leg_dir)
    return final


def verify_checkpoint(path, spec_sha256):
    """(manifest, None) when the folder verifies, else (None, why not)."""
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
    m = _CKPT.match(os.path.basename(path))
    if m and manifest.get("update") != int(m.group(1)):
        return None, f"manifest update {manifest.get('update')!r} does not match the folder name"
    for name, meta in manifest.get("files", {}).items():
        p = os.path.join(path, name)
        if not os.path.exists(p):
            return None, f"file {name} missing"
        if os.path.getsize(p) != meta["size"] or file_sha256(p) != meta["sha256"]:
            return None, f"file {name} does not match its manifest entry"
    return manifest, None


def newest_valid_checkpoint(leg_dir, spec_sha256, log=None):
    """(path, manifest) of the newest valid checkpoint, or (None, None) when there is none."""
    if not os.path.isdir(leg_dir):
        return None, None
    for name in sorted((n for n in os.listdir(leg_dir) if _CKPT.match(n)), reverse=True):
        path = os.path.join(leg_dir, name)
        manifest, reason = verify_checkpoint(path, spec_sha256)
        if manifest is not None:
            return path, manifest
        if log:
            log(f"skipping checkpoint {path}: {reason}")
    return None, None


def resume_checkpoint(leg_dir, spec_sha256, log):
    """--resume: (path, manifest) of the newest valid checkpoint, or (None, None), said on `log` (the
    leg then starts from the beginning)."""
    path, manifest = newest_valid_checkpoint(leg_dir, spec_sha256, log)
    if path is None:
        log("no valid checkpoint: starting from the beginning (resume requested)")
    return path, manifest
