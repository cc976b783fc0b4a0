"""``prh run-phase-model``: one model's NTK, AGOP and NTK stability on the paired set (one job per model).

    prh run-phase-model --name resnet_xs_sup --path results/models/resnet_xs_sup --modality vision \\
        --data results/data/shapes_eval --out results/experiments/phase/models/resnet_xs_sup.json \\
        --config '{"phase": {"n_ntk": 256, ...}}' --seed 0

Writes ``<out>.json`` (AGOP summary, stability, sketch error, losses) and ``<out>.npy``
(N × N float64: Θ before training). Stability is S(Θ_before, Θ_after) on the first
``n_stability`` NTK items (the after-NTK costs a second pass). The NTK items are the same
seeded subset of the paired set for every model, so Grams of different models compare
item by item.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from prh.io import read_jsonl, write_json, write_npy
from prh.studies.phase import ntk as nt
from prh.studies.phase.dynamics import model_ntk, train_steps
from prh.studies.phase.models import load_probe_model
from prh.errors import UsageError

__all__ = ["item_split", "read_paired", "run_model", "main"]


def item_split(n: int, *, n_ntk: int, seed: int) -> dict[str, np.ndarray]:
    """Seeded split of the paired set: ``ntk`` items (NTK Grams) and ``rest`` (training steps)."""
    if not 4 <= n_ntk <= n:
        raise ValueError(f"n_ntk={n_ntk} must lie in [4, {n}] (the paired set's size); lower n_ntk")
    perm = np.random.default_rng(seed).permutation(n)
    return {"ntk": np.sort(perm[:n_ntk]), "rest": np.sort(perm[n_ntk:])}


def read_paired(data) -> dict:
    """Images (uint8 N × H × W × 3), captions (``text``) and task labels of a paired dataset dir.

    Labels: the shapes world's tasks from ``scenes.jsonl`` (``prh.data.tasks``), else
    ``labels.npy`` (a hub dataset's class column) as one task, else none.
    """
    data = Path(data)
    if not (data / "images.npy").exists() or not (data / "captions.jsonl").exists():
        raise UsageError(f"data={str(data)!r} lacks images.npy or captions.jsonl; build the paired dataset first")
    images = np.load(data / "images.npy", mmap_mode="r", allow_pickle=False)
    texts = [rec["text"] for rec in read_jsonl(data / "captions.jsonl")]
    labels = {}
    if (data / "scenes.jsonl").exists():
        from prh.data.tasks import task_labels

        labels = task_labels([rec["scene"] for rec in read_jsonl(data / "scenes.jsonl")])
    elif (data / "labels.npy").exists():
        labels = {"label": np.load(data / "labels.npy", allow_pickle=False)}
    return {"images": images, "texts": texts, "labels": labels}


def run_model(*, name: str, path: str, modality: str, data: str, out: str, config: dict, seed: int = 0,
              revision: str | None = None) -> dict:
    """NTK before/after ``config['train_steps']`` steps, AGOP and stability of one model -> ``out`` (.json + .npy)."""
    t0 = time.process_time()
    torch.manual_seed(seed)
    paired = read_paired(data)
    split = item_split(len(paired["texts"]), n_ntk=config["n_ntk"], seed=seed)
    pm = load_probe_model(name=name, path=path, modality=modality, images=paired["images"], texts=paired["texts"],
                          revision=revision)
    readouts = nt.random_readouts(pm.dim, config["n_readouts"], seed=seed)
    kw = dict(readouts=readouts, exact_max_params=config["exact_max_params"], sketch_dim=config["sketch_dim"],
              chunk=config["chunk"], agop_k=config["agop_k"], seed=seed)
    before = model_ntk(pm, split["ntk"], n_check=config["sketch_check_items"], **kw)
    losses = []
    if paired["labels"] and config["train_steps"] > 0:
        losses = train_steps(pm, paired["labels"], split["rest"], steps=config["train_steps"], lr=config["train_lr"],
                             batch_size=config["train_batch_size"], seed=seed)
    n_stab = min(config["n_stability"], len(split["ntk"]))
    after = model_ntk(pm, split["ntk"][:n_stab], n_check=0, **kw)
    sa, sb = nt.ntk_states(before["theta"][:n_stab, :n_stab]), nt.ntk_states(after["theta"])
    result = {
        "model": name, "modality": modality, "n_params": pm.n_params, "feature_dim": pm.dim,
        "n_ntk": int(len(split["ntk"])), "n_readouts": int(readouts.shape[0]),
        "sketched": before["sketched"], "sketch_dim": before["sketch_dim"], "sketch_error": before["sketch_error"],
        "sketch_check_items": before.get("sketch_check_items", 0),
        "agop": before["agop"], "agop_after": after["agop"],
        "stability": nt.state_similarity(sa["literal"], sb["literal"]),
        "stability_centred": nt.state_similarity(sa["centred"], sb["centred"]), "n_stability": int(n_stab),
        "train_losses": losses, "cpu_seconds": time.process_time() - t0,
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_npy(out.with_suffix(".npy"), before["theta"].numpy())
    write_json(out, result)
    return result


def main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice
    from prh.studies.phase.design import SLICES

    p = argparse.ArgumentParser(prog="prh run-phase-model", description=run_model.__doc__.split("\n")[0])
    p.add_argument("--name", required=True)
    p.add_argument("--path", required=True, help="zoo checkpoint dir, timm name or HF repo id")
    p.add_argument("--revision", default=None)
    p.add_argument("--modality", required=True, choices=["vision", "language"])
    p.add_argument("--data", required=True, help="paired dataset dir (images.npy, captions.jsonl)")
    p.add_argument("--out", required=True, help="<dir>/<model>.json (the .npy of the Grams goes beside it)")
    p.add_argument("--seed", type=int, default=0)
    settings = add_slice(p, {"phase": SLICES["model"]})
    a = p.parse_args(argv)
    from prh.device import check_seed

    check_seed(a.seed)
    res = run_model(name=a.name, path=a.path, modality=a.modality, data=a.data, out=a.out, config=settings(a)["phase"],
                    seed=a.seed, revision=a.revision)
    print(json.dumps({k: res[k] for k in ("model", "stability", "sketch_error", "cpu_seconds")}))
