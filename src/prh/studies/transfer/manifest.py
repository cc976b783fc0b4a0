"""The transfer study's manifest (Imani, Hu & White: representation alignment and transfer).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

from prh.claims import verdict

__all__ = ["results"]


def results(suite: str, alpha: float, *, metrics: dict, peaks: dict) -> dict:
    runs = (peaks.get("config") or {}).get("runs")
    return {key: {"value": None, "n": runs, "seeds": runs, "verdict": c.get("verdict", verdict(c["reproduced"]))}
            for key, c in metrics["claims"].items()}
