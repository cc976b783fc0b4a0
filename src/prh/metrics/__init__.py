"""Alignment metrics (PRH appendix A and B), the all-layer-pairs engine, and spectral summaries.

    >>> from prh.metrics import measure, layer_pair_scores, prepare_features
    >>> measure("mutual_knn", feats_a, feats_b, topk=10)          # two N x D arrays
    >>> res = layer_pair_scores("mutual_knn", prepare_features(A), prepare_features(B))
    >>> res.scores, res.best_score, res.best_pair                  # La x Lb, float, (a, b)

Modules: ``knn`` (neighbour lists, k-NN metrics), ``kernel`` (CKA, unbiased CKA,
CKNNA, SVCCA), ``registry`` (per-layer states, ``measure``), ``engine`` (layer
pairs, model-set table, ``prh align``), ``files`` (states read from feature files one
layer at a time), ``calibration`` (permutation nulls), ``curves`` (Imani et al.
alignment curve, effective rank); torch-free, for the workflow's planning: ``names``
(the metric names) and ``memory`` (an alignment job's memory from file headers).
"""

import importlib

# Submodules load on first use (PEP 562), so ``from prh.metrics import SUPPORTED_METRICS``, which
# the workflow runs on every Snakemake start, does not import torch.
_HOME = {
    "best_pair": "calibration",
    "permutation_null": "calibration",
    "alignment_curve": "curves",
    "effective_rank": "curves",
    "LayerPairScores": "engine",
    "alignment_table": "engine",
    "layer_pair_scores": "engine",
    "SUPPORTED_METRICS": "names",
    "layer_states": "registry",
    "measure": "registry",
    "pair_scores": "registry",
    "prepare_features": "registry",
}

__all__ = [
    "SUPPORTED_METRICS",
    "LayerPairScores",
    "alignment_curve",
    "alignment_table",
    "best_pair",
    "effective_rank",
    "layer_pair_scores",
    "layer_states",
    "measure",
    "pair_scores",
    "permutation_null",
    "prepare_features",
]


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(f"prh.metrics.{_HOME[name]}"), name)
    try:  # a submodule (``prh.metrics.knn``) not imported yet
        return importlib.import_module(f"prh.metrics.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"prh.metrics.{name}":
            raise
    raise AttributeError(f"module 'prh.metrics' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
