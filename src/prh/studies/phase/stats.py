"""Tests of the phase study: label-permutation nulls, partial correlations, threshold rules.

The unit that varies is the model, so every null permutes model labels, never pairs:

* ``modality_permutation``: a statistic of the model × model matrices under random
  reassignment of the vision / language labels (counts kept), e.g. mean within-modality
  minus mean cross-modal score;
* ``mantel_partial``: Spearman partial correlation over the cross pairs (V × L cells) of x
  and y given covariates (ranks residualised on the covariates by least squares); the null
  permutes the rows (vision models) and columns (language models) of y's residual matrix;
* ``rule_balanced_accuracy``: balanced accuracy of "predict failure when score > threshold";
  the null permutes rows and columns of the failure matrix.

p-values are (1 + #{null ≥ observed}) / (1 + n_permutations), two-sided on |statistic|
where the statistic has a sign.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata

__all__ = ["modality_permutation", "mantel_partial", "balanced_accuracy", "rule_balanced_accuracy",
           "model_label_test"]


def _p(null, obs, *, two_sided=True) -> float:
    null = np.asarray(null)
    if not np.isfinite(obs):
        return float("nan")
    hits = np.abs(null) >= abs(obs) - 1e-12 if two_sided else null >= obs - 1e-12
    return float((1 + np.sum(hits)) / (1 + len(null)))


def _within_minus_cross(m: np.ndarray, is_vision: np.ndarray) -> float:
    iu = np.triu_indices(len(m), 1)
    same = is_vision[iu[0]] == is_vision[iu[1]]
    vals = m[iu]
    return float(np.nanmean(vals[same]) - np.nanmean(vals[~same]))


def modality_permutation(matrix, is_vision, *, n_permutations: int = 1000, seed: int = 0) -> dict:
    """Mean within-modality minus mean cross-modal value of a symmetric model × model matrix, and its p."""
    m, lab = np.asarray(matrix, dtype=np.float64), np.asarray(is_vision, dtype=bool)
    if m.shape != (len(lab), len(lab)):
        raise ValueError(f"matrix must be M x M for M = len(is_vision) = {len(lab)}, got {m.shape}")
    obs = _within_minus_cross(m, lab)
    rng = np.random.default_rng(seed)
    null = np.array([_within_minus_cross(m, rng.permutation(lab)) for _ in range(n_permutations)])
    return {"statistic": obs, "p_value": _p(null, obs), "n_permutations": n_permutations}


def model_label_test(values, is_vision, *, n_permutations: int = 1000, seed: int = 0) -> dict:
    """Mean over vision models minus mean over language models of a per-model value, and its p."""
    v, lab = np.asarray(values, dtype=np.float64), np.asarray(is_vision, dtype=bool)
    ok = np.isfinite(v)
    v, lab = v[ok], lab[ok]
    obs = float(v[lab].mean() - v[~lab].mean())
    rng = np.random.default_rng(seed)
    null = []
    for _ in range(n_permutations):
        p = rng.permutation(lab)
        null.append(v[p].mean() - v[~p].mean())
    return {"statistic": obs, "p_value": _p(null, obs), "n_permutations": n_permutations}


def _residual_ranks(x: np.ndarray, covariates: list[np.ndarray]) -> np.ndarray:
    r = rankdata(x.ravel())
    if not covariates:
        return (r - r.mean()).reshape(x.shape)
    z = np.column_stack([np.ones(r.size)] + [rankdata(c.ravel()) for c in covariates])
    beta, *_ = np.linalg.lstsq(z, r, rcond=None)
    return (r - z @ beta).reshape(x.shape)


def _corr(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel(), b.ravel()
    den = np.sqrt(np.sum(a * a) * np.sum(b * b))
    return float(np.sum(a * b) / den) if den > 0 else float("nan")


def mantel_partial(x, y, covariates=(), *, n_permutations: int = 1000, seed: int = 0) -> dict:
    """Spearman partial correlation of two V × L matrices given covariate matrices, Mantel permutation p."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    covs = [np.asarray(c, dtype=np.float64) for c in covariates]
    if x.shape != y.shape or any(c.shape != x.shape for c in covs) or x.ndim != 2:
        raise ValueError("x, y and every covariate must be V x L matrices of one shape")
    rx, ry = _residual_ranks(x, covs), _residual_ranks(y, covs)
    obs = _corr(rx, ry)
    rng = np.random.default_rng(seed)
    null = [_corr(rx, ry[rng.permutation(x.shape[0])][:, rng.permutation(x.shape[1])])
            for _ in range(n_permutations)]
    return {"statistic": obs, "p_value": _p(null, obs), "n_permutations": n_permutations,
            "n_pairs": int(x.size), "covariates": len(covs)}


def balanced_accuracy(pred, truth) -> float:
    """Mean of sensitivity and specificity; NaN when ``truth`` has one class only."""
    pred, truth = np.asarray(pred, dtype=bool).ravel(), np.asarray(truth, dtype=bool).ravel()
    if truth.all() or not truth.any():
        return float("nan")
    return float((np.mean(pred[truth]) + np.mean(~pred[~truth])) / 2)


def rule_balanced_accuracy(score, failure, *, threshold: float, n_permutations: int = 1000, seed: int = 0) -> dict:
    """Rule "failure iff score > threshold" on V × L matrices: accuracy, balanced accuracy, its p, base rate."""
    score, failure = np.asarray(score, dtype=np.float64), np.asarray(failure, dtype=bool)
    if score.shape != failure.shape or score.ndim != 2:
        raise ValueError("score and failure must be V x L matrices of one shape")
    pred = score > threshold
    obs = balanced_accuracy(pred, failure)
    rng = np.random.default_rng(seed)
    null = [balanced_accuracy(pred, failure[rng.permutation(score.shape[0])][:, rng.permutation(score.shape[1])])
            for _ in range(n_permutations)] if np.isfinite(obs) else []
    return {"threshold": threshold, "accuracy": float(np.mean(pred == failure)), "balanced_accuracy": obs,
            "p_value": _p(null, obs, two_sided=False) if null else float("nan"),
            "predicted_failure_rate": float(pred.mean()), "failure_base_rate": float(failure.mean()),
            "n_permutations": n_permutations}
