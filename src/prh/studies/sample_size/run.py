"""Alignment against the number of items N: raw and calibrated scores, and the null, per N.

Over nested subsets of one dataset's items (``prh.metrics.sample_size.subsets``), for every model pair
(vision–vision, language–vision) and, offline, every model against the world's ground-truth kernel
(``prh.data.shapes.world_kernel``, an N × N matrix, so only up to ``kernel_max_n``): mutual k-NN and
CKNNA at k fixed and at k / N fixed, and linear CKA (kernel CKA against the world kernel), each with its
permutation null (mean and spread) and calibrated score (raw − null mean). Every model reads its last
layer, fixed in advance (the study's brief allows the best pair at small N or all layers; a pair chosen on the
subset's own items is a maximum the single-pair null does not correct, so neither is used).

The claims, fixed in ``params.yaml`` (``sample_size``) before any run computed them; unit: the model
pair (models as clusters), vision–vision and language–vision pairs, mutual k-NN at k fixed, the
smallest against the largest N of the grid:

* ``raw_falls``: raw alignment falls with N. Reproduced when every pair's raw score is lower at the
  largest N; not reproduced when none is; inconclusive when the pairs disagree.
* ``calibrated_flat``: calibrated alignment does not fall with N. A pair falls when its calibrated
  score drops by more than ``margin_sd`` null standard deviations (at the smallest N). Reproduced
  when no pair falls; not reproduced when every pair falls; inconclusive otherwise. Its value
  is the mean change of the Aristotelian calibrated score (``prh.metrics.calibration.aristotelian``, the
  authors' definition), which the weighed verdict reads; the registered rule's corrected score (raw
  minus the null mean) is ``corrected_change``.
* ``kernel_tracks_models``: model–kernel and model–model calibrated alignment move together: the
  mean change (largest N within ``kernel_max_n`` minus smallest) of the model–model pairs and of
  the model–kernel pairs. Reproduced when they have the same sign and both exceed their margins;
  not reproduced when their signs differ and both exceed them; inconclusive when either lies within
  its margin; not testable without a kernel or with one grid point under ``kernel_max_n``.

    prh run-sample-size --scenes results/data/shapes_sweep/scenes.jsonl --names a b c \\
        --features results/features/shapes_sweep/a.safetensors ... --language c \\
        --config '{...params.yaml sample_size...}' --seed 0 --sweep sweep.json --metrics metrics.json
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from prh.claims import verdict
from prh.io import add_path_options, named_paths, write_json
from prh.slices import add_slice, block_keys

__all__ = ["CONFIG", "OUTPUTS", "pairs_of", "claims", "run_sample_size", "main"]

# The params.yaml keys the sweep reads (its rule's one --config argument, prh.slices): the sample_size block but the
# keys the rule itself reads (which items and models), and offline the world's kernel
CONFIG = {"sample_size": tuple(k for k in block_keys("sample_size") if k not in ("dataset", "vision_models",
                                                                                  "language_models")),
          "world": ("kernel",)}

OUTPUTS = ("sweep", "metrics")
KERNEL = "world_kernel"


def pairs_of(vision: list[str], language: list[str], *, kernel: bool) -> list[tuple[str, str, str]]:
    """(group, a, b) of every pair: vision–vision, language–vision, then each model with the kernel."""
    out = [("vision-vision", a, b) for a, b in itertools.combinations(vision, 2)]
    out += [("language-vision", a, b) for a in language for b in vision]
    out += [("model-kernel", m, KERNEL) for m in [*vision, *language]] if kernel else []
    return out


def _change(cells: list[dict], group: set[str], *, ns: tuple[int, int]) -> dict[str, dict]:
    """Per pair of ``group``: mutual k-NN at k fixed at the two N of ``ns``: raw and calibrated change, null sd."""
    rows = {}
    for c in cells:
        if c["group"] in group and c["metric"] == "mutual_knn" and c["k_mode"] == "fixed" and c["n"] in ns:
            rows.setdefault(c["pair"], {})[c["n"]] = c
    out = {}
    for pair, by_n in rows.items():
        if set(ns) <= set(by_n):
            lo, hi = by_n[ns[0]], by_n[ns[1]]
            out[pair] = {"raw": hi["raw"] - lo["raw"], "calibrated": hi["calibrated"] - lo["calibrated"],
                         "aristotelian": hi["aristotelian"] - lo["aristotelian"], "null_std": lo["null_std"]}
    return out


def claims(cells: list[dict], *, grid: list[int], kernel_max_n: int | None, margin_sd: float) -> dict:
    """The three pre-registered claims (module docstring) from the sweep's cells."""
    models = {"vision-vision", "language-vision"}
    ch = _change(cells, models, ns=(grid[0], grid[-1]))
    n_models = len({m for p in ch for m in p.split(" / ")})
    out = {}
    if len(ch) < 2:
        none = {"verdict": verdict(None), "n": len(ch), "reason": "fewer than 2 model pairs"}
        out["raw_falls"], out["calibrated_flat"] = dict(none), dict(none)
    else:
        falls = [d["raw"] < 0 for d in ch.values()]
        out["raw_falls"] = {"value": float(np.mean([d["raw"] for d in ch.values()])), "n": len(ch), "n_models": n_models,
                            "fraction": float(np.mean(falls)),
                            "verdict": verdict(all(falls), conclusive=all(falls) or not any(falls))}
        drops = [d["calibrated"] < -margin_sd * d["null_std"] for d in ch.values()]
        # the value is the authors' calibrated score (their claim is judged on it); the registered rule
        # reads ours, raw minus the null mean, beside it as corrected_change
        out["calibrated_flat"] = {"value": float(np.mean([d["aristotelian"] for d in ch.values()])), "n": len(ch),
                                  "corrected_change": float(np.mean([d["calibrated"] for d in ch.values()])),
                                  "n_models": n_models, "fraction_falling": float(np.mean(drops)),
                                  "verdict": verdict(not any(drops), conclusive=not any(drops) or all(drops))}
    kernel_ns = [n for n in grid if kernel_max_n is not None and n <= kernel_max_n]
    mk = _change(cells, {"model-kernel"}, ns=(kernel_ns[0], kernel_ns[-1])) if len(kernel_ns) >= 2 else {}
    mm = _change(cells, models, ns=(kernel_ns[0], kernel_ns[-1])) if len(kernel_ns) >= 2 else {}
    if not mk or not mm:
        out["kernel_tracks_models"] = {"verdict": verdict(None), "n": len(mk),
                                       "reason": "no kernel, or fewer than 2 grid sizes within kernel_max_n"}
    else:
        d_mm, d_mk = (float(np.mean([d["calibrated"] for d in g.values()])) for g in (mm, mk))
        m_mm, m_mk = (margin_sd * float(np.mean([d["null_std"] for d in g.values()])) for g in (mm, mk))
        clear = abs(d_mm) > m_mm and abs(d_mk) > m_mk
        out["kernel_tracks_models"] = {"value": d_mk, "model_model_change": d_mm, "n": len(mk) + len(mm),
                                       "ns": [kernel_ns[0], kernel_ns[-1]],
                                       "verdict": verdict(np.sign(d_mm) == np.sign(d_mk), conclusive=clear)}
    return out


def run_sample_size(*, names: list[str], features: list[str], language: list[str], config: dict, out: dict,
                    scenes: str | None = None, seed: int = 0, device: str = "cpu") -> dict:
    """The sweep of every pair (module docstring); writes ``out``'s sweep and metrics JSON, returns the metrics.
    ``device``: where the neighbour searches run (``cpu``, ``cuda``, ``auto``); everything else runs on the CPU."""
    from prh.data.shapes import world_kernel
    from prh.device import resolve_device
    from prh.evaluation.probe_splits import load_probe_layers
    from prh.io import read_jsonl
    from prh.metrics.sample_size import KERNEL_METRICS, KNN_SWEEP_METRICS, cell, k_modes, kernel_cell, knn_states, subsets

    out = named_paths(out, OUTPUTS, command="run-sample-size")
    device = str(resolve_device(device))
    if len(names) != len(features) or not names:
        raise ValueError(f"names ({len(names)}) and features ({len(features)}) must be non-empty and pair up")
    if set(language) - set(names):
        raise ValueError(f"--language names {sorted(set(language) - set(names))}, which have no --features")
    c = config
    # every model reads its last layer, fixed in advance: a layer pair chosen on the subset items would be
    # a maximum the single-pair null does not correct (POST-HOC in params.yaml). Only that layer is read from
    # disk, cut to its real width d (zero padding of narrower stages dropped), as a probe reads it.
    last, feats = {}, {}
    for n, p in zip(names, features):
        x, last[n] = load_probe_layers(p, "last")
        feats[n] = x[:, 0]
    sizes = {n: len(x) for n, x in feats.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"the features hold different numbers of items: {sizes}; extract them from one dataset")
    width = {n: x.shape[1] for n, x in feats.items()}  # for the d/N floor
    n_total = next(iter(sizes.values()))
    world = [r["scene"] for r in read_jsonl(scenes, keys=("scene",))] if scenes else None
    if world is not None and len(world) != n_total:
        raise ValueError(f"{scenes} holds {len(world)} scenes, the features {n_total} items")
    grid = [n for n in c["grid"] if n <= n_total]
    if len(grid) < 2:
        raise ValueError(f"the grid {c['grid']} has fewer than 2 sizes within the {n_total} items; draw more items")
    if c["k_fixed"] >= grid[0]:
        raise ValueError(f"sample_size.k_fixed = {c['k_fixed']} must be below the grid's smallest N = {grid[0]}")
    parts = subsets(n_total, grid, seed=seed)
    vision = [n for n in names if n not in language]
    pairs = pairs_of(vision, list(language), kernel=world is not None)
    layers = {f"{a} / {b}": {"group": group, "a": a, "b": b, "layer_a": last[a], "width_a": width[a],
                             "layer_b": None if b == KERNEL else last[b], "width_b": None if b == KERNEL else width[b]}
              for group, a, b in pairs}
    knn_metrics = [m for m in c["metrics"] if m in KNN_SWEEP_METRICS]
    krules = dict(k_fixed=c["k_fixed"], k_fraction=c["k_fraction"], fraction_max_n=c.get("k_fraction_max_n"))
    model_pairs = [(label, lay) for label, lay in layers.items() if lay["b"] != KERNEL]
    cells = []
    last_use = {m: i for i, (_, lay) in enumerate(model_pairs) for m in (lay["a"], lay["b"])}  # a state's last pair
    for n in grid:  # one N at a time, so one N x N kernel is held at once
        idx = parts[n]
        sub = {m: x[idx] for m, x in feats.items()}
        kern = (world_kernel([world[i] for i in idx], **c["kernel"])
                if world is not None and n <= c["kernel_max_n"] else None)
        found = {}  # (pair, metric, k_mode) -> cell
        # the k-NN metrics, one k at a time: one neighbour search per model serves mutual k-NN and CKNNA, and a
        # model's state is dropped after its last pair (at N = 10^5 and k = N / 100 a CKNNA state is 1.7 GB)
        for mode, k in k_modes(knn_metrics[0], n, **krules) if knn_metrics else []:
            states = {}
            for i, (label, lay) in enumerate(model_pairs):
                for m in (lay["a"], lay["b"]):
                    if m not in states:
                        states[m] = knn_states(knn_metrics, sub[m], k=k, quantile=c["quantile"], device=device)
                for metric in knn_metrics:
                    found[label, metric, mode] = cell(
                        metric, sub[lay["a"]], sub[lay["b"]], k=k, quantile=c["quantile"], permutations=c["permutations"],
                        seed=seed, states=(states[lay["a"]][metric], states[lay["b"]][metric]))
                for m in (lay["a"], lay["b"]):
                    if last_use[m] == i:
                        states.pop(m, None)
        for label, lay in layers.items():  # every cell in the sweep's order; CKA and the kernel's cells here
            if lay["b"] == KERNEL and kern is None:
                continue
            for metric in c["metrics"]:
                if lay["b"] == KERNEL and metric not in KERNEL_METRICS:
                    continue
                for mode, k in k_modes(metric, n, **krules):
                    kw = dict(k=k, quantile=c["quantile"], permutations=c["permutations"], seed=seed)
                    if (label, metric, mode) not in found:
                        found[label, metric, mode] = (kernel_cell(metric, sub[lay["a"]], kern, **kw) if lay["b"] == KERNEL
                                                      else cell(metric, sub[lay["a"]], sub[lay["b"]], **kw))
                    cells.append({"group": lay["group"], "pair": label, "k_mode": mode, **found[label, metric, mode]})
        del kern, found
    found = claims(cells, grid=grid, kernel_max_n=c["kernel_max_n"] if world is not None else None,
                   margin_sd=c["margin_sd"])
    settings = {**c, "grid": grid, "n_items": n_total, "seed": seed, "layers": "last"}
    write_json(out["sweep"], {"settings": settings, "layers": layers, "cells": cells})
    metrics = {"settings": settings, "n_pairs": len(pairs), "claims": found}
    write_json(out["metrics"], metrics)
    return metrics


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh run-sample-size", description=__doc__.splitlines()[0])
    p.add_argument("--names", nargs="+", required=True, help="model names, in the order of --features")
    p.add_argument("--features", nargs="+", required=True, help="features of one dataset (N x L x D safetensors)")
    p.add_argument("--language", nargs="*", default=[], help="which of --names are language models")
    p.add_argument("--scenes", default=None, help="scenes.jsonl of that dataset (offline: adds the world kernel)")
    p.add_argument("--seed", type=int, default=0, help="seed of the subsets and the permutation nulls")
    p.add_argument("--device", default="cpu", help="where the neighbour searches run: cpu | cuda | auto")
    add_path_options(p, OUTPUTS, help="{name} JSON written")
    settings = add_slice(p, CONFIG, config_only=("metrics",))  # --metrics is the path of metrics.json
    a = p.parse_args(argv)
    config = settings(a)
    m = run_sample_size(names=a.names, features=a.features, language=a.language, out=vars(a),
                        config=dict(sorted({**config["sample_size"], "kernel": config["world"]["kernel"]}.items())),
                        scenes=a.scenes, seed=a.seed, device=a.device)
    print({k: v["verdict"] for k, v in m["claims"].items()})
