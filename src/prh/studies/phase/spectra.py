"""Table 1 analogue from the per-layer features: compression and spectral decay (seed 000, RQ1).

Seed 000 reports per family a "compression" (+54 % CNN, +3.7 % ViT, −12 % BERT, −8 % GPT),
a layer-wise dimensionality change (ResNet-50: 23.3 → 309.4) and a "spectral decay"
(2.90 vision vs 1.28 language) without defining them. Our definitions (params.yaml):

* participation ratio of a layer's feature covariance, PR = (Σ λ_k)² / Σ λ_k²;
* compression = PR_last / PR_first − 1 (first = the first stored layer: embeddings for
  language models, the first block or stage for vision models);
* spectral decay α: slope of −log λ_k on log k, least squares over ranks 1..k_max of
  the last layer's covariance spectrum (a power law λ_k ∝ k^−α).
"""

from __future__ import annotations

import numpy as np

__all__ = ["covariance_spectrum", "participation_ratio", "power_law_exponent", "layer_summary"]


def covariance_spectrum(x) -> np.ndarray:
    """Eigenvalues (descending, ≥ 0) of the feature covariance of x (N × d)."""
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or len(x) < 2:
        raise ValueError(f"x must be N x d with N >= 2, got shape {x.shape}")
    xc = x - x.mean(0)
    s = np.linalg.svd(xc, compute_uv=False)
    return s**2 / (len(x) - 1)


def participation_ratio(eigenvalues) -> float:
    """(Σ λ)² / Σ λ² (NaN for an all-zero spectrum)."""
    ev = np.asarray(eigenvalues, dtype=np.float64)
    den = float(np.sum(ev**2))
    return float(np.sum(ev) ** 2 / den) if den > 0 else float("nan")


def power_law_exponent(eigenvalues, *, k_max: int = 50) -> float:
    """α of λ_k ∝ k^−α, fitted by least squares on log λ_k over k = 1..min(k_max, #positive)."""
    ev = np.asarray(eigenvalues, dtype=np.float64)
    ev = ev[ev > ev.max() * 1e-12] if ev.size and ev.max() > 0 else ev[:0]
    k = min(int(k_max), len(ev))
    if k < 3:
        return float("nan")
    ranks = np.arange(1, k + 1)
    slope = np.polyfit(np.log(ranks), np.log(ev[:k]), 1)[0]
    return float(-slope)


def layer_summary(feats, *, layer_dims=None, k_max: int = 50) -> dict[str, float]:
    """PR of the first and last layer, compression and α of the last layer, from N × L × D features."""
    feats = np.asarray(feats, dtype=np.float64)
    if feats.ndim != 3:
        raise ValueError(f"feats must be N x L x D, got shape {feats.shape}")
    dims = list(layer_dims) if layer_dims else [feats.shape[2]] * feats.shape[1]
    first = covariance_spectrum(feats[:, 0, : dims[0]])
    last = covariance_spectrum(feats[:, -1, : dims[-1]])
    pr_first, pr_last = participation_ratio(first), participation_ratio(last)
    return {"pr_first": pr_first, "pr_last": pr_last, "compression": pr_last / pr_first - 1,
            "spectral_decay": power_law_exponent(last, k_max=k_max)}
