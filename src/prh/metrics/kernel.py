"""Kernel alignment metrics: CKA, unbiased CKA, CKNNA and SVCCA (PRH appendix A eq. 12-18, appendix B).

Each metric is split into a per-layer *state*, computed once per layer, and a
cheap per-pair score, so that all La × Lb layer pairs cost one pass over the
layers plus small products:

* ``cka``: K̄ = H K H with K = X Xᵀ (eq. 12), HSIC(K, L) = tr(K̄ L̄)/(n−1)²
  (eq. 13), CKA = HSIC(K, L)/√(HSIC(K, K) HSIC(L, L)) (eq. 14). State: K̄/‖K̄‖_F;
  pair: the Frobenius inner product.
* ``unbiased_cka``: the unbiased HSIC of Song et al. (2012, eq. 5)::

      HSIC₁(K, L) = [tr(K̃L̃) + 1ᵀK̃1·1ᵀL̃1/((n−1)(n−2)) − 2·1ᵀK̃L̃1/(n−2)] / (n(n−3))

  (K̃: K with zero diagonal). It equals ⟨U(K), U(L)⟩_F/(n(n−3)) with the
  U-centred matrix U(K)_ij = K̃_ij − r_i/(n−2) − r_j/(n−2) + s/((n−1)(n−2)) off
  the diagonal (r = row sums, s = total of K̃), so the state is U(K)/‖U(K)‖_F.
  Scores can be negative.
* ``cknna``: eq. 16-18 in the reference's unbiased form: M = α ∘ K, P = α ∘ L with
  α(i, j) = 1[j ∈ knn_K(i) ∧ j ∈ knn_L(i)] (the item excluded from its own
  neighbours), Align = HSIC₁(M, P), CKNNA = Align(K, L)/√(Align(K, K) Align(L, L)).
  α is sparse (≤ k entries per row), so HSIC₁ is computed from the neighbour
  lists, their kernel values and reciprocity flags: O(N k²) per pair, no N × N.
  Like the reference, it is slightly asymmetric: α is not a symmetric mask, so
  the 1ᵀMP1 term of HSIC₁(M, P) differs from 1ᵀPM1.
* ``svcca``: centre and scale each feature, keep the top ``cca_dim`` left
  singular vectors U (Raghu et al. 2017); the canonical correlations of
  U_A and U_B are the singular values of U_Aᵀ U_B (both orthonormal), and
  SVCCA is their mean. Exact and deterministic (the reference code uses a
  randomised SVD and iterative CCA, which approximate the same numbers).
"""

from __future__ import annotations

import torch

from prh.errors import UsageError
from prh.metrics.knn import neighbour_positions, position_table, reciprocal_flags

__all__ = [
    "centered_product",
    "centered_gram",
    "unit_gram",
    "ucentered_from_product",
    "gram_scores",
    "cknna_state_from_knn",
    "cknna_layer_state",
    "cknna_scores",
    "cknna_pass_scores",
    "svcca_state",
    "svcca_limits",
    "svcca_scores",
]


def _unit(g: torch.Tensor) -> torch.Tensor:
    """Scale a matrix to unit Frobenius norm; a zero matrix becomes NaN (alignment undefined)."""
    norm = torch.linalg.matrix_norm(g)
    return g / norm if norm > 0 else torch.full_like(g, float("nan"))


def centered_product(x: torch.Tensor) -> torch.Tensor:
    """H X Xᵀ H = (HX)(HX)ᵀ (N × N): centring the features first has less cancellation."""
    xc = x - x.mean(dim=0, keepdim=True)
    return xc @ xc.T


def centered_gram(x: torch.Tensor) -> torch.Tensor:
    """K̄ = H X Xᵀ H / ‖H X Xᵀ H‖_F (the CKA state of one layer, N × N)."""
    return unit_gram(centered_product(x))


def unit_gram(product: torch.Tensor) -> torch.Tensor:
    """The CKA state from the centred product ``centered_product(x)``."""
    return _unit(product)


def ucentered_from_product(k: torch.Tensor) -> torch.Tensor:
    """The unbiased-CKA state from the centred product (U(·) removes additive row/column terms, so
    centring is free); overwrites ``k``."""
    n = k.shape[0]
    if n < 4:
        raise ValueError(f"unbiased_cka needs at least 4 items (n(n-3) > 0), got N={n}")
    k = k.fill_diagonal_(0)
    r = k.sum(dim=1)
    u = k - r[:, None] / (n - 2) - r[None, :] / (n - 2) + r.sum() / ((n - 1) * (n - 2))
    return _unit(u.fill_diagonal_(0))


def gram_scores(grams_a: torch.Tensor, grams_b: torch.Tensor) -> torch.Tensor:
    """⟨G_a, G_b⟩_F for every pair of unit-norm Gram states (La × N × N, Lb × N × N) -> La × Lb."""
    la, lb = grams_a.shape[0], grams_b.shape[0]
    return (grams_a.reshape(la, -1) @ grams_b.reshape(lb, -1).T).double()


def _hsic1_sparse(n, m_vals, p_vals, cols, trace_term):
    """HSIC₁(M, P) for sparse M, P with entries on the k slots of each row.

    m_vals, p_vals : (..., N, k) values of M and P at slot (i, p) (0 off the support);
    cols : N × k column index of each slot; trace_term : Σ_ij M_ij P_ji.
    """
    sum_m = m_vals.sum(dim=(-1, -2))
    sum_p = p_vals.sum(dim=(-1, -2))
    col_m = torch.zeros(*m_vals.shape[:-2], n, dtype=m_vals.dtype, device=m_vals.device)
    col_m.scatter_add_(-1, cols.reshape(-1).expand(*m_vals.shape[:-2], -1), m_vals.flatten(-2))
    one_mp_one = (col_m * p_vals.sum(dim=-1)).sum(dim=-1)  # 1ᵀ M P 1 = Σ_j colsum(M)_j rowsum(P)_j
    return (trace_term + sum_m * sum_p / ((n - 1) * (n - 2)) - 2 * one_mp_one / (n - 2)) / (n * (n - 3))


def cknna_state_from_knn(idx: torch.Tensor, sims: torch.Tensor) -> dict:
    """The cknna state of one layer from its neighbour lists and similarities (``knn.knn``): the lists,
    kernel values, reciprocity flags and Align_knn(K, K)."""
    n = idx.shape[0]
    vals = sims.double()  # per-pair sums stay in float64: HSIC₁ has cancelling terms
    back = reciprocal_flags(idx)
    self_align = _hsic1_sparse(n, vals, vals, idx, (vals * vals * back).sum())
    return {"idx": idx, "vals": vals, "back": back, "self": self_align}


def cknna_layer_state(source: tuple[torch.Tensor, torch.Tensor]) -> dict:
    """The cknna state of one layer from its search ``(idx, sims)`` (prh.metrics.names' entry), which needs
    k >= 2 and N >= 4 (HSIC₁ divides by n(n−3))."""
    idx, sims = source
    n, k = idx.shape
    if k < 2 or n < 4:
        raise UsageError(f"cknna needs topk >= 2 and N >= 4, got topk={k}, N={n}")
    return cknna_state_from_knn(idx, sims)


def cknna_scores(a: dict, b: dict, *, layer: int, table=False, pos=None) -> torch.Tensor:
    """CKNNA of layer ``layer`` of state ``a`` against every layer of state ``b`` (Lb scores).

    Which of A's neighbours (i, j) are also B's, and B's kernel value and reciprocity there,
    come from ``knn.neighbour_positions`` (N k lookups in A's position table per B layer)
    scattered back onto A's k slots: O(N k) per layer pair. ``table`` (``knn.position_table``
    of A's lists; False: built here) and ``pos`` (the positions) when the caller has them.
    Memory is a few Lb × N × k tensors: callers hand in blocks of B layers.
    """
    idx_a, vals_a, back_a = a["idx"][layer], a["vals"][layer], a["back"][layer]
    n = idx_a.shape[0]
    if pos is None:
        pos = neighbour_positions(idx_a, b["idx"], position_table(idx_a) if table is False else table)
    found = pos >= 0  # B's slot q holds A's slot pos
    slot = pos.clamp(min=0).long()  # a miss adds 0 to slot 0: the sums below hold one term per hit
    l_vals = torch.zeros(found.shape, dtype=b["vals"].dtype, device=idx_a.device)
    l_vals.scatter_add_(2, slot, torch.where(found, b["vals"], 0))  # L_ij at A's slot, 0 if j ∉ S_B(i)
    hits = torch.zeros(found.shape, dtype=torch.int8, device=idx_a.device)
    in_b = hits.scatter_add(2, slot, found.to(torch.int8)) > 0
    back_b = hits.scatter_add_(2, slot, (found & b["back"]).to(torch.int8)) > 0
    m_vals = vals_a[None] * in_b
    trace = (m_vals * l_vals * (back_a[None] & back_b)).sum(dim=(1, 2))  # Σ_ij M_ij P_ji
    align = _hsic1_sparse(n, m_vals, l_vals, idx_a, trace)
    return align / torch.sqrt(a["self"][layer] * b["self"])


def cknna_pass_scores(metrics, a: dict, b: dict, *, layer: int, table=False, pos=None) -> dict:
    """``cknna_scores`` in the registry's neighbour pass (``registry.pair_score_set``): {"cknna": Lb scores}."""
    return {metric: cknna_scores(a, b, layer=layer, table=table, pos=pos) for metric in metrics}


def svcca_state(x: torch.Tensor, cca_dim: int) -> torch.Tensor:
    """Top ``cca_dim`` left singular vectors (N × cca_dim) of the standardised features."""
    n, d = x.shape
    if not 1 <= cca_dim <= min(n, d):
        raise ValueError(f"cca_dim must be between 1 and min(N, D) = {min(n, d)}, got {cca_dim}")
    z = x - x.mean(dim=0, keepdim=True)
    z = z / (z.std(dim=0, keepdim=True) + 1e-8)  # the reference's scaling, constant features stay 0
    if d > n:  # the N × N eigenproblem is the cheaper one
        evals, evecs = torch.linalg.eigh(z @ z.T)
        return evecs[:, -cca_dim:].flip(1)
    u, _, _ = torch.linalg.svd(z, full_matrices=False)
    return u[:, :cca_dim]


def svcca_limits(n: int, width: int, *, cca_dim: int) -> str | None:
    """What ``svcca_state`` refuses, from a features file's N and D before it is read."""
    if not 1 <= cca_dim <= min(n, width):
        return (f"svcca keeps cca_dim = {cca_dim} directions, more than its {n} items or {width} features give; "
                "lower alignment.cca_dim (--cca-dim)")
    return None


def svcca_scores(u_a: torch.Tensor, u_b: torch.Tensor) -> torch.Tensor:
    """Mean canonical correlation for every pair of states (La × N × c, Lb × N × c) -> La × Lb."""
    cross = torch.einsum("anc,bnd->abcd", u_a, u_b)
    return torch.linalg.svdvals(cross).clamp(max=1.0).mean(dim=-1).double()
