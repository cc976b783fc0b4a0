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
    # the registered rule reads the largest p over metric pairs; the entry's p is the least-agreeing pair's own (the
    # p of the value shown, which the weighed verdict pools), the largest beside it in the note
    return {"fig12": {"value": r, "p": m.get("p_at_min", p), "n": None, "seeds": 1 if suite == "offline" else None,
                      "note": None if p is None else f"largest p over metric pairs {p:.3g} (the registered rule's)",
                      "verdict": verdict(None if r is None or p is None else bool(r > 0 and p < alpha))}}
