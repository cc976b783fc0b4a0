"""Seed 000's claims as pre-registered rules (params.yaml ``phase.rules``): statistic, p-value, verdict.

Claims (seed 000 section numbers in brackets):

* C1 [abstract, sec. 1]: cross-modal linear alignment < 3 % against > 90 % within a modality.
* C2a [Fig 1a, 2]: ≥ 75 % of cross pairs have S (eq. 3) < 0.25 (also reported centred).
* C2b [sec. 2 "nearly orthogonal"]: cross-modal S lower than within-modality S.
* C2c [Fig 1b]: every family's mean cross-modal S below 0.5 (the zoo has no Swin).
* C3 [Fig 1a, RQ2]: S explains alignment: partial Spearman of S with retrieval over cross
  pairs, controlling for log parameter count and feature CKA, Mantel null.
* T1 [Table 1]: spectral decay vision > language; AGOP λ₁ language > vision; compression
  vision > language; every family chaotic (mean cross S < 0.5).
* C4a/C4b [sec. 3 "Predictive phase metrics"]: AGOP ratio > 1e6, and ΔNTK · log10 AGOP > 2.5,
  predict failure (cross retrieval < 3 %); balanced accuracy, model-label null. Also a
  secondary, relative failure (below the cross pairs' median), reported without a verdict.
* T2 [Table 2]: adaptive LR η₀ · S(t) beats a fixed η₀ (sign-flip permutation over pairs);
  phase regularisation, compatible init and Fig 3's information ratio: not testable as specified.

A claim whose statistic is undefined (e.g. a base rate of 0 or 1), or a C4 rule that predicts the same
class for every pair (it cannot fire; balanced accuracy 0.5 by construction), is ``not testable``.
"""

from __future__ import annotations

import itertools

import numpy as np

from prh.claims import verdict
from prh.studies.phase.stats import (
    mantel_partial,
    modality_permutation,
    model_label_test,
    rule_balanced_accuracy,
)

__all__ = ["evaluate_claims", "rule_verdict", "sign_flip_p"]


def rule_verdict(res: dict, *, min_balanced_accuracy: float, alpha: float) -> str:
    """C4's label from ``rule_balanced_accuracy``: a rule that predicts one class for every pair cannot fire
    on this data (balanced accuracy 0.5 by construction), so it is not testable, not "not
    reproduced"; nor is an undefined balanced accuracy (a failure base rate of 0 or 1)."""
    ba, fires = res["balanced_accuracy"], 0 < res["predicted_failure_rate"] < 1
    if not np.isfinite(ba) or not fires:
        return verdict(None)
    return verdict(bool(ba >= min_balanced_accuracy and res["p_value"] < alpha))


def _square(names, pairs, key) -> np.ndarray:
    idx = {n: i for i, n in enumerate(names)}
    m = np.full((len(names), len(names)), np.nan)
    for p in pairs:
        m[idx[p["a"]], idx[p["b"]]] = m[idx[p["b"]], idx[p["a"]]] = p[key]
    return m


def _cross(vis, lang, pairs, key) -> np.ndarray:
    look = {(p["a"], p["b"]): p[key] for p in pairs if p["kind"] == "cross"}
    return np.array([[look[(v, ell)] for ell in lang] for v in vis], dtype=np.float64)


def sign_flip_p(diffs) -> float:
    """One-sided exact sign-flip p-value of mean(diffs) > 0 (all 2^n flips)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0:
        return float("nan")
    obs = d.mean()
    null = [np.mean(d * np.array(s)) for s in itertools.product([1, -1], repeat=d.size)]
    return float(np.mean(np.array(null) >= obs - 1e-12))


def _adaptive_lr(lr: dict | None, alpha: float) -> dict:
    if not lr or not lr.get("pairs"):
        return {"verdict": verdict(None), "reason": "adaptive-LR runs were not made"}
    diffs = [p["adaptive"]["retrieval"] - p["fixed"]["retrieval"] for p in lr["pairs"]]
    p = sign_flip_p(diffs)
    stat = float(np.mean(diffs))
    return {"statistic": stat, "p_value": p, "n_pairs": len(diffs),
            "fixed_mean": float(np.mean([q["fixed"]["retrieval"] for q in lr["pairs"]])),
            "adaptive_mean": float(np.mean([q["adaptive"]["retrieval"] for q in lr["pairs"]])),
            "test": "adaptive minus fixed-LR retrieval, exact one-sided sign-flip over pairs",
            "verdict": verdict(stat > 0 and p < alpha)}


def evaluate_claims(rows: list[dict], pairs: list[dict], *, config: dict, adaptive_lr: dict | None = None,
                    seed: int = 0) -> dict:
    """metrics.json content: one entry per claim, plus the threshold rules' numbers and base rates."""
    r, alpha, n_perm = config["rules"], config["alpha"], config["permutations"]
    names = [x["model"] for x in rows]
    is_vis = np.array([x["modality"] == "vision" for x in rows])
    vis = [n for n, v in zip(names, is_vis) if v]
    lang = [n for n, v in zip(names, is_vis) if not v]
    cross = [p for p in pairs if p["kind"] == "cross"]
    med = {k: float(np.median([p["retrieval"] for p in pairs if p["kind"] == k])) if any(
        p["kind"] == k for p in pairs) else float("nan") for k in ("cross", "vision", "language")}
    claims = {}

    perm = modality_permutation(_square(names, pairs, "retrieval"), is_vis, n_permutations=n_perm, seed=seed)
    ok = med["cross"] < r["cross_max"] and min(med["vision"], med["language"]) > r["within_min"]
    claims["C1_alignment_gap"] = {**perm, "median_cross": med["cross"], "median_within_vision": med["vision"],
                                  "median_within_language": med["language"], "chance": cross[0]["chance"],
                                  "test": "within minus cross mean retrieval, modality-label permutation",
                                  "verdict": verdict(ok and perm["statistic"] > 0 and perm["p_value"] < alpha)}
    for key in ("s_literal", "s_centred"):
        frac = float(np.mean([p[key] < r["low_s"] for p in cross]))
        claims[f"C2a_fraction_below_{r['low_s']}_{key}"] = {
            "statistic": frac, "p_value": None, "test": "descriptive fraction of cross pairs (no null)",
            "median": float(np.median([p[key] for p in cross])), "verdict": verdict(frac >= r["low_s_fraction"])}
    perm = modality_permutation(_square(names, pairs, "s_literal"), is_vis, n_permutations=n_perm, seed=seed)
    claims["C2b_cross_below_within"] = {**perm, "test": "within minus cross mean S (eq. 3), modality-label permutation",
                                        "verdict": verdict(perm["statistic"] > 0 and perm["p_value"] < alpha)}
    fam = {}
    for p in cross:
        fam.setdefault(p["group_a"], []).append(p["s_literal"])
    fam_mean = {g: float(np.mean(v)) for g, v in fam.items()}
    claims["C2c_vision_families_below_0.5"] = {
        "statistic": max(fam_mean.values()), "p_value": None, "family_means": fam_mean,
        "test": "largest vision-family mean cross S (descriptive); no Swin in this zoo",
        "verdict": verdict(max(fam_mean.values()) < r["chaotic"])}

    s_x, ret_x = _cross(vis, lang, pairs, "s_literal"), _cross(vis, lang, pairs, "retrieval")
    covs = [_cross(vis, lang, pairs, "log_params"), _cross(vis, lang, pairs, "feature_cka")]
    part = mantel_partial(s_x, ret_x, covs, n_permutations=n_perm, seed=seed)
    claims["C3_s_explains_alignment"] = {
        **part, "centred": mantel_partial(_cross(vis, lang, pairs, "s_centred"), ret_x, covs, n_permutations=n_perm,
                                          seed=seed),
        "raw": mantel_partial(s_x, ret_x, (), n_permutations=n_perm, seed=seed),
        "mutual_knn": mantel_partial(s_x, _cross(vis, lang, pairs, "mutual_knn"), covs, n_permutations=n_perm, seed=seed),
        "test": "Spearman partial r(S, retrieval | log params, feature CKA), Mantel permutation",
        "verdict": verdict(part["statistic"] > 0 and part["p_value"] < alpha)}

    col = {k: np.array([x[k] for x in rows], dtype=np.float64) for k in ("spectral_decay", "compression", "lambda1")}
    for key, values, sign in (("T1_spectral_decay_vision_gt_language", col["spectral_decay"], 1),
                              ("T1_compression_vision_gt_language", col["compression"], 1),
                              ("T1_agop_language_gt_vision", np.log10(col["lambda1"]), -1)):
        t = model_label_test(values, is_vis, n_permutations=n_perm, seed=seed)
        claims[key] = {**t, "vision_mean": float(np.nanmean(values[is_vis])),
                       "language_mean": float(np.nanmean(values[~is_vis])),
                       "test": "vision minus language model mean, modality-label permutation",
                       "verdict": verdict(sign * t["statistic"] > 0 and t["p_value"] < alpha)}
    groups = {}
    for p in cross:
        groups.setdefault(p["group_a"], []).append(p["s_literal"])
        groups.setdefault(p["group_b"], []).append(p["s_literal"])
    worst = max(float(np.mean(v)) for v in groups.values())
    claims["T1_every_family_chaotic"] = {"statistic": worst, "p_value": None,
                                         "test": "largest family mean cross S (descriptive)",
                                         "verdict": verdict(worst < r["chaotic"])}

    failure = ret_x < r["failure"]
    relative = ret_x < np.median(ret_x)
    rules = {}
    for key, score_key, thr in (("C4a_agop_ratio_rule", "agop_ratio", r["agop_ratio"]),
                                ("C4b_combined_rule", "combined", r["combined"])):
        score = _cross(vis, lang, pairs, score_key)
        res = rule_balanced_accuracy(score, failure, threshold=thr, n_permutations=n_perm, seed=seed)
        rel = rule_balanced_accuracy(score, relative, threshold=thr, n_permutations=n_perm, seed=seed)
        ba = res["balanced_accuracy"]
        claims[key] = {**res, "statistic": ba, "relative_failure": rel,
                       "test": "balanced accuracy of 'failure iff score > threshold', Mantel label permutation",
                       "verdict": rule_verdict(res, min_balanced_accuracy=r["min_balanced_accuracy"], alpha=alpha)}
        rules[key] = {"balanced_accuracy": ba, "failure_base_rate": res["failure_base_rate"]}
    claims["T2_adaptive_lr"] = _adaptive_lr(adaptive_lr, alpha)
    for key in ("T2_phase_regularisation", "T2_compatible_init", "F3_information_ratio"):
        claims[key] = {"verdict": verdict(None), "reason": "the seed does not specify how to build or measure it"}
    err = [x["sketch_error"] for x in rows if x["sketch_error"] is not None]
    return {"claims": claims, "threshold_rules": rules, "failure_base_rate": float(failure.mean()),
            "relative_failure_base_rate": float(relative.mean()), "n_models": len(rows),
            "n_vision": len(vis), "n_language": len(lang), "n_cross_pairs": len(cross),
            "median_retrieval": med, "chance": cross[0]["chance"],
            "max_sketch_error": max(err) if err else None,
            "verdicts": {k: v["verdict"] for k, v in claims.items()}}
