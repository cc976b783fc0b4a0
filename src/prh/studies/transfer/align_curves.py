"""Alignment curves over independent runs, and the one-number summary used for claims.

The curve itself is ``prh.metrics.alignment_curve`` (Imani, Hu & White, eq. 2).
Here: the threshold grid, curves for a stack of runs, mean ± standard error, and
the normalised area under a curve,

    AUC(Φ, y) = (1 / τ_max) ∫_0^τ_max Alignment(Φ, y, τ) / ‖y‖² dτ  ∈ [0, 1],

which is larger when the label's energy sits on larger singular values ("the
green curve has higher alignment", section 4). With every row of the prepared Φ
of unit length, σ_1 ≤ ‖Φ‖_F = √n, so the grid [0, √n] covers every curve whole.
"""

from __future__ import annotations

import numpy as np

from prh.metrics import alignment_curve

__all__ = ["tau_grid", "run_curves", "auc", "mean_se"]


def tau_grid(*, n: int, num: int) -> np.ndarray:
    """``num`` thresholds evenly spaced on [0, √n] (σ_1 ≤ √n for n unit-length rows)."""
    if n < 1 or num < 2:
        raise ValueError(f"need n >= 1 and num >= 2 thresholds, got n={n}, num={num}")
    return np.linspace(0.0, np.sqrt(n), num)


def run_curves(reps, labels, taus) -> np.ndarray:
    """Alignment curve of every run: reps R × n × d, labels R × n -> R × len(taus)."""
    reps, labels = np.asarray(reps), np.asarray(labels)
    if reps.ndim != 3 or labels.shape != reps.shape[:2]:
        raise ValueError(f"reps must be R x n x d and labels R x n, got {reps.shape} and {labels.shape}")
    return np.stack([alignment_curve(r, y, taus) for r, y in zip(reps, labels)])


def auc(curves, labels, taus) -> np.ndarray:
    """Normalised area under each run's curve (module docstring): R × T curves -> (R,)."""
    curves = np.atleast_2d(np.asarray(curves, dtype=np.float64))
    totals = (np.atleast_2d(np.asarray(labels, dtype=np.float64)) ** 2).sum(axis=1)
    taus = np.asarray(taus, dtype=np.float64)
    return np.trapezoid(curves / totals[:, None], taus, axis=1) / taus[-1]


def mean_se(values) -> dict:
    """Mean and standard error over the first axis (runs), as lists for JSON."""
    v = np.asarray(values, dtype=np.float64)
    se = v.std(axis=0, ddof=1) / np.sqrt(v.shape[0]) if v.shape[0] > 1 else np.zeros(v.shape[1:])
    return {"mean": v.mean(axis=0).tolist(), "se": np.asarray(se).tolist()}
