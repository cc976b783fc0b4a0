"""The metric-agreement study's manifest (PRH appendices A-B, Figs 10 and 12-14)."""

from __future__ import annotations

from prh.claims import verdict
from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

M, S = "Metrics", "metric_agreement"
STUDY = Study(
    name=S, title="Alignment metrics against each other (PRH Figs 10, 12-14)", source="PRH (002), appendices A-B",
    outputs=("locality.json", "locality_metrics.json", "metric_agreement.json", "cross_metrics.json", "metrics.json"),
    figures=(
        Figure("metric_agreement_fig10_locality", "prh.plots.metric_agreement:fig10_locality",
               {"locality": f"{E}/{S}/locality.json"}, f"{S}/locality", M, S),
        Figure("metric_agreement_fig12", "prh.plots.metric_agreement:fig12_metric_agreement",
               {"agreement": f"{E}/{S}/metric_agreement.json"}, f"{S}/metric_agreement", M, S),
        Figure("metric_agreement_fig13_cross_metrics", "prh.plots.metric_agreement:fig13_cross_metrics",
               {"cross": f"{E}/{S}/cross_metrics.json"}, f"{S}/cross_metrics", M, S),
        Figure("metric_agreement_fig14_cross_metrics", "prh.plots.metric_agreement:fig14_cross_metrics",
               {"cross": f"{E}/{S}/cross_metrics.json"}, f"{S}/cross_metrics", M, S),
    ),
    commands=("run-locality", "run-metric-agreement"),
    claims=(ClaimSpec("fig12", "PRH Fig 12", "the alignment metrics rank vision-vision pairs alike",
                      "smallest Spearman r between two metrics' scores (largest p beside it)", "metric pair",
                      "every metric pair r > 0 with p < alpha"),),
    verdict_inputs={"metrics": "metrics.json"},
)


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    m = metrics["metric_agreement"]
    r, p = m.get("min_spearman"), m.get("max_p")
    return {"fig12": {"value": r, "p": p, "n": None, "seeds": 1 if suite == "offline" else None,
                      "verdict": verdict(None if r is None or p is None else bool(r > 0 and p < alpha))}}
