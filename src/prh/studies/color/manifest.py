"""The colour study's manifest (PRH section 4, Fig 8 and appendix D; section 4.2's NCE check).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

from prh.claims import correlation_row

__all__ = ["results"]


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    out = {"fig08_vision": correlation_row(metrics["vision_pmi"], alpha, None, r="spearman", p="p_value")}
    language = sorted(k for k in metrics if k.startswith("language_"))
    if language:
        out["fig08_language"] = {**correlation_row(metrics[language[0]], alpha, None, r="spearman", p="p_value"),
                                 "note": language[0].removeprefix("language_")}
    return out
