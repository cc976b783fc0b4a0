"""Permutation nulls for alignment scores, including the null of the best layer pair.

The paper reports raw scores (e.g. 0.16 mutual-k-NN for the best LLM) and
leaves open what chance is. Shuffling which item of B is paired with which
item of A keeps each model's own geometry and destroys only their
correspondence, so it draws scores from the "no alignment" null. Shuffling is
cheap because it re-indexes the cached per-layer state of B
(``registry.permute_state``); nothing is recomputed from features, and a group of
permuted states is scored in one call, as one stack of B layers.

Taking the best of La × Lb layer pairs inflates the score above the
single-pair chance level (for mutual_knn, k/(N−1)), so the test statistic is
the maximum itself: for permutations π_1..π_P (one π for all layers of B)::

    null_max_p = max_{a,b} score(A_a, B_b[π_p])
    p_value    = (1 + #{p : null_max_p ≥ observed max}) / (1 + P)
    corrected  = observed max − mean_p null_max_p

The +1 counts the observed pairing as one draw of the null, so p is never 0
and is exactly uniform-or-conservative under the null (Phipson & Smyth 2010).
"""

from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from prh.metrics.registry import cat_states, layer_tensor, pair_scores, permute_state

__all__ = ["best_pair", "permutation_null", "aristotelian", "cell_seed"]

# bytes of permuted B states scored in one batch (the permutations are vectorised in groups)
NULL_CHUNK_BYTES = 256 << 20


def _nbytes(state) -> int:
    return sum(t.nbytes for t in state.values()) if isinstance(state, dict) else state.nbytes


def best_pair(scores) -> tuple[float, tuple[int, int] | None]:
    """Largest score of a La × Lb matrix and its (row, col), ignoring NaN; never assumes scores ≥ 0."""
    s = np.asarray(scores, dtype=np.float64)
    if s.size == 0 or np.all(np.isnan(s)):
        return float("nan"), None
    flat = int(np.nanargmax(s))
    a, b = np.unravel_index(flat, s.shape)
    return float(s[a, b]), (int(a), int(b))


def cell_seed(seed: int, *parts: int) -> int:
    """A seed for one cell of a table, independent of the order cells are computed in."""
    return int(np.random.SeedSequence([seed, *parts]).generate_state(1)[0])


def permutation_null(
    metric: str,
    state_a,
    state_b,
    *,
    permutations: int = 100,
    seed: int = 0,
    observed=None,
    progress: bool = False,
    alpha: float = 0.05,
    smax: float | None = 1.0,
) -> dict:
    """Permutation test of the best-layer-pair score of two models.

    Parameters
    ----------
    metric : str
    state_a, state_b : per-layer states (``registry.layer_states``) of the two models
    permutations : int
        Number P of random re-pairings of B's items; p-values have resolution 1/(P+1).
    seed : int
        Seeds the permutations: the same call gives the same numbers.
    observed : La × Lb array, optional
        The unpermuted score matrix, if already computed.
    alpha, smax : the Aristotelian calibration's level and the metric's largest attainable score (``aristotelian``)

    Returns
    -------
    dict with ``permutations``, ``seed``, ``best_score``, ``best_pair``,
    ``null_max_mean``, ``null_max_std``, ``p_value`` (of the max over layer
    pairs), ``corrected`` (best − null_max_mean: this project's "calibrated", named as what it is),
    ``null_pair_mean`` (chance level of the chosen layer pair alone), ``p_value_pair`` (that pair's
    permutation p-value, which ignores that the pair was chosen as the best) and ``aristotelian``
    (:func:`aristotelian`: the calibrated score of Gröger, Wen & Brbić over the same permutations).
    """
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1, got {permutations}")
    if observed is None:
        observed = pair_scores(metric, state_a, state_b).cpu().numpy()
    best, pair = best_pair(observed)
    first = layer_tensor(state_b)  # Lb × N × ...
    lb, n, device = first.shape[0], first.shape[1], first.device
    gen = torch.Generator().manual_seed(seed)
    perms = [torch.randperm(n, generator=gen).to(device) for _ in range(permutations)]
    # permutations scored together: their permuted states stacked as one B of g × Lb layers
    group = max(1, NULL_CHUNK_BYTES // max(1, _nbytes(state_b)))
    null_max = np.empty(permutations)
    null_pair = np.empty(permutations)
    starts = range(0, permutations, group)
    for start in tqdm(starts, desc=f"{metric} null", disable=not progress, leave=False):
        chunk = perms[start:start + group]
        stacked = cat_states(metric, [permute_state(metric, state_b, perm) for perm in chunk])
        s_all = pair_scores(metric, state_a, stacked).cpu().numpy()
        for g in range(len(chunk)):
            s = s_all[:, g * lb:(g + 1) * lb]
            null_max[start + g] = best_pair(s)[0]
            null_pair[start + g] = s[pair] if pair is not None else np.nan
    # an undefined best score (all NaN) has undefined p-values, not p = 1/(P+1)
    exceed_max = np.sum(null_max >= best) if pair is not None else np.nan
    exceed_pair = np.sum(null_pair >= best) if pair is not None else np.nan
    return {
        "permutations": permutations,
        "seed": seed,
        "best_score": best,
        "best_pair": pair,
        "null_max_mean": float(np.nanmean(null_max)),
        "null_max_std": float(np.nanstd(null_max)),
        "p_value": float((1 + exceed_max) / (1 + permutations)),
        "corrected": float(best - np.nanmean(null_max)),
        "null_pair_mean": float(np.nanmean(null_pair)),
        "p_value_pair": float((1 + exceed_pair) / (1 + permutations)),
        "aristotelian": aristotelian(best, null_max, alpha=alpha, smax=smax),
    }


def aristotelian(observed: float, null, *, alpha: float = 0.05, smax: float | None = 1.0) -> dict:
    """The calibrated score of the Aristotelian view (Gröger, Wen & Brbić; their package ``calibrated-similarity``,
    ``calibrate_layers`` with ``agg="max"``, Algorithm 2) from an observed aggregate and its permutation null (one
    permutation shared by every layer, as :func:`permutation_null` draws them)::

        tau        = the ceil((1 − alpha)(K + 1))-th smallest of {observed} ∪ null (K = len(null))
        p          = (1 + #{null ≥ observed}) / (K + 1)
        calibrated = clip((observed − tau) / (smax − tau), 0, 1)   (smax None: max(observed − tau, 0))

    Returns ``tau``, ``p``, ``calibrated``, ``alpha``, ``smax``; all None where the observed score is undefined.
    tests/test_aristotelian.py feeds their package the same permutations and asserts the same numbers."""
    import math

    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if smax is not None and smax <= 0:
        raise ValueError(f"smax must be positive, got {smax}")
    null = np.asarray(null, dtype=np.float64).ravel()
    if null.size == 0:
        raise ValueError("the null needs at least one permutation")
    if not np.isfinite(observed) or not np.all(np.isfinite(null)):
        return {"tau": None, "p": None, "calibrated": None, "alpha": alpha, "smax": smax}
    k = null.size
    combined = np.sort(np.concatenate([[observed], null]))
    idx = max(0, min(int(math.ceil((1.0 - alpha) * (k + 1))) - 1, k))
    tau = float(combined[idx])
    p = float((1 + np.sum(null >= observed)) / (k + 1))
    if smax is None:
        cal = max(float(observed) - tau, 0.0)
    else:
        cal = float(np.clip((observed - tau) / max(smax - tau, 1e-12), 0.0, 1.0))
    return {"tau": tau, "p": p, "calibrated": cal, "alpha": alpha, "smax": smax}
