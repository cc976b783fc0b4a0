"""Stand-ins for the plain-URL checkpoints (``paper.models`` with ``source: url``; ``prh.models.checkpoints``).

A URL checkpoint has no hub repo to fake: the loader reads the file at the URL's cache path
(``prh.models.url_cache.cache_path``) and checks its SHA-256 against the lock. For each one, ``build_checkpoint_standins``
writes a tiny model of the declared architecture (seeded, shrunk like the hub stand-ins: ``VISION_ARGS``, or a narrow
SmallAlexNet) at that path, **in the declared key layout** (the MoCo wrapping, prefixes and the projection head the
layout drops, plus a key outside ``keep_prefix``), so the replay runs the real loader's path: cache lookup, SHA-256
check, key mapping, strict load. The file says it is a stand-in under ``prh_standin`` (with the ``arch_args`` that
shrink it, which the loader applies and warns about); its SHA-256 is written into the config's lock, which must not
be the committed one (``presets/replay.yaml`` points ``paper.checkpoints.lock`` into the stand-in hub's folder).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

__all__ = ["STANDIN_ARCH_ARGS", "standin_state", "build_checkpoint_standin", "build_checkpoint_standins"]

# SmallAlexNet at a few channels (the real one has 58M parameters); timm ResNets shrink as the hub stand-ins do
STANDIN_ARCH_ARGS = {"smallalexnet": {"widths": [8, 8, 16, 16, 8], "hidden": 32}}


def _arch_args(arch: str) -> dict:
    from prh.standin.models import VISION_ARGS

    if arch in STANDIN_ARCH_ARGS:
        return dict(STANDIN_ARCH_ARGS[arch])
    for prefix, args in VISION_ARGS:
        if arch.startswith(prefix):
            return dict(args)
    raise ValueError(f"no stand-in for checkpoint architecture {arch!r}; known: smallalexnet, timm "
                     f"{', '.join(p for p, _ in VISION_ARGS)}")


def standin_state(state: dict, layout: dict) -> dict:
    """A checkpoint object that ``prh.models.checkpoints.map_keys(obj, layout)`` maps back to ``state``: keys under
    ``keep_prefix`` and the first of ``strip_prefixes``, a tensor under each ``drop_prefixes`` (a projection head)
    and one outside ``keep_prefix`` (MoCo's queue), wrapped in ``state_dict_key`` beside an epoch and optimizer."""
    import torch

    prefix = (layout.get("keep_prefix") or "") + ((layout.get("strip_prefixes") or [""])[0])
    out = {prefix + k: v for k, v in state.items()}
    for drop in layout.get("drop_prefixes") or ():
        out[prefix + drop + "0.weight"] = torch.zeros(4, 4)
    if layout.get("keep_prefix"):
        out["queue"] = torch.zeros(4, 8)
    key = layout.get("state_dict_key")
    return {key: out, "epoch": 200, "optimizer": {}} if key else out


def _seed(seed: int, url: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{url}".encode()).digest()[:4], "little")


def build_checkpoint_standin(spec: dict, root: str | os.PathLike, *, seed: int = 0) -> tuple[Path, str]:
    """Write the stand-in of one resolved URL checkpoint (``resolve_checkpoint``) at its cache path under ``root``
    (atomically); return (path, its SHA-256)."""
    import torch

    from prh.models.checkpoints import STANDIN_KEY, build_architecture
    from prh.models.url_cache import cache_path
    from prh.standin.cache import STANDIN_NOTE

    args = _arch_args(spec["arch"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(_seed(seed, spec["url"]))
        model = build_architecture(spec["arch"], {**spec.get("arch_args", {}), **args})
    # the note rides at the top level, also beside a bare state dict's tensors: the loader takes it out first
    obj = {**standin_state(model.state_dict(), spec["layout"]),
           STANDIN_KEY: {"note": f"{STANDIN_NOTE} (stand-in for {spec['url']})", "arch_args": args}}
    path = cache_path(spec["url"], root)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    torch.save(obj, tmp)
    digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
    os.replace(tmp, path)
    return path, digest


def _check_lock(lock: str) -> None:
    from prh.config import ROOT
    from prh.models.checkpoints import DEFAULT_LOCK

    committed = (ROOT / DEFAULT_LOCK).resolve()
    if Path(lock).resolve() == committed or Path(lock).resolve() == (Path.cwd() / DEFAULT_LOCK).resolve():
        raise SystemExit(f"paper.checkpoints.lock is the committed lock ({DEFAULT_LOCK}): stand-ins would pin their "
                         "random files' hashes there. Point it at a file of the stand-in hub's own (presets/replay.yaml "
                         "sets .standin-hub/checkpoints.lock.yaml)")


def build_checkpoint_standins(cfg: dict, hf_home: str | os.PathLike, *, seed: int = 0) -> list[dict]:
    """Stand-ins of every plain-URL checkpoint of ``cfg`` under ``<hf_home>/prh-checkpoints`` (where the loader
    looks when ``HF_HOME`` is ``hf_home``), their SHA-256 recorded in ``cfg``'s lock (replacing what it held)."""
    from prh.models.checkpoints import checkpoint_models, resolve_checkpoint
    from prh.models.url_cache import CACHE_ENV, record_sha256

    names = checkpoint_models(cfg, source="url")
    if not names:
        return []
    root = Path(hf_home) / "prh-checkpoints"
    if os.environ.get(CACHE_ENV) and Path(os.environ[CACHE_ENV]).resolve() != root.resolve():
        raise SystemExit(f"{CACHE_ENV} is set ({os.environ[CACHE_ENV]}): the loader would read URL checkpoints "
                         f"there, not from the stand-ins in {root}; unset it for the replay")
    out = []
    for name in names:
        spec = resolve_checkpoint(cfg, name)
        _check_lock(spec["lock"])
        path, digest = build_checkpoint_standin(spec, root, seed=seed)
        record_sha256(spec["lock"], spec["url"], digest, name=name, path=path, replace=True)
        out.append({"name": name, "url": spec["url"], "path": str(path), "sha256": digest})
    return out
