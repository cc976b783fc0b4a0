"""The convergence study's manifest (PRH section 2, Figs 2 and 3; the platonic reference)."""

from __future__ import annotations

from prh.claims import correlation_row as correlation
from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

C = "Convergence"
STUDY = Study(
    name="convergence", title="Convergence: alignment against competence (PRH Figs 2-3)",
    source="PRH (002), section 2",
    outputs=("competence.json", "model_map.json", "language_vision.json", "metrics.json", "platonic.json",
             "platonic_metrics.json"),
    figures=(
        Figure("convergence_fig02_competence_alignment", "prh.plots.convergence:plot_competence",
               {"competence": f"{E}/convergence/competence.json"}, "convergence/competence", C, "convergence"),
        Figure("convergence_fig02_model_map", "prh.plots.convergence:plot_model_map",
               {"model_map": f"{E}/convergence/model_map.json"}, "convergence/model_map", C, "convergence"),
        Figure("convergence_fig03_language_vision", "prh.plots.convergence:plot_language_vision",
               {"language_vision": f"{E}/convergence/language_vision.json"}, "convergence/language_vision", C,
               "convergence"),
        Figure("convergence_fig03_preregistered", "prh.plots.convergence:plot_preregistered",
               {"metrics": f"{E}/convergence/metrics.json"}, "convergence/preregistered", C, "convergence"),
        Figure("convergence_platonic_reference", "prh.plots.convergence:plot_platonic",
               {"platonic": f"{E}/convergence/platonic.json"}, "convergence/platonic", C, "convergence"),
    ),
    commands=("run-convergence", "run-platonic"),
    claims=(
        ClaimSpec("fig02_competence", "PRH Fig 2 (left)",
                  "vision models that solve more tasks align more with each other",
                  "Spearman r of tasks solved vs mean alignment to the other models", "vision model",
                  "r > 0 and p < alpha"),
        ClaimSpec("fig03_preregistered", "PRH Fig 3 (pre-registered test, params.yaml convergence.preregistered)",
                  "language models of higher competence align more with vision models",
                  "Spearman r of competence vs calibrated alignment (Holm p)", "language model",
                  "gate passed, r > 0 and p_holm < alpha; gate not passed: inconclusive"),
        ClaimSpec("fig03_amended", "PRH Fig 3 (issue 36's amendment, params.yaml convergence.amended)",
                  "training runs that end more competent gain more alignment with vision over their untrained model",
                  "Spearman r of final competence vs gain over the untrained model (Holm p)", "training run",
                  "r > 0 and p_holm < alpha; no gate; fewer than 4 runs: not testable"),
        ClaimSpec("fig03_descriptive", "PRH Fig 3", "language-vision alignment rises with 1 - bits per byte",
                  "Spearman r over (language, vision) pairs", "model pair", "r > 0 and p < alpha"),
        ClaimSpec("platonic_vision", "PRH section 5 (offline: the world kernel)",
                  "better vision models are closer to the world's kernel",
                  "Spearman r of competence vs alignment with the world kernel", "vision model", "r > 0 and p < alpha"),
        ClaimSpec("platonic_language", "PRH section 5 (offline: the world kernel)",
                  "better language models are closer to the world's kernel",
                  "Spearman r of 1 - bpb vs alignment with the world kernel", "language model", "r > 0 and p < alpha"),
    ),
    verdict_inputs={"metrics": "metrics.json", "platonic": "platonic_metrics.json?"},
)


def results(suite: str, alpha: float, *, metrics: dict, platonic: dict | None) -> dict:
    seeds = 1 if suite == "offline" else None  # offline: one draw of the zoo; paper: fixed public checkpoints
    pre = metrics["language_vision_preregistered"]
    out = {"fig02_competence": correlation(metrics["competence_alignment"], alpha, seeds),
           "fig03_preregistered": {"value": pre.get("spearman_r"), "p": pre.get("p_holm"), "n": pre.get("n"),
                                   "seeds": seeds, "verdict": pre["verdict"],
                                   "note": None if pre.get("gate_passed") else "validity gate not passed"},
           "fig03_descriptive": correlation(metrics["language_vision_descriptive"], alpha, seeds)}
    amended = metrics.get("language_vision_amended")
    if amended is not None:
        out["fig03_amended"] = {"value": amended.get("spearman_r"), "p": amended.get("p_holm"), "n": amended.get("n"),
                                "seeds": amended.get("seeds") if suite == "offline" else None,
                                "verdict": amended["verdict"], "note": amended.get("reason")}
    for modality in ("vision", "language"):
        if modality in ((platonic or {}).get("platonic") or {}):
            out[f"platonic_{modality}"] = correlation(platonic["platonic"][modality], alpha, seeds)
    return out
