"""Small statistics shared by the studies (bottom layer: numpy and scipy only)."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata, spearmanr

__all__ = ["depth_trend", "spearman_permutation", "cluster_permutation", "checkpoint_run_level", "holm", "sign_flip"]

ALTERNATIVES = ("greater", "less", "two-sided")
# permuted r within this of the observed r counts as ">=": the identity permutation (and any that
# only swaps tied ranks) reproduces the observed r up to float rounding and must count.
TIE_TOL = 1e-12


def depth_trend(depths, values) -> dict:
    """Spearman ρ_s of ``values`` against ``depths`` (pooled pairs) with its two-sided p-value;
    non-finite values (e.g. diverged training runs) are left out."""
    depths, values = np.asarray(depths, float).ravel(), np.asarray(values, float).ravel()
    keep = np.isfinite(values)
    depths, values = depths[keep], values[keep]
    res = spearmanr(depths, values)
    return {"spearman_rho": float(res.statistic), "p_value": float(res.pvalue), "n": int(depths.size)}


def spearman_permutation(x, y, *, permutations: int = 10000, alternative: str = "greater", seed: int = 0,
                         chunk: int = 2000) -> dict:
    """Spearman r of two paired samples with a permutation p-value (one point per unit).

    r = Pearson correlation of the average ranks (ties share their mean rank). Under the
    null that the pairing is arbitrary, y's ranks are shuffled P times (seeded; computed in
    chunks of ``chunk`` permutations as one matrix product each) and, with the +1 of
    Phipson & Smyth (2010) counting the observed pairing as one draw of the null::

        greater:   p = (1 + #{r_π >= r}) / (1 + P)
        less:      p = (1 + #{r_π <= r}) / (1 + P)
        two-sided: p = (1 + #{|r_π| >= |r|}) / (1 + P)

    so p is never 0 and is uniform-or-conservative under the null; its resolution is 1/(P+1).

    Parameters
    ----------
    x, y : 1-D sequences of n >= 3 finite numbers, neither constant
    permutations : P >= 1
    alternative : "greater" (r > 0 expected), "less" or "two-sided"
    seed : seeds the permutations (same call, same p)

    Returns
    -------
    dict: ``spearman_r``, ``p_permutation``, ``n``, ``permutations``, ``alternative``, ``seed``
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.ndim != 1 or y.ndim != 1 or x.size != y.size:
        raise ValueError(f"x and y must be 1-D of equal length, got shapes {x.shape} and {y.shape}")
    if x.size < 3:
        raise ValueError(f"x and y need at least 3 points for a rank correlation, got {x.size}")
    for name, v in (("x", x), ("y", y)):
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{name} has NaN or infinite values at {np.flatnonzero(~np.isfinite(v)).tolist()}: "
                             "drop those units first")
        if np.ptp(v) == 0:
            raise ValueError(f"{name} is constant: its rank correlation is undefined")
    if int(permutations) != permutations or permutations < 1:
        raise ValueError(f"permutations must be an integer >= 1 (10000 for a reported p), got {permutations}")
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    rx, ry = rankdata(x), rankdata(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    scale = np.sqrt((rx @ rx) * (ry @ ry))
    r = float(rx @ ry / scale)
    rng = np.random.default_rng(seed)
    exceed, done = 0, 0
    while done < permutations:
        m = min(chunk, permutations - done)
        r_perm = rng.permuted(np.broadcast_to(ry, (m, ry.size)), axis=1) @ rx / scale
        if alternative == "greater":
            exceed += int(np.sum(r_perm >= r - TIE_TOL))
        elif alternative == "less":
            exceed += int(np.sum(r_perm <= r + TIE_TOL))
        else:
            exceed += int(np.sum(np.abs(r_perm) >= abs(r) - TIE_TOL))
        done += m
    return {"spearman_r": r, "p_permutation": (1 + exceed) / (1 + permutations), "n": int(x.size),
            "permutations": int(permutations), "alternative": alternative, "seed": seed}


def cluster_permutation(x, y, clusters, *, alternative: str = "greater") -> dict:
    """Spearman r over every unit with a p-value from permuting whole clusters (checkpoints of one
    training run are a cluster, not exchangeable units).

    ``clusters`` names each unit's cluster; every cluster holds the same number of units, given in the same
    within-cluster order (e.g. checkpoints by step). Under the null that competence and alignment are
    unrelated beyond what every run shares (its step structure), run i's x may be paired with run j's y
    block: all c! block permutations are enumerated (c <= 8 clusters) and, as in ``spearman_permutation``,
    p = #{r_π >= r} / c! with the identity among them. Its resolution is 1 / c!: 6 runs reach 1/720."""
    import itertools
    import math

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    names = list(dict.fromkeys(clusters))
    if len(clusters) != x.size or x.size != y.size:
        raise ValueError(f"x, y and clusters must pair up, got {x.size}, {y.size} and {len(clusters)}")
    idx = [np.flatnonzero(np.asarray(clusters, dtype=object) == c) for c in names]
    if len({len(i) for i in idx}) != 1:
        raise ValueError(f"clusters differ in size ({ {c: len(i) for c, i in zip(names, idx)} }): "
                         "block permutations need equal clusters (the same checkpoints in every run)")
    if not 2 <= len(names) <= 8:
        raise ValueError(f"{len(names)} clusters: the exact block permutation needs 2 to 8")
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    r = spearman_permutation(x, y, permutations=1)["spearman_r"]
    rx = rankdata(x)
    count = 0
    for perm in itertools.permutations(range(len(names))):
        yp = np.empty_like(y)
        for i, j in enumerate(perm):
            yp[idx[i]] = y[idx[j]]
        ry = rankdata(yp)
        rp = float(np.corrcoef(rx, ry)[0, 1])
        count += (rp >= r - TIE_TOL if alternative == "greater" else rp <= r + TIE_TOL if alternative == "less"
                  else abs(rp) >= abs(r) - TIE_TOL)
    total = math.factorial(len(names))
    return {"spearman_r": r, "p_permutation": count / total, "n": int(x.size), "clusters": len(names),
            "permutations": total, "alternative": alternative}


def checkpoint_run_level(names, x, y) -> dict:
    """Spearman r over checkpoints named ``<run>_<steps>`` with p-values from permuting whole runs (Fig 4 and
    the platonic language reference counted every checkpoint as an independent model): step-0 checkpoints are left
    out (the untrained model of a family belongs to no run's training), the rest must form at least 2 runs holding
    the same steps; ``cluster_permutation`` both ways. Returns ``spearman_r`` (over the points kept), ``p_greater``,
    ``p_less``, ``runs``, ``n``; or ``p_greater`` None with a ``reason``."""
    import re

    names, x, y = list(names), np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if not (len(names) == x.size == y.size):
        raise ValueError(f"names, x and y must pair up, got {len(names)}, {x.size} and {y.size}")
    parsed = [re.fullmatch(r"(.+)_(\d+)", str(n)) for n in names]
    bad = [n for n, m in zip(names, parsed) if m is None]
    if bad:
        return {"p_greater": None, "p_less": None, "reason": f"{bad[:3]} are no <run>_<steps> checkpoints"}
    keep = sorted((m.group(1), int(m.group(2)), i) for i, m in enumerate(parsed) if int(m.group(2)) > 0)
    steps = {}
    for run, step, _ in keep:
        steps.setdefault(run, []).append(step)
    if len(steps) < 2 or len({tuple(v) for v in steps.values()}) != 1 or len(next(iter(steps.values()))) < 2:
        return {"p_greater": None, "p_less": None, "reason": f"the checkpoints form no equal runs: {steps}"}
    if len(steps) > 8:
        return {"p_greater": None, "p_less": None, "reason": f"{len(steps)} runs: the exact block permutation takes 2 to 8"}
    idx = [i for *_, i in keep]
    clusters = [run for run, *_ in keep]
    try:
        up = cluster_permutation(x[idx], y[idx], clusters, alternative="greater")
        down = cluster_permutation(x[idx], y[idx], clusters, alternative="less")
    except ValueError as err:  # e.g. a constant variable
        return {"p_greater": None, "p_less": None, "reason": str(err)}
    return {"spearman_r": up["spearman_r"], "p_greater": up["p_permutation"], "p_less": down["p_permutation"],
            "runs": len(steps), "n": len(idx), "permutations": up["permutations"]}


def holm(pvalues) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the input order.

    With p_(1) <= ... <= p_(m) sorted: p̃_(i) = min(1, max_{j <= i} (m - j + 1) p_(j)),
    monotone in the sorted order; reject H_(i) at level α when p̃_(i) < α (controls the
    family-wise error rate under any dependence).
    """
    p = np.asarray(pvalues, dtype=float).ravel()
    if p.size and (not np.all(np.isfinite(p)) or p.min() < 0 or p.max() > 1):
        raise ValueError(f"pvalues must be finite numbers in [0, 1], got {p.tolist()}")
    order = np.argsort(p, kind="stable")
    m = p.size
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted
    return out.tolist()


def sign_flip(effects, *, max_exact: int = 20) -> dict:
    """The exact one-sided sign-flip test of independent per-run effects (positive = the claimed direction): under
    the null each run's effect is symmetric about 0, so all 2^n sign patterns are equally likely, and
    p = #{mean of the flipped effects >= the observed mean} / 2^n (the identity among them), ``p_less`` the
    other way. Its smallest p is 2^-n: 4 runs cannot reach 0.05 (``min_p`` 0.0625), 5 can (0.031).

    Returns ``mean``, ``p`` (greater), ``p_less``, ``n``, ``min_p``."""
    import itertools

    e = np.asarray(effects, dtype=float).ravel()
    if e.size == 0 or not np.all(np.isfinite(e)):
        raise ValueError(f"sign_flip needs one finite effect per run, got {e.tolist()}")
    if e.size > max_exact:
        raise ValueError(f"{e.size} runs: the exact sign-flip enumerates 2^n patterns, n <= {max_exact}")
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=e.size)))
    means = signs @ e / e.size
    m = float(e.mean())
    total = signs.shape[0]
    return {"mean": m, "p": int(np.sum(means >= m - TIE_TOL)) / total, "p_less": int(np.sum(means <= m + TIE_TOL)) / total,
            "n": int(e.size), "min_p": 1 / total}
