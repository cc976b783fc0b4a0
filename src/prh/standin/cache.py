"""Write a repo snapshot into a local Hugging Face hub cache, laid out as ``hf download`` leaves it.

    <cache>/<models|datasets>--<owner>--<name>/refs/<revision>          (a branch or tag: the commit it points to)
    <cache>/<models|datasets>--<owner>--<name>/snapshots/<commit>/...   (the repo's files)

``huggingface_hub`` finds a file offline (``local_files_only=True`` / ``HF_HUB_OFFLINE=1``) by
reading ``refs/<revision>`` (or taking ``revision`` itself when it is a 40-hex commit) and opening
``snapshots/<commit>/<file>``; nothing else of the layout (``blobs/``) is read offline. Stand-ins
get a commit id derived from the repo and revision (``standin_commit``), so two builds of the same
stand-in are the same snapshot and a pinned revision (a commit SHA in params.yaml) is kept as is.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from pathlib import Path

__all__ = ["STANDIN_NOTE", "repo_folder", "standin_commit", "write_snapshot"]

SHA_RE = re.compile(r"[0-9a-f]{40}")
# Written into every stand-in's config or card: a stand-in must never pass for the real thing.
STANDIN_NOTE = ("STAND-IN built locally by `prh standin-hub` (seeded random weights / synthetic rows at tiny "
                "sizes, same architecture class, config keys, tokenizer kind and file format as the real repo); "
                "never downloaded; its numbers mean nothing")


def repo_folder(cache_dir: str | os.PathLike, repo_id: str, repo_type: str = "model") -> Path:
    """``<cache>/models--owner--name`` (or ``datasets--``), the folder huggingface_hub caches a repo in."""
    if repo_type not in ("model", "dataset"):
        raise ValueError(f"repo_type={repo_type!r}: use 'model' or 'dataset'")
    return Path(cache_dir) / f"{repo_type}s--{repo_id.replace('/', '--')}"


def standin_commit(repo_id: str, revision: str | None) -> str:
    """The commit id of a stand-in: ``revision`` itself when it is a 40-hex SHA, else a SHA-1 of
    repo and revision (stable across builds, never equal to a real commit by construction of its input)."""
    rev = revision or "main"
    if SHA_RE.fullmatch(rev):
        return rev
    return hashlib.sha1(f"prh-standin:{repo_id}@{rev}".encode()).hexdigest()


def write_snapshot(cache_dir: str | os.PathLike, repo_id: str, revision: str | None, source: str | os.PathLike,
                   *, repo_type: str = "model") -> Path:
    """Copy the files of folder ``source`` into the cache as ``repo_id`` at ``revision``; return the snapshot.

    The snapshot is assembled beside its final place and renamed into it, and the ref is written
    last, so an interrupted build leaves no snapshot that looks complete. An existing snapshot of
    the same commit is replaced.
    """
    source = Path(source)
    if not source.is_dir():
        raise ValueError(f"source={str(source)!r} is not a folder of repo files")
    root = repo_folder(cache_dir, repo_id, repo_type)
    commit = standin_commit(repo_id, revision)
    snap = root / "snapshots" / commit
    tmp = snap.with_name(f".{commit}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source, tmp)
    shutil.rmtree(snap, ignore_errors=True)
    os.replace(tmp, snap)
    rev = revision or "main"
    if not SHA_RE.fullmatch(rev):
        ref = root / "refs" / rev
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
    return snap
