"""LoRA-the-Explorer's manifest (Huh's thesis, chapter 4 and appendix 8).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations


__all__ = ["results"]


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    return {key: {"value": metrics[key].get("value"), "n": None, "seeds": 1, "verdict": metrics[key]["verdict"]}
            for key in ("samples_to_match", "least_squares", "update_rank", "head_orthogonality", "merge_interval")
            if key in metrics}
