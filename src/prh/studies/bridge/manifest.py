"""Seed 001's manifest: random-label "bridge" training of a language-pretrained transformer.

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations


__all__ = ["results"]


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    out = {}
    for key, c in metrics["claims"].items():
        # independent runs: a paired claim's arm-A seeds; appendix A's arms train once each; Fig 2's trained
        # vision models are one draw of the zoo offline and fixed public checkpoints in the paper suite
        if c.get("arms_A"):
            seeds = len(c["arms_A"])
        else:
            seeds = 1 if "arms" in c or suite == "offline" else None
        out[key] = {"value": c.get("mean"), "interval": [c.get("lo"), c.get("hi")] if "lo" in c else None,
                    "n": c.get("n_units", len(c.get("arms") or {}) or None), "seeds": seeds, "verdict": c["verdict"],
                    "note": c.get("reason")}
    return out
