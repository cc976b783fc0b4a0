"""The one verdict engine: every claim of every study gets its label here.

A verdict is one of four labels:

* ``not testable``: the rule cannot fire on this data (an undefined statistic, one paired
  unit, a base rate of 0 or 1, too few units);
* ``inconclusive``: the rule can fire, but the data cannot tell (an interval straddling the
  equivalence margin, a validity gate not passed, an effect too small to read);
* ``reproduced`` / ``not reproduced``: the pre-registered rule passed / failed.

:func:`verdict` is the only function that picks a label; :func:`interval_verdict`,
:func:`correlation_verdict` and :func:`seeds_verdict` (independent runs) are rules written with it. :func:`replication`
adds what the number of independent runs allows: a "reproduced" that rests on fewer than
``MIN_SEEDS`` runs is marked "one seed: provisional" (``provisional`` in the ledger).
:func:`replicated_verdict` joins one claim's verdicts from independent replicates of a whole study
(the master seeds of ``claims.replicates``): the replication rule, fixed before the replicate run.
"""

from __future__ import annotations

import math

__all__ = ["LABELS", "MIN_SEEDS", "PROVISIONAL", "verdict", "interval_verdict", "correlation_verdict", "correlation_row",
           "seeds_verdict", "replication", "replicated_verdict"]

LABELS = ("reproduced", "not reproduced", "inconclusive", "not testable")
MIN_SEEDS = 3  # "reproduced" needs at least this many agreeing independent runs
PROVISIONAL = "one seed: provisional"


def verdict(passed: bool | None, *, testable: bool = True, conclusive: bool = True) -> str:
    """The label of a rule's outcome: ``passed`` None or ``testable`` False -> not testable; else
    ``conclusive`` False -> inconclusive; else reproduced / not reproduced."""
    if passed is None or not testable:
        return "not testable"
    if not conclusive:
        return "inconclusive"
    return "reproduced" if passed else "not reproduced"


def interval_verdict(kind: str, lo: float | None, hi: float | None, margin: float) -> str:
    """A "beats" (A - B > 0) or "matches" (|A - B| < margin) claim from an interval of A - B.

    beats: reproduced when lo > 0; not reproduced when hi < margin (no effect as large as the
    margin is compatible); inconclusive otherwise. matches: reproduced when the interval lies
    inside (-margin, margin); not reproduced when it lies wholly outside; inconclusive otherwise.
    No interval (one paired unit): not testable."""
    if kind not in ("beats", "matches"):
        raise ValueError(f"kind={kind!r} must be 'beats' or 'matches'")
    if lo is None or hi is None:
        return verdict(None)
    if kind == "beats":
        return verdict(lo > 0, conclusive=lo > 0 or hi < margin)
    inside, outside = -margin < lo and hi < margin, lo >= margin or hi <= -margin
    return verdict(inside, conclusive=inside or outside)


def correlation_verdict(r: float | None, p: float | None, n: int | None, *, alpha: float, min_n: int = 4) -> str:
    """A "rises with" claim: reproduced when r > 0 with p < alpha; not testable with fewer than
    ``min_n`` units (``n`` None: not recorded, not checked) or an undefined r or p (a constant variable)."""
    defined = r is not None and p is not None and math.isfinite(r) and math.isfinite(p)
    return verdict(bool(defined and r > 0 and p < alpha), testable=defined and (n is None or n >= min_n))


def seeds_verdict(effects, passed: bool | None, *, margin: float = 0.0) -> str:
    """A claim replicated over independent runs (issue 36): ``effects`` holds one signed effect per run
    (positive = the claimed direction), ``passed`` whether the pre-registered statistic passed.

    not testable: the rule cannot fire (``passed`` None, no run, an undefined effect);
    inconclusive: the runs disagree in sign, or the mean effect lies within ``margin`` of 0;
    reproduced: passed and every run agrees (fewer than ``MIN_SEEDS`` runs: still "reproduced",
    and :func:`replication` marks it provisional); not reproduced otherwise."""
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
    """One claim's verdict from independent replicates of its study (issue 36's replication rule, written
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
