"""The downstream study's manifest (PRH section 2.5, Fig 4)."""

from __future__ import annotations

from prh.claims import correlation_row
from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

STUDY = Study(
    name="downstream", title="Alignment predicts downstream scores (PRH Fig 4)", source="PRH (002), section 2.5",
    outputs=("downstream.json", "metrics.json"),
    figures=(Figure("downstream_fig04", "prh.plots.downstream:plot_downstream",
                    {"downstream": f"{E}/downstream/downstream.json"}, "downstream/downstream", "Convergence",
                    "downstream"),),
    commands=("score-mc", "run-downstream", "eval-harness", "merge-harness"),
    claims=(ClaimSpec("fig04", "PRH Fig 4",
                      "language models more aligned with the strongest vision model score higher downstream",
                      "Spearman r of alignment vs the first task's score", "language model", "r > 0 and p < alpha"),),
    verdict_inputs={"metrics": "metrics.json"},
)


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    task, stats = next(iter(metrics["tasks"].items()))
    return {"fig04": {**correlation_row(stats, alpha, 1 if suite == "offline" else None), "note": f"task {task}"}}
