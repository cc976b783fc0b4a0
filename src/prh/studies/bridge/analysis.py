"""Verdicts of seed 001's claims from the arms' results (pre-registered in params.yaml ``bridge.analysis``).

Statistic: the paired difference d = mean_u (a_u - b_u) between two arms over units u
(probe tasks for accuracy; the backbone's weight matrices for outlier fractions), with a
percentile bootstrap interval over units (``n_boot`` resamples, level ``ci``). Arms that
differ only in seed are averaged per unit first. Decisions, with equivalence margin m:

- "A beats B":   reproduced if lo > 0; not reproduced if hi < m (no gain of m or more); else inconclusive;
- "A matches B": reproduced if -m < lo and hi < m; not reproduced if the interval misses (-m, m)
  entirely; else inconclusive.

Fig 2 (one language-pretrained model): reproduced if MiniLM's median outlier fraction exceeds
that of every trained vision model, not reproduced if it is at or below their median, else
inconclusive. Appendix A: reproduced if every stage-1 arm at ρ = 1 with trained patch embedding
is ``aligned`` (``covariance.alignment_check``), not reproduced if none is, else inconclusive.

    prh run-bridge-analysis --arms results/experiments/bridge/arms/*/result.json \\
        --outliers results/experiments/bridge/outliers.json --metrics results/experiments/bridge/metrics.json \\
        --figures results/experiments/bridge/figures.json
"""

from __future__ import annotations

import argparse

import numpy as np

from prh.claims import interval_verdict, verdict
from prh.config import schema_defaults

__all__ = ["ANALYSIS_DEFAULTS", "paired_bootstrap", "find_arms", "analyse", "main"]

ANALYSIS_DEFAULTS = schema_defaults("bridge")["analysis"]  # workflow/schemas/bridge.schema.yaml, the one home
# what `analyse` reads of each arm's result.json (`prh run-bridge-arm`)
ARM_KEYS = ("name", "arm", "probes", "curves", "outliers", "covariance", "cpu_seconds")


def paired_bootstrap(a, b, *, n_boot: int = 2000, ci: float = 0.95, seed: int = 0) -> dict:
    """Mean of a - b over paired units and its percentile bootstrap interval (``b`` None: of a alone).

    One unit has no interval: ``lo`` and ``hi`` are None (``prh.claims.interval_verdict`` then says "not testable"); the paper
    suite's probe sets have one task (the class label), where the shapes world has ten."""
    a = np.asarray(a, dtype=float)
    d = a if b is None else a - np.asarray(b, dtype=float)
    if d.ndim != 1 or len(d) < 1:
        raise ValueError(f"need a 1-d array of paired units, got shape {d.shape}")
    if len(d) == 1:
        return {"mean": float(d[0]), "lo": None, "hi": None, "n_units": 1}
    idx = np.random.default_rng(seed).integers(0, len(d), size=(n_boot, len(d)))
    boots = d[idx].mean(1)
    lo, hi = np.quantile(boots, [(1 - ci) / 2, (1 + ci) / 2])
    return {"mean": float(d.mean()), "lo": float(lo), "hi": float(hi), "n_units": len(d)}


def find_arms(arms: dict, **spec) -> list[dict]:
    """Results whose arm matches ``spec`` (``trained=True/False`` tests epochs > 0)."""
    trained = spec.pop("trained", None)
    return [r for r in arms.values()
            if all(r["arm"][k] == v for k, v in spec.items())
            and (trained is None or (r["arm"]["epochs"] > 0) == trained)]


def _task_acc(results: list[dict]) -> np.ndarray:
    """Per-task accuracy (sorted task names), averaged over the seeds of one arm."""
    tasks = sorted(results[0]["probes"]["tasks"])
    return np.mean([[r["probes"]["tasks"][t]["accuracy"] for t in tasks] for r in results], axis=0)


def _outlier_fracs(results: list[dict], when: str = "after") -> np.ndarray:
    names = sorted(results[0]["outliers"][when]["matrices"])
    return np.mean([[r["outliers"][when]["matrices"][m]["outlier_fraction"] for m in names] for r in results], axis=0)


def _compare(arms, a: dict, b: dict, kind: str, cfg: dict, *, what: str = "accuracy", claim: str) -> dict:
    ra, rb = find_arms(arms, **dict(a)), find_arms(arms, **dict(b))
    if not ra or not rb:
        return {"claim": claim, "verdict": verdict(None), "reason": f"no arm matches {a if not ra else b}"}
    fa, fb = (_task_acc(ra), _task_acc(rb)) if what == "accuracy" else (_outlier_fracs(ra), _outlier_fracs(rb))
    margin = cfg["margin_accuracy"] if what == "accuracy" else cfg["margin_outliers"]
    stat = paired_bootstrap(fa, fb, n_boot=cfg["n_boot"], ci=cfg["ci"], seed=cfg["seed"])
    return {"claim": claim, "statistic": f"mean paired difference of {what} (A - B)", "A": a, "B": b,
            "arms_A": [r["name"] for r in ra], "arms_B": [r["name"] for r in rb], "test": kind,
            "margin": margin, **stat, "verdict": interval_verdict(kind, stat["lo"], stat["hi"], margin),
            **({"reason": f"{stat['n_units']} paired unit: no interval"} if stat["lo"] is None else {})}


def _fig2(outliers: dict) -> dict:
    models = outliers["models"]
    lang = {m: r["summary"]["median_outlier_fraction"] for m, r in models.items() if r["family"] == "language_pretrained"}
    vision = {m: r["summary"]["median_outlier_fraction"] for m, r in models.items() if r["family"] == "vision_trained"}
    if not lang or not vision:
        return {"claim": "Fig 2", "verdict": verdict(None), "reason": "needs language_pretrained and vision_trained models"}
    top = min(lang.values())
    above, below = top > max(vision.values()), top <= float(np.median(list(vision.values())))
    label = verdict(above, conclusive=above or below)
    return {"claim": "Fig 2: language-pretrained weights have more outliers than vision-trained ones",
            "statistic": "median over matrices of the fraction beyond threshold robust SDs, per model",
            "language_pretrained": lang, "vision_trained": vision,
            "others": {m: r["summary"]["median_outlier_fraction"] for m, r in models.items()
                       if r["family"] not in ("language_pretrained", "vision_trained")},
            "rank_p": 1.0 / (len(vision) + 1), "verdict": label}


def analyse(*, arms: dict, outliers: dict | None, alignment: dict | None = None,
            config: dict | None = None) -> tuple[dict, dict]:
    """(metrics, figures): the verdicts and per-arm summaries, and the numbers the figures plot."""
    cfg = {**ANALYSIS_DEFAULTS, **(config or {})}
    unknown = sorted(set(cfg) - set(ANALYSIS_DEFAULTS))
    if unknown:
        raise ValueError(f"analysis: unknown key(s) {unknown}; allowed: {sorted(ANALYSIS_DEFAULTS)}")
    per_arm = {}
    for name, r in sorted(arms.items()):
        accs = [t["accuracy"] for t in r["probes"]["tasks"].values()]
        per_arm[name] = {**r["arm"], "mean_accuracy": r["probes"]["mean_accuracy"],
                         "ci": paired_bootstrap(accs, None, n_boot=cfg["n_boot"], ci=cfg["ci"], seed=cfg["seed"]),
                         "mean_chance": r["probes"]["mean_chance"],
                         "final_train_accuracy": r["curves"]["train_accuracy"][-1],
                         "final_test_accuracy": r["curves"]["test_accuracy"][-1],
                         "mutual_knn": {k: v for k, v in ((alignment or {}).get("arms") or {}).get(name, {}).items()
                                        if k in ("vision", "world")},
                         "outliers_before": r["outliers"]["before"]["summary"],
                         "outliers_after": r["outliers"]["after"]["summary"],
                         "covariance": {k: r["covariance"][k] for k in ("before", "after", "update", "null_q05", "aligned")},
                         "cpu_seconds": r["cpu_seconds"]}
    pre1 = {"init": "pretrained", "ratio": 1.0, "blocks": "all", "trained": True}
    c = lambda a, b, kind, claim, what="accuracy": _compare(arms, a, b, kind, cfg, what=what, claim=claim)  # noqa: E731
    claims = {
        "fig3_random_labels": c(pre1, {**pre1, "init": "scratch"}, "beats",
                                "Figs 3/12: pretrained beats scratch at 100% random labels (stage-2 probes)"),
        "fig3_correct_labels": c({**pre1, "ratio": 0.0}, {**pre1, "init": "scratch", "ratio": 0.0}, "beats",
                                 "Figs 3/12: pretrained beats scratch with correct labels (stage-2 probes)"),
        "fig6_bridge_helps": c(pre1, {"init": "pretrained", "trained": False}, "beats",
                               "Fig 6: the random-label bridge beats no bridge (stage-2 probes)"),
        "fig8_first2_matches_all": c({**pre1, "blocks": 2}, pre1, "matches", "Figs 8/13: bridging 2 blocks matches all"),
        "fig8_first5_beats_all": c({**pre1, "blocks": 5}, pre1, "beats", "Figs 8/13: bridging 5 blocks beats all"),
        "null_k0_matches_all": c({**pre1, "blocks": 0}, pre1, "matches",
                                 "null: patch embedding alone (k=0) matches bridging all (the gain is the input embedding)"),
        "null_shuffled_matches_pretrained": c(pre1, {**pre1, "init": "shuffled"}, "matches",
                                              "null: permuted pretrained weights match the pretrained ones"),
        "fig10_pretrained_more_outliers": c(pre1, {**pre1, "init": "scratch"}, "beats",
                                            "Figs 10/11: after random labels pretrained has more outliers than scratch",
                                            what="outlier_fraction"),
        "fig10_correct_labels_reduce": c(pre1, {**pre1, "ratio": 0.0}, "beats",
                                         "Figs 11/14: correct labels leave fewer outliers than random labels",
                                         what="outlier_fraction"),
    }
    cov_arms = [r for r in find_arms(arms, ratio=1.0, trained=True)]
    flags = [r["covariance"]["aligned"] for r in cov_arms]
    claims["appA_covariance_alignment"] = {
        "claim": "Appendix A: under random labels the patch embedding's covariance aligns with the input's",
        "statistic": "off-diagonal mass of U_x^T Sigma_w U_x (top PCs): after < before and < 5% random-basis null",
        "arms": {r["name"]: {k: r["covariance"][k] for k in ("before", "after", "null_q05", "aligned")} for r in cov_arms},
        "verdict": verdict(all(flags) if flags else None, conclusive=all(flags) or not any(flags))}
    if outliers is not None:
        claims["fig2_outliers"] = _fig2(outliers)
    metrics = {"analysis": cfg, "arms": per_arm, "claims": claims,
               "vision_model": (alignment or {}).get("vision_model"),
               "verdicts": {k: v["verdict"] for k, v in claims.items()},
               "cpu_seconds_arms": float(sum(r["cpu_seconds"] for r in arms.values()))}
    figures = {"arms": {name: {"arm": r["arm"], "curves": r["curves"], "mean_accuracy": per_arm[name]["mean_accuracy"],
                               "ci": per_arm[name]["ci"], "mean_chance": per_arm[name]["mean_chance"],
                               "outliers_before": [m["outlier_fraction"] for _, m in sorted(r["outliers"]["before"]["matrices"].items())],
                               "outliers_after": [m["outlier_fraction"] for _, m in sorted(r["outliers"]["after"]["matrices"].items())],
                               "kurtosis_after": [m["excess_kurtosis"] for _, m in sorted(r["outliers"]["after"]["matrices"].items())]}
                        for name, r in sorted(arms.items())},
               "verdicts": metrics["verdicts"]}
    return metrics, figures


def main(argv: list[str] | None = None) -> None:
    from prh.io import read_json, write_json
    from prh.slices import add_slice
    from prh.studies.bridge.design import ANALYSIS_CONFIG

    p = argparse.ArgumentParser(prog="prh run-bridge-analysis", description="Verdicts of seed 001's claims.")
    p.add_argument("--arms", nargs="+", required=True, help="result.json of every arm")
    p.add_argument("--outliers", default=None, help="`prh run-bridge-outliers` JSON (Fig 2)")
    p.add_argument("--alignment", default=None, help="`prh run-bridge-align` JSON (mutual k-NN per arm)")
    p.add_argument("--metrics", required=True, help="JSON written: the claims' verdicts and per-arm numbers")
    p.add_argument("--figures", required=True, help="JSON written: what the bridge figures draw")
    settings = add_slice(p, ANALYSIS_CONFIG)  # bootstrap, interval, margins, seed
    args = p.parse_args(argv)
    arms = {r["name"]: r for r in (read_json(path, keys=ARM_KEYS, what="`prh run-bridge-arm` result") for path in args.arms)}
    metrics, figures = analyse(arms=arms, outliers=read_json(args.outliers) if args.outliers else None,
                               alignment=read_json(args.alignment) if args.alignment else None,
                               config=settings(args)["bridge.analysis"])
    write_json(args.figures, figures)
    write_json(args.metrics, metrics)
    for k, v in metrics["verdicts"].items():
        print(f"{k}: {v}")
