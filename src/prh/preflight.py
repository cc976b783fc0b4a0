"""``prh preflight``: the paper suite's checks that fail in minutes, before any GPU job.

A real run of the paper suite used to meet its problems one job at a time, hours apart: a gated repo whose licence
was not accepted failed with a 403 inside its extraction job, a dataset that no longer loads (OpenWebText's script)
inside its data job, a missing manual download after the models had run. The rule ``preflight`` (paper suite) runs
first, and every GPU rule reads its report, so nothing costly starts before it passes. It checks, and lists every
problem in one error:

1. **gated repos**: ``HfApi.auth_check`` of every gated repo the config loads (``gated: true`` in the hub manifest),
   with this machine's token; each one it cannot read is named with the page where its licence is accepted. Offline
   (``HF_HUB_OFFLINE``), a gated repo must be in the cache instead;
2. **datasets**: the first row of every hub dataset (params' ``datasets``, the OpenWebText sample, the harness
   tasks) at its revision, streamed, with the columns its block names;
3. **manual downloads**: a dataset built by a ``prepare`` rule (Places-365, DCI) is built already, or its download
   is where ``prepare.source`` says;
4. **one batch per model family**: the smallest model of each family (``paper.models.<m>.family``: bloomz, llama,
   dinov2, clip, ...) loads and runs one short batch on the
   job's device (a plain-URL checkpoint, ``prh.models.checkpoints``, is fetched and its SHA-256 checked, or pinned
   on this first fetch); and, where the job holds two or more cards, the smallest model that needs several is spread over
   them (``device_map=auto``) and runs one batch. With fewer cards that check is reported as not run.

The report (``results/preflight.json``) lists what was checked. Offline it runs against the stand-in hub in the
replay.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from prh.errors import ConfigError, problems_message
from prh.gpus import FAKE_COUNT_ENV
from prh.io import write_json

__all__ = ["check_gated", "check_datasets", "check_downloads", "model_families", "check_models", "preflight", "main"]


def check_gated(cfg: dict, manifest: dict, *, online: bool, token: str | None = None, api=None) -> tuple[list, list]:
    """(checked repo ids, problems) of the gated repos ``cfg`` loads."""
    from prh.models.hub_cache import in_hub_cache, gated_repos
    from prh.pin import hub_entries

    gated = gated_repos(manifest)
    repos = sorted({(e["repo_id"], e["revision"] or "main") for e in hub_entries(cfg, include_unset=True)
                    if e["repo_id"] in gated})
    problems = []
    for repo, revision in repos:
        if not online:
            if not in_hub_cache(repo, revision, "model", None):
                problems.append(f"{repo}: gated, not in the cache and the hub cannot be reached; accept its licence "
                                f"at https://huggingface.co/{repo} and fetch it on a machine with network")
            continue
        if api is None:
            from huggingface_hub import HfApi

            api = HfApi()
        try:
            api.auth_check(repo, token=token)
        except Exception as e:  # noqa: BLE001 - GatedRepoError, RepositoryNotFoundError, HTTP errors: all reported
            problems.append(f"{repo}: this token cannot read it ({type(e).__name__}); accept its licence at "
                            f"https://huggingface.co/{repo} with the account of `hf auth login` / HF_TOKEN")
    return [r for r, _ in repos], problems


def _dataset_reads(cfg: dict) -> list[dict]:
    """Every hub dataset read of ``cfg``: key, repo, revision, config, split, data_files, columns."""
    from prh.data.hub_datasets import is_local_repo
    from prh.pin import entry_spec, entry_splits, hub_entries

    reads = []
    for entry in hub_entries(cfg, include_unset=True):
        if entry["kind"] != "dataset" or is_local_repo(entry["repo"]):
            continue
        spec = entry_spec(cfg, entry)
        columns = [spec[k] for k in ("image_column", "text_column", "label_column") if spec.get(k)]
        for split in entry_splits(cfg, entry):
            files = spec.get("data_files")
            reads.append({"key": entry["key"], "repo": entry["repo"], "revision": entry["revision"],
                          "config": spec.get("config"), "split": split, "columns": columns,
                          "data_files": {split: files[split]} if isinstance(files, dict) and split in files else None})
    return reads


def check_datasets(cfg: dict) -> tuple[list, list]:
    """(checked reads, problems): the first row of each read, streamed, and its named columns."""
    import datasets

    checked, problems = [], []
    seen = set()
    for r in _dataset_reads(cfg):
        ident = (r["repo"], r["revision"], r["config"], r["split"], str(r["data_files"]))
        if ident in seen:
            continue
        seen.add(ident)
        label = f"{r['repo']} (revision {r['revision'] or 'main'}, split {r['split']}; {r['key']})"
        try:
            stream = datasets.load_dataset(r["repo"], name=r["config"], revision=r["revision"], split=r["split"],
                                           data_files=r["data_files"], streaming=True)
            row = next(iter(stream))
        except StopIteration:
            problems.append(f"{label}: the split is empty")
            continue
        except Exception as e:  # noqa: BLE001 - a script dataset's RuntimeError, 404s, offline misses: all reported
            problems.append(f"{label}: its first row does not load: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
            continue
        missing = [c for c in r["columns"] if c not in row]
        if missing:
            problems.append(f"{label}: no column {missing} in its rows (columns: {sorted(row)})")
        checked.append(label)
    return checked, problems


def check_downloads(cfg: dict, root: str | os.PathLike = ".") -> tuple[list, list]:
    """(checked datasets, problems): a ``prepare``d dataset is built, or its download is present."""
    checked, problems = [], []
    for name, spec in (cfg.get("datasets") or {}).items():
        prep = spec.get("prepare")
        if spec.get("kind") != "hub" or not prep:
            continue
        checked.append(name)
        if (Path(root) / spec["repo"]).is_dir():
            continue  # built already
        for key in ("source", "filelist"):
            path = prep.get(key)
            if path and not (Path(root) / path).exists():
                problems.append(f"datasets.{name}: neither its folder {spec['repo']} nor its download {path} "
                                f"(prepare.{key}) exists; docs/paper_suite.md says where to download it")
    return checked, problems


def model_families(cfg: dict, models: list[str]) -> dict[str, str]:
    """family -> its smallest model among ``models`` (paper.models names): each entry's ``family`` (params.yaml),
    else its modality and timm tag or name."""
    specs = (cfg.get("paper") or {}).get("models") or {}
    families: dict[str, str] = {}
    for name in models:
        spec = specs[name]
        family = f"{spec['modality']}:{spec.get('family') or spec['repo'].rsplit('.', 1)[-1]}"
        if family not in families or spec["n_params"] < specs[families[family]]["n_params"]:
            families[family] = name
    return families


def _one_batch(spec: dict, device: str, device_map: str | None = None, checkpoint: dict | None = None) -> None:
    import numpy as np

    from prh.features import extract_language_features, extract_vision_features
    from prh.models import loaders

    if spec["modality"] == "vision":  # a plain-URL checkpoint is fetched (and pinned on its first fetch) here
        net, pre = loaders.load_vision_model(spec["repo"], revision=spec.get("revision"), checkpoint=checkpoint)
        side = pre["input_size"][-1]
        images = np.random.default_rng(0).integers(0, 256, size=(2, side, side, 3), dtype=np.uint8)
        kw = {k: pre[k] for k in ("pooling", "mean", "std", "input_size", "interpolation", "crop_pct")}
        extract_vision_features(net, images, batch_size=2, device=device, progress=False, **kw)
    else:
        net, tok = loaders.load_language_model(spec["repo"], revision=spec.get("revision"), device_map=device_map)
        extract_language_features(net, tok, ["a small red circle above a blue square", "two spheres"], batch_size=2,
                                  device=device, dtype="auto", progress=False)
    del net
    loaders.free_model_memory()


def check_models(cfg: dict, models: list[str], *, device: str = "auto", cards: int | None = None) -> tuple[dict, list]:
    """({family: model, "spread": ...}, problems): one batch of each family's smallest model on ``device``; the
    smallest model that needs several cards over ``cards`` of them (>= 2), else reported as not run."""
    from prh.cluster import gpus_needed

    checked, problems = {}, []
    try:
        families = model_families(cfg, models)
    except Exception as e:  # noqa: BLE001 - a hub config that does not load is a problem to list, not a crash
        return {}, [f"model configs: {type(e).__name__}: {' '.join(str(e).split())[:300]}"]
    from prh.models.checkpoints import SOURCES, resolve_checkpoint

    specs = cfg["paper"]["models"]
    for family, name in sorted(families.items()):
        try:
            on_no_hub = specs[name].get("source") in SOURCES
            _one_batch(specs[name], device, checkpoint=resolve_checkpoint(cfg, name) if on_no_hub else None)
            checked[family] = name
        except Exception as e:  # noqa: BLE001
            problems.append(f"{name} ({family}): one batch failed: {type(e).__name__}: {' '.join(str(e).split())[:300]}")
    memory = (cfg.get("cluster") or {}).get("gpu_memory_gb", 80)
    spread = sorted((m for m in models if specs[m]["modality"] == "language"
                     and gpus_needed(n_params=specs[m]["n_params"], gpu_memory_gb=memory) > 1),
                    key=lambda m: specs[m]["n_params"])
    if not spread:
        checked["spread"] = "not needed: every model fits one card"
    elif not cards or cards < 2:
        checked["spread"] = (f"not run: {spread[0]} needs several cards and this job has {cards or 0} real ones"
                             + (" (pretend cards: PRH_FAKE_GPU_COUNT)" if os.environ.get(FAKE_COUNT_ENV) else ""))
    else:
        try:
            _one_batch(specs[spread[0]], device, device_map="auto")
            checked["spread"] = f"{spread[0]} over {cards} cards"
        except Exception as e:  # noqa: BLE001
            problems.append(f"{spread[0]} spread over {cards} cards (device_map=auto): one batch failed: "
                            f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
    return checked, problems


def preflight(cfg: dict, *, out, manifest_path, models: list[str], device: str = "auto", root=".") -> dict:
    """Every check of the module docstring; one ``ConfigError`` listing all problems, else the report at ``out``."""
    from prh.data.hub_manifest import read_manifest
    from prh.models.hub_cache import hub_reachable

    online = hub_reachable()
    report, problems = {"online": online}, []
    for key, (checked, found) in (
        ("gated", check_gated(cfg, read_manifest(manifest_path), online=online)),
        ("datasets", check_datasets(cfg)),
        ("downloads", check_downloads(cfg, root)),
        ("models", check_models(cfg, models, device=device, cards=_cards())),
    ):
        report[key] = checked
        problems += found
    if problems:
        raise ConfigError(problems_message(f"the paper suite's pre-flight found {len(problems)} problems; "
                                           "no GPU job has started", problems))
    write_json(out, report)
    return report


def _cards() -> int:
    """Real cards this job can use: torch's count (its CUDA_VISIBLE_DEVICES, set by prh --gpus or SLURM); 0 with
    pretend cards (PRH_FAKE_GPU_COUNT: the replay), which nothing can be spread over."""
    if os.environ.get(FAKE_COUNT_ENV):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def main(argv: list[str] | None = None) -> None:

    p = argparse.ArgumentParser(prog="prh preflight", description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True, help="the config's paper, datasets, downstream, bridge and cluster "
                                                   "blocks as JSON, or a JSON file of them (the rule passes them)")
    p.add_argument("--models", nargs="+", required=True, help="paper.models names the planned jobs load")
    p.add_argument("--manifest", default="workflow/resources/hub_manifest.yaml")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"])
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from prh.io import json_object, read_json

    cfg = json_object(a.config) if a.config.lstrip().startswith("{") else read_json(a.config)
    if not isinstance(cfg, dict):
        raise ConfigError(f"{a.config}: holds {type(cfg).__name__}, not the config's blocks as a JSON object")
    report = preflight(cfg, out=a.out, manifest_path=a.manifest, models=a.models, device=a.device)
    print(f"pre-flight passed: {len(report['gated'])} gated repos, {len(report['datasets'])} dataset reads, "
          f"{len(report['downloads'])} manual downloads, {len(report['models'])} model checks -> {a.out}")
