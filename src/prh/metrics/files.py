"""Alignment states straight from features files, one layer at a time.

``file_layer_states`` turns a ``.safetensors`` features file (N × L × D) into the per-layer
states of one or more metrics while holding one N × D layer, not the file; it serves
``engine.alignment_tables``. What that costs in memory is ``prh.metrics.memory.align_memory_mb``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from prh.errors import FeaturesError, UsageError
from prh.io import (
    features_layout,
    features_meta_path,
    read_features_layer,
    read_features_meta,
)
from prh.metrics.registry import (
    LIMITS,
    abs_quantile,
    as_tensor,
    join_states,
    layer_state_set,
    settings_of,
)
from prh.metrics.sanity import REMEDY, constant_layer, layer_problem

__all__ = ["DTYPES", "QUANTILE_CHUNK", "clamp_bound", "file_layer_states"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}
# elements of |x| histogrammed at once while the clamp quantile is found (2^22: 32 MiB as int64)
QUANTILE_CHUNK = 1 << 22


def _layout(path, n_items):
    """(layout, n, n_layers, width, dims, where) of a features file: its first ``n_items`` items, the meta's
    ``layer_dims`` (real entries, no zero padding) and how errors name it (file and model)."""
    layout = features_layout(path)
    n_all, n_layers, width = layout["shape"]
    if n_items is not None and not 1 <= n_items <= n_all:
        raise ValueError(f"n_items={n_items} must be between 1 and the {n_all} items of {path}")
    n = n_all if n_items is None else n_items
    meta_path = features_meta_path(path)
    meta = read_features_meta(path)
    dims = meta.get("layer_dims") or [width] * n_layers
    if len(dims) != n_layers or max(dims) > width:
        raise ValueError(f"layer_dims {list(dims)} in {meta_path} does not fit features of shape {layout['shape']}")
    return layout, n, n_layers, width, dims, f"{path} (model {meta.get('name') or meta.get('model') or Path(path).stem})"


def _checked_layer(path, layer, *, n, layout, dims, where):
    """One layer, NaN or inf rows refused before they reach the clamp quantile."""
    x = read_features_layer(path, layer, n_items=n, layout=layout)
    problem = layer_problem(x[:, :dims[layer]], normalize=False)
    if problem:
        raise FeaturesError(f"{where}, layer {layer}: {problem}; {REMEDY}")
    return x


def clamp_bound(path, *, quantile: float = 0.95, n_items: int | None = None) -> tuple:
    """``(c, n, n_layers, layout)`` of a features file: c, the ``quantile`` of |x| over its first ``n_items``
    items' real entries (``layer_dims`` of its meta excluding zero padding; None for ``quantile`` 1), streamed
    from disk one layer at a time, each checked for NaN and inf. ``file_layer_states`` and ``knn_shard`` clamp every
    layer to ±c."""
    layout, n, n_layers, width, dims, where = _layout(path, n_items)
    if not 0 < quantile <= 1:
        raise ValueError(f"q must be in (0, 1], got {quantile}")

    def chunks():
        rows = max(1, QUANTILE_CHUNK // width)
        for layer, d in enumerate(dims):
            x = _checked_layer(path, layer, n=n, layout=layout, dims=dims, where=where)
            yield from (x[i:i + rows, :d] for i in range(0, n, rows))

    return (abs_quantile(chunks, quantile) if quantile < 1 else None), n, n_layers, layout


def file_layer_states(metrics, path, *, quantile: float = 0.95, n_items: int | None = None, topk: int = 10,
                      cca_dim: int = 10, normalize: bool = True, device: str = "cpu", dtype=torch.float32,
                      block_rows: int | None = None, knn_precision: str = "fp32") -> tuple:
    """``{m: layer_states(m, prepare_features(feats[:n_items], q=quantile, layer_dims))}`` for the
    metrics ``metrics`` of a features file, read one layer at a time: memory is one N × D layer
    plus the states (L × N × k indices for the k-NN metrics), not the N × L × D file.

    The clamp c (the ``quantile`` of |x| over the file's real entries, ``layer_dims`` of its
    meta excluding zero padding) comes from ``abs_quantile`` over the layers streamed from
    disk (two reads of the file for float32), then each layer is read again, clamped to
    ±c, cast to ``dtype`` and turned into the states of every metric at once
    (``registry.layer_state_set``: one neighbour search, one centred product): the same
    elementwise operations as the in-memory path, so the states are identical. The
    k-NN metrics share one tensor of lists (``registry.join_states``). Returns ``(states, n_items, n_layers)``.
    """
    metrics = list(metrics)
    layout, n, n_layers, width, dims, where = _layout(path, n_items)
    for metric in metrics:  # what a metric cannot score on this file (its entry's limits), before it is read
        limits = LIMITS.get(metric)
        problem = limits and limits(n, width, **settings_of(metric, topk=topk, cca_dim=cca_dim))
        if problem:
            raise UsageError(f"{where}: {problem}")
    c, n, n_layers, layout = clamp_bound(path, quantile=quantile, n_items=n_items)
    per_layer, constant = [], 0
    for layer in range(n_layers):
        x = _checked_layer(path, layer, n=n, layout=layout, dims=dims, where=where)
        x = as_tensor(x if c is None else x.clamp(-c, c), ndim=2, name=str(path), dtype=dtype)
        constant += constant_layer(x[:, :dims[layer]])
        try:
            per_layer.append(layer_state_set(metrics, x, topk=topk, cca_dim=cca_dim, normalize=normalize,
                                             device=device, block_rows=block_rows, knn_precision=knn_precision))
        except FeaturesError as e:  # overflow in the working dtype, a failed SVD: named by file, model and layer
            raise FeaturesError(f"{where}, layer {layer}: {str(e).removeprefix('features unfit to score: ')}") from None
        del x
    if n_layers and constant == n_layers:
        raise FeaturesError(f"{where}: every layer is one constant vector for all {n} items (the model carries no "
                            f"information: it would score as chance); {REMEDY}")
    return join_states(metrics, per_layer, stack=True), n, n_layers  # the k-NN metrics' lists: one tensor
