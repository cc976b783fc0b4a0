"""Alignment scores of a model pair: linear-map retrieval (seed 000 eq. 1) and the engine's mutual k-NN.

Seed 000 scores "alignment" as the accuracy of a linear map g with g(f_v(x_v)) ≈ f_ℓ(x_ℓ)
(eq. 1, "following Radford et al. 2021"). Here: features standardised on the training
items, a ridge map A → B fitted there (``RidgeCV``, penalty chosen by leave-one-out on
the training items only), then top-1 retrieval on the held-out items: item i counts as
found when its mapped vector's nearest held-out target (cosine) is its own pair. Chance
is 1 / n_test. The pair's score is the mean of both directions (A → B and B → A), so it
is symmetric and defined the same way within and across modalities.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["ALPHAS", "ridge_retrieval", "pair_retrieval", "mutual_knn_last", "linear_cka_last"]

ALPHAS = tuple(10.0 ** k for k in range(-2, 5))


def _standardise(train: np.ndarray, test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mu, sd = train.mean(0), train.std(0)
    sd = np.where(sd > 1e-8, sd, 1.0)
    return (train - mu) / sd, (test - mu) / sd


def ridge_retrieval(x, y, *, train, test, alphas=ALPHAS) -> float:
    """Top-1 retrieval accuracy of a ridge map x → y, fitted on ``train`` rows, scored on ``test`` rows."""
    from sklearn.linear_model import RidgeCV

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y):
        raise ValueError(f"x and y must be N x d arrays of the same N, got {x.shape} and {y.shape}")
    train, test = np.asarray(train), np.asarray(test)
    if len(test) < 2 or len(train) < 2:
        raise ValueError(f"train ({len(train)}) and test ({len(test)}) need at least 2 items each")
    xtr, xte = _standardise(x[train], x[test])
    ytr, yte = _standardise(y[train], y[test])
    pred = RidgeCV(alphas=alphas).fit(xtr, ytr).predict(xte)
    pred /= np.linalg.norm(pred, axis=1, keepdims=True) + 1e-12
    yte /= np.linalg.norm(yte, axis=1, keepdims=True) + 1e-12
    return float(np.mean((pred @ yte.T).argmax(1) == np.arange(len(test))))


def pair_retrieval(x, y, *, train, test, alphas=ALPHAS) -> dict[str, float]:
    """Both directions and their mean (the pair's alignment score); chance = 1 / len(test)."""
    ab = ridge_retrieval(x, y, train=train, test=test, alphas=alphas)
    ba = ridge_retrieval(y, x, train=train, test=test, alphas=alphas)
    return {"a_to_b": ab, "b_to_a": ba, "retrieval": (ab + ba) / 2, "chance": 1.0 / len(test)}


def mutual_knn_last(x, y, *, topk: int = 10, quantile: float = 0.95) -> float:
    """The engine's mutual k-NN (PRH eq. 11, clamp + L2 as ``prh.metrics``) on one layer of each model."""
    from prh.metrics.engine import layer_pair_scores
    from prh.metrics.registry import prepare_features

    a = prepare_features(torch.as_tensor(np.asarray(x, dtype=np.float32))[:, None], quantile)
    b = prepare_features(torch.as_tensor(np.asarray(y, dtype=np.float32))[:, None], quantile)
    return float(layer_pair_scores("mutual_knn", a, b, topk=topk).best_score)


def linear_cka_last(x, y) -> float:
    """Linear CKA of two feature matrices (``prh.metrics.kernel`` states), the feature-similarity covariate."""
    from prh.metrics.kernel import centered_gram, gram_scores

    ga = centered_gram(torch.as_tensor(np.asarray(x, dtype=np.float64)))
    gb = centered_gram(torch.as_tensor(np.asarray(y, dtype=np.float64)))
    return float(gram_scores(ga[None], gb[None])[0, 0])
