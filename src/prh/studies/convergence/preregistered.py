"""The pre-registered test of PRH Fig 3: one point per language model.

Fig 3 pools every (language, vision) pair, but the pairs of one LM share its competence and
its features, so they are not independent (7 LMs x 14 vision models gave p = 4e-21 from 98
"points"; one point per LM gave p = 0.052). The analysis fixed in ``params.yaml``
(``convergence.preregistered``) before the first look at the results:

* unit: one language model (n = the trained causal LMs; references stay out);
* outcome of LM l: its calibrated alignment averaged over a vision set V named in advance::

      y_l = (1/|V|) Σ_{v ∈ V} (score[l, v] − null_max_mean[l, v])

  where score is the best layer pair (the LM's embedding layer left out: ``prh align
  --skip-x-layers 1``) and null_max_mean the mean of that cell's permutation-null maxima;
* per co-primary predictor c (competence, higher = better): Spearman r(c_l, y_l), one-sided
  (r > 0) permutation p (``prh.stats.spearman_permutation``), Holm across the predictors;
* verdict: "reproduced" when the validity gate passed and the first (primary) predictor has
  p_holm < alpha and r > 0; "not reproduced" when the gate passed and it has not;
  "inconclusive" when the gate failed or was not computed (a null result means something
  only when the models could have learnt the world).
"""

from __future__ import annotations

import numpy as np

from prh.claims import verdict
from prh.stats import cluster_permutation, holm, spearman_permutation

__all__ = ["preregistered_language_vision", "amended_language_vision", "amended_on_runs", "calibrated_outcomes",
           "run_level"]

OUTCOME = ("mean calibrated alignment (best layer pair, embedding layer excluded, minus the mean null "
           "maximum) over the vision set")


def _index(names: list[str], wanted: list[str], what: str, flag: str) -> list[int]:
    missing = [m for m in wanted if m not in names]
    if missing:
        raise ValueError(f"{what} {missing} are not in the cross alignment's {flag} {names}: "
                         "align the language set against the vision set that contains them")
    return [names.index(m) for m in wanted]


def calibrated_outcomes(*, cross: dict, language_models: list[str], vision_models: list[str]) -> dict[str, float]:
    """Per LM, the mean over ``vision_models`` of score − null_max_mean (the outcome y_l above).

    ``cross`` is a ``prh align`` table of the language set (rows) against a vision set
    (columns) computed with ``--null-permutations P``.
    """
    calib = cross.get("calibration")
    if not calib or "null_max_mean" not in calib:
        raise ValueError("the cross alignment has no permutation null (calibration.null_max_mean): compute it with "
                         "`prh align --null-permutations P` (alignment.null_permutations > 0)")
    if not language_models or not vision_models:
        raise ValueError("language_models and vision_models must be non-empty lists of model names")
    rows = _index(cross["x_names"], language_models, "language models", "x_names")
    cols = _index(cross["y_names"], vision_models, "vision models", "y_names")
    calibrated = np.asarray(cross["scores"], dtype=float) - np.asarray(calib["null_max_mean"], dtype=float)
    block = calibrated[np.ix_(rows, cols)]
    bad = [language_models[i] for i in np.flatnonzero(~np.all(np.isfinite(block), axis=1))]
    if bad:
        raise ValueError(f"language models {bad} have an undefined (NaN) score or null against a vision model")
    return {lm: float(v) for lm, v in zip(language_models, block.mean(axis=1))}


def _holm_tests(xs: dict[str, list[float]], y: list[float], *, permutations: int, alternative: str,
                seed: int) -> dict:
    """{predictor: {spearman_r, p_permutation, p_holm}} of each predictor's values ``xs`` against ``y``,
    Holm-corrected across the predictors (in their order; the first is primary)."""
    tests = {}
    for name, x in xs.items():
        if len(set(x)) == 1 and len(x) >= 3:  # e.g. every LM at the same accuracy: no test, not a crash
            tests[name] = {"spearman_r": None, "p_permutation": 1.0, "note": "constant predictor: r undefined"}
            continue
        try:
            res = spearman_permutation(x, y, permutations=permutations, alternative=alternative, seed=seed)
        except ValueError as err:
            raise ValueError(f"predictor {name!r} against the outcome: {err}") from err
        tests[name] = {"spearman_r": res["spearman_r"], "p_permutation": res["p_permutation"]}
    for name, p in zip(xs, holm([t["p_permutation"] for t in tests.values()])):
        tests[name]["p_holm"] = p
    return tests


def preregistered_language_vision(*, cross: dict, competence: dict[str, dict[str, float]], language_models: list[str],
                                  vision_models: list[str], predictors: list[str], permutations: int,
                                  alternative: str = "greater", seed: int = 0, gate_passed: bool | None = None,
                                  alpha: float = 0.05) -> dict:
    """The pre-registered one-point-per-LM test of language-vision alignment against competence.

    Parameters
    ----------
    cross : ``prh align`` JSON, language set (rows) x vision set (columns), with a permutation null
    competence : {lm: {predictor: value}}, higher = more competent (e.g. ``reducible_fraction``,
        ``mc_accuracy``, ``neg_bits_per_byte``); every LM of ``language_models`` needs every predictor
    language_models : the units (n = their number), rows of ``cross``
    vision_models : the vision set V named in advance, columns of ``cross``
    predictors : the co-primary predictors, the first one primary; Holm-corrected across all
    permutations, alternative, seed : of ``prh.stats.spearman_permutation`` (one seed for all predictors)
    gate_passed : the validity gate's result (None: not computed)
    alpha : family-wise level of the verdict

    Returns
    -------
    dict: ``unit``, ``n``, ``language_models``, ``vision_models``, ``outcome`` (its definition),
    ``skip_x_layers`` and ``null_permutations`` (of the cross table), ``points`` ([{language,
    outcome, <predictor>: value}]), ``predictors`` ({name: {spearman_r, p_permutation, p_holm}}),
    the primary predictor's ``spearman_r``, ``p_permutation``, ``p_holm`` at the top level,
    ``primary``, ``permutations``, ``alternative``, ``seed``, ``alpha``, ``gate_passed``, ``verdict``.
    """
    if not predictors or len(set(predictors)) != len(predictors):
        raise ValueError(f"predictors must be a non-empty list of distinct names, got {predictors}")
    if len(set(language_models)) != len(language_models):
        raise ValueError(f"language_models lists a model twice: {language_models}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if gate_passed not in (True, False, None):
        raise ValueError(f"gate_passed must be true, false or null (not computed), got {gate_passed!r}")
    missing = [lm for lm in language_models if lm not in competence]
    if missing:
        raise ValueError(f"language models {missing} have no competence values: add them to the competence JSON")
    lacking = {lm: [c for c in predictors if competence[lm].get(c) is None] for lm in language_models}
    lacking = {lm: cs for lm, cs in lacking.items() if cs}
    if lacking:
        raise ValueError(f"competence lacks predictors (LM: missing): {lacking}")
    outcome = calibrated_outcomes(cross=cross, language_models=language_models, vision_models=vision_models)
    y = [outcome[lm] for lm in language_models]
    tests = _holm_tests({c: [competence[lm][c] for lm in language_models] for c in predictors}, y,
                        permutations=permutations, alternative=alternative, seed=seed)
    primary = tests[predictors[0]]
    r = primary["spearman_r"]
    label = verdict(r is not None and r > 0 and primary["p_holm"] < alpha,
                    conclusive=gate_passed is True and r is not None)
    skip = int(cross.get("settings", {}).get("skip_x_layers", 0))
    return {
        "unit": "language_model",
        "n": len(language_models),
        "language_models": list(language_models),
        "vision_models": list(vision_models),
        "outcome": OUTCOME if skip else OUTCOME.replace("embedding layer excluded", "all layers, embedding included"),
        "skip_x_layers": skip,
        "null_permutations": cross["calibration"].get("permutations"),
        "points": [{"language": lm, "outcome": outcome[lm], **{c: float(competence[lm][c]) for c in predictors}}
                   for lm in language_models],
        "predictors": tests,
        "primary": predictors[0],
        **primary,
        "permutations": int(permutations),
        "alternative": alternative,
        "seed": seed,
        "alpha": alpha,
        "gate_passed": gate_passed,
        "verdict": label,
    }


def run_level(registered: dict, runs: dict[str, dict], alternative: str = "greater") -> dict:
    """The registered test's primary correlation with its checkpoints as clusters of their training run:
    the same Spearman r over the same points, p from permuting whole runs (``prh.stats.
    cluster_permutation``; checkpoints paired by step). ``runs``: ``prh.config.language_runs``; a point
    belongs to the run whose name prefixes it (``<run>_<steps>``, ``prh.config.run_models``)."""
    primary = registered["primary"]
    points = []
    for pt in registered["points"]:
        run = next((r for r in sorted(runs, key=len, reverse=True) if pt["language"].startswith(f"{r}_")), None)
        step = pt["language"][len(run) + 1:] if run is not None else ""
        if not step.isdigit():
            return {"p_permutation": None, "reason": f"{pt['language']} is no <run>_<steps> checkpoint of a training run"}
        points.append((run, int(step), pt[primary], pt["outcome"]))
    points.sort()
    try:
        res = cluster_permutation([p[2] for p in points], [p[3] for p in points], [p[0] for p in points],
                                  alternative=alternative)
    except ValueError as err:
        return {"p_permutation": None, "reason": str(err)}
    steps = {r: [p[1] for p in points if p[0] == r] for r in dict.fromkeys(p[0] for p in points)}
    if len({tuple(v) for v in steps.values()}) != 1:
        return {"p_permutation": None, "reason": f"runs hold different checkpoints: {steps}"}
    return {**res, "predictor": primary, "unit": "training run (its checkpoints one cluster)"}


def amended_language_vision(*, cross: dict, competence: dict[str, dict[str, float]], runs: dict[str, dict],
                            vision_models: list[str], predictors: list[str], permutations: int,
                            alternative: str = "greater", seed: int = 0, alpha: float = 0.05) -> dict:
    """The amendment of 2026-11-26 (params.yaml ``convergence.amended``): one point per training run.

    ``runs``: {run: {"final": its last checkpoint's model, "untrained": the untrained model of its size,
    "seed": its training seed}}. Outcome of run r: the calibrated alignment (as registered) of its final
    checkpoint minus that of the untrained model, y_r = c(final_r) - c(untrained_r); predictors: the
    registered ones at the final checkpoint; the same permutation test and Holm. The verdict has no
    gate (params.yaml says why); it is not testable where Holm's p cannot reach alpha at this many runs under the
    exact null (``prh.pooling.spearman_min_p``: 4 runs cannot, 5 can). ``seeds`` counts the runs (independent
    draws, not their seed labels); the ledger marks a verdict on fewer than 3 provisional."""
    if len(runs) < 3:
        raise ValueError(f"the amended test needs at least 3 training runs with an untrained reference, got {len(runs)}")
    finals = [r["final"] for r in runs.values()]
    models = list(dict.fromkeys(finals + [r["untrained"] for r in runs.values()]))
    missing = [m for m in finals if any(competence.get(m, {}).get(c) is None for c in predictors)]
    if missing:
        raise ValueError(f"final checkpoints {missing} lack competence values for {predictors}")
    calibrated = calibrated_outcomes(cross=cross, language_models=models, vision_models=vision_models)
    gain = {run: calibrated[r["final"]] - calibrated[r["untrained"]] for run, r in runs.items()}
    y = [gain[run] for run in runs]
    tests = _holm_tests({c: [competence[runs[run]["final"]][c] for run in runs] for c in predictors}, y,
                        permutations=permutations, alternative=alternative, seed=seed)
    primary = tests[predictors[0]]
    r = primary["spearman_r"]
    # testable where Holm's p can reach alpha at this many runs under the exact null (was: >= 4 runs,
    # where 4 runs could never pass: 2 x 1/24 = 0.083)
    from prh.pooling import spearman_min_p

    reachable = spearman_min_p([len(runs)], len(predictors), sides=1 if alternative != "two-sided" else 2) < alpha
    label = verdict(r is not None and r > 0 and primary["p_holm"] < alpha, testable=r is not None and reachable)
    return {
        "unit": "run", "n": len(runs), "seeds": len(runs),  # every run is an independent draw
        "outcome": "calibrated alignment of the run's final checkpoint minus the untrained same-size model's",
        "points": [{"run": run, "final": r["final"], "untrained": r["untrained"], "gain": gain[run],
                    "final_outcome": calibrated[r["final"]], "untrained_outcome": calibrated[r["untrained"]],
                    **{c: float(competence[r["final"]][c]) for c in predictors}} for run, r in runs.items()],
        "gain_positive_runs": int(sum(g > 0 for g in y)),
        "predictors": tests, "primary": predictors[0], **primary, "permutations": int(permutations),
        "alternative": alternative, "seed": seed, "alpha": alpha, "gate": "none (params.yaml convergence.amended)",
        "verdict": label,
    }


def amended_on_runs(cross: dict, competence: dict, runs: dict, vision_models, pre: dict) -> dict:
    """The amended test on the runs whose final checkpoint is a unit of the registered test (``competence``:
    ``read_lm_competence``'s dict) and whose untrained model is a row of ``cross`` (a smoke config keeps
    run specs of the default it does not train); ``pre`` is the ``preregistered`` block. Fewer than 3
    such runs: not testable, with the reason."""
    units, rows = set(competence["language_models"]), set(cross["x_names"])
    kept = {run: r for run, r in runs.items() if r["final"] in units and r["untrained"] in rows}
    if len(kept) < 3:
        return {"unit": "run", "n": len(kept), "verdict": verdict(None),
                "reason": f"{len(kept)} training runs with an untrained reference; the amended test needs 3"}
    return amended_language_vision(cross=cross, competence=competence["models"], runs=kept,
                                   vision_models=list(vision_models), predictors=pre["predictors"],
                                   permutations=pre["permutations"], alternative=pre["alternative"],
                                   seed=pre["seed"], alpha=pre["alpha"])
