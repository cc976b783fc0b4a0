"""The Aristotelian calibrated score (Gröger, Wen & Brbić) from this project's permutation engine agrees with
their package ``calibrated-similarity`` (PyPI 0.1.1, MIT) fed the same permutations (its ``perm_fn``): the same tau,
p and calibrated score. The package is a declared dependency (pyproject.toml, requirements.lock); an environment
that predates it skips the parity test and says so."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from prh.metrics import layer_states, pair_scores, permutation_null
from prh.metrics.calibration import aristotelian
from prh.metrics.registry import measure


def _feats(n, layers, d, seed, shared=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, layers, d, generator=g, dtype=torch.float64)
    return x if shared is None else x + shared[:, None, :d]


@pytest.mark.parametrize("aligned, alpha, perms", [(True, 0.05, 39), (False, 0.05, 39), (True, 0.1, 19)])
def test_our_engine_matches_the_authors_package(aligned, alpha, perms):
    cs = pytest.importorskip("calibrated_similarity", reason="calibrated-similarity is not installed here "
                                                              "(pip install -c requirements.lock calibrated-similarity)")
    n, k, seed = 48, 5, 3
    shared = 2 * torch.randn(n, 6, generator=torch.Generator().manual_seed(9), dtype=torch.float64) if aligned else None
    a, b = _feats(n, 3, 6, 1, shared), _feats(n, 2, 6, 2, shared)
    kw = dict(topk=k, dtype=torch.float64, normalize=False)
    ours = permutation_null("mutual_knn", layer_states("mutual_knn", a, **kw), layer_states("mutual_knn", b, **kw),
                            permutations=perms, seed=seed, alpha=alpha)["aristotelian"]
    # the same permutations, in the same order, as permutation_null draws them (one for every layer of B)
    gen = torch.Generator().manual_seed(seed)
    same = iter([torch.randperm(n, generator=gen) for _ in range(perms)])
    cal, p, tau = cs.calibrate_layers([a[:, i] for i in range(3)], [b[:, j] for j in range(2)],
                                      lambda x, y: measure("mutual_knn", x, y, topk=k, dtype=torch.float64),
                                      agg="max", K=perms, alpha=alpha, smax=1.0, perm_fn=lambda n_, d_: next(same))
    # the same count of null maxima >= the observed max (theirs is a float32 of it)
    assert round(ours["p"] * (perms + 1)) == round(float(p) * (perms + 1)) and ours["p"] == pytest.approx(float(p))
    assert ours["tau"] == pytest.approx(float(tau), rel=1e-6)  # theirs is float32
    assert ours["calibrated"] == pytest.approx(float(cal), rel=1e-5, abs=1e-7)
    if aligned:
        assert ours["calibrated"] > 0 and ours["p"] == pytest.approx(1 / (perms + 1))


def test_aristotelian_by_hand():
    # K = 19 permutations at alpha 0.05: tau is the ceil(0.95 x 20) = 19th smallest of the 20 scores, the null's largest
    null = np.linspace(0.10, 0.28, 19)
    out = aristotelian(0.40, null, alpha=0.05)
    assert out["tau"] == pytest.approx(0.28) and out["p"] == pytest.approx(1 / 20)
    assert out["calibrated"] == pytest.approx((0.40 - 0.28) / (1 - 0.28))
    out = aristotelian(0.40, null, alpha=0.10)  # ceil(0.9 x 20) = 18: the 18th smallest, 0.27
    assert out["tau"] == pytest.approx(0.27) and out["calibrated"] == pytest.approx((0.40 - 0.27) / (1 - 0.27))
    assert aristotelian(0.40, null, alpha=0.10, smax=None)["calibrated"] == pytest.approx(0.13)
    assert aristotelian(0.05, null, alpha=0.10)["calibrated"] == 0.0  # below tau: clipped at 0
    assert aristotelian(math.nan, null)["calibrated"] is None
    with pytest.raises(ValueError, match="alpha"):
        aristotelian(0.4, null, alpha=1.0)
    with pytest.raises(ValueError, match="smax"):
        aristotelian(0.4, null, smax=0.0)


def test_the_scores_agree_on_what_chance_is():
    """Our ``corrected`` (best - mean null max) and the authors' calibrated score read the same null differently:
    both near 0 for independent models, both > 0 for aligned ones; the ledger names ours as what it is."""
    kw = dict(topk=5, dtype=torch.float64)
    shared = 2 * torch.randn(60, 6, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    aligned = permutation_null("mutual_knn", layer_states("mutual_knn", _feats(60, 2, 6, 1, shared), **kw),
                               layer_states("mutual_knn", _feats(60, 2, 6, 2, shared), **kw), permutations=39, seed=0)
    assert aligned["corrected"] > 0 and aligned["aristotelian"]["calibrated"] > 0
    alone = permutation_null("mutual_knn", layer_states("mutual_knn", _feats(60, 2, 6, 3), **kw),
                             layer_states("mutual_knn", _feats(60, 2, 6, 4), **kw), permutations=39, seed=0)
    assert alone["aristotelian"]["calibrated"] == 0.0 or alone["aristotelian"]["p"] < 0.05
    assert pair_scores  # the engine the scores come from


def test_sample_size_cells_carry_the_authors_score():
    """Every k-NN cell of the N sweep reports the Aristotelian calibrated score over its own permutations,
    beside this project's ``calibrated`` (raw - null mean), which the pre-registered claims still read."""
    from prh.metrics.sample_size import cell

    shared = np.random.default_rng(0).normal(size=(80, 4))
    a = np.hstack([shared, np.random.default_rng(1).normal(size=(80, 4))])
    b = np.hstack([shared, np.random.default_rng(2).normal(size=(80, 4))])
    out = cell("mutual_knn", a, b, k=5, quantile=1.0, permutations=19, seed=0)
    assert out["calibrated"] == pytest.approx(out["raw"] - out["null_mean"])
    assert 0 < out["aristotelian"] <= 1 and out["aristotelian_tau"] < out["raw"]
    assert out["aristotelian"] == pytest.approx((out["raw"] - out["aristotelian_tau"]) / (1 - out["aristotelian_tau"]))
