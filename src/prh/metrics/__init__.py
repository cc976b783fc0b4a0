"""Alignment metrics (PRH appendix A and B), the all-layer-pairs engine, and spectral summaries.

    >>> from prh.metrics import measure, layer_pair_scores, prepare_features
    >>> measure("mutual_knn", feats_a, feats_b, topk=10)          # two N x D arrays
    >>> res = layer_pair_scores("mutual_knn", prepare_features(A), prepare_features(B))
    >>> res.scores, res.best_score, res.best_pair                  # La x Lb, float, (a, b)

Modules: ``knn`` (neighbour lists, k-NN metrics), ``kernel`` (CKA, unbiased CKA,
CKNNA, SVCCA), ``registry`` (per-layer states, ``measure``), ``engine`` (layer
pairs, model-set table, ``prh align``), ``calibration`` (permutation nulls),
``curves`` (Imani et al. alignment curve, effective rank).
"""

from prh.metrics.calibration import best_pair, permutation_null
from prh.metrics.curves import alignment_curve, effective_rank
from prh.metrics.engine import LayerPairScores, alignment_table, layer_pair_scores
from prh.metrics.registry import (
    SUPPORTED_METRICS,
    layer_states,
    measure,
    pair_scores,
    prepare_features,
)

__all__ = [
    "SUPPORTED_METRICS",
    "measure",
    "prepare_features",
    "layer_states",
    "pair_scores",
    "layer_pair_scores",
    "LayerPairScores",
    "alignment_table",
    "permutation_null",
    "best_pair",
    "alignment_curve",
    "effective_rank",
]
