"""Small statistics shared by the studies (bottom layer: numpy and scipy only)."""

from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

__all__ = ["depth_trend"]


def depth_trend(depths, values) -> dict:
    """Spearman ρ_s of ``values`` against ``depths`` (pooled pairs) with its two-sided p-value;
    non-finite values (e.g. diverged training runs) are left out."""
    depths, values = np.asarray(depths, float).ravel(), np.asarray(values, float).ravel()
    keep = np.isfinite(values)
    depths, values = depths[keep], values[keep]
    res = spearmanr(depths, values)
    return {"spearman_rho": float(res.statistic), "p_value": float(res.pvalue), "n": int(depths.size)}
