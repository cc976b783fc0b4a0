"""One arm of the bridge study (seed 001, Figs 3, 6, 8, 10): stage 1, then stage 2 on frozen features.

An arm is ``{init, ratio, blocks, epochs, seed}``: the backbone's weights (pretrained /
scratch / shuffled), the random-label ratio ρ of stage 1, how many leading blocks the bridge
trains (0 = patch embedding and head only; ``all``) and the stage-1 epochs (0 = no bridge:
the fresh patch embedding is never trained). ``run_arm``:

1. stage 1 (``train``): train on the first ``n_train`` items of the training set with the
   stage-1 task's labels, a fraction ρ of them random; curves on ``n_eval`` held-out items;
2. weight statistics of the backbone's matrices before and after (``outliers``) and the
   appendix-A check on the patch embedding (``covariance``);
3. stage 2: per-layer mean-pooled features of the first ``n_probe`` items of the probe set
   (saved for ``align``) and linear probes on every task (``prh.experiments.probes``, the
   zoo's protocol and split).

    prh run-bridge-arm --name pretrained_r1 --arm '{"init": "pretrained", "ratio": 1}' --config '{...}' \\
        --train-data results/data/shapes_train --probe-data results/data/shapes_vision \\
        --result results/experiments/bridge/arms/pretrained_r1/result.json \\
        --features results/experiments/bridge/arms/pretrained_r1/features.safetensors
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from prh.config import schema_defaults
from prh.studies.bridge.design import arm_spec

__all__ = ["CONFIG_DEFAULTS", "extract_features", "run_arm", "main"]

CONFIG_DEFAULTS = schema_defaults("bridge")["offline"]["config"]  # the setting's defaults (bridge.schema.yaml)


@torch.no_grad()
def extract_features(model, images: np.ndarray, *, batch_size: int = 128) -> np.ndarray:
    """N x (blocks + 1) x D: the mean over tokens of the embedding output and of every block."""
    from prh.studies.bridge.train import to_tensor

    model.eval()
    device = next(model.parameters()).device
    parts = [model(to_tensor(images[s:s + batch_size], device), return_layers=True)[1].float().cpu()
             for s in range(0, len(images), batch_size)]
    return torch.cat(parts).numpy()


def _block_tensors(model) -> dict:
    return {k: v.detach().cpu().numpy().copy() for k, v in model.blocks.state_dict().items()}


def run_arm(*, name: str, arm: dict, config: dict, train_data: str, probe_data: str, result: str, features: str,
            seed: int = 0, device: str = "auto") -> dict:
    """Run one arm (module docstring); write its numbers to ``result`` (JSON) and its stage-2 features to
    ``features`` (safetensors)."""
    from prh.device import resolve_device
    from prh.evaluation.probes import probe_features, split_indices
    from prh.io import save_features, write_json
    from prh.studies.bridge.covariance import alignment_check
    from prh.studies.bridge.model import build_model, set_bridge
    from prh.studies.bridge.outliers import matrix_stats, summarise
    from prh.studies.bridge.train import (
        load_labelled,
        random_labels,
        to_tensor,
        train_bridge,
    )

    unknown = sorted(set(config) - set(CONFIG_DEFAULTS))
    if unknown:
        raise ValueError(f"config: unknown key(s) {unknown}; allowed: {sorted(CONFIG_DEFAULTS)}")
    cfg = {**CONFIG_DEFAULTS, **config}
    spec = arm_spec(arm, epochs=cfg["epochs"])
    arm_seed = seed + spec["seed"]
    cpu0 = time.process_time()
    torch.set_num_threads(1)

    images, labels, classes = load_labelled(train_data, tasks=None if cfg["task"] == "label" else [cfg["task"]],
                                            n=cfg["n_train"] + cfg["n_eval"])
    task = next(iter(labels))
    n_train = len(images) - cfg["n_eval"]
    if n_train < cfg["batch_size"]:
        raise ValueError(f"{train_data} has {len(images)} items: too few for n_train={cfg['n_train']} + "
                         f"n_eval={cfg['n_eval']}; lower them or make a larger dataset")
    y_true = labels[task]
    y_train, replaced = random_labels(y_true[:n_train], ratio=spec["ratio"], num_classes=classes[task], seed=arm_seed)

    model = build_model(source=cfg["source"], revision=cfg["revision"], init=spec["init"],
                        image_size=images.shape[1], patch_size=cfg["patch_size"], num_classes=classes[task],
                        seed=arm_seed)
    trainable = set_bridge(model, blocks=spec["blocks"])
    model.to(resolve_device(device))
    before_blocks, w_before = _block_tensors(model), model.embed.proj.weight.detach().cpu().numpy().copy()
    curves = train_bridge(model, images[:n_train], y_train, epochs=spec["epochs"], batch_size=cfg["batch_size"],
                          lr_new=cfg["lr_new"], lr_blocks=cfg["lr_blocks"], weight_decay=cfg["weight_decay"],
                          seed=arm_seed, eval_images=images[n_train:], eval_labels=y_true[n_train:])
    stats = {"before": matrix_stats(before_blocks, threshold=cfg["threshold"], min_size=cfg["min_size"]),
             "after": matrix_stats(_block_tensors(model), threshold=cfg["threshold"], min_size=cfg["min_size"])}
    with torch.no_grad():
        patches = model.embed.patches(to_tensor(images[:min(n_train, 2048)])).reshape(-1, model.embed.proj.in_features).numpy()
    w_after = model.embed.proj.weight.detach().cpu().numpy()
    patches = patches[np.random.default_rng(arm_seed).permutation(len(patches))[:cfg["cov_patches"]]]
    cov = alignment_check(w_before, w_after, patches, top=cfg["cov_top"],
                          null_bases=cfg["cov_null_bases"], seed=arm_seed)

    probe_images, probe_labels, probe_classes = load_labelled(probe_data, n=cfg["n_probe"])
    feats = extract_features(model, probe_images)
    save_features(features, torch.from_numpy(feats),
                  {"model": name, "arm": spec, "pooling": "mean over tokens", "dataset": str(probe_data)})
    splits = split_indices(len(feats), seed=seed)
    probes = probe_features(feats, probe_labels, splits, cs=cfg["probe_cs"], layer=cfg["probe_layer"],
                            num_classes=probe_classes)
    out = {
        "name": name, "arm": spec, "config": cfg, "task": task, "num_classes": classes[task],
        "n_train": n_train, "n_eval": len(images) - n_train, "n_random": int(replaced.sum()),
        "trainable": {"names": trainable, "count": int(sum(p.numel() for p in model.parameters() if p.requires_grad))},
        "curves": curves, "probes": probes, "covariance": cov,
        "outliers": {k: {"summary": summarise(v), "matrices": v} for k, v in stats.items()},
        "cpu_seconds": time.process_time() - cpu0,
    }
    write_json(result, out)
    return out


def main(argv: list[str] | None = None) -> None:
    from prh.io import json_object

    p = argparse.ArgumentParser(prog="prh run-bridge-arm", description=__doc__.splitlines()[0])
    p.add_argument("--name", required=True, help="arm name (the folder under arms/)")
    p.add_argument("--arm", type=json_object, required=True, help="JSON {init, ratio, blocks, epochs, seed}")
    p.add_argument("--config", type=json_object, default="{}", help="JSON of the bridge block's shared settings")
    p.add_argument("--train-data", required=True, help="stage-1 dataset dir (shapes world or hub with labels.npy)")
    p.add_argument("--probe-data", required=True, help="stage-2 dataset dir (probes, alignment)")
    p.add_argument("--seed", type=int, default=0, help="master seed (the arm's seed is added)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present) | cpu | cuda")
    p.add_argument("--result", required=True, help="JSON written: curves, probes, outlier statistics")
    p.add_argument("--features", required=True, help="safetensors written: the stage-2 features (run-bridge-align)")
    args = vars(p.parse_args(argv))
    r = run_arm(**args)
    print(f"{r['name']}: mean probe accuracy {r['probes']['mean_accuracy']:.3f}, cpu {r['cpu_seconds']:.0f} s")
