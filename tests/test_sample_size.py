"""Issue 38's sweep of alignment against N (prh.metrics.sample_size): the null's floors, the cells
against single-N runs of the engine, and linear CKA from features against the engine's Gram CKA."""

from __future__ import annotations

import numpy as np
import pytest

from prh.metrics import layer_pair_scores, measure, prepare_features
from prh.metrics.sample_size import cell, linear_cka, linear_cka_null, subsets, sweep


@pytest.mark.parametrize("n, k", [(200, 10), (800, 10), (800, 40)])
def test_the_mutual_knn_null_on_independent_features_is_k_over_n_minus_1(n, k):
    rng = np.random.default_rng(n + k)
    a, b = rng.normal(size=(n, 16)), rng.normal(size=(n, 16))
    out = cell("mutual_knn", a, b, k=k, quantile=0.95, permutations=40, seed=0)
    assert out["chance"] == pytest.approx(k / (n - 1))
    # the mean of 40 permutations of a mean over n items: within 4 standard errors of the chance level
    se = np.sqrt(k / (n - 1) / k / n / 40) * 2
    assert out["null_mean"] == pytest.approx(k / (n - 1), abs=4 * se)
    assert out["raw"] == pytest.approx(k / (n - 1), abs=8 * np.sqrt(k / (n - 1) / k / n))  # independent: raw is chance too


def test_sweep_cells_equal_single_n_runs_of_the_engine():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(600, 8))
    a = np.c_[z, rng.normal(size=(600, 8))]
    b = np.c_[z @ rng.normal(size=(8, 8)), rng.normal(size=(600, 4))]
    cells = sweep(a, b, grid=[100, 300, 600], metrics=["mutual_knn", "cknna", "cka"], k_fixed=10, k_fraction=0.05,
                  quantile=0.95, permutations=5, seed=3)
    assert len(cells) == 3 * (2 + 2 + 1)
    parts = subsets(600, [100, 300, 600], seed=3)
    for c in cells:
        idx = parts[c["n"]]
        if c["metric"] == "cka":
            continue
        single = layer_pair_scores(c["metric"], prepare_features(a[idx][:, None], 0.95),
                                   prepare_features(b[idx][:, None], 0.95), topk=c["k"], null_permutations=5, seed=3)
        assert c["raw"] == single.best_score and c["null_mean"] == single.calibration["null_max_mean"]
        assert c["calibrated"] == pytest.approx(c["raw"] - c["null_mean"])
    ks = {(c["n"], c["k_mode"]): c["k"] for c in cells if c["metric"] == "mutual_knn"}
    assert ks == {(100, "fixed"): 10, (300, "fixed"): 10, (600, "fixed"): 10,
                  (100, "fraction"): 5, (300, "fraction"): 15, (600, "fraction"): 30}
    # shared structure: the calibrated score is well above the null at every N
    assert all(c["calibrated"] > 5 * c["null_std"] for c in cells)


def test_subsets_are_nested_and_checked():
    parts = subsets(50, [5, 20, 50], seed=1)
    assert set(parts[5]) <= set(parts[20]) <= set(parts[50]) == set(range(50))
    for grid in ([20, 5], [5, 5], [2, 10], [10, 60], []):
        with pytest.raises(ValueError):
            subsets(50, grid, seed=0)


def test_linear_cka_from_features_equals_the_engine_s_gram_cka():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 12)).astype(np.float32)
    y = (x @ rng.normal(size=(12, 6)) + rng.normal(size=(300, 6))).astype(np.float32)
    assert linear_cka(x, y) == pytest.approx(measure("cka", x, y), abs=1e-5)
    null = linear_cka_null(x, rng.normal(size=(300, 6)), permutations=50, seed=0)
    # chance linear CKA of independent features grows with width over N (the Aristotelian floor)
    assert 0 < null["null_mean"] < 0.2 and null["p"] > 0.01
    with pytest.raises(ValueError, match="same items"):
        linear_cka(x, y[:10])


def test_a_cell_refuses_a_k_it_cannot_use():
    a = np.random.default_rng(0).normal(size=(20, 4))
    with pytest.raises(ValueError, match="k = 20"):
        cell("mutual_knn", a, a, k=20, quantile=1.0, permutations=1, seed=0)
    with pytest.raises(ValueError, match="svcca"):
        cell("svcca", a, a, k=5, quantile=1.0, permutations=1, seed=0)


def test_kernel_cells_match_the_engine_on_the_kernel_s_own_features():
    """A kernel K = F Fᵀ given as a matrix scores as the engine scores its features F: the same k-NN lists
    (mutual k-NN) and the same CKA, with the null of the same permutations."""
    from prh.metrics.sample_size import _prepared, kernel_cell

    rng = np.random.default_rng(4)
    z = rng.normal(size=(300, 6))
    a = np.c_[z, rng.normal(size=(300, 6))]
    f = _prepared(np.c_[z @ rng.normal(size=(6, 6)), rng.normal(size=(300, 3))], 1.0)
    kern = f @ f.T
    mk = kernel_cell("mutual_knn", a, kern, k=10, quantile=0.95, permutations=5, seed=2)
    ref = cell("mutual_knn", a, f, k=10, quantile=1.0, permutations=5, seed=2)
    # the same lists up to float32 (engine) against float64 (kernel) order of near-equal similarities
    assert mk["raw"] == pytest.approx(ref["raw"], abs=5e-3) and mk["null_mean"] == pytest.approx(ref["null_mean"], abs=5e-3)
    ck = kernel_cell("cka", a, kern, k=10, quantile=0.95, permutations=5, seed=2)
    assert ck["raw"] == pytest.approx(linear_cka(_prepared(a, 0.95), f), rel=1e-9)
    assert ck["calibrated"] > 5 * ck["null_std"] and mk["calibrated"] > 5 * mk["null_std"]
    with pytest.raises(ValueError, match="N x N"):
        kernel_cell("cka", a[:10], kern, k=3, quantile=1.0, permutations=1, seed=0)
    with pytest.raises(ValueError, match="scored with"):
        kernel_cell("cknna", a, kern, k=3, quantile=1.0, permutations=1, seed=0)
