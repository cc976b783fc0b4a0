"""The colour study's manifest (PRH section 4, Fig 8 and appendix D; section 4.2's NCE check)."""

from __future__ import annotations

from prh.claims import correlation_row
from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

STUDY = Study(
    name="color", title="Colour from co-occurrence (PRH Fig 8)", source="PRH (002), section 4",
    outputs=("vision.json", "language.json", "nce.json", "metrics.json"),
    figures=(
        Figure("color_fig08_pmi", "prh.plots.color:plot_color_pmi",
               {"vision": f"{E}/color/vision.json", "language": f"{E}/color/language.json"}, "color/pmi", "Colour",
               "color"),
        Figure("color_sec4_nce_pmi", "prh.plots.color:plot_nce_pmi", {"nce": f"{E}/color/nce.json"}, "color/nce",
               "Colour", "color"),
    ),
    commands=("run-color",),
    claims=(
        ClaimSpec("fig08_vision", "PRH Fig 8", "colour distances from pixel co-occurrence (PMI) match perceptual ones",
                  "Spearman r of PMI-embedding vs CIELAB distances", "colour pair", "r > 0 and p < alpha"),
        ClaimSpec("fig08_language", "PRH Fig 8", "colour distances of a language model's embeddings match perceptual ones",
                  "Spearman r of embedding vs CIELAB distances (first language model)", "colour pair",
                  "r > 0 and p < alpha"),
    ),
    verdict_inputs={"metrics": "metrics.json"},
)


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    out = {"fig08_vision": correlation_row(metrics["vision_pmi"], alpha, None, r="spearman", p="p_value")}
    language = sorted(k for k in metrics if k.startswith("language_"))
    if language:
        out["fig08_language"] = {**correlation_row(metrics[language[0]], alpha, None, r="spearman", p="p_value"),
                                 "note": language[0].removeprefix("language_")}
    return out
