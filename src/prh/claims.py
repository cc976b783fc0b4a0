"""The one verdict engine: every claim of every study gets its label here.

A verdict is one of four labels:

* ``not testable``: the rule cannot fire on this data (an undefined statistic, one paired unit, a base rate of 0 or
  1, too few units);
* ``inconclusive``: the rule can fire, but the data cannot tell (an interval straddling the equivalence margin, a
  validity gate not passed, an effect too small to read);
* ``reproduced`` / ``not reproduced``: the pre-registered rule passed / failed.

:func:`verdict` is the only function that picks a label; :func:`interval_verdict`, :func:`correlation_verdict` and
:func:`seeds_verdict` (independent runs) are rules written with it. :func:`replication` adds what the number of
independent runs allows: a "reproduced" that rests on fewer than ``MIN_SEEDS`` runs is marked "one seed: provisional"
(``provisional`` in the ledger). :func:`replicated_verdict` joins one claim's verdicts from independent replicates of
a whole study (the master seeds of ``claims.replicates``): the replication rule, fixed before the replicate run.

The weighed verdicts (``DECISION_RULE``, 2026-11-27): :func:`weigh` judges a claim from its replicates pooled, the run as unit, against its
smallest effect of interest (its manifest's ``decision``), with its power (MDE at 80 %); the registered verdict beside.
"""

from __future__ import annotations

import math

import numpy as np

from prh.pooling import (POWER, fisher_combined, fisher_z_meta, mde_correlation, mde_difference, normal_quantile,
                         pooled_spearman, random_effects, spearman_min_p)

__all__ = ["LABELS", "MIN_SEEDS", "PROVISIONAL", "verdict", "interval_verdict", "correlation_verdict", "correlation_row",
           "seeds_verdict", "replication", "replicated_verdict",
           # verdicts that weigh the evidence
           "DECISION_RULE", "KINDS", "weighed_verdict", "weigh", "check_decision", "run_level_fields"]

LABELS = ("reproduced", "not reproduced", "inconclusive", "not testable")
MIN_SEEDS = 3  # "reproduced" needs at least this many agreeing independent runs
PROVISIONAL = "one seed: provisional"


def verdict(passed: bool | None, *, testable: bool = True, conclusive: bool = True) -> str:
    """The label of a rule's outcome: ``passed`` None or ``testable`` False -> not testable; else ``conclusive`` False
    -> inconclusive; else reproduced / not reproduced."""
    if passed is None or not testable:
        return "not testable"
    if not conclusive:
        return "inconclusive"
    return "reproduced" if passed else "not reproduced"


def interval_verdict(kind: str, lo: float | None, hi: float | None, margin: float) -> str:
    """A "beats" (A - B > 0) or "matches" (|A - B| < margin) claim from an interval of A - B.

    beats: reproduced when lo > 0; not reproduced when hi < margin (no effect as large as the margin is compatible);
    inconclusive otherwise. matches: reproduced when the interval lies inside (-margin, margin); not reproduced when
    it lies wholly outside; inconclusive otherwise. No interval (one paired unit): not testable."""
    if kind not in ("beats", "matches"):
        raise ValueError(f"kind={kind!r} must be 'beats' or 'matches'")
    if lo is None or hi is None:
        return verdict(None)
    if kind == "beats":
        return verdict(lo > 0, conclusive=lo > 0 or hi < margin)
    inside, outside = -margin < lo and hi < margin, lo >= margin or hi <= -margin
    return verdict(inside, conclusive=inside or outside)


def correlation_verdict(r: float | None, p: float | None, n: int | None, *, alpha: float) -> str:
    """A "rises with" claim: reproduced when r > 0 with p < alpha; not testable where the test cannot reach alpha
    at n untied units (the exact null's smallest two-sided p, ``spearman_min_p``, is not below alpha:
    n <= 4 at 0.05, where a t-approximated p of r = 1 would read 0; ``n`` None: not recorded, not checked) or r
    or p is undefined (a constant variable)."""
    defined = r is not None and p is not None and math.isfinite(r) and math.isfinite(p)
    reachable = n is None or (n >= 2 and spearman_min_p([n]) < alpha)
    return verdict(bool(defined and r > 0 and p < alpha), testable=defined and reachable)


def seeds_verdict(effects, passed: bool | None, *, margin: float = 0.0) -> str:
    """A claim replicated over independent runs: ``effects`` holds one signed effect per run (positive =
    the claimed direction), ``passed`` whether the pre-registered statistic passed.

    not testable: the rule cannot fire (``passed`` None, no run, an undefined effect); inconclusive: the runs
    disagree in sign, or the mean effect lies within ``margin`` of 0;
    reproduced: passed and every run agrees (fewer than ``MIN_SEEDS`` runs: still "reproduced", and
    :func:`replication` marks it provisional); not reproduced otherwise."""
    effects = [float(e) for e in effects]
    if not effects or any(not math.isfinite(e) for e in effects):
        return verdict(None)
    disagree = any(e > 0 for e in effects) and any(e < 0 for e in effects)
    small = abs(sum(effects) / len(effects)) <= margin
    return verdict(passed, conclusive=not disagree and not small)


def correlation_row(stats: dict, alpha: float, seeds: int | None, *, r: str = "spearman_r", p: str = "spearman_p",
                    sign: int = 1) -> dict:
    """A ledger entry of a "rises with" (``sign`` 1) or "falls with" (-1) claim from a correlation
    record such as ``{"n", "spearman_r", "spearman_p"}`` (``r`` and ``p`` name its keys)."""
    value, n = stats.get(r), stats.get("n")
    signed = None if value is None else sign * value
    return {"value": value, "p": stats.get(p), "n": n, "seeds": seeds, "effect": signed,
            "verdict": correlation_verdict(signed, stats.get(p), n, alpha=alpha)}


def replication(label: str, seeds: int | None) -> dict:
    """The ledger's replication fields: ``seeds`` (independent runs behind the verdict; None where the
    study has no training runs, e.g. fixed checkpoints) and ``provisional`` (a "reproduced" or
    "not reproduced" on fewer than ``MIN_SEEDS`` runs, labelled ``PROVISIONAL``)."""
    if label not in LABELS:
        raise ValueError(f"verdict {label!r} is not one of {LABELS}")
    provisional = seeds is not None and seeds < MIN_SEEDS and label in ("reproduced", "not reproduced")
    return {"seeds": seeds, "provisional": PROVISIONAL if provisional else None}


def replicated_verdict(labels, effects=None) -> str:
    """One claim's verdict from independent replicates of its study (the replication rule of docs/replication.md, written
    down before the replicate run): ``labels`` holds each replicate's verdict under its own pre-registered
    rule, ``effects`` (optional, one per replicate, None where a replicate states none) its signed effect
    in the claimed direction.

    not testable: no replicate could test it (every label "not testable"); the replicates that cannot are
    left out of the rest. inconclusive: a testable replicate is inconclusive, the replicates' labels
    disagree (some reproduced, some not), or their effects disagree in sign. Otherwise the label they
    agree on; :func:`replication` marks it provisional when fewer than ``MIN_SEEDS`` replicates tested it."""
    labels = list(labels)
    bad = [x for x in labels if x not in LABELS]
    if bad:
        raise ValueError(f"verdicts {bad} are not among {LABELS}")
    effects = [None] * len(labels) if effects is None else list(effects)
    if len(effects) != len(labels):
        raise ValueError(f"{len(effects)} effects for {len(labels)} replicates")
    tested = [(x, e) for x, e in zip(labels, effects) if x != "not testable"]
    if not tested:
        return verdict(None)
    signs = {math.copysign(1.0, e) for _, e in tested if e is not None and math.isfinite(e) and e != 0}
    agree = len({x for x, _ in tested}) == 1 and tested[0][0] != "inconclusive" and len(signs) <= 1
    return verdict(tested[0][0] == "reproduced", conclusive=agree)


# Verdicts that weigh the evidence. The rule (DECISION_RULE), written before it was recomputed:
#
#   reproduced      the pooled two-sided test has p < alpha and its effect points the claimed way;
#   not reproduced  the pooled (1 - alpha) interval lies wholly below the claim's SESOI (an effect as large as the
#                   smallest one of interest is excluded; a significant effect the wrong way reads "not reproduced"
#                   only through this, so "not reproduced" is never said while the interval holds the SESOI);
#   inconclusive    everything else, a failed validity gate included;
#   not testable    the test cannot pass at this n: its smallest achievable p under the exact null is >= alpha.
#
# "reproduced" is read first: a significant effect whose interval also lies below the SESOI (possible only at large
# n) is reproduced, and its note says the effect is smaller than the SESOI.

DECISION_RULE = ("reproduced: pooled two-sided p < alpha, effect in the claimed direction; not reproduced: the pooled "
                 "(1 - alpha) interval lies wholly below the SESOI; not testable: the smallest p the exact null allows "
                 "at this n is not below alpha; otherwise inconclusive (a failed validity gate included)")


def weighed_verdict(*, effect: float | None, p: float | None, interval, sesoi: float, alpha: float,
                    min_p: float | None = None, gate: bool | None = True) -> str:
    """The issue-47 decision rule (``DECISION_RULE``) on a pooled result.

    ``effect``: the pooled estimate signed so that positive is the claimed direction; ``p``: the pooled two-sided p;
    ``interval``: its (1 - alpha) interval on the same signed scale (None: none computable); ``sesoi`` > 0: the
    smallest effect of interest on that scale; ``min_p``: the smallest two-sided p the exact null allows at this n
    (None: not bounded, e.g. a continuous approximation); ``gate``: a validity gate (False: not passed ->
    inconclusive; None: the gate could not be judged -> inconclusive)."""
    if not (isinstance(sesoi, (int, float)) and math.isfinite(sesoi) and sesoi > 0):
        raise ValueError(f"sesoi must be a positive number on the claim's scale, got {sesoi!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    if min_p is not None and min_p >= alpha:  # p < alpha is out of reach
        return verdict(None)
    finite = effect is not None and p is not None and math.isfinite(effect) and math.isfinite(p)
    if not finite:
        return verdict(None)
    if gate is not True:
        return verdict(True, conclusive=False)
    if p < alpha and effect > 0:
        return verdict(True)
    hi = None if interval is None or interval[1] is None else float(interval[1])
    excluded = hi is not None and math.isfinite(hi) and hi < sesoi
    return verdict(False, conclusive=excluded)


KINDS = ("correlation", "beats", "matches", "sign_flip", "descriptive", "run_mean", "run_matches", "tolerance")
CHOICES = {"direction": (1, -1), "own_p": (False, True), "strata": ("random", "fixed")}  # a decision's keys of few values


def check_decision(decision: dict, where: str = "claim") -> dict:
    """A claim's issue-47 decision block (its manifest's ``decision``), checked: ``kind`` (one of ``KINDS``), ``sesoi``
    (> 0, on the scale of the claim's effect: r for a correlation, the difference for beats/matches; none for
    descriptive, sign_flip, tolerance), ``reason`` (why), ``set`` (when, and what had been seen), optional ``direction``
    (1 rises, -1 falls), ``tests`` (the Holm family), ``interval_level`` (the level of the replicates' own intervals),
    ``runs`` (the independent runs inside one replicate when its recorded p counts units clustered in them),
    ``no_effect`` and ``own_p`` (run_mean / run_matches: the value at no effect; each replicate's ``p`` its own test),
    ``strata`` (correlation: "random" or "fixed"), ``note`` (descriptive / tolerance, which needs one: why no test)."""
    if not isinstance(decision, dict):
        raise ValueError(f"{where}: decision must be a mapping, got {decision!r}")
    known = {"kind", "sesoi", "reason", "set", "tests", "interval_level", "runs", "no_effect", "note", *CHOICES}
    extra = sorted(set(decision) - known)
    if extra:
        raise ValueError(f"{where}: decision has unknown keys {extra}; known: {sorted(known)}")
    kind = decision.get("kind")
    if kind not in KINDS:
        raise ValueError(f"{where}: decision kind {kind!r} is not one of {KINDS}")
    if kind not in ("descriptive", "sign_flip", "tolerance"):  # a sign-flip test of per-run effects needs no SESOI
        s = decision.get("sesoi")
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s) or s <= 0:
            raise ValueError(f"{where}: decision sesoi must be a number > 0, got {s!r}")
    for key in ("reason", "set", *(["note"] if "note" in decision or kind == "tolerance" else [])):
        if not isinstance(decision.get(key), str) or not decision[key].strip():
            raise ValueError(f"{where}: decision needs a non-empty {key!r}")
    for key, allowed in CHOICES.items():  # the first is the default; True is not 1 here
        if not any(decision.get(key, allowed[0]) == a and type(decision.get(key, allowed[0])) is type(a) for a in allowed):
            raise ValueError(f"{where}: decision {key} must be one of {list(allowed)}, got {decision[key]!r}")
    tests = decision.get("tests", 1)
    if isinstance(tests, bool) or not isinstance(tests, int) or tests < 1:
        raise ValueError(f"{where}: decision tests must be an integer >= 1, got {tests!r}")
    if not _finite(decision.get("no_effect", 0.0)):
        raise ValueError(f"{where}: decision no_effect must be a finite number, got {decision['no_effect']!r}")
    if (runs := decision.get("runs")) is not None and (isinstance(runs, bool) or not isinstance(runs, int) or runs < 2):
        raise ValueError(f"{where}: decision runs must be an integer >= 2, got {runs!r}")
    return decision


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def weigh(decision: dict, entries, *, alpha: float) -> dict:
    """The issue-47 verdict of one claim from its independent replicates (``entries``: each replicate's ledger
    entry, ``value``, ``p``, ``n``, ``interval``, optional ``gate``; one entry for a study run once), under its
    ``decision`` (``check_decision``).

    correlation: the pooled test is ``pooled_spearman`` on each replicate's r x direction at its n (its p x ``tests``:
    Holm's first step bounds the family's adjusted p); the interval ``fisher_z_meta``; the MDE ``mde_correlation``;
    testable when ``spearman_min_p`` x tests < alpha. With ``runs`` set, the recorded r and p count units clustered in
    that many runs: no test with the run as unit is recorded, so the verdict is inconclusive (or not testable when
    even ``runs`` untied units per replicate could not reach alpha) and the MDE is that of ``runs`` units. A replicate
    whose gate failed makes the verdict inconclusive. beats / matches: ``random_effects`` on the replicates' mean
    differences, each se from its own interval (width / (2 z), at ``interval_level``), judged by ``interval_verdict``
    at the SESOI (the margin); MDE ``mde_difference``. descriptive: not testable (no test with independent units);
    tolerance (a numerical check, not a test): ``verdict`` None, its registered rule stands; both show their ``note``.

    Returns ``verdict``, ``value`` (pooled, signed as recorded), ``interval``, ``p``, ``n`` (units per replicate),
    ``replicates`` (those that tested it), ``sesoi``, ``mde``, ``method`` and ``note``."""
    check_decision(decision)
    kind, sesoi, tests = decision["kind"], decision.get("sesoi"), decision.get("tests", 1)
    sign = decision.get("direction", 1)
    entries = list(entries)
    base = {"sesoi": sesoi, "mde": None, "value": None, "interval": None, "p": None, "n": None, "replicates": 0}
    if kind in ("descriptive", "tolerance"):
        values = [float(e["value"]) for e in entries if _finite(e.get("value"))]
        note = decision.get("note") or "descriptive: its units share models, so no test with independent units is made"
        return {**base, "verdict": verdict(None) if kind == "descriptive" else None, "method": kind, "note": note,
                "value": float(np.mean(values)) if values else None, "n": [e.get("n") for e in entries]}
    if kind == "sign_flip":
        return _weigh_sign_flip(entries, alpha=alpha, base=base)
    if kind in ("run_mean", "run_matches"):
        return _weigh_run_mean(decision, entries, alpha=alpha, base=base)
    if kind == "correlation":
        used = [e for e in entries if _finite(e.get("value")) and _finite(e.get("n")) and e["n"] >= 3]
        if not used:
            return {**base, "verdict": None, "method": "pooled Spearman", "note": "no replicate states r and n"}
        ns = [int(e["n"]) for e in used]
        gate = all(e.get("gate", True) is True for e in used)
        # a replicate's results may say how many runs its units sit in (None: independent units, e.g. the paper
        # suite's public checkpoints); otherwise the decision's offline count
        runs = next((e["runs"] for e in used if "runs" in e), decision.get("runs"))
        level = 1 - alpha
        if runs is not None and all(_finite(e.get("run_p_greater")) and _finite(e.get("run_p_less")) for e in used):
            # each replicate's run-level (cluster) permutation p, combined by Fisher's method, two-sided
            k = len(used)
            greater = fisher_combined([e["run_p_greater"] for e in used])
            less = fisher_combined([e["run_p_less"] for e in used])
            p = min(1.0, tests * 2 * min(greater, less))
            from scipy.stats import chi2

            best = min(1.0, tests * 2 * float(chi2.sf(2 * k * math.lgamma(runs + 1), 2 * k)))  # every p at 1/runs!
            # the direction is the side whose combined p is smaller (sign-only: no interval is computed here)
            direction = sign * (1.0 if greater < less else -1.0)
            label = weighed_verdict(effect=direction, p=p, interval=None, sesoi=sesoi, alpha=alpha, min_p=best,
                                    gate=gate)
            return {**base, "verdict": label, "value": float(np.mean([e["value"] for e in used])), "p": p, "n": ns,
                    "replicates": k, "mde": mde_correlation([runs] * k, alpha=alpha, tests=tests),
                    "method": f"permutation of {runs} whole clusters (runs, or Mantel items) per replicate, "
                              "Fisher-combined; no interval (the ledger cannot say not reproduced)",
                    "note": "cluster-level one-sided p per replicate: "
                            + " / ".join(f"{e['run_p_greater']:.3g}" for e in used)}
        if runs is not None:
            k = len(used)
            min_p = spearman_min_p([runs] * k, tests)
            mde = mde_correlation([runs] * k, alpha=alpha, tests=tests)
            label = verdict(None) if min_p >= alpha else verdict(True, conclusive=False)
            return {**base, "verdict": label, "value": float(np.mean([e["value"] for e in used])), "n": ns,
                    "replicates": k, "mde": mde, "method": f"no run-level test recorded ({runs} runs per replicate)",
                    "note": f"the recorded p counts {ns[0]} units clustered in {runs} runs as independent; "
                            "no test whose unit is the run is recorded"}
        effects = [sign * float(e["value"]) for e in used]
        pooled = pooled_spearman(effects, ns)
        p = min(1.0, tests * pooled["p"])
        meta = fisher_z_meta(effects, ns, level=level, fixed=decision.get("strata") == "fixed")
        interval = None if meta is None else meta["interval"]
        label = weighed_verdict(effect=pooled["mean_r"], p=p, interval=interval, sesoi=sesoi, alpha=alpha,
                                min_p=min(1.0, tests * pooled["min_p"]), gate=gate)
        value = sign * (meta["estimate"] if meta is not None else pooled["mean_r"])
        shown = None if interval is None else sorted(sign * v for v in interval)
        notes = [f"pooled sum of r {pooled['statistic']:.3g} over {len(used)} replicate(s), {pooled['null']} null"
                 + (f", x{tests} (Holm)" if tests > 1 else "")]
        if not gate:
            notes.append("validity gate not passed")
        if label == "reproduced" and interval is not None and interval[1] < sesoi:
            notes.append("significant, but the whole interval lies below the SESOI")
        return {**base, "verdict": label, "value": value, "interval": shown, "p": p, "n": ns, "replicates": len(used),
                "mde": mde_correlation(ns, alpha=alpha, tests=tests),
                "method": "stratified permutation on the summed r; interval: "
                          + ("none (n <= 3)" if meta is None else meta["method"]),
                "note": "; ".join(notes)}
    # beats / matches: differences with their own intervals
    level_in = decision.get("interval_level", 0.95)
    used = [e for e in entries if _finite(e.get("value")) and e.get("interval") is not None
            and all(_finite(v) for v in e["interval"]) and e["interval"][1] > e["interval"][0]]
    if not used:
        return {**base, "verdict": verdict(None), "method": "random effects", "note": "no replicate states an interval"}
    zq = normal_quantile(0.5 + level_in / 2)
    effects = [float(e["value"]) for e in used]
    ses = [(e["interval"][1] - e["interval"][0]) / (2 * zq) for e in used]
    meta = random_effects(effects, ses, level=1 - alpha)
    lo, hi = meta["interval"]
    return {**base, "verdict": interval_verdict(kind, lo, hi, sesoi), "value": meta["estimate"], "interval": [lo, hi],
            "p": meta["p"], "n": [e.get("n") for e in used], "replicates": len(used),
            "mde": mde_difference(ses, alpha=alpha),
            "method": meta["method"] + f"; each replicate's se from its {level_in:g} interval (normal approximation)",
            "note": None}


def _weigh_sign_flip(entries, *, alpha: float, base: dict) -> dict:
    """``weigh`` of a claim with one signed effect per independent run (``effects`` of each entry, runs of every
    replicate together): the exact two-sided sign-flip test (``prh.stats.sign_flip``). reproduced: p < alpha with
    a positive mean; not reproduced: p < alpha with a negative mean (significant the wrong way; no SESOI is
    declared, so nothing else reads "not reproduced"); not testable: 2 x 2^-n >= alpha (5 runs cannot, 6 can);
    else inconclusive. An entry without per-run effects (a ledger from before the weighed verdicts of 2026-11-27): ``verdict`` None, the
    registered verdict stands. MDE: normal approximation, (z_{1-alpha/2} + z_0.8) x sd / sqrt(n), in the effect's
    units."""
    from prh.stats import sign_flip

    effects = [float(x) for e in entries for x in (e.get("effects") or [])]
    if not any(e.get("effects") for e in entries):
        return {**base, "verdict": None, "method": "sign-flip test of per-run effects",
                "note": "the records hold no per-run effects: the registered verdict stands until the next run"}
    runs = len(effects)
    if any(not math.isfinite(x) for x in effects):
        return {**base, "verdict": verdict(None), "n": runs, "method": "sign-flip test of per-run effects",
                "note": "a run's effect is undefined (it never reached the point compared)"}
    res = sign_flip(effects)
    p = min(1.0, 2 * min(res["p"], res["p_less"]))
    sd = float(np.std(effects, ddof=1)) if runs > 1 else None
    mde = None if not sd else float((normal_quantile(1 - alpha / 2) + normal_quantile(POWER)) * sd / math.sqrt(runs))
    if 2 * res["min_p"] >= alpha:
        label = verdict(None)
    elif p < alpha:
        label = verdict(res["mean"] > 0, conclusive=res["mean"] != 0)
    else:
        label = verdict(True, conclusive=False)
    return {**base, "verdict": label, "value": res["mean"], "p": p, "n": runs, "replicates": len(entries), "mde": mde,
            "method": f"exact two-sided sign-flip over {runs} runs (2^{runs} patterns); MDE: normal approximation",
            "note": f"{sum(x > 0 for x in effects)} of {runs} runs in the claimed direction"}


def _weigh_run_mean(decision: dict, entries, *, alpha: float, base: dict) -> dict:
    """``weigh`` of one statistic per independent run (each replicate's ``value`` against the decision's ``no_effect``,
    ``direction``) pooled by ``prh.pooling.replicate_mean``, the run as unit (the replicates' own two-sided ``p``,
    where all state one, weigh the units inside each run). run_mean: ``weighed_verdict`` at the SESOI; run_matches
    ("does not change"): ``interval_verdict``, the SESOI the equivalence margin. One run: ``verdict`` None."""
    from prh.pooling import replicate_mean

    null, sign, sesoi = float(decision.get("no_effect", 0.0)), decision.get("direction", 1), decision["sesoi"]
    used = [e for e in entries if _finite(e.get("value"))]
    ps = [e.get("p") for e in used] if decision.get("own_p") is True else [None]
    pooled = replicate_mean([sign * (float(e["value"]) - null) for e in used],
                            ps if all(_finite(p) for p in ps) else None, level=1 - alpha, alpha=alpha)
    if pooled is None:
        return {**base, "verdict": None, "method": "pooled over runs",
                "note": "no run-level test: fewer than 2 runs state a value, or every run is at no effect (t = 0/0)"}
    lo, hi = pooled["interval"]
    if decision["kind"] == "run_matches":
        label = interval_verdict("matches", lo, hi, sesoi)
    else:
        label = weighed_verdict(effect=pooled["estimate"], p=pooled["p"], interval=(lo, hi), sesoi=sesoi, alpha=alpha)
    back = sorted(null + sign * v for v in (lo, hi))
    return {**base, "verdict": label, "value": null + sign * pooled["estimate"], "interval": back, "p": pooled["p"],
            "n": [e.get("n") for e in used], "replicates": pooled["k"], "mde": pooled["mde"],
            "method": pooled["method"], "note": f"{pooled['k']} runs" + (f"; no effect at {null:g}" if null else "")}


def run_level_fields(run_level: dict | None) -> dict:
    """A ledger entry's fields from a run-level test (``prh.stats.checkpoint_run_level``): ``runs`` and the one-sided
    ``run_p_greater`` / ``run_p_less``, which ``weigh`` pools over replicates; nothing where none was computed."""
    if not run_level or run_level.get("p_greater") is None:
        return {}
    return {"runs": run_level["runs"], "run_p_greater": run_level["p_greater"], "run_p_less": run_level["p_less"],
            "run_r": run_level.get("spearman_r")}


