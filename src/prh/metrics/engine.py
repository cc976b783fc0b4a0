"""The all-layer-pairs alignment engine and the model-set score table (PRH section 3, appendix A-B).

For two models, every layer of one is compared with every layer of the other
and the best score is kept with its layer pair. A model's neighbour lists and
centred Grams depend on that model alone, so they are computed once per layer
(``registry.layer_states``) and every layer pair pays only the cheap part: set
intersections for the k-NN metrics, one inner product for CKA.

For two *sets* of models, ``alignment_tables`` reads each model's features once,
computes its states once for every metric asked for, and writes one JSON per metric
(docs/metrics.md)::

    prh align --metric mutual_knn cka --topk 10 --quantile 0.95 \\
        --x-names gpt2 bloom --x-features f/gpt2.safetensors f/bloom.safetensors \\
        --y-names vit_s --y-features f/vit_s.safetensors \\
        --out results/alignment/wit_1024/mutual_knn/llm__lvm.json results/alignment/wit_1024/cka/llm__lvm.json
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from prh.device import resolve_device
from prh.errors import UsageError
from prh.io import write_json
from prh.metrics.calibration import best_pair, cell_seed, permutation_null
from prh.metrics.files import DTYPES, file_layer_states
from prh.metrics.knn import resolve_precision
from prh.metrics.names import metric_entry
from prh.metrics.registry import (
    as_tensor,
    check_metric,
    join_states,
    layer_slice,
    layer_states,
    layer_tensor,
    pair_score_set,
    pair_scores,
)

__all__ = ["LayerPairScores", "layer_pair_scores", "alignment_table", "alignment_tables", "main"]



@dataclass
class LayerPairScores:
    """Result of ``layer_pair_scores``.

    scores : La × Lb float64 array, scores[a, b] = metric(layer a of A, layer b of B)
    best_score : max over the matrix, NaN ignored (NaN if all are NaN)
    best_pair : (a, b) of the best score, or None
    calibration : ``calibration.permutation_null`` dict when permutations were asked for
    """

    scores: np.ndarray
    best_score: float
    best_pair: tuple[int, int] | None
    calibration: dict | None = None


def layer_pair_scores(
    metric: str,
    feats_a,
    feats_b,
    topk: int = 10,
    normalize: bool = True,
    *,
    cca_dim: int = 10,
    device: str = "cpu",
    dtype=torch.float32,
    block_rows: int | None = None,
    null_permutations: int = 0,
    seed: int = 0,
) -> LayerPairScores:
    """Score every layer of A against every layer of B and keep the best pair.

    Parameters
    ----------
    metric : one of SUPPORTED_METRICS
    feats_a, feats_b : tensor or array N × La × D and N × Lb × D' (same items, same order)
    topk : int
        k of the k-NN metrics and cknna.
    normalize : bool
        L2-normalise every item's vector within each layer first (clamp outliers
        beforehand with ``prepare_features``).
    cca_dim : int
        Singular directions kept by svcca.
    device, dtype : where and in what precision the states are computed
        (float32 accumulation by default; float64 for reference runs).
    block_rows : rows of the similarity matrix held at once in the k-NN search.
    null_permutations, seed : when > 0, add a permutation test of the best score
        (``calibration.permutation_null``).

    Returns
    -------
    LayerPairScores
    """
    check_metric(metric)
    device = str(resolve_device(device))
    a = as_tensor(feats_a, ndim=3, name="feats_a", dtype=dtype)
    b = as_tensor(feats_b, ndim=3, name="feats_b", dtype=dtype)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"feats_a and feats_b must have the same items N, got {a.shape[0]} and {b.shape[0]}")
    kw = dict(topk=topk, cca_dim=cca_dim, normalize=normalize, device=device, dtype=dtype, block_rows=block_rows)
    state_a, state_b = layer_states(metric, a, **kw), layer_states(metric, b, **kw)
    scores = pair_scores(metric, state_a, state_b).cpu().numpy()
    best, pair = best_pair(scores)
    calib = None
    if null_permutations > 0:
        calib = permutation_null(metric, state_a, state_b, permutations=null_permutations, seed=seed, observed=scores)
    return LayerPairScores(scores=scores, best_score=best, best_pair=pair, calibration=calib)


def _n_layers(state) -> int:
    return int(layer_tensor(state).shape[0])


def _layers(state, start: int, stop: int | None = None):
    """Layers ``start:stop`` of a layer-stacked state (views, no copy)."""
    return layer_slice(state, slice(start, stop))


def alignment_table(metric: str, *, out: str | None = None, **kwargs) -> dict:
    """The table of one metric: ``alignment_tables([metric], outs=[out], **kwargs)[metric]``
    (every argument as there)."""
    return alignment_tables([metric], outs=None if out is None else [out], **kwargs)[metric]


def alignment_tables(
    metrics,
    *,
    x_names: list[str],
    x_features: list[str],
    y_names: list[str] | None = None,
    y_features: list[str] | None = None,
    outs: list[str] | None = None,
    topk: int = 10,
    quantile: float = 0.95,
    cca_dim: int = 10,
    device: str = "cpu",
    dtype: str = "float32",
    block_rows: int | None = None,
    null_permutations: int = 0,
    null_metrics=None,
    seed: int = 0,
    layer_scores: bool = False,
    threads: int | None = None,
    n_items: int | None = None,
    skip_x_layers: int = 0,
    knn_precision: str = "fp32",
) -> dict:
    """Best-layer-pair alignment of every x model with every y model under each metric of
    ``metrics``, in one pass: one JSON per metric.

    Each model's features are clamped (``prepare_features(q=quantile)``), L2-normalised
    per layer and turned into per-layer states once for all metrics, streamed from its
    file one layer at a time (``file_layer_states``: memory is one N × D layer, not the
    N × L × D file; one neighbour search serves every k-NN metric and cknna, one centred
    product both CKAs). The y states are kept for the whole run (memory: the Σ over y models
    of L × N × k indices for k-NN metrics, L × N² floats for cka/unbiased_cka), the
    neighbour lists of all y models as one stack of layers; x models are streamed and each
    x layer is scored against every y layer at once (``registry.pair_score_set``: one
    position table per x layer serves every k-NN metric and cknna). When y is omitted or lists the same files as x, the set
    is scored against itself and each model is computed once. Every table equals the one
    its metric gives alone.

    Parameters
    ----------
    metrics : one or more of SUPPORTED_METRICS, distinct
    x_names, x_features : model names and their ``.safetensors`` feature files (rows)
    y_names, y_features : the same for the columns; default: the x set
    outs : JSON paths to write, one per metric (``results/alignment/<dataset>/<metric>/<xset>__<yset>.json``)
    topk, quantile, cca_dim : metric settings (k, outlier-clamp quantile, SVCCA dims)
    device : ``cpu``, ``cuda`` or ``auto``; dtype : ``float32`` or ``float64``
    knn_precision : the neighbour search's product (``knn.resolve_precision``): "auto" is the certified bf16 path on
        CUDA and fp32 on a CPU; the lists are the same but at exact ties. Recorded in ``settings`` unless fp32.
    null_permutations, seed : P > 0 adds a permutation test of every cell's best score
    null_metrics : the metrics that get the permutation test (default: all of ``metrics``)
    layer_scores : also store every model pair's La × Lb matrix
    threads : torch intra-op threads (left as is when None)
    n_items : use only the first ``n_items`` items of every feature file (a smaller
        batch, as PRH Fig 12's bsz); clamping and states see only those items, so the
        table equals one computed on truncated files; files may then differ in length
        (their first n_items rows must be the same items). None: all items, equal counts.
    skip_x_layers : leave out the first N layers of every x (row) model, e.g. N = 1 drops a
        language model's token-embedding layer (layer 0 of its feature file), so a bag of
        words cannot be the best pair. The best score, and every permutation null maximum,
        are then max over a >= N of score(x_a, y_b). Features are clamped with all layers
        (as for N = 0), so the kept layer pairs score exactly as in the N = 0 table;
        ``best_pairs`` keep the file's layer numbering (a >= N), ``x_layers`` count all
        layers, and ``layer_scores`` rows a < N are NaN. Recorded as
        ``settings.skip_x_layers`` when N > 0 (absent: 0, as tables written before it).

    Returns
    -------
    {metric: dict, the JSON written}: ``settings``, ``x_names``, ``y_names``, ``x_layers``,
    ``y_layers``, ``scores`` (len(x) × len(y)), ``best_pairs`` ([la, lb] per cell),
    optionally ``layer_scores`` ({"x__y": La × Lb}) and ``calibration`` (per-cell matrices
    ``p_value``, ``corrected``, ``null_max_mean``, ``null_max_std``, ``null_pair_mean``).
    """
    metrics = [metrics] if isinstance(metrics, str) else list(metrics)
    for metric in metrics:
        check_metric(metric)
    if not metrics or len(set(metrics)) != len(metrics):
        raise ValueError(f"metrics must be a non-empty list of distinct metrics, got {metrics}")
    null_metrics = list(metrics) if null_metrics is None else list(null_metrics)
    if set(null_metrics) - set(metrics):
        raise ValueError(f"null_metrics {sorted(set(null_metrics) - set(metrics))} are not among the metrics {metrics}")
    if outs is not None and len(outs) != len(metrics):
        raise ValueError(f"--out must name one JSON per metric: {len(metrics)} metrics, {len(outs)} outputs")
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    if int(skip_x_layers) != skip_x_layers or skip_x_layers < 0:
        raise UsageError(f"skip_x_layers must be an integer >= 0 (1 drops the embedding layer), got {skip_x_layers}")
    skip = int(skip_x_layers)
    if y_names is None and y_features is None:
        y_names, y_features = x_names, x_features
    for side, names, files in (("x", x_names, x_features), ("y", y_names, y_features)):
        if names is None or files is None or len(names) != len(files) or not names:
            raise UsageError(f"--{side}-names and --{side}-features must be non-empty lists of equal length")
    if threads is not None:
        from prh.device import set_threads

        set_threads(threads)
    device = str(resolve_device(device))
    knn_precision = resolve_precision(knn_precision, device)
    kw = dict(topk=topk, cca_dim=cca_dim, normalize=True, device=device, dtype=DTYPES[dtype], block_rows=block_rows,
              knn_precision=knn_precision)
    item_counts: dict[str, int] = {}

    def states_of(name: str, path: str) -> dict:
        # one layer of the file in memory at a time (file_layer_states), whatever its number of layers
        states, item_counts[name], _ = file_layer_states(metrics, path, quantile=quantile, n_items=n_items, **kw)
        if len(set(item_counts.values())) > 1:
            raise UsageError(f"all feature files must hold the same items; item counts per model: {item_counts} "
                             "(extract every model on the same dataset, or pass --n-items)")
        return states

    # The neighbour-list states of every y model as one stack of layers (each x layer's position
    # table then serves all y layers in one call); y_views[j] is model j's states, views into
    # that stack for the list metrics. Gram and SVCCA states stay per model (a matrix product
    # gains nothing from the stack, and N x N Grams are not worth a copy).
    stacked = [m for m in metrics if metric_entry(m).source == "neighbours"]
    y_paths = [os.path.realpath(path) for path in y_features]
    y_views = [states_of(name, path) for name, path in tqdm(list(zip(y_names, y_features)), desc="y models")]
    y_layers = [_n_layers(st[metrics[0]]) for st in y_views]
    y_all = join_states(stacked, y_views, stack=False)  # the k-NN metrics sharing one tensor, as per model
    offsets = np.concatenate([[0], np.cumsum(y_layers)])
    for j, view in enumerate(y_views):
        view.update({m: _layers(y_all[m], offsets[j], offsets[j + 1]) for m in stacked})

    shape = (len(x_names), len(y_names))
    scores = {m: np.full(shape, np.nan) for m in metrics}
    pairs = {m: [[None] * len(y_names) for _ in x_names] for m in metrics}
    # "aristotelian": the authors' calibrated score of the cell (Groeger, Wen & Brbic), its tau beside it
    calib = {m: {key: np.full(shape, np.nan) for key in ("p_value", "corrected", "null_max_mean", "null_max_std",
                                                           "null_pair_mean", "aristotelian", "aristotelian_tau")}
             for m in null_metrics}
    per_pair: dict = {m: {} for m in metrics}
    x_layers = []
    for i, (xname, xpath) in enumerate(tqdm(list(zip(x_names, x_features)), desc="x models")):
        real = os.path.realpath(xpath)
        sx = y_views[y_paths.index(real)] if real in y_paths else states_of(xname, xpath)
        x_layers.append(_n_layers(sx[metrics[0]]))
        if skip >= x_layers[-1]:
            raise ValueError(f"skip_x_layers={skip} leaves no layer of x model {xname!r} ({x_layers[-1]} layers)")
        sx = {m: _layers(sx[m], skip) for m in metrics}
        s_all = {m: s.cpu().numpy() for m, s in pair_score_set(stacked, sx, y_all).items()}
        for j, yname in enumerate(y_names):
            per_y = {m: s.cpu().numpy() for m, s in pair_score_set([m for m in metrics if m not in stacked], sx, y_views[j]).items()}
            for metric in metrics:
                s = per_y[metric] if metric in per_y else s_all[metric][:, offsets[j]:offsets[j + 1]]
                scores[metric][i, j], pair = best_pair(s)
                pairs[metric][i][j] = None if pair is None else (pair[0] + skip, pair[1])  # the file's layer numbering
                if layer_scores:
                    per_pair[metric][f"{xname}__{yname}"] = np.concatenate([np.full((skip, s.shape[1]), np.nan), s])
                if metric in null_metrics and null_permutations > 0:
                    null = permutation_null(metric, sx[metric], y_views[j][metric], permutations=null_permutations,
                                            seed=cell_seed(seed, i, j), observed=s)
                    flat = {**null, "aristotelian": null["aristotelian"]["calibrated"],
                            "aristotelian_tau": null["aristotelian"]["tau"]}
                    for key in calib[metric]:
                        calib[metric][key][i, j] = flat[key]
    results = {}
    for k, metric in enumerate(metrics):
        result = {
            "settings": {
                "metric": metric, "topk": topk, "quantile": quantile, "n": n_items or next(iter(item_counts.values())),
                "cca_dim": cca_dim, "normalize": True, "dtype": dtype,
                **({"knn_precision": knn_precision} if knn_precision != "fp32" else {}),
                **({"skip_x_layers": skip} if skip else {}),
            },
            "x_names": list(x_names),
            "y_names": list(y_names),
            "x_layers": x_layers,
            "y_layers": y_layers,
            "scores": scores[metric],
            "best_pairs": [[list(p) if p is not None else None for p in row] for row in pairs[metric]],
        }
        if layer_scores:
            result["layer_scores"] = per_pair[metric]
        if metric in null_metrics and null_permutations > 0:
            result["calibration"] = {"permutations": null_permutations, "seed": seed, **calib[metric]}
        if outs is not None:
            write_json(outs[k], result)
        results[metric] = result
    return results


def main(argv: list[str] | None = None) -> None:
    from prh.metrics.names import ALIGN_CONFIG
    from prh.slices import add_slice

    p = argparse.ArgumentParser(prog="prh align", description=alignment_tables.__doc__.split("\n")[0])
    p.add_argument("--metric", nargs="+", required=True,
                   help="one or more of SUPPORTED_METRICS (prh.metrics.names), in one pass")
    p.add_argument("--x-names", nargs="+", required=True, help="row model names")
    p.add_argument("--x-features", nargs="+", required=True, help="row feature files, same order")
    p.add_argument("--y-names", nargs="+", help="column model names (default: the x set)")
    p.add_argument("--y-features", nargs="+", help="column feature files (default: the x set)")
    p.add_argument("--out", nargs="+", required=True, help="output JSON path, one per --metric, same order")
    p.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    p.add_argument("--block-rows", type=int, default=None, help="rows per k-NN similarity block")
    p.add_argument("--null-permutations", type=int, default=0, help="P > 0: permutation p-values of each best score")
    p.add_argument("--null-metrics", nargs="+", default=None, help="metrics that get the permutation test (default: all)")
    p.add_argument("--seed", type=int, default=0, help="seeds the permutations")
    p.add_argument("--layer-scores", action="store_true", help="also store every La x Lb matrix")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: leave as is)")
    p.add_argument("--n-items", type=int, default=None, help="use only the first N items of every file (default: all)")
    p.add_argument("--skip-x-layers", type=int, default=0,
                   help="leave out the first N layers of every row model, in scores and null (1: an LM's embedding layer)")
    settings = add_slice(p, ALIGN_CONFIG)  # topk, quantile, cca_dim, dtype, knn_precision (auto: bf16 certified on CUDA)
    args = p.parse_args(argv)
    config = settings(args)["alignment"]
    if len(args.out) != len(args.metric):
        p.error(f"--out must name one JSON per --metric: {len(args.metric)} metrics, {len(args.out)} outputs")
    alignment_tables(
        args.metric, x_names=args.x_names, x_features=args.x_features, y_names=args.y_names,
        y_features=args.y_features, outs=args.out, **config, device=args.device, block_rows=args.block_rows,
        null_permutations=args.null_permutations, null_metrics=args.null_metrics, seed=args.seed,
        layer_scores=args.layer_scores, threads=args.threads, n_items=args.n_items, skip_x_layers=args.skip_x_layers)
