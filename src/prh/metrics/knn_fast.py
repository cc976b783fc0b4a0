"""The block search behind ``knn.knn``, and exact k-NN lists from a low-precision product,
by certificate.

``block_rows_for`` sizes the row blocks (also of ``knn.knn``'s default path), ``top_k_ordered``
is this path's tie rule (decreasing value, then increasing index) and ``exact_rows`` one block
of the search in x's dtype under that rule.

``knn_fast(x, k, precision="bf16")`` returns the lists of the search in x's dtype (``exact_rows``
over every row; ``knn.knn(x, k)``'s "fp32" path gives the same lists except that among exactly
equal similarities it keeps torch.topk's order) while the N × N product runs in bfloat16 (or
TF32). Per row block:

1. ŝ = x̃_B x̃ᵀ with x̃ = round(x) to bf16 (tf32), float32 accumulation; ŝ_ii = −inf.
2. The c = k + margin (MARGIN_CPU, MARGIN_CUDA) largest ŝ of each row are its candidates;
   ŝ_out, the (c+1)-th largest, is the largest ŝ_ij of any non-candidate j.
3. The candidates are re-ranked by r_ij = ⟨x_i, x_j⟩ evaluated in the dtype of x (an
   elementwise product and sum, never TF32) and ordered by the tie rule; the first k are
   the row's list, v_k its k-th value.
4. Certificate: the list is the exact top k under r when

       v_k  >  up(ŝ_out) + E_i                                                       (★)

   because every non-candidate j then has r_ij ≤ up(ŝ_ij) + E_i ≤ up(ŝ_out) + E_i < v_k,
   so none can enter the list nor tie with its k-th entry (the inequality is strict, so
   the tie rule cannot pull a non-candidate in either). The candidates' side needs no
   error term: their r are computed, not bounded; hence one E, not two.
5. Rows failing (★) try again with RETRY_FACTOR × c candidates from the ŝ block in
   memory, up to RETRIES times; rows failing still are searched in full in the dtype of x
   (``exact_rows``, TF32 off) and counted as fallbacks (``KnnStats``).

The bound E_i (rigorous, from the actual rounding of each row). With ρ_i = ‖x_i − x̃_i‖
(x_i − x̃_i is exact in floating point), real dot products s = ⟨x_i, x_j⟩, t = ⟨x̃_i, x̃_j⟩:

    |s − t| = |⟨x_i − x̃_i, x_j⟩ + ⟨x̃_i, x_j − x̃_j⟩| ≤ ρ_i ‖x_j‖ + ‖x̃_i‖ ρ_j   (Cauchy–Schwarz)
    |t' − t| ≤ γ(D, U_ACC) ‖x̃_i‖ ‖x̃_j‖ + D·2^-125   t': the GEMM's float32 sum; bf16 and tf32
              products are exact in float32, any summation order, flushed subnormals
    |r − s| ≤ γ(D, ε) ‖x_i‖ ‖x_j‖                    ε = machine epsilon of x's dtype (2u)
    γ(D, u) = D u / (1 − D u)

so for any j, r_ij ≤ t'_ij + E_i with the maxima over all j of ‖x_j‖, ‖x̃_j‖, ρ_j:

    E_i = ρ_i max‖x_j‖ + ‖x̃_i‖ max ρ_j + γ(D, U_ACC) ‖x̃_i‖ max‖x̃_j‖
          + γ(D, ε) ‖x_i‖ max‖x_j‖ + D·2^-125

computed in float64 (norms rounded up by a factor 1 + 1e-9). When the GEMM writes bf16
(the CPU; ŝ = bf16(t')), t' ≤ up(ŝ) = ŝ + u_out |ŝ| / (1 − u_out), u_out = 2^-8, monotone
in ŝ; on CUDA it writes float32 (``torch.mm(..., out_dtype=float32)``), u_out = 0 and
up(ŝ) = ŝ. U_ACC = 2^-22, four times float32's unit roundoff, covers accumulators that
truncate (tensor cores, AMX; the CPU's bf16 GEMM accumulates in float32 with or without them).
For unit rows in bf16, ρ ≤ 2^-8 and in practice ≈ 1.7e-3 at D = 768 (tf32: 2.1e-4), so
E_i ≈ 3.8e-3 (tf32: ≈ 7e-4): the k-th neighbour must beat the (c+1)-th candidate's ŝ by that.

"Exact" means equal to the search in x's dtype with the values r. ``knn``'s "fp32" path
computes them by a GEMM, whose rounding differs from r's by ≤ 2 γ(D, ε) ‖x_i‖ ‖x_j‖ (1.8e-4
at D = 768; ≈ 1e-7, rarely 1e-6, in practice), so two neighbours closer than that may swap
between the two paths, as they may between two block sizes or devices of one GEMM; where
they did (N = 3·10^4, clustered), this path's lists agreed with a float64 search 39 times of
44, the GEMM's 12. Exactly equal vectors give exactly equal values in both, so they follow
the tie rule.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

__all__ = [
    "BLOCK_ELEMENTS",
    "KnnStats",
    "block_rows_for",
    "certificate_bound",
    "exact_rows",
    "knn_fast",
    "low_product",
    "round_low",
    "top_k_ordered",
]

# Elements of a (block × N) similarity block held at once on a CPU: 2^24 float32 = 64 MiB.
BLOCK_ELEMENTS = 1 << 24
# On CUDA a block of the search may take this fraction of the free device memory, counting
# CUDA_BYTES_PER_ELEMENT bytes per similarity: the float32 row plus as much again for torch.topk
CUDA_MEMORY_FRACTION = 0.25
CUDA_BYTES_PER_ELEMENT = 8
# On a CPU a block has at least CPU_MIN_ROWS rows where CPU_MEMORY_FRACTION of the available RAM holds them: at
# large N the 64 MiB rule gives few rows (16 at N = 10^6), and every block streams all N x D features again
CPU_MIN_ROWS = 512
CPU_MEMORY_FRACTION = 0.25

# extra candidates per row, c = k + margin: on a CPU each costs a gathered row of D in the re-rank;
# on CUDA that is nearly free and a retry (another torch.topk over N) is not
MARGIN_CPU, MARGIN_CUDA = 24, 54
RETRY_FACTOR = 2       # rows without a certificate try again with RETRY_FACTOR times the candidates,
RETRIES = 4            # up to RETRIES times (c = 34, 68, ... 544 at k = 10 on a CPU), then the full search
U_ACC = 2.0 ** -22     # unit roundoff allowed for the low-precision GEMM's float32 accumulation
RERANK_ELEMENTS = 1 << 24  # gathered candidate features (rows × c × D) held at once
NORM_SLACK = 1 + 1e-9  # float64 norms of float32 vectors, rounded up


def block_rows_for(n: int, device="cpu", *, free_bytes: int | None = None) -> int:
    """Rows of the N-wide similarity matrix one block of ``knn`` holds.

    CPU: BLOCK_ELEMENTS // N (64 MiB of float32), as before: blocks of 1-2k rows measured no
    faster here (one thread, N = 3·10^4 and 10^5, within ±10 %); above N = 32,768, where that is fewer
    than CPU_MIN_ROWS rows, up to CPU_MIN_ROWS as CPU_MEMORY_FRACTION of the available RAM allows (at
    N = 10^6, 512 rows of 8 bytes: 4 GB), so each pass over the N x D features serves more rows. CUDA: CUDA_MEMORY_FRACTION of
    the free device memory (``torch.cuda.mem_get_info``, or ``free_bytes``) at
    CUDA_BYTES_PER_ELEMENT bytes per similarity, never fewer rows than on a CPU: about 4,000
    rows at N = 10^6 on an idle 141 GB card, where the CPU rule gives 16. Always 1 ≤ rows ≤ N.
    """
    cpu_rows = max(1, BLOCK_ELEMENTS // max(1, n))
    device = torch.device(device)
    if device.type == "cuda" or free_bytes is not None:
        if free_bytes is None:
            free_bytes = torch.cuda.mem_get_info(device)[0]
        rows = int(free_bytes * CUDA_MEMORY_FRACTION) // (CUDA_BYTES_PER_ELEMENT * max(1, n))
        return max(1, min(n, max(rows, cpu_rows)))
    if cpu_rows < CPU_MIN_ROWS:  # large N: as many rows as a share of the free RAM holds, up to CPU_MIN_ROWS
        ram_rows = int(available_ram() * CPU_MEMORY_FRACTION) // (CUDA_BYTES_PER_ELEMENT * max(1, n))
        cpu_rows = max(cpu_rows, min(CPU_MIN_ROWS, ram_rows))
    return min(max(1, n), cpu_rows)


def available_ram() -> int:
    """Bytes of RAM free for new allocations (Linux ``SC_AVPHYS_PAGES``; elsewhere 0: the 64 MiB rule alone)."""
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def top_k_ordered(block: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``topk`` largest entries of each row of ``block`` (B × N) as (values, columns),
    ordered by decreasing value and, among exactly equal values, increasing column.

    That is the tie rule of ``knn``: torch.topk leaves the order of equal values open (and
    which of them is kept at the k-th place); here the k-th place goes to the smallest
    columns among those equal to the k-th value, and equal values in a list are listed by
    increasing column. Values that differ are untouched. −0.0 and +0.0 are equal.
    """
    n = block.shape[1]
    k1 = min(topk + 1, n)
    vals, idx = torch.topk(block, k1, dim=1, sorted=True)
    if k1 > topk:  # is the k-th value shared with a column outside the list? (rare: duplicates)
        tied = torch.nonzero(vals[:, topk - 1] == vals[:, topk]).flatten().tolist()
        for r in tied:
            v = vals[r, topk - 1].clone()
            above = int((vals[r, :topk] > v).sum())
            equal = torch.nonzero(block[r] == v).flatten()[: topk - above]
            idx[r, above:topk] = equal
            vals[r, above:topk] = v
    vals, idx = vals[:, :topk] + 0.0, idx[:, :topk]  # + 0.0: -0.0 becomes +0.0
    by_col = idx.argsort(dim=1)
    vals, idx = vals.gather(1, by_col), idx.gather(1, by_col)
    vals, order = torch.sort(vals, dim=1, descending=True, stable=True)
    return vals, idx.gather(1, order)


def exact_rows(x: torch.Tensor, rows: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sims, idx) of the rows ``rows`` of ``x`` against all of ``x`` in the dtype of ``x``,
    self excluded, by the tie rule of ``top_k_ordered``: one block of ``knn``."""
    block = x[rows] @ x.T
    block[torch.arange(len(rows), device=x.device), rows] = float("-inf")  # an item is not its own neighbour
    return top_k_ordered(block, topk)


@dataclass
class KnnStats:
    """What ``knn_fast`` did: rows searched, rows that failed the first certificate (``retried``
    with more candidates), rows searched again in full (``fallback``), the first candidates per
    row, the rows per block."""

    rows: int
    retried: int
    fallback: int
    candidates: int
    block_rows: int
    precision: str

    @property
    def fallback_fraction(self) -> float:
        return self.fallback / max(1, self.rows)


def _gamma(d: int, u: float) -> float:
    return d * u / (1 - d * u)


def round_low(x: torch.Tensor, precision: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(operand of the low-precision GEMM, x̃: its exact values in x's dtype)."""
    if precision == "bf16":
        low = x.to(torch.bfloat16)
        return low, low.to(x.dtype)
    if precision == "tf32":  # round to nearest even at 10 fraction bits, kept in float32
        bits = x.float().view(torch.int32)
        bits = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
        low = bits.view(torch.float32)
        return low, low.to(x.dtype)
    raise ValueError(f"precision must be 'bf16' or 'tf32', got {precision!r}")


def _norms(v: torch.Tensor) -> torch.Tensor:
    return torch.linalg.vector_norm(v, dim=1, dtype=torch.float64) * NORM_SLACK


def certificate_bound(x: torch.Tensor, x_round: torch.Tensor) -> torch.Tensor:
    """E_i (float64, N) of the module docstring: r_ij ≤ t'_ij + E_i for every pair i, j."""
    d = x.shape[1]
    nx, nr, rho = _norms(x), _norms(x_round), _norms(x - x_round)
    g_acc, g_re = _gamma(d, U_ACC), _gamma(d, torch.finfo(x.dtype).eps)
    return (rho * nx.max() + nr * rho.max() + g_acc * nr * nr.max() + g_re * nx * nx.max()
            + d * 2.0 ** -125)


@contextlib.contextmanager
def _cuda_matmul(tf32: bool):
    """TF32 on or off, and no reduced-precision (bf16) split-K reductions, for one GEMM."""
    m = torch.backends.cuda.matmul
    saved = (m.allow_tf32, m.allow_bf16_reduced_precision_reduction)
    m.allow_tf32, m.allow_bf16_reduced_precision_reduction = tf32, False
    try:
        yield
    finally:
        m.allow_tf32, m.allow_bf16_reduced_precision_reduction = saved


def low_product(a: torch.Tensor, b: torch.Tensor, precision: str, bf16_output: bool = False
                 ) -> tuple[torch.Tensor, float]:
    """(a bᵀ from the low-precision operands, u_out: the unit roundoff of its output dtype)."""
    if a.device.type == "cuda":
        with _cuda_matmul(tf32=precision == "tf32"):
            if precision == "tf32":
                return a @ b.T, 0.0
            if bf16_output:
                return a @ b.T, 2.0 ** -8
            try:
                return torch.mm(a, b.T, out_dtype=torch.float32), 0.0
            except (TypeError, RuntimeError):  # a torch without mm(out_dtype=): bf16 output
                return a @ b.T, 2.0 ** -8
    out = a @ b.T  # CPU: bf16 GEMM (AMX / avx512_bf16 where present), float32 accumulation
    return out, (2.0 ** -8 if out.dtype == torch.bfloat16 else 0.0)


def _rerank(x: torch.Tensor, rows: torch.Tensor, cand: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    """r[b, q] = ⟨x[rows[b]], x[cand[b, q]]⟩ in x's dtype: products and a sum over D per pair,
    the same arithmetic for every pair (no TF32; equal vectors give equal values), gathered
    into ``buf`` (RERANK_ELEMENTS, reused: fresh allocations cost more than the arithmetic)."""
    d, c = x.shape[1], cand.shape[1]
    out = torch.empty(cand.shape, dtype=x.dtype, device=x.device)
    step = max(1, len(buf) // (c * d))
    for s in range(0, len(rows), step):
        r, q = rows[s:s + step], cand[s:s + step]
        size = len(r) * c * d
        g = buf[:size] if size <= len(buf) else torch.empty(size, dtype=x.dtype, device=x.device)
        g = g.view(len(r) * c, d)
        torch.index_select(x, 0, q.reshape(-1), out=g)
        g = g.view(len(r), c, d).mul_(x[r, None, :])
        torch.sum(g, dim=2, out=out[s:s + step])
    return out


def _certified(x, rows, s_low, c, topk, bound, u_out, buf):
    """Candidates, re-rank and certificate (★) of the rows ``rows`` with low-precision
    similarities ``s_low`` (len(rows) × N), c candidates each: (sims, idx, ok)."""
    n = s_low.shape[1]
    if c + 1 <= n - 1:  # the (c+1)-th is the largest non-candidate
        top_vals, cand = torch.topk(s_low, c + 1, dim=1, sorted=True)
        s_out = top_vals[:, c].double()
        cand = cand[:, :c]
        limit = s_out + u_out * s_out.abs() / (1 - u_out) + bound[rows]
    else:  # every other item is a candidate: nothing to certify
        cand = torch.topk(s_low, n - 1, dim=1).indices
        limit = torch.full((len(rows),), float("-inf"), dtype=torch.float64, device=x.device)
    cand = cand.sort(dim=1).values  # the tie rule: by index, then stably by value
    r = _rerank(x, rows, cand, buf) + 0.0  # + 0.0: -0.0 becomes +0.0
    r, order = torch.sort(r, dim=1, descending=True, stable=True)
    sims, idx = r[:, :topk], cand.gather(1, order[:, :topk])
    return sims, idx, sims[:, topk - 1].double() > limit


def knn_fast(x: torch.Tensor, topk: int, *, block_rows: int | None = None, precision: str = "bf16",
             margin: int | None = None, bf16_output: bool = True, rows: tuple[int, int] | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, KnnStats]:
    """``knn.knn(x, topk)``'s lists with the product in ``precision`` ("bf16" or "tf32"),
    exact by the certificate (★) of the module docstring: (idx, sims, KnnStats).

    ``block_rows``: rows per block (default ``knn.block_rows_for``: memory-sized on CUDA);
    ``margin``: extra candidates per row (default MARGIN_CPU or MARGIN_CUDA). ``bf16_output``:
    on CUDA, write the bf16 product in bf16 (as the CPU does) rather than float32: half the
    memory for torch.topk to read, a larger bound (u_out = 2^-8). The default since its first GPU
    run (one H200, N = 10^6, d = 768, k = 10: 10.96 s against 15.14 s with float32 output,
    the same lists, no row retried). Rows that fell back to the full search: ``stats.fallback``.
    ``rows=(start, stop)``: only those rows' lists (``knn.knn``).
    """
    n = x.shape[0]
    if not 1 <= topk <= n - 1:
        raise ValueError(f"topk must be between 1 and N-1 = {n - 1}, got {topk}")
    if x.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"knn_fast re-ranks in x's dtype, float32 or float64; got {x.dtype}")
    low, x_round = round_low(x, precision)
    bound = certificate_bound(x, x_round)
    del x_round
    if margin is None:
        margin = MARGIN_CUDA if x.device.type == "cuda" else MARGIN_CPU
    c = min(n - 1, topk + max(0, margin))
    if block_rows is None:
        block_rows = block_rows_for(n, x.device)
    first, last = (0, n) if rows is None else rows
    idx = torch.empty(last - first, topk, dtype=torch.long, device=x.device)
    sims = torch.empty(last - first, topk, dtype=x.dtype, device=x.device)
    c_max = min(n - 1, c * RETRY_FACTOR**RETRIES)
    buf = torch.empty(min(RERANK_ELEMENTS, max(block_rows * c, c_max) * x.shape[1]), dtype=x.dtype,
                      device=x.device)
    retried = fallback = 0
    for start in range(first, last, block_rows):
        stop = min(last, start + block_rows)
        rows = torch.arange(start, stop, device=x.device)
        out = rows - first  # the block's rows in idx and sims
        s_low, u_out = low_product(low[start:stop], low, precision, bf16_output)
        s_low[rows - start, rows] = float("-inf")  # an item is not its own neighbour
        sims[out], idx[out], ok = _certified(x, rows, s_low, c, topk, bound, u_out, buf)
        bad = torch.nonzero(~ok).flatten()
        retried += len(bad)
        c_more = c
        for _ in range(RETRIES):  # more candidates from the block in memory
            if not len(bad) or c_more >= n - 1:
                break
            c_more = min(n - 1, RETRY_FACTOR * c_more)
            s2, i2, ok2 = _certified(x, rows[bad], s_low[bad], c_more, topk, bound, u_out, buf)
            sims[out[bad]], idx[out[bad]] = s2, i2
            bad = bad[~ok2]
        del s_low
        if len(bad):
            fallback += len(bad)
            ctx = _cuda_matmul(tf32=False) if x.device.type == "cuda" else contextlib.nullcontext()
            with ctx:
                sims[out[bad]], idx[out[bad]] = exact_rows(x, rows[bad], topk)
    stats = KnnStats(rows=last - first, retried=retried, fallback=fallback, candidates=c, block_rows=block_rows,
                     precision=precision)
    return idx, sims, stats
