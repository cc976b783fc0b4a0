"""Fig 4.7: alignment between LTE heads (thesis section 4.3.2, appendix 8.5).

For heads i != j, averaged over pairs and over linear layers, on D_n = B_n A_n:

    |cos| = |<vec D_i, vec D_j>| / (||D_i|| ||D_j||)
    d_G(U_i, U_j) = (sum_{k <= r} theta_k^2)^(1/2),  cos theta_k = sigma_k(U_i^T U_j),

U_n the top-r left singular vectors of D_n (Grassmann distance; appendix 8.5 writes the
pair sum with a 1 / 2N factor, we report the plain mean over pairs). The four settings
cross same/different init of A with same/different minibatches per head.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

__all__ = ["SETTINGS", "grassmann", "head_alignment"]

# name -> (same_init, same_data)
SETTINGS = {"same init, same data": (True, True), "same init, diff data": (True, False),
            "diff init, same data": (False, True), "diff init, diff data": (False, False)}


def grassmann(u: torch.Tensor, v: torch.Tensor) -> float:
    """Grassmann distance between the column spans of orthonormal ``u`` and ``v`` (m x k)."""
    s = torch.linalg.svdvals(u.T @ v).clamp(-1.0, 1.0)
    return float(torch.arccos(s).pow(2).sum().sqrt())


def head_alignment(gathered: list[tuple[torch.Tensor, torch.Tensor]], *, rank: int) -> dict:
    """Mean pairwise |cos| and Grassmann distance between heads, over layers (``gathered``: per layer
    (B [N, m, r], A [N, r, n]), as the engine's ``track`` receives them)."""
    cos, dist = [], []
    for b, a in gathered:
        d = (b @ a).double()
        if len(d) < 2:
            raise ValueError("head_alignment needs at least 2 heads")
        if float(d.abs().max()) == 0.0:
            continue  # B = 0 (right after init): no direction yet
        flat = d.reshape(len(d), -1)
        unit = flat / flat.norm(dim=1, keepdim=True).clamp_min(1e-30)
        basis = [torch.linalg.svd(x, full_matrices=False)[0][:, :rank] for x in d]
        for i, j in itertools.combinations(range(len(d)), 2):
            cos.append(min(1.0, float((unit[i] @ unit[j]).abs())))  # rounding can pass 1 for equal heads
            dist.append(grassmann(basis[i], basis[j]))
    return {"abs_cos": float(np.mean(cos)) if cos else None, "grassmann": float(np.mean(dist)) if dist else None}
