"""The colour study's manifest (PRH section 4, Fig 8 and appendix D; section 4.2's NCE check).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

from prh.claims import correlation_row, run_level_fields

__all__ = ["results"]


def _row(stats: dict, alpha: float) -> dict:
    """A panel's ledger entry: its registered rule on the Spearman r of distances with the Mantel p (``n``: the
    distance pairs), and that Mantel test as the colours' own: the pairs sit in ``items`` colours, the
    relabelling permutes the colours, so ``weigh`` reads its two one-sided p with the colour as unit. A metrics.json
    from before the weighed verdicts of 2026-11-27 states neither n nor the other side: the registered verdict then stands."""
    if stats.get("p_less") is None or stats.get("items") is None:  # no n either: never the pairs as independent
        return correlation_row(stats, alpha, None, r="spearman", p="p_value")
    row = correlation_row({**stats, "n": stats.get("distance_pairs")}, alpha, None, r="spearman", p="p_value")
    return {**row, **run_level_fields({"runs": stats["items"], "p_greater": stats["p_value"], "p_less": stats["p_less"],
                                       "spearman_r": stats["spearman"]})}


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    out = {"fig08_vision": _row(metrics["vision_pmi"], alpha)}
    language = sorted(k for k in metrics if k.startswith("language_"))
    if language:
        out["fig08_language"] = {**_row(metrics[language[0]], alpha), "note": language[0].removeprefix("language_")}
    return out
