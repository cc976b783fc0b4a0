"""The caption-density study's manifest (PRH section 6, Fig 9, appendix E)."""

from __future__ import annotations

from prh.claims import correlation_row
from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

STUDY = Study(
    name="density", title="Caption density (PRH Fig 9)", source="PRH (002), section 6",
    outputs=("density.json", "metrics.json"),
    figures=(Figure("density_fig09_caption_density", "prh.plots.density:plot_density",
                    {"density": f"{E}/density/density.json"}, "density/density", "Caption density", "density"),),
    commands=("summarise-captions", "run-density"),
    claims=(ClaimSpec("fig09", "PRH Fig 9", "denser captions align better with vision",
                      "Spearman r of caption density vs mean alignment", "density level", "r > 0 and p < alpha"),),
    verdict_inputs={"metrics": "metrics.json"},
)


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    trend = metrics["trend"]
    return {"fig09": correlation_row({**trend, "n": trend.get("n_levels")}, alpha, 1 if suite == "offline" else None)}
