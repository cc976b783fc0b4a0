"""The transfer study's manifest (Imani, Hu & White: representation alignment and transfer).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

import math

from prh.claims import verdict

__all__ = ["results"]


def results(suite: str, alpha: float, *, metrics: dict, peaks: dict) -> dict:
    """Each claim's registered verdict (the ordering of run means), and for the ledger's weighed verdict
    its per-run effects (``run_effects``): n and seeds are the runs of the claim's own part (peaks: ``runs``; Fig 2:
    ``fig2_runs``, which Fig 7 on the digits shares where its per-run AUCs are recorded). Proposition 1 is a numerical
    check with a tolerance (largest relative error < 1e-8), not a set of runs: its decision keeps that rule."""
    out = {}
    for key, c in metrics["claims"].items():
        label = c.get("verdict", verdict(c["reproduced"]))
        effects = c.get("run_effects")
        if key.startswith("prop1"):
            out[key] = {"value": c.get("max_rel_error"), "n": None, "seeds": None, "verdict": label,
                        "note": "numerical check: largest relative error of the closed form against gradient "
                                "descent < 1e-8 (a tolerance, not a run count)"}
        elif effects is not None:  # a run whose effect is undefined (NaN, written as null) stays a run: not testable
            effects = [float("nan") if e is None else float(e) for e in effects]
            finite = [e for e in effects if math.isfinite(e)]
            out[key] = {"value": sum(finite) / len(finite) if finite else None, "n": len(effects),
                        "seeds": len(effects), "verdict": label, "effects": effects}
        else:  # a metrics.json from before the weighed verdicts of 2026-11-27 (Fig 7 on the digits: from before its per-run AUCs)
            runs = (peaks.get("config") or {}).get("runs") if "_peaks_" in key or key.startswith(("fig10", "fig11",
                                                                                                 "fig12")) else None
            out[key] = {"value": None, "n": runs, "seeds": runs, "verdict": label,
                        "note": "run means compared; per-run effects not recorded"}
    return out
