"""The simplicity-bias study's manifest (Huh's thesis, chapter 2: effective rank against depth).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

from prh.claims import verdict

__all__ = ["results"]


def _falls(trends: list[dict], alpha: float) -> dict:
    rhos = [t.get("spearman_rho") for t in trends]
    if not trends or any(r is None for r in rhos):
        return {"verdict": verdict(None), "note": "an undefined rho"}
    ok = all(t["spearman_rho"] < 0 and t["p_value"] < alpha for t in trends)
    return {"value": max(rhos), "p": max(t["p_value"] for t in trends), "n": min(t["n"] for t in trends),
            "seeds": None, "verdict": verdict(ok), "note": f"{len(trends)} settings"}


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    pick = lambda prefix, suffix="": [v for k, v in metrics.items()  # noqa: E731
                                      if k.startswith(prefix) and k.endswith(suffix) and isinstance(v, dict)]
    return {"fig2.2_random_nets": _falls(pick("random_net/"), alpha),
            "fig7.1_products": _falls(pick("products/"), alpha),
            "fig2.6_trained": _falls(pick("trained/", "/map_rank"), alpha)}
