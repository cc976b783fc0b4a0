"""Empirical NTK, its count sketch, NTK similarity (seed 000 eq. 2-3) and AGOP spectra (eq. 4).

A model's pooled feature φ(x) ∈ R^d is read out by R random unit directions,
f_r(x) = ⟨r, φ(x)⟩/√d, and the per-sample Jacobian J[i, r] = ∇_θ f_r(x_i) is taken
with ``torch.func`` (``vmap`` over items of one input shape, ``jacrev`` over the R
readouts). Then

* NTK (eq. 2), readout-averaged: Θ = (1/R) Σ_r J_r J_rᵀ  (N × N);
* eq. 3 literally: S(Θ_a, Θ_b) = tr(Θ_aᵀ Θ_b)/(‖Θ_a‖_F ‖Θ_b‖_F), in [0, 1] for PSD Θ;
* centred: the same on H Θ H (H = I − 11ᵀ/N), i.e. CKA of the two NTK Grams; the state
  is ``prh.metrics.kernel.centered_gram`` of a factor of Θ (the engine's CKA code);
* AGOP (eq. 4) over items and readouts, (1/(N R)) Σ_i Σ_r g_ir g_irᵀ: its nonzero
  eigenvalues are eig(K)/(N R) with K the (N R) × (N R) Gram of all g_ir (for R = 1,
  N · eig(AGOP) = eig(Θ)), so the P × P matrix is never formed.

A model with more than ``exact_max_params`` parameters is sketched: a count sketch
(Charikar et al. 2002) maps each gradient g ∈ R^P to C g ∈ R^m with C[h(p), p] = s(p),
h uniform on [m], s = ±1, so E⟨Cg, Cg'⟩ = ⟨g, g'⟩; ``sketch_error`` measures the
relative Frobenius error of the sketched Θ against the exact one on a few items.
"""

from __future__ import annotations

import math

import torch

from prh.metrics.kernel import centered_gram, gram_scores

__all__ = [
    "CountSketch",
    "random_readouts",
    "per_sample_jacobian",
    "jacobian_gram",
    "ntk_from_gram",
    "ntk_from_jacobian",
    "ntk_similarity",
    "ntk_states",
    "state_similarity",
    "agop_eigenvalues",
    "agop_summary",
    "sketch_error",
]


class CountSketch:
    """C ∈ {0, ±1}^{m × P}, one nonzero per column: ``apply(G)`` maps rows of G (· × P) to · × m."""

    def __init__(self, n_params: int, dim: int, *, seed: int = 0):
        if dim < 1 or n_params < 1:
            raise ValueError(f"dim={dim} and n_params={n_params} must be >= 1")
        gen = torch.Generator().manual_seed(seed)
        self.dim = int(dim)
        self.bucket = torch.randint(0, dim, (n_params,), generator=gen)
        self.sign = torch.randint(0, 2, (n_params,), generator=gen).float() * 2 - 1

    def apply(self, g: torch.Tensor) -> torch.Tensor:
        flat = g.reshape(-1, g.shape[-1])
        out = torch.zeros(flat.shape[0], self.dim, dtype=g.dtype)
        out.index_add_(1, self.bucket, flat * self.sign.to(g.dtype))
        return out.reshape(*g.shape[:-1], self.dim)


def random_readouts(dim: int, n: int, *, seed: int = 0) -> torch.Tensor:
    """n random unit directions r ∈ R^dim (rows), seeded."""
    if dim < 1 or n < 1:
        raise ValueError(f"dim={dim} and n_readouts={n} must be >= 1")
    r = torch.randn(n, dim, generator=torch.Generator().manual_seed(seed))
    return r / r.norm(dim=1, keepdim=True)


def _flat_jac(jac: dict, names: list[str], batch: int, n_out: int) -> torch.Tensor:
    return torch.cat([jac[k].reshape(batch, n_out, -1) for k in names], dim=2)


def per_sample_jacobian(feature_fn, params: dict, inputs, *, readouts: torch.Tensor, chunk: int = 16,
                        sketch: CountSketch | None = None, vectorize: bool = True) -> torch.Tensor:
    """J[i, r, :] = ∇_θ ⟨r, φ(x_i)⟩/√d, optionally count-sketched (N × R × P, or N × R × m).

    Parameters
    ----------
    feature_fn : (params dict, one input without batch axis) -> φ(x) of shape (d,).
    params : name -> tensor, the parameters differentiated (``dict(model.named_parameters())``).
    inputs : a tensor N × ... (one shape: vmapped in chunks) or a list of tensors (any
        shapes: equal shapes are vmapped together).
    readouts : R × d readout directions (``random_readouts``).
    chunk : items per vmapped call (bounds memory at chunk × R × P floats).
    sketch : a ``CountSketch`` over P = total parameter count, or None for the exact J.
    vectorize : False: one ``jacrev`` per item (for models whose forward vmap cannot trace).
    """
    from torch.func import jacrev, vmap

    if readouts.ndim != 2:
        raise ValueError(f"readouts must be R x d, got shape {tuple(readouts.shape)}")
    if chunk < 1:
        raise ValueError(f"chunk={chunk} must be >= 1")
    names = list(params)
    n_out, d = readouts.shape
    scale = 1.0 / math.sqrt(d)

    def f(p, x):
        return (readouts @ feature_fn(p, x)) * scale

    items = list(inputs) if not torch.is_tensor(inputs) else [inputs[i] for i in range(len(inputs))]
    groups: dict[tuple, list[int]] = {}
    for i, x in enumerate(items):
        groups.setdefault(tuple(x.shape), []).append(i)
    rows: list[torch.Tensor | None] = [None] * len(items)
    jf = vmap(jacrev(f), in_dims=(None, 0)) if vectorize else jacrev(f)
    for idx in groups.values():
        for s in range(0, len(idx), chunk):
            part = idx[s : s + chunk]
            if vectorize:
                g = _flat_jac(jf(params, torch.stack([items[i] for i in part])), names, len(part), n_out)
            else:
                g = torch.cat([_flat_jac(jf(params, items[i]), names, 1, n_out) for i in part])
            g = g.detach()
            if sketch is not None:
                g = sketch.apply(g)
            for k, i in enumerate(part):
                rows[i] = g[k]
    return torch.stack(rows)


def jacobian_gram(jac: torch.Tensor) -> torch.Tensor:
    """K = G Gᵀ (float64) for G = J reshaped to (N R) × P: the Gram of every per-item, per-readout gradient."""
    if jac.ndim != 3:
        raise ValueError(f"jac must be N x R x P, got shape {tuple(jac.shape)}")
    g = jac.reshape(jac.shape[0] * jac.shape[1], -1)
    return (g @ g.T).double()


def ntk_from_gram(gram: torch.Tensor, n_readouts: int) -> torch.Tensor:
    """Θ = (1/R) Σ_r J_r J_rᵀ: the mean of the R diagonal readout blocks of K ((N R) × (N R))."""
    n = gram.shape[0] // n_readouts
    return torch.einsum("irjr->ij", gram.reshape(n, n_readouts, n, n_readouts)) / n_readouts


def ntk_from_jacobian(jac: torch.Tensor) -> torch.Tensor:
    """Θ = (1/R) Σ_r J_r J_rᵀ from J of shape N × R × P (float64)."""
    return ntk_from_gram(jacobian_gram(jac), jac.shape[1])


def _centre(theta: torch.Tensor) -> torch.Tensor:
    return theta - theta.mean(0, keepdim=True) - theta.mean(1, keepdim=True) + theta.mean()


def ntk_similarity(theta_a, theta_b, *, centred: bool = False) -> float:
    """Eq. 3: tr(Θ_aᵀ Θ_b)/(‖Θ_a‖_F ‖Θ_b‖_F); ``centred`` applies it to H Θ H (CKA of the Grams)."""
    a, b = torch.as_tensor(theta_a, dtype=torch.float64), torch.as_tensor(theta_b, dtype=torch.float64)
    if a.ndim != 2 or a.shape != b.shape or a.shape[0] != a.shape[1]:
        raise ValueError(f"theta_a and theta_b must be square N x N of one shape, got {tuple(a.shape)}, {tuple(b.shape)}")
    if centred:
        a, b = _centre(a), _centre(b)
    den = torch.linalg.matrix_norm(a) * torch.linalg.matrix_norm(b)
    return float((a * b).sum() / den) if den > 0 else float("nan")


def ntk_states(theta: torch.Tensor) -> dict[str, torch.Tensor]:
    """Unit-norm states of one NTK: ``literal`` Θ/‖Θ‖_F and ``centred`` HΘH/‖HΘH‖_F.

    The centred state is the engine's CKA state (``prh.metrics.kernel.centered_gram``) of
    a factor F of Θ = F Fᵀ (F = U Λ^½ from its eigendecomposition), so S between two
    models is ``gram_scores`` of their states, as CKA is for features.
    """
    theta = torch.as_tensor(theta, dtype=torch.float64)
    ev, vec = torch.linalg.eigh(theta)
    factor = vec * ev.clamp_min(0).sqrt()
    return {"literal": theta / torch.linalg.matrix_norm(theta), "centred": centered_gram(factor)}


def state_similarity(state_a: torch.Tensor, state_b: torch.Tensor) -> float:
    """⟨G_a, G_b⟩_F of two unit-norm N × N states (``prh.metrics.kernel.gram_scores``)."""
    return float(gram_scores(state_a[None], state_b[None])[0, 0])


def agop_eigenvalues(gram: torch.Tensor, n_items: int) -> torch.Tensor:
    """Spectrum of AGOP = (1/(N R)) Σ_{i,r} g_ir g_irᵀ on its range, descending: eig(K)/(N R).

    ``gram`` is K from ``jacobian_gram`` ((N R) × (N R)); the P × P AGOP is never formed.
    """
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or gram.shape[0] % n_items:
        raise ValueError(f"gram must be (N R) x (N R) with N = n_items = {n_items}, got {tuple(gram.shape)}")
    return (torch.linalg.eigvalsh(gram.double()) / gram.shape[0]).flip(0).clamp_min(0)


def agop_summary(eigenvalues: torch.Tensor, *, k: int = 10) -> dict[str, float]:
    """λ₁, λ_k and the anisotropy λ₁/λ_k of an AGOP spectrum (descending)."""
    ev = torch.as_tensor(eigenvalues, dtype=torch.float64)
    if len(ev) < k:
        raise ValueError(f"k={k} exceeds the {len(ev)} eigenvalues; use k <= N*R")
    lam1, lamk = float(ev[0]), float(ev[k - 1])
    return {"lambda1": lam1, f"lambda{k}": lamk, "anisotropy": lam1 / lamk if lamk > 0 else float("inf"),
            "trace": float(ev.sum())}


def sketch_error(exact: torch.Tensor, sketched: torch.Tensor) -> float:
    """‖Θ̂ − Θ‖_F / ‖Θ‖_F between the sketched and exact NTK of the same items."""
    a, b = ntk_from_jacobian(exact.double()), ntk_from_jacobian(sketched.double())
    return float(torch.linalg.matrix_norm(b - a) / torch.linalg.matrix_norm(a))
