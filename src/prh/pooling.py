"""Pooled tests, power and exact nulls for the verdict engine (``prh.claims``): one test over independent
replicates whose unit is the run (an exact sum-of-Spearman permutation test, a random-effects meta-analysis, Fisher's
z and Fisher's combined p), the smallest p an exact null allows at n (``spearman_min_p``: what makes a rule "not
testable"), and the minimum detectable effect at 80 % power. Plain statistics: no labels are chosen here."""

from __future__ import annotations

import functools
import math

import numpy as np

__all__ = ["POWER", "EXACT_MAX_N", "SPEARMAN_Z_VAR", "normal_quantile", "spearman_null", "spearman_min_p",
           "pooled_spearman", "random_effects", "fisher_z_meta", "mde_correlation", "mde_difference", "fisher_combined",
           "replicate_mean", "spearman_to_pearson", "pooled_spearman_power", "runs_for_power", "power_main"]


POWER = 0.8


EXACT_MAX_N = 8  # Spearman's null is enumerated (n! orderings) up to this n, drawn above it


def normal_quantile(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))


def spearman_null(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact null of Spearman's r at ``n`` untied units: (values, probabilities) over all n! orderings
    (3 <= n <= ``EXACT_MAX_N``)."""
    if not 3 <= n <= EXACT_MAX_N:
        raise ValueError(f"the exact Spearman null is enumerated for 3 <= n <= {EXACT_MAX_N}, got n={n}")
    r, p = _spearman_null(int(n))
    return r.copy(), p.copy()


@functools.cache
def _spearman_null(n: int) -> tuple[np.ndarray, np.ndarray]:
    import itertools

    perms = np.array(list(itertools.permutations(range(n))))
    d2 = ((perms - np.arange(n)) ** 2).sum(axis=1)
    values, counts = np.unique(d2, return_counts=True)
    r = 1 - 6 * values / (n * (n * n - 1))
    order = np.argsort(r)
    return r[order], counts[order] / counts.sum()


def _convolve(dists):
    """The distribution of a sum of independent discrete variables, each (values, probabilities)."""
    values, probs = np.array([0.0]), np.array([1.0])
    for v, p in dists:
        s = np.round((values[:, None] + v[None, :]).ravel(), 10)
        q = (probs[:, None] * p[None, :]).ravel()
        values, inv = np.unique(s, return_inverse=True)
        probs = np.bincount(inv, weights=q)
    return values, probs


def spearman_min_p(ns, tests: int = 1, *, sides: int = 2) -> float:
    """The smallest p a (pooled) Spearman test can reach over replicates of ``ns`` untied units each, Holm over
    ``tests`` co-primary tests (its first step: ``tests`` x p): tests x sides x prod(1 / n_i!), capped at 1
    (``sides`` 1: a one-sided test). One replicate of 4 runs, two predictors, one-sided: 2 / 24 = 0.083, so the
    amended Fig 3 test can never fire at 0.05 on 4 runs; on 5 it can (2 / 120 = 0.017)."""
    ns = [int(n) for n in ns]
    if not ns or min(ns) < 2:
        raise ValueError(f"every replicate needs n >= 2 units, got {ns}")
    if sides not in (1, 2):
        raise ValueError(f"sides must be 1 or 2, got {sides}")
    return float(min(1.0, tests * sides / math.prod(math.factorial(n) for n in ns)))


def pooled_spearman(rs, ns, *, permutations: int = 100_000, seed: int = 0) -> dict:
    """One test of a "rises with" claim over independent replicates: the statistic is the sum of the replicates'
    Spearman r (each signed in the claimed direction), its null the replicates' own permutation nulls, each
    permuting that replicate's units only (stratified by replicate), summed. Exact (convolution of the n!
    orderings) where every n <= ``EXACT_MAX_N``; otherwise ``permutations`` seeded draws, p = (1 + #) / (1 + P).
    Assumes untied ranks (the ledger records r and n, not the data).

    Returns ``statistic`` (sum of r), ``mean_r``, ``p_greater``, ``p_less``, ``p`` (two-sided: twice the smaller,
    capped at 1), ``min_p`` (``spearman_min_p``), ``null`` ("exact" or "permutation (P draws)")."""
    from prh.stats import TIE_TOL

    rs, ns = [float(r) for r in rs], [int(n) for n in ns]
    if not rs or len(rs) != len(ns):
        raise ValueError(f"one r per replicate and one n per replicate, got {len(rs)} and {len(ns)}")
    if any(not math.isfinite(r) or abs(r) > 1 + 1e-9 for r in rs) or min(ns) < 3:
        raise ValueError(f"r must be finite in [-1, 1] and every n >= 3, got r={rs}, n={ns}")
    s = sum(rs)
    if max(ns) <= EXACT_MAX_N:
        values, probs = _convolve([spearman_null(n) for n in ns])
        ge = float(probs[values >= s - 1e-9].sum())
        le = float(probs[values <= s + 1e-9].sum())
        null = "exact"
    else:
        rng = np.random.default_rng(seed)
        total = np.zeros(permutations)
        for n in ns:
            if n <= EXACT_MAX_N:
                v, p = spearman_null(n)
                total += rng.choice(v, size=permutations, p=p)
                continue
            ranks = np.arange(n, dtype=float) - (n - 1) / 2
            scale = ranks @ ranks
            for start in range(0, permutations, 2000):
                m = min(2000, permutations - start)
                total[start:start + m] += rng.permuted(np.broadcast_to(ranks, (m, n)), axis=1) @ ranks / scale
        ge = (1 + int(np.sum(total >= s - TIE_TOL))) / (1 + permutations)
        le = (1 + int(np.sum(total <= s + TIE_TOL))) / (1 + permutations)
        null = f"permutation ({permutations} draws)"
    return {"statistic": s, "mean_r": s / len(rs), "p_greater": ge, "p_less": le, "p": min(1.0, 2 * min(ge, le)),
            "min_p": spearman_min_p(ns), "null": null}


def random_effects(effects, ses, *, level: float = 0.95) -> dict:
    """A random-effects meta-analysis of one effect per independent replicate: DerSimonian-Laird tau^2, and the
    Hartung-Knapp-Sidik-Jonkman interval and p (t with k - 1 df; its variance never below DerSimonian-Laird's),
    which keeps run-to-run variation in the interval at k = 3. One replicate: its own normal interval.

    Returns ``estimate``, ``se``, ``interval``, ``p`` (two-sided), ``tau2``, ``k``, ``method``."""
    from scipy.stats import t as student

    y, se = np.asarray(effects, dtype=float), np.asarray(ses, dtype=float)
    if y.ndim != 1 or y.size == 0 or y.shape != se.shape:
        raise ValueError(f"one effect and one standard error per replicate, got {y.shape} and {se.shape}")
    if not (np.all(np.isfinite(y)) and np.all(np.isfinite(se)) and np.all(se > 0)):
        raise ValueError(f"effects must be finite and standard errors finite and > 0, got {y.tolist()}, {se.tolist()}")
    if not 0 < level < 1:
        raise ValueError(f"level must lie in (0, 1), got {level}")
    k = y.size
    w = 1 / se**2
    fixed = float(w @ y / w.sum())
    if k == 1:
        half = normal_quantile(0.5 + level / 2) * float(se[0])
        from scipy.stats import norm

        p = float(2 * norm.sf(abs(fixed) / se[0]))
        return {"estimate": fixed, "se": float(se[0]), "interval": [fixed - half, fixed + half], "p": p, "tau2": 0.0,
                "k": 1, "method": "one replicate: normal interval"}
    q = float(w @ (y - fixed) ** 2)
    tau2 = max(0.0, (q - (k - 1)) / (w.sum() - (w**2).sum() / w.sum()))
    ws = 1 / (se**2 + tau2)
    mu = float(ws @ y / ws.sum())
    var_dl = 1 / ws.sum()
    var_hk = float(ws @ (y - mu) ** 2 / ((k - 1) * ws.sum()))
    se_mu = math.sqrt(max(var_dl, var_hk))
    crit = float(student.ppf(0.5 + level / 2, k - 1))
    p = float(2 * student.sf(abs(mu) / se_mu, k - 1))
    return {"estimate": mu, "se": se_mu, "interval": [mu - crit * se_mu, mu + crit * se_mu], "p": p, "tau2": tau2,
            "k": k, "method": "random effects (DerSimonian-Laird tau^2, Hartung-Knapp t interval)"}


SPEARMAN_Z_VAR = 1.06  # var(atanh r_s) ~ 1.06 / (n - 3) (Fieller, Hartley & Pearson 1957)


def fisher_z_meta(rs, ns, *, level: float = 0.95, fixed: bool = False) -> dict:
    """``random_effects`` on Fisher's z of Spearman r (var 1.06 / (n - 3)), back on the r scale: ``estimate`` and
    ``interval`` are r. A replicate with n <= 3 has no z variance and is left out (None if none is left).
    ``fixed``: the strata of one design (sizes), not draws of replicates: the inverse-variance (fixed
    effect) mean and its normal interval (random effects over 2 strata would have 1 df, a t of 12.7)."""
    keep = [(float(r), int(n)) for r, n in zip(rs, ns) if n is not None and n > 3]
    if not keep:
        return None
    z = [math.atanh(max(-0.999999, min(0.999999, r))) for r, _ in keep]
    se = [math.sqrt(SPEARMAN_Z_VAR / (n - 3)) for _, n in keep]
    if fixed:
        w = np.array([1 / s**2 for s in se])
        mu, se_mu = float(w @ np.array(z) / w.sum()), float(1 / math.sqrt(w.sum()))
        half = normal_quantile(0.5 + level / 2) * se_mu
        return {"estimate": math.tanh(mu), "se": se_mu, "interval": [math.tanh(mu - half), math.tanh(mu + half)],
                "k": len(keep), "tau2": None, "method": "fixed effect (inverse variance) over strata on Fisher z, "
                                                         "var 1.06/(n-3), normal interval"}
    out = random_effects(z, se, level=level)
    return {**out, "estimate": math.tanh(out["estimate"]), "interval": [math.tanh(v) for v in out["interval"]],
            "method": out["method"] + " on Fisher z, var 1.06/(n-3)"}


def mde_correlation(ns, *, alpha: float, power: float = POWER, tests: int = 1) -> float | None:
    """The smallest correlation a pooled test over replicates of ``ns`` units detects with probability ``power`` at
    two-sided ``alpha`` (Holm over ``tests``: alpha / tests at its first step). Fisher-z approximation (var
    1.06 / (n - 3) per replicate, fixed effect): tanh((z_{1-alpha/(2 tests)} + z_power) / sqrt(sum (n_i - 3) / 1.06)).
    None when no replicate has n > 3."""
    info = sum((n - 3) / SPEARMAN_Z_VAR for n in ns if n is not None and n > 3)
    if info <= 0:
        return None
    return float(math.tanh((normal_quantile(1 - alpha / (2 * tests)) + normal_quantile(power)) / math.sqrt(info)))


def mde_difference(ses, *, alpha: float, power: float = POWER) -> float | None:
    """The smallest mean difference a pooled test over replicates with standard errors ``ses`` detects with
    probability ``power`` at two-sided ``alpha``: (z_{1-alpha/2} + z_power) x the fixed-effect pooled se (normal
    approximation; run-to-run variation would raise it)."""
    se = np.asarray([s for s in ses if s is not None and math.isfinite(s) and s > 0], dtype=float)
    if se.size == 0:
        return None
    return float((normal_quantile(1 - alpha / 2) + normal_quantile(power)) / math.sqrt(float((1 / se**2).sum())))


def fisher_combined(pvalues) -> float:
    """Fisher's combination of independent one-sided p-values: P(chi^2_{2k} >= -2 sum ln p) (conservative for the
    discrete p of a permutation test)."""
    from scipy.stats import chi2

    p = np.asarray(pvalues, dtype=float)
    if p.size == 0 or not np.all((p > 0) & (p <= 1)):
        raise ValueError(f"p-values must lie in (0, 1], got {p.tolist()}")
    return float(chi2.sf(-2 * np.log(p).sum(), 2 * p.size))


def replicate_mean(values, pvalues=None, *, level: float = 0.95, alpha: float = 0.05, power: float = POWER) -> dict:
    """One effect per independent run (the replicates' statistics, signed so that positive is the claimed direction),
    pooled with the run as the unit. Where every run states its own two-sided ``pvalues`` (a permutation test over
    the units inside it), each run's standard error is read back from its p (|effect| / z_{1-p/2}, conservative at a
    permutation p's floor) and the runs are pooled by ``random_effects``, so the interval holds both the sampling
    error inside a run and the run-to-run variation. Otherwise: a one-sample t over the runs (run-to-run variation
    only; the units inside a run are then not weighed). Needs 2 runs or more (one run: ``None``); every run exactly at
    no effect (all values 0, so t = 0/0: a statistic at its null by construction, such as a rule that never fires)
    is no test either (``None``), not a zero-width interval.

    Returns ``estimate``, ``interval`` (at ``level``), ``p`` (two-sided), ``k``, ``mde`` (the smallest effect the
    same test detects with probability ``power`` at two-sided ``alpha``) and ``method``."""
    from scipy.stats import t as student

    y = np.asarray(values, dtype=float)
    if y.ndim != 1 or not np.all(np.isfinite(y)):
        raise ValueError(f"values must be a list of finite numbers, got {values!r}")
    k = int(y.size)
    if k < 2:
        return None
    tq = lambda q: float(student.ppf(q, k - 1))  # noqa: E731
    mde_factor = tq(1 - alpha / 2) + tq(power)
    if pvalues is not None:
        p = np.clip(np.asarray(pvalues, dtype=float), 1e-300, 1 - 1e-6)  # p = 1: a huge se, a weight near 0
        if p.shape != y.shape:
            raise ValueError(f"{p.size} p-values for {k} runs")
        z = np.array([normal_quantile(1 - q / 2) for q in p])
        if np.all(z > 0) and np.all(y != 0):
            se = np.abs(y) / z
            meta = random_effects(y, se, level=level)
            return {"estimate": meta["estimate"], "interval": meta["interval"], "p": meta["p"], "k": k,
                    "mde": mde_factor * meta["se"],
                    "method": meta["method"] + "; each run's se read back from its own two-sided p"}
    mean, sd = float(y.mean()), float(y.std(ddof=1))
    if sd == 0 and mean == 0:  # t = 0/0: undefined
        return None
    se = sd / math.sqrt(k)
    half = tq(0.5 + level / 2) * se
    p = 0.0 if se == 0 else float(2 * student.sf(abs(mean) / se, k - 1))
    return {"estimate": mean, "interval": [mean - half, mean + half], "p": p, "k": k, "mde": mde_factor * se,
            "method": f"one-sample t over {k} independent runs (run-to-run variation only)"}


def spearman_to_pearson(rho: float) -> float:
    """The Pearson correlation of a bivariate normal whose population Spearman correlation is ``rho``:
    2 sin(pi rho / 6) (Pearson 1907); rho = 0.5 -> 0.518."""
    if not -1 <= rho <= 1:
        raise ValueError(f"rho={rho} must lie in [-1, 1]")
    return 2 * math.sin(math.pi * rho / 6)


def _rank_r(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman r of each row pair (continuous draws: no ties)."""
    n = x.shape[1]
    d = x.argsort(axis=1).argsort(axis=1) - y.argsort(axis=1).argsort(axis=1)
    return 1 - 6 * (d * d).sum(axis=1) / (n * (n * n - 1))


def pooled_spearman_power(ns, rho: float, *, alpha: float = 0.05, sides: int = 2, sims: int = 4000,
                          null_draws: int = 20000, seed: int = 0) -> float:
    """The power of ``pooled_spearman``'s test (the sum of the strata's Spearman r, each stratum permuted alone) over
    strata of ``ns`` independent runs each, when every stratum's population Spearman correlation is ``rho`` (> 0:
    the claimed direction): the share of ``sims`` simulated designs (bivariate normal runs, Pearson
    ``spearman_to_pearson(rho)``) whose p in the claimed direction, ``(1 + #null >= s) / (1 + null_draws)`` as
    ``pooled_spearman`` computes it, times ``sides`` (2: the ledger's two-sided p, ``prh.claims.weigh``), is below
    ``alpha``. The null is drawn, stratum by stratum, as ``pooled_spearman`` draws it. Seeded: the same arguments
    give the same number."""
    from prh.stats import TIE_TOL

    ns = [int(n) for n in ns]
    if not ns or min(ns) < 3 or sides not in (1, 2) or not 0 < alpha < 1 or min(sims, null_draws) < 1:
        raise ValueError(f"ns={ns} (each >= 3), sides={sides} (1 or 2), alpha={alpha} in (0, 1), sims={sims} and "
                         f"null_draws={null_draws} >= 1")
    rng = np.random.default_rng(seed)
    r_p = spearman_to_pearson(rho)
    null, stat = np.zeros(null_draws), np.zeros(sims)
    for n in ns:
        base = np.broadcast_to(np.arange(n), (null_draws, n))
        null += _rank_r(rng.permuted(base, axis=1), base)
        x = rng.standard_normal((sims, n))
        stat += _rank_r(x, r_p * x + math.sqrt(1 - r_p * r_p) * rng.standard_normal((sims, n)))
    null.sort()
    ge = null_draws - np.searchsorted(null, stat - TIE_TOL, side="left")
    p = (1 + ge) / (1 + null_draws)
    return float(np.mean(sides * p < alpha))


def runs_for_power(rho: float, *, strata: int = 1, alpha: float = 0.05, sides: int = 2, power: float = POWER,
                   max_per_stratum: int = 200, **kw) -> dict:
    """The fewest runs, ``strata`` equal strata of n each, with which ``pooled_spearman_power`` reaches ``power``:
    {"runs", "per_stratum", "power"} (None where even ``max_per_stratum`` per stratum does not)."""
    for n in range(3, max_per_stratum + 1):
        got = pooled_spearman_power([n] * strata, rho, alpha=alpha, sides=sides, **kw)
        if got >= power:
            return {"runs": n * strata, "per_stratum": n, "power": got}
    return {"runs": None, "per_stratum": None, "power": None}


def power_main(argv: list[str] | None = None) -> None:
    """``prh power-spearman``: the power of the pooled run-level Spearman test at a design, and the runs it needs."""
    import argparse
    import json

    from prh.errors import UsageError

    p = argparse.ArgumentParser(prog="prh power-spearman", description=power_main.__doc__.split(": ", 1)[1])
    p.add_argument("--ns", type=int, nargs="+", required=True, help="runs per stratum, e.g. 15 15 (2 sizes x 15 runs)")
    p.add_argument("--rho", type=float, default=0.5, help="population Spearman correlation of the effect")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--sides", type=int, default=2, choices=[1, 2])
    p.add_argument("--sims", type=int, default=4000)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if not 3 <= min(a.ns) <= max(a.ns) <= 1000 or not 0 < a.alpha < 1 or not -1 <= a.rho <= 1 or not 1 <= a.sims <= 10**6 or a.seed < 0:
        raise UsageError(f"--ns {a.ns} must each lie in 3..1000, --alpha {a.alpha} in (0, 1), --rho {a.rho} in [-1, 1], "
                         f"--sims {a.sims} in 1..10^6, --seed {a.seed} >= 0")
    kw = dict(alpha=a.alpha, sides=a.sides, sims=a.sims, seed=a.seed)
    out = {"ns": a.ns, "rho": a.rho, **kw, "power": pooled_spearman_power(a.ns, a.rho, **kw),
           "needed": runs_for_power(a.rho, strata=len(a.ns), max_per_stratum=100, **kw),
           "fisher_z_mde": mde_correlation(a.ns, alpha=a.alpha * (2 / a.sides))}
    print(json.dumps(out))
