"""``prh standin-hub``: build the stand-in hub a paper-suite replay runs on (models, datasets, downloads).

    HF_HOME=.standin-hub prh standin-hub --configfile presets/replay.yaml
    HF_HOME=.standin-hub HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \\
        snakemake --cores 2 --config suite=paper --configfile presets/replay.yaml

Reads params.yaml layered with each ``--configfile`` as Snakemake layers them (``prh.config.merge``),
and writes, for every hub item of that config (``prh.pin.hub_entries``):

- model stand-ins into ``$HF_HOME/hub`` (``prh.standin.models``);
- plain-URL checkpoint stand-ins at their cache paths under ``$HF_HOME/prh-checkpoints``, their SHA-256 in the
  config's ``paper.checkpoints.lock`` (``prh.standin.checkpoints``);
- dataset stand-ins into ``$HF_HOME/hub`` and their prepared copies into ``$HF_HOME/datasets``
  (``prh.standin.datasets``);
- the downloads the ``prepare_*`` rules read (DCI, Places), under ``--downloads-root`` (the
  workflow's working directory: params.yaml names them relative to it);
- ``$HF_HOME/standin-hub.json``: what was built, so a reader of the cache can tell it from a real one.

Use a separate ``HF_HOME`` for stand-ins: they share repo ids and revisions with the real repos.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

__all__ = ["build_standin_hub", "check_standin_home", "main"]


SUMMARY = "standin-hub.json"


def check_standin_home(hf_home: Path) -> None:
    """Refuse a Hugging Face home that holds anything but stand-ins: a stand-in moves ``refs/main`` of
    the real repo ids to its own commit, so a real cache would then load random weights, silently."""
    if hf_home.is_dir() and any(hf_home.iterdir()) and not (hf_home / SUMMARY).is_file():
        raise SystemExit(f"{hf_home} is not empty and holds no {SUMMARY}: it looks like a real Hugging Face "
                         "cache, which stand-ins would overwrite (same repo ids and branches). Point HF_HOME "
                         "(or --hf-home) at a new folder, e.g. .standin-hub")


def build_standin_hub(cfg: dict, hf_home: str | os.PathLike, *, downloads_root: str | os.PathLike = ".",
                      rows: int = 24, seed: int = 0) -> dict:
    """Build every stand-in of ``cfg`` under ``hf_home`` (``hub/``, ``datasets/``) and the downloads under
    ``downloads_root``; write and return the summary (``standin-hub.json``)."""
    from prh.io import write_json
    from prh.standin.cache import STANDIN_NOTE
    from prh.standin.checkpoints import build_checkpoint_standins
    from prh.standin.datasets import build_dataset_standins
    from prh.standin.downloads import build_download_standins
    from prh.standin.models import build_model_standins

    hf_home = Path(hf_home)
    check_standin_home(hf_home)
    start = time.perf_counter()
    models = build_model_standins(cfg, hf_home / "hub", seed=seed)
    checkpoints = build_checkpoint_standins(cfg, hf_home, seed=seed)
    datasets = build_dataset_standins(cfg, hf_home / "hub", hf_home / "datasets", rows=rows, seed=seed)
    downloads = build_download_standins(cfg, downloads_root, rows=rows, seed=seed)
    summary = {"note": STANDIN_NOTE, "rows": rows, "seed": seed, "seconds": round(time.perf_counter() - start, 1),
               "models": [{k: str(v) for k, v in m.items()} for m in models], "checkpoints": checkpoints,
               "datasets": [{k: r[k] for k in ("repo_id", "revision", "commit", "config", "format", "snapshot")}
                            for r in datasets],
               "downloads": downloads}
    write_json(hf_home / SUMMARY, summary)
    return summary


def main(argv: list[str] | None = None) -> None:
    from prh.config import load, merge

    p = argparse.ArgumentParser(prog="prh standin-hub", description=__doc__.splitlines()[0])
    p.add_argument("--params", default="params.yaml", help="the base config (default: params.yaml)")
    p.add_argument("--configfile", action="append", default=[], help="a config layered on --params (repeatable)")
    p.add_argument("--hf-home", default=os.environ.get("HF_HOME"),
                   help="the Hugging Face home to write into (default: $HF_HOME; required)")
    p.add_argument("--downloads-root", default=".", help="where params' prepare.source paths are resolved")
    p.add_argument("--rows", type=int, default=24, help="rows per dataset split")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if not a.hf_home:
        p.error("set HF_HOME (or --hf-home) to a folder for the stand-ins, not your real Hugging Face cache")
    cfg = load(a.params)
    for path in a.configfile:
        cfg = merge(cfg, load(path))
    s = build_standin_hub(cfg, a.hf_home, downloads_root=a.downloads_root, rows=a.rows, seed=a.seed)
    print(f"{a.hf_home}: {len(s['models'])} model, {len(s['checkpoints'])} URL checkpoint, {len(s['datasets'])} "
          f"dataset and {len(s['downloads'])} download stand-ins in {s['seconds']} s (random weights, synthetic rows: "
          "their numbers mean nothing)")
