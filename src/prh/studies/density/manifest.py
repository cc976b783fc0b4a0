"""The caption-density study's manifest (PRH section 6, Fig 9, appendix E).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

from prh.claims import correlation_row

__all__ = ["results"]


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    trend = metrics["trend"]
    return {"fig09": correlation_row({**trend, "n": trend.get("n_levels")}, alpha, 1 if suite == "offline" else None)}
