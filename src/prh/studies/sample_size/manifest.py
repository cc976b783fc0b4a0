"""The sample_size study's manifest (issue 38: alignment against the number of items N).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

__all__ = ["results"]


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    seeds = 1 if suite == "offline" else None  # offline: one draw of the zoo; paper: fixed public checkpoints
    return {key: {"value": c.get("value"), "n": c.get("n"), "seeds": seeds, "verdict": c["verdict"],
                  "note": c.get("reason")} for key, c in metrics["claims"].items()}
