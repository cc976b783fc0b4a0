"""Appendix A of seed 001 (after Maennel et al. 2020): first-layer weights align with the input covariance.

Claim: under random labels, the covariance of the first layer's weight vectors Σ_w
comes to share its eigenvectors with the input covariance Σ_x. For the patch embedding
(rows w_j ∈ R^d of W_e, j = 1..m; inputs = centred image patches x ∈ R^d):

    Σ_x = U_x Λ U_xᵀ,   Σ_w = (1/m) Σ_j w_j w_jᵀ,   M = U_rᵀ Σ_w U_r   (U_r: top r eigenvectors)
    off_diagonal_mass = ‖M - diag(M)‖²_F / ‖M‖²_F       (0 when aligned)

Restricting to the top r input directions keeps M well estimated from m rows (d = 3p² may
exceed m). The null: the same mass in ``null_bases`` random orthonormal r-frames Q
(Haar), which does not move when Σ_w aligns with U_x; an isotropic Σ_w gives the same
distribution in both bases.
"""

from __future__ import annotations

import numpy as np

__all__ = ["input_basis", "off_diagonal_mass", "alignment_check"]


def input_basis(patches: np.ndarray, *, top: int) -> np.ndarray:
    """d x top matrix of the leading eigenvectors of the covariance of ``patches`` (n x d)."""
    x = np.asarray(patches, dtype=np.float64)
    if x.ndim != 2 or not 1 <= top <= x.shape[1]:
        raise ValueError(f"patches must be n x d and top in 1..d, got {x.shape} and top={top}")
    x = x - x.mean(0)
    evals, evecs = np.linalg.eigh(x.T @ x / len(x))
    return evecs[:, ::-1][:, :top]


def off_diagonal_mass(weight: np.ndarray, basis: np.ndarray) -> float:
    """‖M - diag M‖²_F / ‖M‖²_F for M = Bᵀ Σ_w B, Σ_w = Wᵀ W / m (weight: m x d rows w_j, basis: d x r)."""
    w = np.asarray(weight, dtype=np.float64)
    if w.ndim != 2 or w.shape[1] != basis.shape[0]:
        raise ValueError(f"weight must be m x d with d = {basis.shape[0]} (the basis' rows), got {w.shape}")
    m = basis.T @ (w.T @ w / len(w)) @ basis
    total = float(np.sum(m**2))
    return float((total - np.sum(np.diag(m) ** 2)) / total) if total > 0 else float("nan")


def alignment_check(weight_before: np.ndarray, weight_after: np.ndarray, patches: np.ndarray, *, top: int = 32,
                    null_bases: int = 20, seed: int = 0) -> dict:
    """Off-diagonal mass in the input basis before / after training, of the update, and the random-basis null.

    Returns ``{"before", "after", "update", "null_after": [...], "null_q05", "aligned"}`` where
    ``aligned`` = after < before and after < the 5th percentile of the random-basis masses of
    the trained weights.
    """
    u = input_basis(patches, top=top)
    rng = np.random.default_rng(seed)
    d = u.shape[0]
    nulls = [off_diagonal_mass(weight_after, np.linalg.qr(rng.normal(size=(d, top)))[0]) for _ in range(null_bases)]
    before, after = off_diagonal_mass(weight_before, u), off_diagonal_mass(weight_after, u)
    q05 = float(np.quantile(nulls, 0.05)) if nulls else float("nan")
    return {"before": before, "after": after,
            "update": off_diagonal_mass(np.asarray(weight_after) - np.asarray(weight_before), u),
            "null_after": nulls, "null_q05": q05, "top": top,
            "aligned": bool(after < before and after < q05)}
