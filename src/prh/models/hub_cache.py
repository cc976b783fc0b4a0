"""Before any job of a real paper-suite run: every hub item present or reachable, and allowed.

Offline (``HF_HUB_OFFLINE=1``, or no network), a hub model or dataset missing from the local cache
fails the job that loads it, naming that one item (``prh.models.loaders``, ``prh.data.hub_datasets``);
a user then learns of the next missing item only after fixing the first. ``check_before_run(cfg)``,
which the Snakefile's ``onstart:`` calls when Snakemake is about to execute paper-suite jobs, runs
three checks over ONE list of hub items (``prh.pin.hub_entries``: the list ``prh pin-revisions``,
``prh hub-manifest``, the stand-in hub and this module read):

1. every revision is a commit SHA (``prh.pin.check_pinned``), unless ``allow_unpinned``;
2. when the hub cannot be reached (``HF_HUB_OFFLINE`` set, or a HEAD request to the endpoint fails):
   ``check_hub_cache`` raises one ``ModelNotAvailableError`` listing EVERY missing item, each with
   the command that fetches it;
3. when it can: ``check_gated_access`` raises one error naming every gated repo (the manifest's
   ``gated: true``) that is not cached while no hub token is set, and how to log in.

An item counts as present when:

- model: ``snapshot_download(repo, revision, local_files_only=True)`` finds its snapshot (the
  loaders' own test); a timm name's repo is its ``hf_hub_id`` (``timm/<name>``);
- hub dataset (and ``paper.lm_score``'s corpus): the ``datasets`` library's cache holds its prepared
  copy (``<HF_DATASETS_CACHE>/<owner>___<name>``). Offline, ``datasets.load_dataset(repo)`` reads
  only that copy (``CachedDatasetModuleFactory``); a snapshot in the hub cache alone does not load;
- local dataset folder (``repo: ./data/...``): the folder exists, or the download its ``prepare``
  rule builds it from;
- plain-URL checkpoint (``paper.models`` with ``source: url``, ``prh.models.checkpoints``): its file is in the
  checkpoint cache (``prh.models.url_cache.cache_path``); listed with the missing hub items, with its fetch command.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from prh.errors import ConfigError, ModelNotAvailableError

__all__ = ["check_before_run", "check_gated_access", "check_hub_cache", "gated_repos", "hub_reachable",
           "missing_hub_items"]


def in_hub_cache(repo: str, revision: str | None, repo_type: str, cache_dir) -> bool:
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(repo, revision=revision, repo_type=repo_type, local_files_only=True, cache_dir=cache_dir)
    except Exception:  # noqa: BLE001 - any failure to find the snapshot offline means: not cached
        return False
    return True


def _prepared(repo: str, datasets_cache_dir) -> bool:
    """The ``datasets`` cache holds a prepared copy of ``repo`` (the folder name ``load_dataset`` uses)."""
    from datasets.naming import camelcase_to_snakecase

    owner, _, name = repo.rpartition("/")
    return (Path(datasets_cache_dir) / "___".join(filter(None, [owner, camelcase_to_snakecase(name)]))).is_dir()


def _local_folder_missing(name: str, spec: dict) -> str | None:
    prep = spec.get("prepare") or {}
    if prep and Path(prep["source"]).expanduser().exists():
        return None  # the rule prepare_<name> builds the folder from the download
    if Path(spec["repo"]).expanduser().is_dir():
        return None
    how = (f"download it (docs/paper_suite.md) to {prep['source']}; rule prepare_{name} builds the folder"
           if prep else "prepare it as params.yaml's comment on it says")
    return f"  dataset {name}: folder {spec['repo']} does not exist ({how})"


def missing_hub_items(cfg: dict, *, cache_dir: str | os.PathLike | None = None,
                      datasets_cache_dir: str | os.PathLike | None = None) -> list[str]:
    """One line per item of ``prh.pin.hub_entries(cfg, include_unset=True)`` (and per local dataset
    folder) that is not in the caches: what it is, where it comes from, and the command that fetches it.
    ``cache_dir`` / ``datasets_cache_dir``: the hub and ``datasets`` caches (default: those of ``HF_HOME``)."""
    from prh.pin import hub_entries

    if datasets_cache_dir is None:
        import datasets

        datasets_cache_dir = datasets.config.HF_DATASETS_CACHE
    missing = []
    for e in hub_entries(cfg, include_unset=True):
        repo, rev, label = e["repo_id"], e["revision"] or "main", e["key"].rsplit(".", 1)[-1]
        if e["key"] == "paper.lm_score":
            label = "lm_score corpus"
        elif e["key"].startswith("bridge."):
            label = f"{e['key']} source"
        if e["kind"] == "model":
            if not in_hub_cache(repo, rev, "model", cache_dir):
                missing.append(f"  model {label}: {repo} (revision {rev}): "
                               f"`hf download {shlex.quote(repo)} --revision {shlex.quote(rev)}`")
        elif not _prepared(repo, datasets_cache_dir):
            script = f"import datasets; datasets.load_dataset({json.dumps(repo)}, revision={json.dumps(rev)})"
            missing.append(f"  dataset {label}: {repo} (revision {rev}): `python -c {shlex.quote(script)}` "
                           "(prepares the copy offline runs read)")
    missing += _missing_checkpoints(cfg)
    for name, spec in (cfg.get("datasets") or {}).items():
        if spec.get("kind") == "hub" and spec["repo"].startswith((".", "/", "~")):
            line = _local_folder_missing(name, spec)
            if line:
                missing.append(line)
    return missing


def _missing_checkpoints(cfg: dict) -> list[str]:
    """One line per plain-URL checkpoint of ``cfg`` (``prh.models.checkpoints``) not in the checkpoint cache."""
    from prh.models.checkpoints import checkpoint_models, resolve_checkpoint
    from prh.models.url_cache import cache_path

    out = []
    for name in checkpoint_models(cfg, source="url"):
        url = resolve_checkpoint(cfg, name)["url"]
        path = cache_path(url)
        if not url.startswith("file:") and not path.is_file():
            out.append(f"  checkpoint {name}: {url}: `prh pin-checkpoints` (fetches and pins every one), or "
                       f"`curl -L -o {shlex.quote(str(path))} {shlex.quote(url)}`")
    return out


def check_hub_cache(cfg: dict, **caches) -> dict:
    """Raise one ``ModelNotAvailableError`` listing every missing hub item (``missing_hub_items``); return ``cfg``."""
    missing = missing_hub_items(cfg, **caches)
    if missing:
        raise ModelNotAvailableError(
            f"the hub cannot be reached (HF_HUB_OFFLINE is set, or no network) and {len(missing)} hub items of the "
            "paper suite are not in the Hugging Face cache:\n" + "\n".join(missing) + "\nEither fetch them into "
            "the cache on a machine with network, with the same HF_HOME (the commands above), or fetch what was "
            "computed elsewhere: `dvc pull results/data` (the materialised datasets) or `make pull` (data, alignment "
            "tables, experiments and figures; per-layer features are not versioned). To replay the DAG without the hub, build stand-ins: docs/paper_suite.md, "
            "'Replaying the paper suite offline'."
        )
    return cfg


def hub_reachable(*, timeout: float = 5.0) -> bool:
    """False when ``HF_HUB_OFFLINE`` is set or a HEAD request to the hub's endpoint (``HF_ENDPOINT``)
    fails within ``timeout`` seconds; then every hub item must come from the cache."""
    from prh.models.loaders import hub_offline

    if hub_offline():
        return False
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:  # the HTTP client huggingface_hub itself downloads with (its proxies and certificates)
        get_session().head(constants.ENDPOINT, timeout=timeout)
    except Exception:  # noqa: BLE001 - DNS, refused, timed out, TLS: the hub cannot be reached
        return False
    return True


def gated_repos(manifest: dict) -> set[str]:
    """Repo ids the hub manifest marks ``gated: true`` (a licence to accept and a token to send)."""
    return {m["id"] for m in (manifest.get("models") or []) if m.get("gated")}


def check_gated_access(cfg: dict, manifest: dict, *, token: str | None = None, cache_dir=None) -> dict:
    """Raise one ``ConfigError`` naming every gated repo the config loads that is not cached while no hub
    token is set (``token``: default ``huggingface_hub.get_token()``, from ``HF_TOKEN`` or ``hf auth login``)."""
    from prh.pin import hub_entries

    if token is None:
        from huggingface_hub import get_token

        token = get_token()
    if token:
        return cfg
    gated = gated_repos(manifest)
    need = sorted({e["repo_id"] for e in hub_entries(cfg, include_unset=True)
                   if e["repo_id"] in gated and not in_hub_cache(e["repo_id"], e["revision"] or "main",
                                                                   "model", cache_dir)})
    if need:
        raise ConfigError(
            f"{len(need)} hub repos the paper suite loads are gated and no hub token is set: {', '.join(need)}. "
            "Accept each licence on its page (https://huggingface.co/<repo>), then `hf auth login` (or set "
            "HF_TOKEN) on this machine, and run again."
        )
    return cfg


def check_before_run(cfg: dict, *, manifest_path: str | os.PathLike = "workflow/resources/hub_manifest.yaml",
                     params: str = "params.yaml") -> dict:
    """The checks a real paper-suite run makes before its first job (module docstring); return ``cfg``."""
    from prh.data.hub_manifest import read_manifest
    from prh.pin import check_pinned

    check_pinned(cfg, params=params)
    if not hub_reachable():
        return check_hub_cache(cfg)
    return check_gated_access(cfg, read_manifest(manifest_path))
