"""k-nearest-neighbour sets and the k-NN alignment metrics (PRH appendix A eq. 9-11, appendix B).

For one layer with L2-normalised features x_1..x_N, the neighbour list of item i
is the k items j ≠ i with the largest inner products ⟨x_i, x_j⟩, ordered by
decreasing similarity (eq. 9-10). They are found in row blocks, so the
similarity matrix is never held whole: memory is O(block × N), not O(N²).

Given the ordered lists S_A(i) and S_B(i) of two layers, the metrics are::

    mutual_knn        = mean_i |S_A(i) ∩ S_B(i)| / k                       (eq. 11)
    cycle_knn         = mean_i 1[i ∈ ∪_{j ∈ S_B(i)} S_A(j)]                 (B: A ← B ← i)
    lcs_knn           = mean_i LCS(S_A(i), S_B(i)) / k
    edit_distance_knn = 1 − mean_i Levenshtein(S_A(i), S_B(i)) / k

Every pair function takes one layer of A (N × k) and a stack of layers of B
(Lb × N × k) and returns Lb scores: the per-layer lists are computed once and
only these O(N k²) comparisons are paid per layer pair.
"""

from __future__ import annotations

import torch

__all__ = [
    "knn",
    "mutual_knn_scores",
    "cycle_knn_scores",
    "lcs_knn_scores",
    "edit_distance_knn_scores",
    "reciprocal_flags",
]

# Elements of a (block × N) similarity block or a (Lb × N × k × k) comparison
# tensor held at once: 2^24 float32 = 64 MiB.
BLOCK_ELEMENTS = 1 << 24


def knn(x: torch.Tensor, topk: int, *, block_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k neighbours of every row of ``x`` by inner product, the row itself excluded.

    Parameters
    ----------
    x : tensor N × D
        Features of one layer (normalise them first for cosine similarity).
    topk : int
        Number of neighbours k, 1 ≤ k ≤ N − 1.
    block_rows : int, optional
        Rows of the similarity matrix computed at once; default keeps a block
        at about 2^24 elements (64 MiB in float32).

    Returns
    -------
    (idx, sims) : (N × k int64, N × k float)
        Neighbour indices sorted by decreasing similarity, and the similarities
        ⟨x_i, x_idx⟩ in the dtype of ``x``.
    """
    n = x.shape[0]
    if not 1 <= topk <= n - 1:
        raise ValueError(f"topk must be between 1 and N-1 = {n - 1}, got {topk}")
    if block_rows is None:
        block_rows = max(1, BLOCK_ELEMENTS // n)
    idx = torch.empty(n, topk, dtype=torch.long, device=x.device)
    sims = torch.empty(n, topk, dtype=x.dtype, device=x.device)
    for start in range(0, n, block_rows):
        stop = min(n, start + block_rows)
        block = x[start:stop] @ x.T
        rows = torch.arange(stop - start, device=x.device)
        block[rows, rows + start] = float("-inf")  # an item is not its own neighbour
        sims[start:stop], idx[start:stop] = torch.topk(block, topk, dim=1, sorted=True)
    return idx, sims


def _b_chunks(idx_b: torch.Tensor, extra: int):
    """Yield slices of the B-layer stack so that Lb_chunk × N × k × extra stays bounded."""
    lb, n, k = idx_b.shape
    step = max(1, BLOCK_ELEMENTS // max(1, n * k * extra))
    for start in range(0, lb, step):
        yield slice(start, min(lb, start + step))


def _matches(idx_a: torch.Tensor, idx_b: torch.Tensor) -> torch.Tensor:
    """eq[l, i, p, q] = (idx_a[i, p] == idx_b[l, i, q]) for idx_a N × k, idx_b Lb × N × k."""
    return idx_a[None, :, :, None] == idx_b[:, :, None, :]


def mutual_knn_scores(idx_a: torch.Tensor, idx_b: torch.Tensor) -> torch.Tensor:
    """mean_i |S_A(i) ∩ S_B(i)| / k for one A layer (N × k) against Lb B layers (Lb × N × k)."""
    n, k = idx_a.shape
    out = []
    for sl in _b_chunks(idx_b, k):
        hits = _matches(idx_a, idx_b[sl]).sum(dim=(1, 2, 3))
        out.append(hits.double() / (n * k))
    return torch.cat(out)


def cycle_knn_scores(idx_a: torch.Tensor, idx_b: torch.Tensor) -> torch.Tensor:
    """mean_i 1[i ∈ S_A(j) for some j ∈ S_B(i)]: leave i through B, come back through A."""
    n, k = idx_a.shape
    me = torch.arange(n, device=idx_a.device)[None, :, None, None]
    out = []
    for sl in _b_chunks(idx_b, k):
        back = idx_a[idx_b[sl]]  # Lb × N × k × k: A-neighbours of i's B-neighbours
        out.append((back == me).any(dim=3).any(dim=2).double().mean(dim=1))
    return torch.cat(out)


def _lcs_lengths(eq: torch.Tensor) -> torch.Tensor:
    """Longest common subsequence of two length-k sequences from their match table eq (B × k × k)."""
    b, k, _ = eq.shape
    prev = torch.zeros(b, k + 1, dtype=torch.int32, device=eq.device)
    for i in range(k):
        cur = torch.zeros_like(prev)
        for j in range(k):
            cur[:, j + 1] = torch.where(
                eq[:, i, j], prev[:, j] + 1, torch.maximum(prev[:, j + 1], cur[:, j])
            )
        prev = cur
    return prev[:, k]


def _edit_distances(eq: torch.Tensor) -> torch.Tensor:
    """Levenshtein distance (unit insert/delete/substitute) between two length-k sequences."""
    b, k, _ = eq.shape
    cost = (~eq).to(torch.int32)
    prev = torch.arange(k + 1, dtype=torch.int32, device=eq.device).expand(b, k + 1).clone()
    for i in range(k):
        cur = torch.empty_like(prev)
        cur[:, 0] = i + 1
        for j in range(k):
            cur[:, j + 1] = torch.minimum(
                torch.minimum(prev[:, j + 1], cur[:, j]) + 1, prev[:, j] + cost[:, i, j]
            )
        prev = cur
    return prev[:, k]


def _list_scores(idx_a: torch.Tensor, idx_b: torch.Tensor, per_item) -> torch.Tensor:
    """For each B layer, mean over items of ``per_item(eq)`` (eq: the k x k match tables of the
    two ordered neighbour lists of each item, batched), in blocks of B layers."""
    n, k = idx_a.shape
    out = []
    for sl in _b_chunks(idx_b, k):
        eq = _matches(idx_a, idx_b[sl])
        lb = eq.shape[0]
        out.append(per_item(eq.reshape(lb * n, k, k)).reshape(lb, n).double().mean(dim=1))
    return torch.cat(out)


def lcs_knn_scores(idx_a: torch.Tensor, idx_b: torch.Tensor) -> torch.Tensor:
    """mean_i LCS(S_A(i), S_B(i)) / k on the similarity-ordered neighbour lists."""
    return _list_scores(idx_a, idx_b, _lcs_lengths) / idx_a.shape[1]


def edit_distance_knn_scores(idx_a: torch.Tensor, idx_b: torch.Tensor) -> torch.Tensor:
    """1 − mean_i Levenshtein(S_A(i), S_B(i)) / k (k is the largest possible distance)."""
    return 1.0 - _list_scores(idx_a, idx_b, _edit_distances) / idx_a.shape[1]


def reciprocal_flags(idx: torch.Tensor) -> torch.Tensor:
    """flag[i, p] = 1[i ∈ S(idx[i, p])]: is i also a neighbour of its p-th neighbour? (N × k bool)"""
    n = idx.shape[0]
    me = torch.arange(n, device=idx.device)[:, None, None]
    return (idx[idx] == me).any(dim=2)
