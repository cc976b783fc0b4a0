"""Alignment against the number of items N: raw and calibrated scores, and the null, per N.

The library part of the sample_size study (``prh.studies.sample_size``).

Every effect the Aristotelian critique (Gröger, Wen and Brbić, ICML 2026) reads in raw alignment
depends on N: under independence chance CKA grows as d/N and chance mutual k-NN is k/(N - 1) (two
random k-subsets of the other N - 1 items share k²/(N - 1) on average, divided by k). A sweep takes
one pair of feature sets of the same items and, for each N of a grid, the first N items of one seeded
permutation (nested subsets, so a larger N only adds items), and scores:

* the k-NN metrics (``mutual_knn``, ``cknna``) through the alignment engine itself
  (``prh.metrics.layer_pair_scores`` on that N × 1 × D layer: the same clamp, normalisation and
  permutation null as ``prh align``), at k fixed and at k / N fixed (``k_fraction``);
* linear CKA from the features (``linear_cka``: ‖X̃ᵀỸ‖²_F / (‖X̃ᵀX̃‖_F ‖ỸᵀỸ‖_F), X̃ the centred
  rows; O(N D²) memory D², never the N × N Gram the engine's ``cka`` holds), with its own
  permutation null over the rows of Y;

each with its null mean and spread and the calibrated score (raw minus the null mean), the score the
PRH's null correction reports.

    >>> cells = sweep(feats_a, feats_b, grid=[1000, 3000, 10000], k_fixed=10, k_fraction=0.01,
    ...               metrics=["mutual_knn", "cknna", "cka"], permutations=20, quantile=0.95, seed=0)
"""

from __future__ import annotations

import numpy as np

__all__ = ["subsets", "linear_cka", "linear_cka_null", "knn_state", "cell", "kernel_cell", "k_modes", "sweep", "KNN_SWEEP_METRICS", "KERNEL_METRICS"]

KNN_SWEEP_METRICS = ("mutual_knn", "cknna")  # scored by the engine; "cka" by linear_cka
KERNEL_METRICS = ("mutual_knn", "cka")  # against a kernel given as an N x N matrix (kernel_cell)


def subsets(n_total: int, grid, *, seed: int) -> dict[int, np.ndarray]:
    """{N: the first N items of one seeded permutation of range(n_total)} for each N of ``grid`` (nested)."""
    grid = [int(n) for n in grid]
    if not grid or sorted(set(grid)) != grid:
        raise ValueError(f"grid must be increasing distinct sizes, got {grid}")
    if grid[0] < 3 or grid[-1] > n_total:
        raise ValueError(f"grid sizes must lie in [3, {n_total}] (the items there are), got {grid}")
    order = np.random.default_rng(seed).permutation(n_total)
    return {n: np.sort(order[:n]) for n in grid}


def _centred(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"features must be N x D, got shape {x.shape}")
    return x - x.mean(axis=0)


def linear_cka(x, y) -> float:
    """Linear CKA of two N × D feature sets from the features (equal to the engine's ``cka`` of them)."""
    xc, yc = _centred(x), _centred(y)
    if len(xc) != len(yc):
        raise ValueError(f"x and y must hold the same items, got {len(xc)} and {len(yc)}")
    den = np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc)
    return float(np.linalg.norm(xc.T @ yc) ** 2 / den) if den > 0 else float("nan")


def linear_cka_null(x, y, *, permutations: int, seed: int) -> dict:
    """Linear CKA of x against row-permuted y, ``permutations`` times (seeded): mean, std, the observed score
    and its permutation p (the +1 counting the observed pairing)."""
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    xc, yc = _centred(x), _centred(y)
    den = np.linalg.norm(xc.T @ xc) * np.linalg.norm(yc.T @ yc)
    rng = np.random.default_rng(seed)
    null = np.array([np.linalg.norm(xc.T @ yc[rng.permutation(len(yc))]) ** 2 / den for _ in range(permutations)])
    raw = linear_cka(x, y)
    return {"raw": raw, "null_mean": float(null.mean()), "null_std": float(null.std()),
            "p": float((1 + np.sum(null >= raw)) / (1 + permutations))}


def knn_state(metric: str, a, *, k: int, quantile: float, device: str = "cpu"):
    """The engine's state of one layer's features (N x D) for a k-NN metric, as ``prh align`` builds it:
    clamped at the quantile, float32, rows L2-normalised, k nearest items. A sweep reuses it across pairs."""
    return knn_states([metric], a, k=k, quantile=quantile, device=device)[metric]


def knn_states(metrics, a, *, k: int, quantile: float, device: str = "cpu") -> dict:
    """``{metric: knn_state(metric, a)}`` for several k-NN metrics from one neighbour search
    (``registry.layer_state_set``: the same tensors each metric computes alone). The search runs on ``device``
    (the O(N² D) part); the states come back to the CPU, where the O(N k) scoring and nulls run."""
    import torch

    from prh.metrics import prepare_features
    from prh.metrics.registry import as_tensor, layer_state_set, stack_states

    x = as_tensor(prepare_features(np.asarray(a)[:, None], quantile), ndim=3, name="features", dtype=torch.float32)
    found = layer_state_set(list(metrics), x[:, 0, :], topk=k, device=device)
    cpu = {m: ({key: v.cpu() for key, v in s.items()} if isinstance(s, dict) else s.cpu()) for m, s in found.items()}
    return {m: stack_states(m, [cpu[m]]) for m in metrics}


def cell(metric: str, a, b, *, k: int, quantile: float, permutations: int, seed: int, states=None) -> dict:
    """One (metric, N, k) cell: raw score, null mean and spread, calibrated score (raw - null mean), p.
    ``states``: the two ``knn_state`` of a k-NN metric, when the caller already holds them."""
    from prh.metrics.calibration import best_pair, permutation_null
    from prh.metrics.registry import pair_scores

    if states is not None and any((s["idx"] if isinstance(s, dict) else s).shape[-1] != k for s in states):
        raise ValueError(f"the states given hold another k than k = {k}")
    a, b = np.asarray(a), np.asarray(b)  # as given: prh align clamps the features as they were saved
    n = len(a)
    if metric == "cka":
        out = linear_cka_null(_prepared(a, quantile), _prepared(b, quantile), permutations=permutations, seed=seed)
    elif metric in KNN_SWEEP_METRICS:
        if not 1 <= k < n:
            raise ValueError(f"k = {k} must lie in [1, N - 1 = {n - 1}]")
        sa, sb = states if states is not None else (knn_state(metric, x, k=k, quantile=quantile) for x in (a, b))
        scores = pair_scores(metric, sa, sb).cpu().numpy()
        c = permutation_null(metric, sa, sb, permutations=permutations, seed=seed, observed=scores)
        out = {"raw": float(best_pair(scores)[0]), "null_mean": c["null_max_mean"], "null_std": c["null_max_std"],
               "p": c["p_value"], **_aristotelian(c)}
    else:
        raise ValueError(f"metric {metric!r}: the sweep scores {[*KNN_SWEEP_METRICS, 'cka']}")
    chance = k / (n - 1) if metric == "mutual_knn" else None
    return {"metric": metric, "n": n, "k": k if metric != "cka" else None, **out,
            "calibrated": out["raw"] - out["null_mean"], "chance": chance}


def _aristotelian(null: dict) -> dict:
    """The Aristotelian calibrated score over the cell's own permutations (``permutation_null``), beside
    ``calibrated`` (raw - null mean, this project's) which the pre-registered claims still read."""
    a = null["aristotelian"]
    return {"aristotelian": a["calibrated"], "aristotelian_tau": a["tau"]}


def _prepared(a, quantile: float) -> np.ndarray:
    """One layer N x D as the engine reads it: clamped at the quantile, rows L2-normalised (float64)."""
    from prh.metrics import prepare_features

    x = prepare_features(np.asarray(a)[:, None], quantile)[:, 0].numpy().astype(np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def kernel_cell(metric: str, a, kernel, *, k: int, quantile: float, permutations: int, seed: int) -> dict:
    """A model's features (N x D) against a kernel on the same items (N x N, e.g. ``prh.data.shapes.world_kernel``):
    ``mutual_knn`` with the kernel's k nearest items (largest K, the item itself excluded) through the engine's
    state and permutation null; ``cka`` as kernel CKA <K~, L~> / (|K~| |L~|), L = the prepared features' linear
    kernel, K~ = H K H, computed as sum(X * (K~ X)) without forming L, its null over permuted rows of X."""
    import torch

    from prh.metrics.calibration import permutation_null
    from prh.metrics.registry import layer_states, pair_scores

    kernel = np.asarray(kernel, dtype=np.float64)
    n = len(kernel)
    if kernel.shape != (n, n) or len(a) != n:
        raise ValueError(f"kernel must be N x N over the features' N = {len(a)} items, got {kernel.shape}")
    if metric == "mutual_knn":
        if not 1 <= k < n:
            raise ValueError(f"k = {k} must lie in [1, N - 1 = {n - 1}]")
        sims = torch.as_tensor(kernel.copy())
        sims.fill_diagonal_(float("-inf"))
        state_k = torch.topk(sims, k, dim=1, sorted=True).indices[None]
        state_a = layer_states(metric, torch.as_tensor(_prepared(a, quantile), dtype=torch.float32)[:, None], topk=k,
                               normalize=False)
        raw = float(pair_scores(metric, state_a, state_k)[0, 0])
        c = permutation_null(metric, state_a, state_k, permutations=permutations, seed=seed)
        out = {"raw": raw, "null_mean": c["null_max_mean"], "null_std": c["null_max_std"], "p": c["p_value"],
               **_aristotelian(c)}
    elif metric == "cka":
        x = _prepared(a, quantile)
        kc = kernel - kernel.mean(0) - kernel.mean(1)[:, None] + kernel.mean()
        xc = x - x.mean(0)
        den = np.linalg.norm(kc) * np.linalg.norm(xc.T @ xc)
        rng = np.random.default_rng(seed)
        score = lambda z: float(np.sum(z * (kc @ z)) / den)  # noqa: E731
        raw = score(xc)
        null = np.array([score(xc[rng.permutation(n)]) for _ in range(permutations)])
        out = {"raw": raw, "null_mean": float(null.mean()), "null_std": float(null.std()),
               "p": float((1 + np.sum(null >= raw)) / (1 + permutations))}
    else:
        raise ValueError(f"metric {metric!r}: a kernel is scored with {list(KERNEL_METRICS)}")
    return {"metric": metric, "n": n, "k": k if metric != "cka" else None, **out,
            "calibrated": out["raw"] - out["null_mean"], "chance": k / (n - 1) if metric == "mutual_knn" else None}


def k_modes(metric: str, n: int, *, k_fixed: int, k_fraction: float,
            fraction_max_n: int | None = None) -> list[tuple[str, int]]:
    """The (k_mode, k) cells of one metric at N = n: a k-NN metric at k = ``k_fixed`` ("fixed") and at
    k = max(2, round(``k_fraction`` n)) ("fraction"; CKNNA needs k >= 2) up to N = ``fraction_max_n`` (None: every
    N; its N x k neighbour lists outgrow memory at large N); any other metric once ("none": k unused)."""
    if metric not in KNN_SWEEP_METRICS:
        return [("none", k_fixed)]
    if fraction_max_n is not None and n > fraction_max_n:
        return [("fixed", k_fixed)]
    return [("fixed", k_fixed), ("fraction", max(2, round(k_fraction * n)))]


def sweep(a, b, *, grid, metrics, k_fixed: int, k_fraction: float, quantile: float, permutations: int,
          seed: int, progress: bool = False) -> list[dict]:
    """Every cell of the sweep (module docstring): for each N of ``grid`` and metric, the k-NN metrics at
    k = ``k_fixed`` (``k_mode`` "fixed") and at k = max(2, round(``k_fraction`` N)) (``k_mode`` "fraction";
    CKNNA needs k >= 2)."""
    from tqdm import tqdm

    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2 or len(a) != len(b):
        raise ValueError(f"a and b must be N x D features of the same items, got {a.shape} and {b.shape}")
    if not 0 < k_fraction < 1:
        raise ValueError(f"k_fraction must lie in (0, 1), got {k_fraction}")
    cells = []
    parts = subsets(len(a), grid, seed=seed)
    jobs = [(n, m, mode, k) for n in parts for m in metrics for mode, k in k_modes(m, n, k_fixed=k_fixed,
                                                                                 k_fraction=k_fraction)]
    for n, metric, mode, k in tqdm(jobs, desc="sample-size sweep", disable=not progress):
        idx = parts[n]
        cells.append({**cell(metric, a[idx], b[idx], k=k, quantile=quantile, permutations=permutations, seed=seed),
                      "k_mode": mode})
    return cells
