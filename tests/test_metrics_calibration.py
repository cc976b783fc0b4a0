"""Permutation nulls: re-indexed states, chance levels, uniform p-values, seeding."""

import numpy as np
import pytest
import torch
from scipy import stats

from prh.metrics import SUPPORTED_METRICS, layer_states, pair_scores, permutation_null
from prh.metrics.registry import permute_state


def feats(n, layers, d, seed, shared=None, noise=1.0):
    g = torch.Generator().manual_seed(seed)
    x = noise * torch.randn(n, layers, d, generator=g, dtype=torch.float64)
    return x if shared is None else x + shared[:, None, :d]


@pytest.mark.parametrize("metric", SUPPORTED_METRICS)
def test_permuting_a_cached_state_equals_recomputing_it_on_permuted_items(metric):
    x = feats(30, 2, 8, 0)
    perm = torch.randperm(30, generator=torch.Generator().manual_seed(1))
    kw = dict(topk=4, cca_dim=3, dtype=torch.float64)
    other = layer_states(metric, feats(30, 2, 5, 2), **kw)
    from_cache = pair_scores(metric, other, permute_state(metric, layer_states(metric, x, **kw), perm))
    recomputed = pair_scores(metric, other, layer_states(metric, x[perm], **kw))
    torch.testing.assert_close(from_cache, recomputed, atol=1e-9, rtol=0)


def test_independent_models_give_uniform_p_values_and_a_corrected_score_near_zero():
    n, k, reps, perms = 60, 5, 40, 19
    kw = dict(topk=k, dtype=torch.float64)
    p_values, corrected, pair_chance = [], [], []
    for r in range(reps):
        sa = layer_states("mutual_knn", feats(n, 3, 6, 2 * r), **kw)
        sb = layer_states("mutual_knn", feats(n, 2, 6, 2 * r + 1), **kw)
        null = permutation_null("mutual_knn", sa, sb, permutations=perms, seed=r)
        p_values.append(null["p_value"])
        corrected.append(null["corrected"])
        pair_chance.append(null["null_pair_mean"])
    # p is discrete on {1/20, ..., 1}: compare with the uniform on that grid, not the continuous one
    grid = np.arange(1, perms + 2) / (perms + 1)
    assert stats.chisquare(np.histogram(p_values, bins=np.append(0, grid[4::5] + 0.5 / (perms + 1)))[0]).pvalue > 0.001
    assert stats.kstest(p_values, "uniform").pvalue > 0.001
    # the max over 3 x 2 layer pairs sits above single-pair chance k/(N-1); the correction removes it
    assert np.mean(pair_chance) == pytest.approx(k / (n - 1), abs=0.01)
    assert abs(np.mean(corrected)) < 0.01


def test_aligned_models_get_the_smallest_possible_p_value():
    shared = torch.randn(80, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    kw = dict(topk=5, dtype=torch.float64)
    for metric in ("mutual_knn", "cka", "cknna"):
        sa = layer_states(metric, feats(80, 2, 8, 1, shared, noise=0.5), **kw)
        sb = layer_states(metric, feats(80, 3, 8, 2, shared, noise=0.5), **kw)
        null = permutation_null(metric, sa, sb, permutations=49, seed=0)
        assert null["p_value"] == pytest.approx(1 / 50)
        assert null["corrected"] > 0.1


def test_the_same_seed_gives_the_same_null_and_another_seed_another():
    kw = dict(topk=4, dtype=torch.float64)
    sa, sb = layer_states("mutual_knn", feats(40, 2, 5, 0), **kw), layer_states("mutual_knn", feats(40, 2, 5, 1), **kw)
    first = permutation_null("mutual_knn", sa, sb, permutations=10, seed=7)
    assert permutation_null("mutual_knn", sa, sb, permutations=10, seed=7) == first
    assert permutation_null("mutual_knn", sa, sb, permutations=10, seed=8)["null_max_mean"] != first["null_max_mean"]
    with pytest.raises(ValueError, match="permutations must be >= 1"):
        permutation_null("mutual_knn", sa, sb, permutations=0)


@pytest.mark.parametrize("metric", ["mutual_knn", "cknna", "cka"])
def test_vectorised_null_equals_one_permutation_at_a_time(monkeypatch, metric):
    """Permutations scored as one stacked B give the null of scoring them one by one."""
    from prh.metrics import calibration

    g = torch.Generator().manual_seed(1)
    sa = layer_states(metric, torch.randn(40, 3, 6, generator=g), topk=5)
    sb = layer_states(metric, torch.randn(40, 2, 6, generator=g), topk=5)
    together = permutation_null(metric, sa, sb, permutations=12, seed=2)
    monkeypatch.setattr(calibration, "NULL_CHUNK_BYTES", 1)  # one permutation per group
    alone = permutation_null(metric, sa, sb, permutations=12, seed=2)
    assert together.keys() == alone.keys()
    # k-NN counts and cknna's float64 sums agree exactly; CKA's float32 products as BLAS blocks them
    tol = {"rel": 1e-6} if metric == "cka" else {"abs": 1e-12}
    for key in together:
        assert together[key] == pytest.approx(alone[key], **tol), key
