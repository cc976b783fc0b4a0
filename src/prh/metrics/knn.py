"""k-nearest-neighbour sets and the k-NN alignment metrics (PRH appendix A eq. 9-11, appendix B).

For one layer with L2-normalised features x_1..x_N, the neighbour list of item i
is the k items j ≠ i with the largest inner products ⟨x_i, x_j⟩, ordered by
decreasing similarity (eq. 9-10). They are found in row blocks (``block_rows_for``: 64 MiB on a CPU, a quarter of the free
memory on CUDA), so the similarity matrix is never held whole: memory is O(block × N), not
O(N²). ``knn(..., precision="bf16")`` finds the same lists from a bfloat16 product, exact by
a certificate per row (``prh.metrics.knn_fast``).

Given the ordered lists S_A(i) and S_B(i) of two layers, the metrics are::

    mutual_knn        = mean_i |S_A(i) ∩ S_B(i)| / k                       (eq. 11)
    cycle_knn         = mean_i 1[i ∈ ∪_{j ∈ S_B(i)} S_A(j)]                 (B: A ← B ← i)
    lcs_knn           = mean_i LCS(S_A(i), S_B(i)) / k
    edit_distance_knn = 1 − mean_i Levenshtein(S_A(i), S_B(i)) / k

``list_scores`` takes one layer of A (N × k) and a stack of layers of B (Lb × N × k)
and returns Lb scores of each metric asked for: the per-layer lists are computed
once, and a layer pair pays N k lookups in A's N × N table of list positions
(``position_table``, ``neighbour_positions``; k comparisons per item above
DENSE_MAX_ITEMS) plus, for LCS and edit distance, bit-parallel DPs of k word
operations per item (a k-bit row of the DP table in one integer) instead of k².
"""

from __future__ import annotations

import torch

from prh.errors import UsageError
from prh.metrics.knn_fast import BLOCK_ELEMENTS, block_rows_for, knn_fast, top_k_ordered

__all__ = [
    "BLOCK_ELEMENTS",
    "PRECISIONS",
    "block_rows_for",
    "knn",
    "top_k_ordered",
    "list_scores",
    "neighbour_lists",
    "pass_scores",
    "pass_plan",
    "b_blocks",
    "neighbour_positions",
    "position_table",
    "reciprocal_flags",
    "resolve_precision",
]

# Elements of a (block × N) similarity block (on a CPU; knn_fast.block_rows_for) or a
# (Lb × N × k × k) comparison tensor held at once: 2^24 float32 = 64 MiB.
# Up to this many items, an A layer's neighbour lists are also held as an N × N table of
# positions (int8: 64 MiB at the limit), so every B list is matched by N k lookups instead of
# N k² comparisons. Above it the comparisons run; the numbers are the same.
DENSE_MAX_ITEMS = 8192
# lcs_knn and edit_distance_knn keep a row of their DP table as bits of one int64
MAX_LIST_K = 62
# the metrics list_scores computes (prh.metrics.names: the entries scored by pass_scores)
LIST_METRICS = ("mutual_knn", "cycle_knn", "lcs_knn", "edit_distance_knn")
# knn's precisions: "fp32" searches in the dtype of x (float32 or float64); "bf16" and "tf32" take
# candidates from a lower-precision product and are exact by certificate (prh.metrics.knn_fast)
PRECISIONS = ("fp32", "bf16", "tf32")


def resolve_precision(precision: str, device) -> str:
    """``"auto"``: the certified bf16 path on CUDA (a GPU multiplies bf16 ~14x faster than fp32; the lists are the
    same), the fp32 search on a CPU (the recorded numbers rest on its order among exact ties); else ``precision``."""
    if precision == "auto":
        return "bf16" if torch.device(device).type == "cuda" else "fp32"
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be 'auto' or one of {PRECISIONS}, got {precision!r}")
    return precision


def knn(x: torch.Tensor, topk: int, *, block_rows: int | None = None,
        precision: str = "fp32", rows: tuple[int, int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k neighbours of every row of ``x`` by inner product, the row itself excluded.

    Parameters
    ----------
    x : tensor N × D
        Features of one layer (normalise them first for cosine similarity).
    topk : int
        Number of neighbours k, 1 ≤ k ≤ N − 1.
    block_rows : int, optional
        Rows of the similarity matrix computed at once; default ``block_rows_for``: about
        2^24 elements (64 MiB in float32) on a CPU, a quarter of the free memory on CUDA.
    precision : "fp32" (default), "bf16", "tf32" or "auto" (``resolve_precision``: bf16 on CUDA, else fp32)
        "fp32": the similarities in the dtype of ``x``. "bf16"/"tf32": candidates from a
        bfloat16/TF32 product, re-ranked in the dtype of ``x`` and certified, rows without a
        certificate searched again in full (``prh.metrics.knn_fast.knn_fast``, which also
        counts them): the same lists, faster where the hardware multiplies bf16 faster.
    rows : (start, stop), optional
        Search only these rows (against all N): the lists of rows start..stop-1 of the full
        search, computed by the same blocks when ``start`` is a multiple of ``block_rows`` (the
        row shards of ``prh.metrics.knn_shard``, so that a shard's lists equal the full search's,
        ties and last-bit similarities included). Returns (stop − start) × k.

    Returns
    -------
    (idx, sims) : (N × k int64, N × k float)
        Neighbour indices sorted by decreasing similarity, and the similarities ⟨x_i, x_idx⟩
        in the dtype of ``x``. Among exactly equal similarities "fp32" keeps torch.topk's order
        (implementation-defined; the recorded smoke numbers rest on it, dead units of the
        untrained zoo tie often); "bf16"/"tf32" follow ``top_k_ordered`` (increasing index), so
        the two paths can differ only at exact ties.
    """
    n = x.shape[0]
    if not 1 <= topk <= n - 1:
        raise UsageError(f"topk must be between 1 and N-1 = {n - 1} (the items the features hold), got {topk}")
    first, last = (0, n) if rows is None else rows
    if not 0 <= first < last <= n:
        raise ValueError(f"rows must be (start, stop) with 0 <= start < stop <= N = {n}, got {rows}")
    precision = resolve_precision(precision, x.device)
    if precision != "fp32":
        idx, sims, _ = knn_fast(x, topk, block_rows=block_rows, precision=precision, rows=rows)
        return idx, sims
    if block_rows is None:
        block_rows = block_rows_for(n, x.device)
    idx = torch.empty(last - first, topk, dtype=torch.long, device=x.device)
    sims = torch.empty(last - first, topk, dtype=x.dtype, device=x.device)
    for start in range(first, last, block_rows):
        stop = min(last, start + block_rows)
        block = x[start:stop] @ x.T
        diag = torch.arange(stop - start, device=x.device)
        block[diag, diag + start] = float("-inf")  # an item is not its own neighbour
        sims[start - first:stop - first], idx[start - first:stop - first] = torch.topk(block, topk, dim=1, sorted=True)
    return idx, sims


def b_blocks(lb: int, n: int, k: int, extra: int):
    """Slices of a stack of Lb B layers such that block × N × k × extra stays under BLOCK_ELEMENTS."""
    step = max(1, BLOCK_ELEMENTS // max(1, n * k * extra))
    for start in range(0, lb, step):
        yield slice(start, min(lb, start + step))


def position_table(idx_a: torch.Tensor) -> torch.Tensor | None:
    """table[i, j] = p if j is A's p-th neighbour of i, else -1 (N × N, int8 or int16); None when
    N > DENSE_MAX_ITEMS, where the comparisons of ``neighbour_positions`` take over."""
    n, k = idx_a.shape
    if n > DENSE_MAX_ITEMS:
        return None
    dtype = torch.int8 if k <= 127 else torch.int16
    table = torch.full((n, n), -1, dtype=dtype, device=idx_a.device)
    ranks = torch.arange(k, dtype=dtype, device=idx_a.device).expand(n, k)
    return table.scatter_(1, idx_a, ranks)


def neighbour_positions(idx_a: torch.Tensor, idx_b: torch.Tensor, table: torch.Tensor | None = None) -> torch.Tensor:
    """pos[l, i, q] = p where B's q-th neighbour of i is A's p-th (idx_b[l, i, q] == idx_a[i, p]), else -1.

    Everything the list metrics and cknna need of a pair of neighbour lists: mutual k-NN
    counts pos ≥ 0, LCS and edit distance read the order, cknna scatters B's kernel values
    onto A's slots. With the position table of A (``position_table``, N ≤ DENSE_MAX_ITEMS)
    it is N k lookups per B layer; without, a binary search of each B neighbour in A's sorted row (O(N k log k),
    not the k comparisons of N × k tensors it replaced: an hour a pair at N = 10^5, k = 1,000). All give the same
    numbers for lists of distinct items, as k-NN lists are. Returns Lb × N × k int32.
    """
    n, k = idx_a.shape
    if table is not None:  # table[i, idx_b[l, i, q]] as one flat lookup
        offsets = torch.arange(0, n * n, n, device=idx_a.device)[None, :, None]
        return torch.take(table, idx_b + offsets).int()
    row_sorted, slot = torch.sort(idx_a, dim=1)  # A's row i in increasing item order, and each item's slot p
    pos = torch.empty(idx_b.shape, dtype=torch.int32, device=idx_a.device)
    for layer in range(idx_b.shape[0]):
        at = torch.searchsorted(row_sorted, idx_b[layer]).clamp_(max=k - 1)
        found = torch.gather(row_sorted, 1, at) == idx_b[layer]
        pos[layer] = torch.where(found, torch.gather(slot, 1, at), -1)
    return pos


def _word(k: int) -> torch.dtype:
    """The integer type that holds a k-bit row of the bit-parallel DPs (and their carries)."""
    return torch.int32 if k <= 30 else torch.int64


def _lcs_lengths(masks: torch.Tensor, k: int) -> torch.Tensor:
    """LCS length of A's and B's lists from B's match masks (..., k): bit p of masks[..., q] is
    set when B's q-th element is A's p-th. Bit-parallel (Allison & Dix 1986; Hyyrö 2004): one
    k-bit row of the DP table per element of B, k word operations in all instead of k² cells."""
    v = torch.full(masks.shape[:-1], -1, dtype=masks.dtype, device=masks.device)
    for q in range(k):
        u = v & masks[..., q]
        v = (v + u) | (v - u)
    zeros = torch.zeros_like(v)
    for p in range(k):  # the LCS is the number of zero bits among the low k
        zeros += ((v >> p) & 1) ^ 1
    return zeros


def _edit_distances(masks: torch.Tensor, k: int) -> torch.Tensor:
    """Levenshtein distance of A's and B's lists (unit insert, delete, substitute) from B's match
    masks, by Myers' bit-vector algorithm in its global form (Myers 1999; Hyyrö 2001): the
    vertical deltas of a DP column as two k-bit words, B's elements as the text."""
    shape, dtype, top = masks.shape[:-1], masks.dtype, k - 1
    pv = torch.full(shape, (1 << k) - 1, dtype=dtype, device=masks.device)
    mv = torch.zeros(shape, dtype=dtype, device=masks.device)
    score = torch.full(shape, k, dtype=dtype, device=masks.device)  # D[k][0] = k
    for q in range(k):
        eq = masks[..., q]
        xv = eq | mv
        xh = (((eq & pv) + pv) ^ pv) | eq
        ph = mv | ~(xh | pv)
        mh = pv & xh
        score += ((ph >> top) & 1) - ((mh >> top) & 1)
        ph = (ph << 1) | 1  # row 0 of a global alignment grows by one per text element
        mh = mh << 1
        pv = mh | ~(xv | ph)
        mv = ph & xv
    return score


def list_scores(metrics, idx_a: torch.Tensor, idx_b: torch.Tensor, table=False, pos=None) -> dict[str, torch.Tensor]:
    """The k-NN metrics named in ``metrics`` of one A layer (N × k) against Lb B layers (Lb × N × k):
    {metric: Lb scores (float64)}.

    mutual_knn = mean_i |S_A(i) ∩ S_B(i)| / k, lcs_knn = mean_i LCS / k and
    edit_distance_knn = 1 − mean_i Levenshtein / k all read the same ``neighbour_positions``;
    cycle_knn (does i come back through A from one of its B-neighbours?) reads A's position
    table transposed, or gathers A's lists of B's neighbours when there is no table.
    ``table``: ``position_table(idx_a)`` when the caller has it (False: built here); ``pos``:
    ``neighbour_positions(idx_a, idx_b, table)`` likewise. Memory is a few Lb × N × k
    tensors (Lb × N × k² for cycle_knn without a table): callers hand in blocks of B layers
    (``registry.pair_score_set`` does).
    """
    unknown = set(metrics) - set(LIST_METRICS)
    if unknown:
        raise ValueError(f"list_scores computes {LIST_METRICS}, got {sorted(unknown)}")
    n, k = idx_a.shape
    lb = idx_b.shape[0]
    if k > MAX_LIST_K and {"lcs_knn", "edit_distance_knn"} & set(metrics):
        raise ValueError(f"lcs_knn and edit_distance_knn need topk <= {MAX_LIST_K} (one 64-bit word per list), got {k}")
    table = position_table(idx_a) if table is False else table
    out = {}
    if "cycle_knn" in metrics:
        me = torch.arange(n, device=idx_a.device)
        if table is not None:  # i is in A's list of its B-neighbour j: table[j, i] >= 0
            back = torch.take(table, idx_b * n + me[None, :, None]) >= 0
        else:
            back = (idx_a[idx_b] == me[None, :, None, None]).any(dim=3)
        out["cycle_knn"] = back.any(dim=2).double().mean(dim=1)
    if set(metrics) - {"cycle_knn"}:
        pos = neighbour_positions(idx_a, idx_b, table) if pos is None else pos
        found = pos >= 0
        if "mutual_knn" in metrics:
            out["mutual_knn"] = found.sum(dim=(1, 2)).double() / (n * k)
        if {"lcs_knn", "edit_distance_knn"} & set(metrics):
            word = _word(k)
            masks = torch.where(found, torch.ones((), dtype=word, device=pos.device) << pos.clamp(min=0).to(word), 0)
            if "lcs_knn" in metrics:
                out["lcs_knn"] = _lcs_lengths(masks, k).reshape(lb, n).double().mean(dim=1) / k
            if "edit_distance_knn" in metrics:
                out["edit_distance_knn"] = 1.0 - _edit_distances(masks, k).reshape(lb, n).double().mean(dim=1) / k
    return {m: out[m] for m in metrics}


def neighbour_lists(source: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """The state of a k-NN list metric (prh.metrics.names): the lists of the layer's search ``(idx, sims)``."""
    return source[0]


def pass_scores(metrics, idx_a: torch.Tensor, idx_b: torch.Tensor, *, layer: int, table=False, pos=None) -> dict:
    """``list_scores`` of A's layer ``layer`` (of L × N × k lists) against a block of B layers: the k-NN list
    metrics' part of the registry's neighbour pass (``registry.pair_score_set``)."""
    return list_scores(metrics, idx_a[layer], idx_b, table=table, pos=pos)


def pass_plan(metrics, k: int, table) -> tuple[int, bool]:
    """(extra, positions) of a neighbour pass over ``metrics`` for an A layer whose position table is ``table``:
    B layers go in blocks of ``b_blocks(..., extra)`` (cycle_knn without a table gathers N × k × k per B layer),
    and the neighbour positions are looked up when a metric other than cycle_knn reads them."""
    extra = 8 if table is not None or "cycle_knn" not in metrics else 2 * k
    return extra, bool(set(metrics) - {"cycle_knn"})


def reciprocal_flags(idx: torch.Tensor) -> torch.Tensor:
    """flag[i, p] = 1[i ∈ S(idx[i, p])]: is i also a neighbour of its p-th neighbour? (N × k bool)

    Every edge i → j is the key i N + j; the edges sorted, flag[i, p] asks whether the reverse key j N + i is
    among them (a binary search per slot, a block of rows at a time): O(N k) memory and O(N k log N k) time.
    (Gathering each neighbour's own list, ``idx[idx]``, held N × k × k: 22 GB at N = 3·10^4, k = 300.)"""
    n, k = idx.shape
    me = torch.arange(n, device=idx.device)
    keys = torch.sort((me[:, None] * n + idx).reshape(-1)).values
    flags = torch.empty(n, k, dtype=torch.bool, device=idx.device)
    rows = max(1, BLOCK_ELEMENTS // max(1, k))
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        rev = (idx[start:stop] * n + me[start:stop, None]).reshape(-1)
        at = torch.searchsorted(keys, rev).clamp_(max=len(keys) - 1)
        flags[start:stop] = (keys[at] == rev).view(stop - start, k)
    return flags
