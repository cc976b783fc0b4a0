"""Spectral summaries of one representation: the alignment curve and effective rank.

* ``alignment_curve``: Imani, Hu, White, *Representation Alignment in Neural
  Networks* (TMLR), section 2 and eq. 2. With the thin SVD Φ = U Σ Vᵀ of the
  n × d representation (a constant feature appended, each row scaled to unit
  length so that singular values are not large merely because features are)::

      Alignment(Φ, y, τ) = Σ_{i : σ_i ≥ τ} (u_iᵀ y)²

  At τ = 0 the sum runs over *all* n left singular vectors, the ones with σ_i = 0
  included, so the curve starts at ‖y‖² (the part of y outside Φ's column space
  counts there, and only there).
* ``effective_rank``: Roy & Vetterli (2007), as in Huh's thesis, definition 2.3.1::

      ρ(A) = − Σ_i σ̄_i log σ̄_i,   σ̄_i = σ_i / Σ_j σ_j

  (natural log; ``exp=True`` gives e^ρ, which lies in [1, rank A]).

    >>> from prh.metrics import alignment_curve, effective_rank
    >>> curve = alignment_curve(phi, y, taus=np.linspace(0, 10, 51))
"""

from __future__ import annotations

import numpy as np

__all__ = ["alignment_curve", "effective_rank"]


def _as_float64(x, name: str) -> np.ndarray:
    if hasattr(x, "detach"):  # a torch tensor, possibly on a GPU
        x = x.detach().cpu().double().numpy()
    x = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} contains NaN or inf; clean the features before measuring")
    return x


def effective_rank(matrix_or_singular_values, exp: bool = False) -> float:
    """Effective rank (spectral entropy) of a matrix, Roy & Vetterli (2007).

    Parameters
    ----------
    matrix_or_singular_values : array (m × n) or 1-D array
        A matrix (its singular values are computed) or its singular values
        (non-negative; any order).
    exp : bool
        False (the thesis's convention): return ρ = −Σ σ̄ log σ̄ in nats, in
        [0, log rank]. True: return e^ρ, in [1, rank].

    Returns
    -------
    float
    """
    s = _as_float64(matrix_or_singular_values, "matrix_or_singular_values")
    if s.ndim == 2:
        s = np.linalg.svd(s, compute_uv=False)
    elif s.ndim != 1:
        raise ValueError(
            "matrix_or_singular_values must be a 2-D matrix or a 1-D vector of singular "
            f"values, got shape {s.shape}"
        )
    if np.any(s < 0):
        raise ValueError("singular values must be non-negative; pass the matrix itself instead")
    total = s.sum()
    if total <= 0:
        raise ValueError("effective rank is undefined for a zero matrix (all singular values 0)")
    p = s[s > 0] / total
    rho = float(-(p * np.log(p)).sum())
    return float(np.exp(rho)) if exp else rho


def alignment_curve(
    phi,
    y,
    taus,
    *,
    add_constant: bool = True,
    normalize_rows: bool = True,
) -> np.ndarray:
    """Imani et al.'s alignment curve: Alignment(Φ, y, τ) for each τ in ``taus`` (eq. 2).

    Parameters
    ----------
    phi : array n × d
        Representation matrix, one row per sample.
    y : array n or n × c
        Label vector (e.g. ±1). With c columns the squared projections are
        summed over columns (a multi-output target).
    taus : sequence of float ≥ 0
        Thresholds on the singular values of the prepared Φ.
    add_constant : bool
        Append a constant feature 1 (the paper replaces the bias unit by it).
    normalize_rows : bool
        Scale each row of [Φ, 1] to unit L2 norm (the paper's ‖x_i‖ ≤ 1).

    Returns
    -------
    np.ndarray, shape (len(taus),)
        Σ_{σ_i ≥ τ} (u_iᵀ y)². For τ = 0 this is ‖y‖² (all n singular
        directions, the zero ones included); for τ > 0 only directions in
        Φ's column space with σ_i ≥ τ count.
    """
    a = _as_float64(phi, "phi")
    t = _as_float64(y, "y")
    taus = _as_float64(taus, "taus").reshape(-1)
    if a.ndim != 2:
        raise ValueError(f"phi must be n x d, got shape {a.shape}")
    if t.ndim == 1:
        t = t[:, None]
    if t.ndim != 2 or t.shape[0] != a.shape[0]:
        raise ValueError(f"y must have one entry per row of phi ({a.shape[0]}), got shape {t.shape}")
    if np.any(taus < 0):
        raise ValueError("taus must be >= 0 (thresholds on singular values)")
    if add_constant:
        a = np.concatenate([a, np.ones((a.shape[0], 1))], axis=1)
    if normalize_rows:
        norms = np.linalg.norm(a, axis=1, keepdims=True)
        a = a / np.where(norms > 0, norms, 1.0)
    u, s, _ = np.linalg.svd(a, full_matrices=False)
    proj = ((u.T @ t) ** 2).sum(axis=1)  # (u_iᵀ y)² for the min(n, d) directions
    total = float((t**2).sum())
    # Only τ = 0 admits the σ = 0 directions (outside the column space): their
    # mass is ‖y‖² minus the mass inside, so we never form the full n × n U.
    curve = np.array([proj[s >= tau].sum() for tau in taus])
    curve[taus == 0] = total
    return curve
