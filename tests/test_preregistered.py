"""The pre-registered one-point-per-LM test of Fig 3 on synthetic alignment tables."""

from __future__ import annotations

import numpy as np
import pytest

from prh.stats import holm, spearman_permutation
from prh.studies.convergence.preregistered import calibrated_outcomes, preregistered_language_vision

LMS = [f"lm{i}" for i in range(10)]
VISION = ["v_sup", "v_ssl", "v_random"]


def table(outcome, *, null=0.05, skip=1):
    """A language x vision table whose calibrated cells are outcome[l] + a per-vision offset."""
    outcome = np.asarray(outcome, float)
    offsets = np.array([0.02, -0.01, 0.5])  # v_random is not in the vision set: its offset must not count
    null_max = np.full((len(outcome) + 1, 3), null)
    scores = np.vstack([outcome[:, None] + offsets[None] + null, [[0.9, 0.9, 0.9]]])  # + a reference row
    return {"settings": {"metric": "mutual_knn", "skip_x_layers": skip}, "x_names": [*LMS, "bow"],
            "y_names": VISION, "scores": scores.tolist(),
            "calibration": {"permutations": 20, "null_max_mean": null_max.tolist()}}


def competence(values, second=None):
    second = values if second is None else second
    return {lm: {"reducible_fraction": float(a), "mc_accuracy": float(b)} for lm, a, b in zip(LMS, values, second)}


KW = dict(language_models=LMS, vision_models=["v_sup", "v_ssl"], predictors=["reducible_fraction", "mc_accuracy"],
          permutations=2000, seed=0)


def test_calibrated_outcome_is_the_mean_over_the_vision_set_minus_the_null():
    out = calibrated_outcomes(cross=table(np.linspace(0, 0.2, 10)), language_models=LMS[:3], vision_models=["v_sup", "v_ssl"])
    assert out == pytest.approx({"lm0": 0.005, "lm1": 0.2 / 9 + 0.005, "lm2": 0.4 / 9 + 0.005})  # mean offset (0.02 - 0.01) / 2


def test_monotone_competence_is_reproduced():
    comp = np.linspace(0.1, 0.9, 10)
    res = preregistered_language_vision(cross=table(comp ** 2), competence=competence(comp), gate_passed=True, **KW)
    assert res["unit"] == "language_model" and res["n"] == 10 and res["language_models"] == LMS
    assert res["spearman_r"] == pytest.approx(1.0) and res["p_permutation"] == pytest.approx(1 / 2001)
    assert res["predictors"]["mc_accuracy"]["p_holm"] == pytest.approx(2 / 2001)  # two equal p: both x 2
    assert res["p_holm"] == pytest.approx(2 / 2001) and res["primary"] == "reducible_fraction"
    assert res["verdict"] == "reproduced" and res["gate_passed"] is True and res["permutations"] == 2000
    assert res["points"][3] == pytest.approx({"language": "lm3", "outcome": comp[3] ** 2 + 0.005,
                                              "reducible_fraction": comp[3], "mc_accuracy": comp[3]})
    assert "embedding layer excluded" in res["outcome"] and res["skip_x_layers"] == 1 and res["null_permutations"] == 20
    # the same table under a failed or uncomputed gate says nothing
    for gate in (False, None):
        assert preregistered_language_vision(cross=table(comp ** 2), competence=competence(comp), gate_passed=gate,
                                             **KW)["verdict"] == "inconclusive"


def test_shuffled_competence_is_not_reproduced_and_holm_combines_the_predictors():
    rng = np.random.default_rng(5)
    outcome = rng.uniform(0, 0.1, 10)
    comp, other = rng.uniform(0, 1, 10), outcome + rng.normal(scale=0.01, size=10)  # second predictor: near-monotone
    res = preregistered_language_vision(cross=table(outcome), competence=competence(comp, other), gate_passed=True, **KW)
    y = [p["outcome"] for p in res["points"]]
    first = spearman_permutation(comp, y, permutations=2000, seed=0)
    second = spearman_permutation(other, y, permutations=2000, seed=0)
    assert res["spearman_r"] == pytest.approx(first["spearman_r"]) and res["p_permutation"] == first["p_permutation"]
    assert res["p_permutation"] > 0.2 and res["verdict"] == "not reproduced"
    assert [t["p_holm"] for t in res["predictors"].values()] == holm([first["p_permutation"], second["p_permutation"]])
    assert res["predictors"]["mc_accuracy"]["p_holm"] < 0.05  # the secondary predictor does not decide the verdict


def test_calibration_is_subtracted_before_the_test():
    comp = np.linspace(0.1, 0.9, 10)
    cross = table(np.zeros(10))
    null = np.asarray(cross["calibration"]["null_max_mean"])
    null[:10] += (comp ** 2)[:, None]  # raw scores stay flat, the null maxima rise: calibrated alignment falls
    cross["calibration"]["null_max_mean"] = null.tolist()
    res = preregistered_language_vision(cross=cross, competence=competence(comp), gate_passed=True, **KW)
    assert res["spearman_r"] == pytest.approx(-1.0) and res["p_permutation"] == 1.0 and res["verdict"] == "not reproduced"


def test_errors_name_what_is_missing():
    comp = np.linspace(0.1, 0.9, 10)
    bare = {k: v for k, v in table(comp).items() if k != "calibration"}
    with pytest.raises(ValueError, match="no permutation null"):
        preregistered_language_vision(cross=bare, competence=competence(comp), **KW)
    partial = competence(comp)
    del partial["lm4"]
    with pytest.raises(ValueError, match=r"\['lm4'\] have no competence"):
        preregistered_language_vision(cross=table(comp), competence=partial, **KW)
    partial = competence(comp)
    del partial["lm2"]["mc_accuracy"]
    with pytest.raises(ValueError, match=r"'lm2': \['mc_accuracy'\]"):
        preregistered_language_vision(cross=table(comp), competence=partial, **KW)
    with pytest.raises(ValueError, match=r"vision models \['v_other'\]"):
        preregistered_language_vision(cross=table(comp), competence=competence(comp), **{**KW, "vision_models": ["v_other"]})
    # a constant primary predictor (e.g. every LM at one accuracy) leaves the test undefined: inconclusive, no crash
    flat = preregistered_language_vision(cross=table(comp), competence=competence(np.ones(10), comp),
                                         **{**KW, "gate_passed": True})
    assert flat["spearman_r"] is None and flat["p_permutation"] == 1.0 and flat["verdict"] == "inconclusive"
    assert flat["predictors"]["mc_accuracy"]["spearman_r"] is not None
    with pytest.raises(ValueError, match="gate_passed"):
        preregistered_language_vision(cross=table(comp), competence=competence(comp), gate_passed="yes", **KW)


# ---- the amendment of 2026-11-26: one point per training run, the outcome its gain over the untrained model
def _runs(n_runs, *, untrained="lm9"):
    return {f"run{i}": {"final": f"lm{i}", "untrained": untrained, "seed": i % 2} for i in range(n_runs)}


def test_amended_test_uses_the_gain_over_the_untrained_model():
    # finals lm0..lm5 with outcomes 0.00..0.05; the untrained lm9 sits at 0.09, above every final
    outcome = [0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0, 0, 0, 0.09]
    from prh.studies.convergence.preregistered import amended_language_vision

    res = amended_language_vision(cross=table(outcome), competence=competence(np.arange(10)), runs=_runs(6),
                                  vision_models=["v_sup", "v_ssl"], predictors=["reducible_fraction", "mc_accuracy"],
                                  permutations=2000, seed=0)
    assert res["unit"] == "run" and res["n"] == 6 and res["seeds"] == 6  # runs, not their 2 seed labels
    gains = [p["gain"] for p in res["points"]]
    assert gains == pytest.approx([-0.09, -0.08, -0.07, -0.06, -0.05, -0.04])  # every run below its untrained model
    assert res["gain_positive_runs"] == 0
    # the ranks still rise with competence: the test is about the ordering, not the floor
    assert res["spearman_r"] == pytest.approx(1.0)
    exact = spearman_permutation(np.arange(6), gains, permutations=2000, seed=0)["p_permutation"]
    assert res["p_permutation"] == pytest.approx(exact)
    assert res["p_holm"] == pytest.approx(holm([exact, exact])[0])
    assert res["verdict"] == "reproduced"


def test_amended_test_verdicts_across_the_boundaries():
    from prh.studies.convergence.preregistered import amended_language_vision

    kw = dict(vision_models=["v_sup", "v_ssl"], predictors=["reducible_fraction", "mc_accuracy"], permutations=2000)
    falling = [0.05, 0.04, 0.03, 0.02, 0.01, 0.0, 0, 0, 0, 0.0]
    res = amended_language_vision(cross=table(falling), competence=competence(np.arange(10)), runs=_runs(6), **kw)
    assert res["spearman_r"] == pytest.approx(-1.0) and res["verdict"] == "not reproduced"
    three = amended_language_vision(cross=table(np.linspace(0, 0.1, 10)), competence=competence(np.arange(10)),
                                    runs=_runs(3), **kw)
    assert three["verdict"] == "not testable"  # 3 runs: Holm's p cannot reach alpha
    four = amended_language_vision(cross=table(np.linspace(0, 0.1, 10)), competence=competence(np.arange(10)),
                                   runs=_runs(4), **kw)
    assert four["spearman_r"] == pytest.approx(1.0) and four["verdict"] == "not testable"  # best Holm p 2/24 = 0.083
    five = amended_language_vision(cross=table(np.linspace(0, 0.1, 10)), competence=competence(np.arange(10)),
                                   runs=_runs(5), **{**kw, "permutations": 10000})
    assert five["verdict"] == "reproduced"  # 2/120 = 0.017 < 0.05
    flat = amended_language_vision(cross=table(np.linspace(0, 0.1, 10)), competence=competence(np.ones(10)),
                                   runs=_runs(6), **kw)
    assert flat["predictors"]["reducible_fraction"]["spearman_r"] is None and flat["verdict"] == "not testable"
    with pytest.raises(ValueError, match="at least 3 training runs"):
        amended_language_vision(cross=table(falling), competence=competence(np.arange(10)), runs=_runs(2), **kw)
    with pytest.raises(ValueError, match="lack competence"):
        amended_language_vision(cross=table(falling), competence={}, runs=_runs(6), **kw)


def test_run_level_reads_checkpoints_as_clusters_of_their_run():
    from prh.studies.convergence.preregistered import run_level

    runs = {"g_r0": {}, "g_r1": {}, "g_r2": {}}
    points = [{"language": f"g_r{r}_{s}", "outcome": float(s + r), "acc": float(s)} for r in range(3) for s in (30, 100)]
    out = run_level({"primary": "acc", "points": points}, runs)
    assert out["clusters"] == 3 and out["permutations"] == 6 and out["n"] == 6 and out["predictor"] == "acc"
    assert 0 < out["p_permutation"] <= 1
    missing = run_level({"primary": "acc", "points": points[:-1]}, runs)
    assert missing["p_permutation"] is None and "differ in size" in missing["reason"]
    stray = run_level({"primary": "acc", "points": [*points, {"language": "other_30", "outcome": 0.0, "acc": 1.0}]}, runs)
    assert stray["p_permutation"] is None and "no <run>_<steps> checkpoint" in stray["reason"]


def test_the_amended_verdict_reads_holm_not_the_raw_p():
    """An audit removed Holm from the amended test and no test failed. At 7 runs the primary's one-sided
    p lies between alpha / 2 and alpha here, so without Holm it would pass; with it (x2) it does not."""
    from prh.studies.convergence.preregistered import amended_language_vision

    # gains of the final checkpoints ranked 0, 1, 2, 4, 6, 5, 3 by competence 0..6: sum d^2 = 14, r = 0.75, exact
    # one-sided p = 0.0331 (spearman_null(7))
    outcome = [0.00, 0.01, 0.02, 0.04, 0.06, 0.05, 0.03, 0, 0, 0.0]
    res = amended_language_vision(cross=table(outcome), competence=competence(np.arange(10)), runs=_runs(7),
                                  vision_models=["v_sup", "v_ssl"], predictors=["reducible_fraction", "mc_accuracy"],
                                  permutations=20000, seed=0)
    assert res["spearman_r"] == pytest.approx(0.75)
    assert res["p_permutation"] == pytest.approx(0.0331, abs=0.004)
    assert res["p_holm"] == pytest.approx(2 * res["p_permutation"]) and res["p_holm"] >= 0.05  # both equal: Holm doubles
    assert res["verdict"] == "not reproduced"
