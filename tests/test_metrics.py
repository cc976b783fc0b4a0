"""Single-pair alignment metrics: identities, invariances, chance level, input checks."""

import numpy as np
import pytest
import torch

from prh.metrics import (
    SUPPORTED_METRICS,
    best_pair,
    layer_pair_scores,
    measure,
    prepare_features,
)


def gaussian(n, d, seed, dtype=torch.float64):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def related_pair(n=80, seed=0):
    """Two feature sets that share structure (B is a noisy linear map of A)."""
    a = gaussian(n, 12, seed)
    b = a @ gaussian(12, 20, seed + 1) + 0.8 * gaussian(n, 20, seed + 2)
    return a, b


def random_orthogonal(d, seed):
    q, _ = torch.linalg.qr(gaussian(d, d, seed))
    return q


@pytest.mark.parametrize("metric", SUPPORTED_METRICS)
def test_a_model_is_perfectly_aligned_with_itself(metric):
    a = torch.nn.functional.normalize(gaussian(100, 16, 0, dtype=torch.float32), dim=1)
    assert measure(metric, a, a, topk=10) == pytest.approx(1.0, abs=1e-6)


def test_cycle_knn_of_a_model_with_itself_counts_items_that_some_neighbour_lists_back():
    """cycle_knn(A, A) is 1 only if every item i is in S(j) for some j ∈ S(i).

    An "anti-hub" that none of its own neighbours lists scores 0, so with small k
    (here k=1: i's nearest neighbour often has a different nearest neighbour) the
    identity fails, as it does in the reference code. Checked against a direct count.
    """
    a = torch.nn.functional.normalize(gaussian(100, 16, 0), dim=1)
    sims = (a @ a.T).fill_diagonal_(-2)
    for k in (1, 3):
        nn = sims.topk(k, dim=1).indices
        listed_back = [any(i in nn[j].tolist() for j in nn[i].tolist()) for i in range(100)]
        assert measure("cycle_knn", a, a, topk=k) == pytest.approx(np.mean(listed_back), abs=1e-12)
    assert measure("cycle_knn", a, a, topk=1) < 0.9


@pytest.mark.parametrize("metric", ["mutual_knn", "cycle_knn", "lcs_knn", "edit_distance_knn", "cka", "unbiased_cka", "cknna"])
def test_invariant_to_rotation_and_isotropic_scaling_of_either_side(metric):
    a, b = related_pair()
    base = measure(metric, a, b, topk=6, dtype=torch.float64)
    rotated_a = measure(metric, 3.0 * a @ random_orthogonal(12, 7), b, topk=6, dtype=torch.float64)
    rotated_b = measure(metric, a, 0.25 * b @ random_orthogonal(20, 8), topk=6, dtype=torch.float64)
    assert rotated_a == pytest.approx(base, abs=1e-9)
    assert rotated_b == pytest.approx(base, abs=1e-9)
    assert 0.05 < base < 1  # the pair is related but not identical, so the check has teeth


def test_mutual_knn_sits_at_chance_on_independent_features():
    """Chance level and its tolerance.

    For independent A and B with i.i.d. rows, S_B(i) is, by exchangeability of B's
    rows, a uniform random k-subset of the N−1 other items, independent of S_A(i).
    So X_i = |S_A(i) ∩ S_B(i)| is hypergeometric(N−1, k, k) and the score
    m = mean_i X_i / k has, exactly, E[m] = k/(N−1) = p, and per item
    σ² = Var(X_i/k) = p(1−p)(N−1−k) / (k(N−2)).

    The X_i are not independent: X_i and X_j share information mainly when j is
    among i's A- or B-neighbours or vice versa, about 2k items per i on average.
    Counting each item's covariance with at most 2k others, each ≤ σ² (Cauchy–
    Schwarz), gives Var(m) ≤ (1 + 2k) σ² / N. Averaging R independent draws
    divides it by R, and we allow 4 standard deviations. (Measured over 200
    seeds at N=300, k=10 the sd is 1.25 σ/√N, well inside the √21 σ/√N used.)
    N=300, k=10, R=8: p = 0.0334, tolerance 0.021; a bug that doubled the
    overlap, or measured including the item itself (+1/k = +0.1), fails.
    """
    n, k, reps = 300, 10, 8
    scores = [measure("mutual_knn", gaussian(n, 32, 2 * r), gaussian(n, 32, 2 * r + 1), topk=k) for r in range(reps)]
    p = k / (n - 1)
    sigma2 = p * (1 - p) * (n - 1 - k) / (k * (n - 2))
    tolerance = 4 * np.sqrt((1 + 2 * k) * sigma2 / (n * reps))
    assert abs(np.mean(scores) - p) < tolerance


def test_svcca_is_invariant_to_scaling_each_feature_but_not_to_rotation():
    # SVCCA standardises every feature (neuron) first, so a rotation changes it
    a, b = related_pair()
    base = measure("svcca", a, b, cca_dim=5, dtype=torch.float64)
    scales = torch.linspace(0.1, 10, 12, dtype=torch.float64)
    assert measure("svcca", a * scales, b, cca_dim=5, dtype=torch.float64) == pytest.approx(base, abs=1e-6)
    assert measure("svcca", a @ random_orthogonal(12, 7), b, cca_dim=5, dtype=torch.float64) != pytest.approx(base, abs=1e-3)


def test_measure_accepts_numpy_and_torch_alike():
    a, b = related_pair()
    assert measure("cka", a.numpy(), b.numpy()) == pytest.approx(measure("cka", a, b), abs=1e-6)


def test_unbiased_cka_can_be_negative_and_the_best_pair_is_still_the_largest():
    # a few independent items: unbiased HSIC fluctuates around 0, so some layer pairs are < 0
    a, b = gaussian(12, 3 * 5, 3).reshape(12, 3, 5), gaussian(12, 4 * 5, 4).reshape(12, 4, 5)
    res = layer_pair_scores("unbiased_cka", a, b)
    assert res.scores.min() < 0
    assert res.best_score == res.scores.max()
    assert res.scores[res.best_pair] == res.best_score
    assert best_pair(-np.arange(1.0, 7.0).reshape(2, 3)) == (-1.0, (0, 0))
    assert best_pair(np.array([[np.nan, -3.0], [-2.0, np.nan]])) == (-2.0, (1, 0))


def test_svcca_is_deterministic_and_float64_runs():
    a, b = related_pair()
    first = measure("svcca", a, b, cca_dim=5, dtype=torch.float64)
    assert measure("svcca", a, b, cca_dim=5, dtype=torch.float64) == first
    assert measure("svcca", a.float(), b.float(), cca_dim=5) == pytest.approx(first, abs=1e-4)


def test_prepare_features_clamps_at_the_quantile_of_the_whole_tensor():
    x = gaussian(50, 3 * 8, 5).reshape(50, 3, 8)
    assert prepare_features(x, q=1) is x
    clamped = prepare_features(x, q=0.9)
    c = np.quantile(x.abs().numpy(), 0.9)
    assert clamped.abs().max().item() == pytest.approx(c, rel=1e-12)
    assert (x.abs() > c).double().mean().item() == pytest.approx(0.1, abs=1 / x.numel())
    assert torch.equal(clamped[x.abs() <= c], x[x.abs() <= c])


def test_prepare_features_ignores_zero_padding_of_narrow_layers():
    """CNN stages of different widths are zero-padded to the widest; the clamp must not see the padding."""
    real = [gaussian(40, 8, 6), gaussian(40, 3, 7)]
    padded = torch.zeros(40, 2, 8, dtype=real[0].dtype)
    padded[:, 0, :8], padded[:, 1, :3] = real[0], real[1]
    c = np.quantile(torch.cat([r.reshape(-1) for r in real]).abs().numpy(), 0.9)
    clamped = prepare_features(padded, q=0.9, layer_dims=[8, 3])
    assert clamped.abs().max().item() == pytest.approx(c, rel=1e-12)
    assert prepare_features(padded, q=0.9).abs().max().item() < c  # what padding would have done
    with pytest.raises(ValueError, match="layer_dims"):
        prepare_features(padded, q=0.9, layer_dims=[8])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda a: measure("mutual_nn", a, a), "metric must be one of"),
        (lambda a: measure("cka", a[:, 0], a), "feats_a must be N x D"),
        (lambda a: measure("cka", a, a[:10]), "same items N"),
        (lambda a: measure("mutual_knn", a, a, topk=40), "topk must be between 1 and N-1"),
        (lambda a: measure("cknna", a, a, topk=1), "cknna needs topk >= 2"),
        (lambda a: measure("svcca", a, a, cca_dim=9), "cca_dim must be between"),
        (lambda a: prepare_features(a, q=0), "q must be in"),
        (lambda a: layer_pair_scores("cka", a, a), "feats_a must be N x L x D"),
    ],
)
def test_bad_input_raises_one_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message):
        call(gaussian(40, 8, 0))


# ---- the k-NN list machinery: bit-parallel DPs, position tables and their fallback ----


@pytest.mark.parametrize("k", [1, 2, 3, 7, 10, 31, 62])
def test_bit_parallel_lcs_and_edit_distance_equal_the_textbook_dp(k):
    from test_metrics_engine import lcs_length, levenshtein  # the textbook DPs

    from prh.metrics.knn import list_scores

    g = torch.Generator().manual_seed(k)
    n = 60
    # lists of distinct items drawn from a small pool, so they overlap in every way (reversed, shifted, disjoint)
    idx_a = torch.stack([torch.randperm(k + 4, generator=g)[:k] for _ in range(n)])
    idx_b = torch.stack([torch.stack([torch.randperm(k + 4, generator=g)[:k] for _ in range(n)]), idx_a.flip(1)])
    got = list_scores(["mutual_knn", "lcs_knn", "edit_distance_knn"], idx_a, idx_b, table=None)
    for layer in range(2):
        pairs = list(zip(idx_a.tolist(), idx_b[layer].tolist()))
        assert got["lcs_knn"][layer].item() == pytest.approx(np.mean([lcs_length(x, y) for x, y in pairs]) / k, abs=1e-12)
        assert got["edit_distance_knn"][layer].item() == pytest.approx(1 - np.mean([levenshtein(x, y) for x, y in pairs]) / k, abs=1e-12)
        assert got["mutual_knn"][layer].item() == pytest.approx(np.mean([len(set(x) & set(y)) for x, y in pairs]) / k)
    with pytest.raises(ValueError, match="topk <= 62"):
        list_scores(["lcs_knn"], torch.zeros(70, 63, dtype=torch.long), torch.zeros(1, 70, 63, dtype=torch.long))


def test_position_table_and_comparisons_give_the_same_scores(monkeypatch):
    """Above DENSE_MAX_ITEMS the lists are matched by comparisons: the numbers must not change."""
    from prh.metrics import knn as knn_lib
    from prh.metrics.registry import layer_states, pair_score_set

    g = torch.Generator().manual_seed(0)
    metrics = ["mutual_knn", "cycle_knn", "lcs_knn", "edit_distance_knn", "cknna"]
    fa, fb = torch.randn(50, 3, 6, generator=g), torch.randn(50, 2, 5, generator=g)
    states = [{m: layer_states(m, f, topk=6) for m in metrics} for f in (fa, fb)]
    dense = pair_score_set(metrics, *states)
    assert knn_lib.position_table(states[0]["mutual_knn"][0]) is not None
    monkeypatch.setattr(knn_lib, "DENSE_MAX_ITEMS", 10)
    assert knn_lib.position_table(states[0]["mutual_knn"][0]) is None
    compared = pair_score_set(metrics, *states)
    for m in metrics:
        torch.testing.assert_close(compared[m], dense[m], rtol=0, atol=1e-12)
        assert compared[m].shape == (3, 2)
