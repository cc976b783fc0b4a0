"""Seed 001's manifest: random-label "bridge" training of a language-pretrained transformer."""

from __future__ import annotations

from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

B, F = "Seed 001: bridge", f"{E}/bridge/figures.json"
TASK = "probe task, paired (arms' seeds averaged)"
BEATS = "interval of A - B above 0; below the margin: not reproduced; else inconclusive"
MATCHES = "interval of A - B inside (-margin, margin); wholly outside: not reproduced; else inconclusive"
STUDY = Study(
    name="bridge", title="Seed 001: language-pretraining-induced bias (random-label bridge)",
    source="seed 001 (001_59d0951087df27fe.txt)",
    outputs=("arms", "alignment.json", "outliers.json", "metrics.json", "figures.json"),
    figures=(
        Figure("bridge_fig02_outliers", "prh.plots.bridge:plot_fig2",
               {"outliers": f"{E}/bridge/outliers.json", "figures": F}, "bridge/fig2_outliers", B, "bridge"),
        Figure("bridge_fig03_random_labels", "prh.plots.bridge:plot_fig3", {"figures": F}, "bridge/fig3_random_labels",
               B, "bridge"),
        Figure("bridge_fig08_partial_bridge", "prh.plots.bridge:plot_fig8", {"figures": F},
               "bridge/fig8_partial_bridge", B, "bridge"),
        Figure("bridge_fig10_outliers_after", "prh.plots.bridge:plot_fig10", {"figures": F},
               "bridge/fig10_outliers_after", B, "bridge"),
    ),
    commands=("run-bridge-arm", "run-bridge-align", "run-bridge-outliers", "run-bridge-analysis"),
    claims=(
        ClaimSpec("fig3_random_labels", "seed 001, Figs 3/12", "pretrained beats scratch at 100% random labels",
                  "mean paired difference of probe accuracy", TASK, BEATS),
        ClaimSpec("fig3_correct_labels", "seed 001, Figs 3/12", "pretrained beats scratch with correct labels",
                  "mean paired difference of probe accuracy", TASK, BEATS),
        ClaimSpec("fig6_bridge_helps", "seed 001, Fig 6", "the random-label bridge beats no bridge",
                  "mean paired difference of probe accuracy", TASK, BEATS),
        ClaimSpec("fig8_first2_matches_all", "seed 001, Figs 8/13", "bridging 2 blocks matches bridging all",
                  "mean paired difference of probe accuracy", TASK, MATCHES),
        ClaimSpec("fig8_first5_beats_all", "seed 001, Figs 8/13", "bridging 5 blocks beats bridging all",
                  "mean paired difference of probe accuracy", TASK, BEATS),
        ClaimSpec("null_k0_matches_all", "control (not in the seed)", "the patch embedding alone matches bridging all",
                  "mean paired difference of probe accuracy", TASK, MATCHES),
        ClaimSpec("null_shuffled_matches_pretrained", "control (not in the seed)",
                  "permuted pretrained weights match the pretrained ones",
                  "mean paired difference of probe accuracy", TASK, MATCHES),
        ClaimSpec("fig10_pretrained_more_outliers", "seed 001, Figs 10/11",
                  "after random labels pretrained weights have more outliers than scratch",
                  "mean paired difference of outlier fraction", "weight matrix, paired", BEATS),
        ClaimSpec("fig10_correct_labels_reduce", "seed 001, Figs 11/14",
                  "correct labels leave fewer outliers than random labels",
                  "mean paired difference of outlier fraction", "weight matrix, paired", BEATS),
        ClaimSpec("appA_covariance_alignment", "seed 001, appendix A",
                  "under random labels the patch embedding's covariance aligns with the input's",
                  "off-diagonal mass after < before and < the random-basis null's 5% quantile", "arm",
                  "all arms aligned; none: not reproduced; some: inconclusive"),
        ClaimSpec("fig2_outliers", "seed 001, Fig 2", "language-pretrained weights have more outliers than vision-trained",
                  "median outlier fraction per model", "model",
                  "every language model above every vision model; below their median: not reproduced"),
    ),
    verdict_inputs={"metrics": "metrics.json"},
)


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    out = {}
    for key, c in metrics["claims"].items():
        seeds = len(c["arms_A"]) if c.get("arms_A") else None
        out[key] = {"value": c.get("mean"), "interval": [c.get("lo"), c.get("hi")] if "lo" in c else None,
                    "n": c.get("n_units", len(c.get("arms") or {}) or None), "seeds": seeds, "verdict": c["verdict"],
                    "note": c.get("reason")}
    return out
