"""The downstream study's manifest (PRH section 2.5, Fig 4).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

from prh.claims import correlation_row, run_level_fields

__all__ = ["results"]


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    task, stats = next(iter(metrics["tasks"].items()))
    row = {**correlation_row(stats, alpha, 1 if suite == "offline" else None), "note": f"task {task}"}
    if suite != "offline":
        row["runs"] = None  # public checkpoints: independent models, not checkpoints of a few runs
    else:
        row.update(run_level_fields(stats.get("run_level")))
    return {"fig04": row}
