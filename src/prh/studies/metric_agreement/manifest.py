"""The metric-agreement study's manifest (PRH appendices A-B, Figs 10 and 12-14).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

from prh.claims import verdict

__all__ = ["results"]


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    m = metrics["metric_agreement"]
    r, p = m.get("min_spearman"), m.get("max_p")
    return {"fig12": {"value": r, "p": p, "n": None, "seeds": 1 if suite == "offline" else None,
                      "verdict": verdict(None if r is None or p is None else bool(r > 0 and p < alpha))}}
