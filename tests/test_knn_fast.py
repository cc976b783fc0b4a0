"""The certified low-precision k-NN search (prh.metrics.knn_fast) against knn's fp32 search, the tie
rule of both (knn.top_k_ordered), the certificate's bound, and block sizing."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from prh.metrics.knn import BLOCK_ELEMENTS, block_rows_for, knn, top_k_ordered
from prh.metrics.knn_fast import CUDA_BYTES_PER_ELEMENT, certificate_bound, exact_rows, knn_fast, low_product, round_low

K = 10


def unit(x):
    return F.normalize(x, dim=1)


def random_feats(n=600, d=96, seed=0):
    return unit(torch.randn(n, d, generator=torch.Generator().manual_seed(seed)))


def clustered_feats(n=600, d=96, seed=1):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(n // 30, d, generator=g)
    return unit(centres[torch.randint(0, len(centres), (n,), generator=g)] + 0.5 * torch.randn(n, d, generator=g))


def near_tie_feats(d=64, seed=2):
    """Query 0 with 600 items at similarities 0.9 − t·1e-5 (t = 0..599: far closer than bf16 resolves,
    and spanning more than the certificate's bound, so no candidate list certifies it), five exact
    copies of one vector at similarity 0.95, four exact copies of another straddling the k-th place
    (similarity 0.9 − 3.5e-5: places 10-13 of query 0's list), and 200 random items.
    Returns (x, the rows to check exactly)."""
    g = torch.Generator().manual_seed(seed)
    q = unit(torch.randn(1, d, generator=g))[0]

    def at(cos, count):
        u = torch.randn(count, d, generator=g, dtype=torch.float64)
        u = unit(u - (u @ q.double())[:, None] * q.double())  # ⊥ q
        c = torch.as_tensor(cos, dtype=torch.float64).reshape(-1, 1)
        return (c * q.double() + (1 - c**2).sqrt() * u).float()

    ladder = at(0.9 - 1e-5 * torch.arange(600, dtype=torch.float64), 600)
    top_dup = at(0.95, 1).repeat(5, 1)
    edge_dup = at(0.9 - 3.5e-5, 1).repeat(4, 1)
    rest = unit(torch.randn(200, d, generator=g))
    x = torch.cat([q[None], ladder[:300], top_dup[:2], edge_dup[:2], ladder[300:], top_dup[2:], edge_dup[2:], rest])
    return x, [0, 301, 303, 305]  # the query, a copy at 0.95, a copy at the edge, a ladder item


def f64_sims(x, idx):
    x64 = x.double()
    return torch.einsum("nd,nkd->nk", x64, x64[idx])


def assert_same_lists(x, a, b, tol):
    """a, b: (idx, sims) of two searches of x. The float64 similarities of the two lists agree place by
    place within ``tol`` (so any disagreement is a near-tie within the dtype's own rounding), and the
    indices agree at every place whose similarity is more than ``tol`` from every other candidate's."""
    (ia, sa), (ib, sb) = a[:2], b[:2]
    va, vb = f64_sims(x, ia), f64_sims(x, ib)
    assert torch.allclose(sa.double(), va, atol=tol) and torch.allclose(sb.double(), vb, atol=tol)
    assert (va - vb).abs().max() <= tol
    x64 = x.double()
    full = x64 @ x64.T
    full.fill_diagonal_(float("-inf"))
    ranked = full.topk(ia.shape[1] + 1, dim=1).values  # float64 top k+1
    gaps = ranked.diff(dim=1).abs()  # gap to the next place
    isolated = torch.ones_like(va, dtype=torch.bool)
    isolated[:, :] &= gaps[:, : ia.shape[1]] > tol
    isolated[:, 1:] &= gaps[:, : ia.shape[1] - 1] > tol
    assert torch.equal(ia[isolated], ib[isolated])


def test_tie_rule_of_top_k_ordered():
    block = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, 3.0], [0.0, -0.0, 0.0, -0.0, 5.0, -1.0]])
    vals, idx = top_k_ordered(block, 3)
    assert idx.tolist() == [[1, 2, 4], [4, 0, 1]]
    assert vals.tolist() == [[3.0, 3.0, 3.0], [5.0, 0.0, 0.0]]
    vals, idx = top_k_ordered(block, 5)
    assert idx.tolist() == [[1, 2, 4, 5, 3], [4, 0, 1, 2, 3]]


@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_fast_equals_fp32_on_random_features(precision):
    x = random_feats()
    idx, sims = knn(x, K)
    fidx, fsims, stats = knn_fast(x, K, precision=precision)
    assert torch.equal(idx, fidx)
    assert torch.allclose(sims, fsims, atol=1e-6)
    assert stats.rows == len(x) and stats.fallback == 0
    assert torch.equal(knn(x, K, precision=precision)[0], idx)


def test_fast_equals_fp32_on_clustered_features():
    x = clustered_feats()
    ref = knn(x, K)
    fast = knn_fast(x, K)
    assert_same_lists(x, ref, fast, tol=1e-6)
    # in float64 both searches resolve every pair: the lists are identical
    x64 = x.double()
    assert torch.equal(knn(x64, K)[0], knn_fast(x64, K)[0])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fast_is_exact_at_near_ties_and_duplicates(dtype):
    """Against the search in x's dtype under the tie rule (exact_rows over every row); knn's fp32 path
    keeps torch.topk's order among exactly equal similarities, so it agrees up to those ties."""
    x, queries = near_tie_feats()
    x = x.to(dtype)
    sims, idx = exact_rows(x, torch.arange(len(x)), K)
    assert_same_lists(x, knn(x, K), (idx, sims), tol=1e-6 if dtype == torch.float32 else 1e-12)
    fidx, fsims, stats = knn_fast(x, K)
    assert stats.fallback > 0  # the ladder cannot be certified from bf16 similarities
    assert torch.equal(idx[queries], fidx[queries])
    # query 0: the five top copies first, by index; of the four edge copies, the lowest-index one
    assert idx[0, :5].tolist() == [301, 302, 605, 606, 607]
    assert idx[0, 9] == 303 and not {304, 608, 609} & set(idx[0].tolist())
    assert idx[303, :3].tolist() == [304, 608, 609]  # an edge copy's neighbours: its copies first
    if dtype == torch.float64:
        assert torch.equal(idx, fidx)
        assert torch.allclose(sims, fsims, atol=1e-12)
    else:
        assert_same_lists(x, (idx, sims), (fidx, fsims), tol=1e-6)


def test_certificate_bound_holds_for_random_pairs():
    g = torch.Generator().manual_seed(3)
    shifted = unit(torch.randn(400, 768, generator=g) + 2)  # cosines near 0.8, as real features
    for x in (random_feats(400, 768), clustered_feats(400, 768), shifted):
        for precision in ("bf16", "tf32"):
            low, x_round = round_low(x, precision)
            bound = certificate_bound(x, x_round)
            s_low, u_out = low_product(low, low, precision)
            s_low = s_low.double()
            r = (x.double() @ x.double().T).float().double()  # the similarity in float32
            slack = u_out * s_low.abs() / (1 - u_out) + bound[:, None]
            assert (r <= s_low + slack).all() and (r >= s_low - slack).all()
            assert bound.max() < (1.6e-2 if precision == "bf16" else 2e-3)  # ρ ≤ 2^-8 per unit row
            assert ((r - s_low).abs().max() < bound.min())  # and in practice it is loose


def test_small_n_every_item_a_candidate_and_margin_zero():
    x = random_feats(n=15, d=8)
    idx, _ = knn(x, K)
    assert torch.equal(knn_fast(x, K)[0], idx)  # c = N − 1: nothing to certify
    fidx, _, stats = knn_fast(x, K, margin=0)
    assert torch.equal(fidx, idx)


def test_block_rows_sizing_and_override(monkeypatch):
    import prh.metrics.knn_fast as kf

    assert block_rows_for(10_000) == BLOCK_ELEMENTS // 10_000
    assert block_rows_for(10) == 10 and block_rows_for(1) == 1
    # above N = 32,768 a CPU block takes up to 512 rows as a quarter of the free RAM allows
    monkeypatch.setattr(kf, "available_ram", lambda: 32 * 2**30)
    assert block_rows_for(10**6) == 512 and block_rows_for(6 * 10**4) == 512
    monkeypatch.setattr(kf, "available_ram", lambda: 2 * 2**30)
    assert block_rows_for(10**6) == int(2 * 2**30 * 0.25) // (8 * 10**6) == 67
    monkeypatch.setattr(kf, "available_ram", lambda: 0)
    assert block_rows_for(10**6) == 16  # no RAM figure: the 64 MiB rule, as before
    free = 140 * 2**30
    rows = block_rows_for(10**6, "cuda", free_bytes=free)
    assert rows == int(free * 0.25) // (CUDA_BYTES_PER_ELEMENT * 10**6) and 3_000 < rows < 6_000
    assert block_rows_for(1000, "cuda", free_bytes=free) == 1000  # never more rows than items
    assert block_rows_for(10**6, "cuda", free_bytes=0) == 16  # never fewer than on a CPU
    x = clustered_feats(n=300)
    idx, sims = knn(x, K)
    for rows in (1, 7, 299, 300):
        assert_same_lists(x, (idx, sims), knn(x, K, block_rows=rows), tol=1e-6)
        if rows > 1:
            f_idx, f_sims, stats = knn_fast(x, K, block_rows=rows)
            assert stats.block_rows == rows
            assert_same_lists(x, (idx, sims), (f_idx, f_sims), tol=1e-6)


def test_bad_arguments():
    x = random_feats(n=20, d=8)
    with pytest.raises(ValueError, match="precision"):
        knn(x, 3, precision="fp16")
    with pytest.raises(ValueError, match="topk"):
        knn_fast(x, 20)
    with pytest.raises(ValueError, match="float32 or float64"):
        knn_fast(x.half(), 3)


def test_auto_precision_is_bf16_on_cuda_and_fp32_on_a_cpu():
    from prh.metrics.knn import resolve_precision

    assert resolve_precision("auto", "cpu") == "fp32" and resolve_precision("auto", "cuda") == "bf16"
    assert resolve_precision("tf32", "cpu") == "tf32"
    with pytest.raises(ValueError, match="precision must be 'auto' or one of"):
        resolve_precision("fp16", "cpu")


def test_engine_tables_in_bf16_equal_fp32_and_record_the_precision(tmp_path):
    """The engine's k-NN search in bf16 (the CUDA default) gives the fp32 tables, and says so."""
    from prh.io import save_features
    from prh.metrics.engine import alignment_tables

    files = []
    for seed, (layers, d) in enumerate([(2, 24), (3, 40), (2, 16)]):
        files.append(tmp_path / f"m{seed}.safetensors")
        save_features(files[-1], torch.randn(300, layers, d, generator=torch.Generator().manual_seed(seed)), {})
    metrics = ["mutual_knn", "cknna", "cycle_knn"]
    names = ["a", "b", "c"]
    kw = dict(x_names=names, x_features=[str(f) for f in files], topk=10, quantile=0.95)
    fp32 = alignment_tables(metrics, **kw)
    bf16 = alignment_tables(metrics, knn_precision="bf16", **kw)
    auto = alignment_tables(metrics, knn_precision="auto", **kw)  # on a CPU: fp32
    for m in metrics:
        if m == "cknna":  # same lists; its kernel values are re-ranked dot products, equal to fp32 rounding
            np.testing.assert_allclose(bf16[m]["scores"], fp32[m]["scores"], rtol=1e-6)
        else:  # list metrics: the lists themselves, so the same numbers
            np.testing.assert_array_equal(bf16[m]["scores"], fp32[m]["scores"])
        assert bf16[m]["best_pairs"] == fp32[m]["best_pairs"]
        assert bf16[m]["settings"]["knn_precision"] == "bf16" and "knn_precision" not in fp32[m]["settings"]
        assert auto[m]["settings"] == fp32[m]["settings"]
