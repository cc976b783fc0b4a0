"""Before any job of the paper suite offline: list EVERY hub model and dataset missing from the cache.

Offline (``HF_HUB_OFFLINE=1``), a hub model or dataset missing from the local cache fails the job that
loads it, naming that one item (``prh.models.loaders``, ``prh.data.hub_datasets``); a user then learns
of the next missing item only after fixing the first. ``check_hub_cache(cfg)`` asks the cache about
every item the config's paper models and hub datasets name and raises one ``ModelNotAvailableError``
listing all the missing ones, each with its download command, and the DVC alternative. The Snakefile
calls it before any job when the suite is ``paper`` and the hub is offline.

An item counts as present when:

- model: ``snapshot_download(repo, revision, local_files_only=True)`` finds its snapshot (the
  loaders' own test); a timm name's repo is its ``hf_hub_id`` (``timm/<name>``);
- hub dataset: its snapshot is in the hub cache, or the ``datasets`` library's cache holds its
  prepared copy (``<HF_DATASETS_CACHE>/<owner>___<name>``);
- local dataset folder (``repo: ./data/...``): the folder exists.
"""

from __future__ import annotations

import os
from pathlib import Path

from prh.data.hub_datasets import is_local_repo
from prh.errors import ModelNotAvailableError

__all__ = ["check_hub_cache", "missing_hub_items"]


def _hub_repo(spec: dict) -> str:
    if spec.get("modality") != "vision":
        return spec["repo"]
    import timm

    cfg = timm.models.get_pretrained_cfg(spec["repo"])  # None for a name timm does not know
    return (cfg.hf_hub_id if cfg is not None else None) or f"timm/{spec['repo']}"


def _in_hub_cache(repo: str, revision: str | None, repo_type: str, cache_dir) -> bool:
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(repo, revision=revision, repo_type=repo_type, local_files_only=True, cache_dir=cache_dir)
    except Exception:  # noqa: BLE001 - any failure to find the snapshot offline means: not cached
        return False
    return True


def missing_hub_items(cfg: dict, *, cache_dir: str | os.PathLike | None = None,
                      datasets_cache_dir: str | os.PathLike | None = None) -> list[str]:
    """One line per missing item of ``cfg["paper"]["models"]`` and of the hub datasets (``kind: hub``):
    what it is, where it comes from, and the command that fetches it. ``cache_dir`` /
    ``datasets_cache_dir``: the hub and ``datasets`` caches (default: those of ``HF_HOME``)."""
    if datasets_cache_dir is None:
        import datasets

        datasets_cache_dir = datasets.config.HF_DATASETS_CACHE
    missing = []
    for name, spec in ((cfg.get("paper") or {}).get("models") or {}).items():
        repo, rev = _hub_repo(spec), spec.get("revision") or "main"
        if not _in_hub_cache(repo, rev, "model", cache_dir):
            missing.append(f"  model {name}: {repo} (revision {rev}): `hf download {repo} --revision {rev}`")
    for name, spec in (cfg.get("datasets") or {}).items():
        if spec.get("kind") != "hub":
            continue
        repo, rev = spec["repo"], spec.get("revision") or "main"
        if is_local_repo(repo):
            prep = spec.get("prepare") or {}
            if prep and Path(prep["source"]).expanduser().exists():
                continue  # the rule prepare_<name> builds the folder from the download
            if not Path(repo).expanduser().is_dir():
                how = (f"download it (README, paper suite) to {prep['source']}; rule prepare_{name} builds the folder"
                       if prep else "prepare it as params.yaml's comment on it says")
                missing.append(f"  dataset {name}: folder {repo} does not exist ({how})")
        elif not (_in_hub_cache(repo, rev, "dataset", cache_dir)
                  or (Path(datasets_cache_dir) / repo.replace("/", "___")).is_dir()):
            missing.append(f"  dataset {name}: {repo} (revision {rev}): "
                           f"`hf download {repo} --repo-type dataset --revision {rev}`")
    return missing


def check_hub_cache(cfg: dict, **caches) -> dict:
    """Raise one ``ModelNotAvailableError`` listing every missing hub item (``missing_hub_items``); return ``cfg``."""
    missing = missing_hub_items(cfg, **caches)
    if missing:
        raise ModelNotAvailableError(
            f"the hub is offline (HF_HUB_OFFLINE) and {len(missing)} hub items of the paper suite are not in "
            "the Hugging Face cache:\n" + "\n".join(missing) + "\nEither download them into the cache on a "
            "machine with network, with the same HF_HOME (the commands above), or fetch what was computed "
            "elsewhere: `dvc pull results/data` (per-layer features are not versioned: `make pull` fetches the alignment tables, experiments and figures computed from them)."
        )
    return cfg
