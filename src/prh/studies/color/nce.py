"""Contrastive learners converge to the PMI kernel (PRH section 4.2, appendix F.1).

A discrete world with a known co-occurrence distribution: a lazy random walk on a
``grid`` x ``grid`` lattice that teleports to a uniform state with probability
``teleport`` (so every pair co-occurs). The defaults make the world smooth enough
that K_PMI + C is positive semi-definite for C >= ``psd_offset`` (appendix F.2),
so ⟨f, f⟩ can represent binary NCE's optimum once log(p_pos/(1-p_pos)) exceeds it. With stationary law π and transition P,
observations within ``window`` steps co-occur (section 4.2):

    P_coor(a, b) ∝ π_a δ_ab + Σ_{k=1..T} [π_a P^k_ab + π_b P^k_ba],     K_PMI = log P_coor / (P P)

An embedding table f (n_states x dim) is learned from sampled pairs with

- binary NCE (eq. 20), positives with prior p_pos: optimum ⟨f(a), f(b)⟩ = K_PMI + log(p_pos / (1 - p_pos)) (eq. 25);
- InfoNCE (eq. 26), K negatives, temperature τ: optimum ⟨f(a), f(b)⟩ = τ K_PMI + c (eq. 30).

Reported: Pearson correlation of ⟨f(a), f(b)⟩ with K_PMI over all pairs, the fitted
slope, and the offset mean(⟨f, f⟩ - K_PMI) (binary NCE: compare with log(p_pos/(1-p_pos))).

    >>> run_nce(grid=5, window=2, steps=3000, seed=0)
"""

from __future__ import annotations

import math

import numpy as np
import torch
from prh.errors import UsageError
from tqdm.auto import tqdm

__all__ = ["markov_world", "train_embeddings", "psd_offset", "run_nce"]


def markov_world(*, grid: int = 5, window: int = 3, stay: float = 0.8, teleport: float = 0.4) -> dict:
    """Co-occurrence law of the grid random walk and its PMI kernel.

    Returns dict with ``p_coor`` (n x n, sums to 1, symmetric), ``marginal`` (n) and ``pmi`` (n x n).
    """
    if grid < 2 or window < 1 or not 0 <= stay < 1 or not 0 < teleport <= 1:
        raise ValueError(f"need grid >= 2, window >= 1, 0 <= stay < 1, 0 < teleport <= 1; "
                         f"got grid={grid}, window={window}, stay={stay}, teleport={teleport}")
    n = grid * grid
    adj = np.zeros((n, n))
    for i in range(grid):
        for j in range(grid):
            for di, dj in ((0, 1), (1, 0)):
                if i + di < grid and j + dj < grid:
                    a, b = i * grid + j, (i + di) * grid + j + dj
                    adj[a, b] = adj[b, a] = 1.0
    walk = stay * np.eye(n) + (1 - stay) * adj / adj.sum(1, keepdims=True)
    trans = (1 - teleport) * walk + teleport / n
    evals, evecs = np.linalg.eig(trans.T)
    pi = np.real(evecs[:, np.argmin(np.abs(evals - 1))])
    pi = pi / pi.sum()
    joint, step = np.diag(pi), np.eye(n)
    for _ in range(window):
        step = step @ trans
        lag = pi[:, None] * step
        joint = joint + lag + lag.T
    joint /= joint.sum()
    marg = joint.sum(1)
    return {"p_coor": joint, "marginal": marg, "pmi": np.log(joint) - np.log(np.outer(marg, marg))}


def train_embeddings(p_coor: np.ndarray, *, loss: str, dim: int = 32, steps: int = 3000, batch_size: int = 512,
                     lr: float = 0.03, p_pos: float = 0.5, negatives: int = 16, temperature: float = 1.0,
                     seed: int = 0, progress: bool = False) -> np.ndarray:
    """Learn a table f (n x dim) from pairs sampled from ``p_coor``; return the kernel ⟨f(a), f(b)⟩ (n x n).

    ``loss="binary_nce"``: p_pos E_pos[-log σ(g)] + (1 - p_pos) E_neg[-log σ(-g)] (eq. 20);
    ``loss="infonce"``: E[-log e^{g+/τ} / (e^{g+/τ} + Σ_K e^{g-/τ})] (eq. 26).
    Positives (a, b) ~ P_coor; negatives pair a with b' ~ P (the marginal). Adam, seeded.
    """
    if loss not in ("binary_nce", "infonce"):
        raise ValueError(f"loss={loss!r}; choose 'binary_nce' or 'infonce'")
    if not 0 < p_pos < 1:
        raise UsageError(f"p_pos={p_pos} must be in (0, 1)")
    gen = torch.Generator().manual_seed(seed)
    joint = torch.as_tensor(p_coor, dtype=torch.float64).flatten()
    marg = torch.as_tensor(p_coor, dtype=torch.float64).sum(1)
    n = len(marg)
    f = torch.nn.Parameter(0.1 * torch.randn(n, dim, generator=gen))
    opt = torch.optim.Adam([f], lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    for _ in tqdm(range(steps), desc=f"{loss} steps", disable=not progress):
        pair = torch.multinomial(joint, batch_size, replacement=True, generator=gen)
        a, b = pair // n, pair % n
        pos = (f[a] * f[b]).sum(1)
        if loss == "binary_nce":
            na = torch.multinomial(marg, batch_size, replacement=True, generator=gen)
            nb = torch.multinomial(marg, batch_size, replacement=True, generator=gen)
            neg = (f[na] * f[nb]).sum(1)
            obj = (p_pos * torch.nn.functional.softplus(-pos).mean()
                   + (1 - p_pos) * torch.nn.functional.softplus(neg).mean())
        else:
            nb = torch.multinomial(marg, batch_size * negatives, replacement=True, generator=gen).view(batch_size, -1)
            neg = (f[a][:, None, :] * f[nb]).sum(-1)
            logits = torch.cat([pos[:, None], neg], dim=1) / temperature
            obj = -torch.log_softmax(logits, dim=1)[:, 0].mean()
        opt.zero_grad()
        obj.backward()
        opt.step()
        sched.step()
    with torch.no_grad():
        return (f @ f.T).double().numpy()


def psd_offset(kernel: np.ndarray) -> float:
    """Smallest constant C with kernel + C positive semi-definite (appendix F.2), by bisection; inf if none <= 100."""
    lo, hi = -100.0, 100.0
    if np.linalg.eigvalsh(kernel + hi).min() < -1e-9:
        return math.inf
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if np.linalg.eigvalsh(kernel + mid).min() >= -1e-9 else (mid, hi)
    return hi


def _fit(kernel: np.ndarray, pmi: np.ndarray) -> dict:
    x, y = pmi.ravel(), kernel.ravel()
    slope, intercept = np.polyfit(x, y, 1)
    off = ~np.eye(len(pmi), dtype=bool)  # without the diagonal, whose large PMI alone would make r high
    return {"pearson": float(np.corrcoef(x, y)[0, 1]),
            "pearson_offdiag": float(np.corrcoef(pmi[off], kernel[off])[0, 1]), "slope": float(slope), "intercept": float(intercept),
            "offset": float(np.mean(y - x)), "rmse_after_offset": float(np.sqrt(np.mean((y - x - np.mean(y - x)) ** 2)))}


def run_nce(*, grid: int = 5, window: int = 3, stay: float = 0.8, teleport: float = 0.4, dim: int = 32,
            steps: int = 3000, batch_size: int = 512, lr: float = 0.03, p_pos: float = 0.75, negatives: int = 16,
            temperature: float = 1.0, seed: int = 0, progress: bool = True) -> dict:
    """The section 4 check: both learners on one world; numbers and kernels for the figure (JSON-ready)."""
    world = markov_world(grid=grid, window=window, stay=stay, teleport=teleport)
    pmi = world["pmi"]
    out = {"settings": dict(grid=grid, window=window, stay=stay, teleport=teleport, dim=dim, steps=steps,
                            batch_size=batch_size, lr=lr, p_pos=p_pos, negatives=negatives,
                            temperature=temperature, seed=seed),
           "pmi": pmi.tolist(), "marginal": world["marginal"].tolist(),
           # Binary NCE's optimum is representable as <f, f> only if this is <= log(p_pos / (1 - p_pos)).
           "psd_offset": psd_offset(pmi),
           "learners": {}}
    for k, loss in enumerate(("binary_nce", "infonce")):
        kern = train_embeddings(world["p_coor"], loss=loss, dim=dim, steps=steps, batch_size=batch_size, lr=lr,
                                p_pos=p_pos, negatives=negatives, temperature=temperature, seed=seed + k,
                                progress=progress)
        out["learners"][loss] = {"kernel": kern.tolist(), **_fit(kern, pmi)}
    out["learners"]["binary_nce"]["expected_offset"] = math.log(p_pos / (1 - p_pos))
    out["learners"]["infonce"]["expected_slope"] = temperature
    return out
