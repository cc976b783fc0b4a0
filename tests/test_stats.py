"""prh.stats: the permutation Spearman test and Holm's correction, against exact and hand-computed values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from prh.stats import holm, spearman_permutation


def test_monotone_relation_n20_is_significant():
    x = np.arange(20.0)
    y = np.exp(x / 5) + np.random.default_rng(0).normal(scale=0.5, size=20)  # monotone with a little noise
    res = spearman_permutation(x, y, permutations=10000, seed=0)
    assert res["spearman_r"] > 0.95 and res["p_permutation"] < 0.01
    assert res["p_permutation"] == pytest.approx(1 / 10001)  # no shuffle reaches r > 0.95 at n = 20
    assert res["n"] == 20 and res["permutations"] == 10000 and res["alternative"] == "greater"
    # the other direction: the same data are as unlikely as possible under "less"
    assert spearman_permutation(x, y, permutations=200, alternative="less")["p_permutation"] == 1.0
    assert spearman_permutation(x, -y, permutations=200, alternative="less")["p_permutation"] == pytest.approx(1 / 201)


def test_null_p_values_are_uniform():
    rng = np.random.default_rng(123)
    p = np.array([spearman_permutation(rng.normal(size=12), rng.normal(size=12), permutations=300, seed=s)["p_permutation"]
                  for s in range(200)])
    assert 0.04 <= np.mean(p < 0.1) <= 0.18
    assert 0.35 <= np.mean(p < 0.5) <= 0.65
    assert stats.kstest(p, "uniform").pvalue > 0.01


def test_matches_exact_enumeration_with_ties():
    x = np.array([1.0, 2.0, 2.0, 4.0, 5.0, 6.0, 7.0])  # a tie: average ranks
    y = np.array([0.3, 0.1, 0.5, 0.4, 0.9, 0.2, 0.8])
    rx, ry = stats.rankdata(x), stats.rankdata(y)
    r = stats.spearmanr(x, y).statistic
    every = np.array([np.corrcoef(rx, ry[list(pi)])[0, 1] for pi in itertools.permutations(range(7))])
    exact = {"greater": np.mean(every >= r - 1e-12), "less": np.mean(every <= r + 1e-12),
             "two-sided": np.mean(np.abs(every) >= abs(r) - 1e-12)}
    for alt, want in exact.items():
        res = spearman_permutation(x, y, permutations=20000, alternative=alt, seed=1)
        assert res["spearman_r"] == pytest.approx(r)
        assert res["p_permutation"] == pytest.approx(want, abs=0.015), alt


@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_matches_scipy_asymptotic_p_for_moderate_n(alternative):
    rng = np.random.default_rng(7)
    x = rng.normal(size=40)
    y = 0.3 * x + rng.normal(size=40)
    res = spearman_permutation(x, y, permutations=20000, alternative=alternative, seed=2)
    ref = stats.spearmanr(x, y, alternative=alternative)
    assert res["spearman_r"] == pytest.approx(ref.statistic)
    assert res["p_permutation"] == pytest.approx(ref.pvalue, abs=0.01)


def test_seeded_and_chunk_independent():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=9), rng.normal(size=9)
    a = spearman_permutation(x, y, permutations=999, seed=5)
    assert a == spearman_permutation(x, y, permutations=999, seed=5)
    assert a["p_permutation"] != spearman_permutation(x, y, permutations=999, seed=6)["p_permutation"]
    # chunking changes which shuffles are drawn, not the statistic: both estimate the same p
    b = spearman_permutation(x, y, permutations=999, seed=5, chunk=7)
    assert b["spearman_r"] == a["spearman_r"] and b["p_permutation"] == pytest.approx(a["p_permutation"], abs=0.06)


@pytest.mark.parametrize("x, y, kw, match", [
    ([1, 2], [1, 2], {}, "at least 3"),
    ([1, 2, 3], [1, 2], {}, "equal length"),
    ([1, 2, math.nan], [1, 2, 3], {}, "x has NaN"),
    ([1, 2, 3], [1, 1, 1], {}, "y is constant"),
    ([1, 2, 3], [3, 1, 2], {"permutations": 0}, "permutations"),
    ([1, 2, 3], [3, 1, 2], {"alternative": "up"}, "alternative"),
])
def test_spearman_permutation_rejects_bad_input(x, y, kw, match):
    with pytest.raises(ValueError, match=match):
        spearman_permutation(x, y, **kw)


def test_holm_hand_example():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.4, 0.7, 0.2]) == pytest.approx([0.8, 0.8, 0.6])  # 0.6, 0.8, max(0.8, 0.7)
    assert holm([0.5, 0.6, 0.9]) == pytest.approx([1.0, 1.0, 1.0])  # 1.5, 1.2, 0.9: capped at 1
    assert holm([0.02]) == pytest.approx([0.02]) and holm([]) == []
    with pytest.raises(ValueError, match="pvalues"):
        holm([0.1, 1.2])


def test_cluster_permutation_removes_what_every_run_shares():
    """Checkpoints of one run are a cluster. A correlation carried by the step structure every run
    shares is strong over the 30 points but not beyond it when whole runs are permuted."""
    from prh.stats import cluster_permutation

    steps = np.tile([30, 100, 300, 1000, 3000], 6).astype(float)
    runs = np.repeat(np.arange(6), 5).tolist()
    x = steps + np.random.default_rng(0).normal(0, 1, 30)
    y = 2 * steps + np.random.default_rng(1).normal(0, 1, 30)
    out = cluster_permutation(x, y, runs)
    assert out["spearman_r"] > 0.9 and out["p_permutation"] > 0.5
    assert out["permutations"] == 720 and out["clusters"] == 6 and out["n"] == 30
    # a run-level effect: the runs that are more competent at every step align more at every step
    x = steps + 10000 * np.repeat(np.arange(6), 5)
    y = 10000 * np.repeat(np.arange(6), 5) + steps * 0.001
    best = cluster_permutation(x, y, runs)
    assert best["p_permutation"] == pytest.approx(1 / 720)  # only the identity reaches the observed r
    assert cluster_permutation(x, -y, runs, alternative="less")["p_permutation"] == pytest.approx(1 / 720)


@pytest.mark.parametrize("clusters, match", [
    ([0, 0, 1], "differ in size"),
    ([0, 1, 2, 3, 4, 5, 6, 7, 8], "2 to 8"),
    ([0, 0], "pair up"),
])
def test_cluster_permutation_refuses_what_it_cannot_permute(clusters, match):
    from prh.stats import cluster_permutation

    n = len(clusters) if match != "pair up" else 3
    with pytest.raises(ValueError, match=match):
        cluster_permutation(np.arange(n, dtype=float), np.arange(n, dtype=float)[::-1].copy(), clusters)
