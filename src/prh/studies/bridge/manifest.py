"""Seed 001's manifest: random-label "bridge" training of a language-pretrained transformer.

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations


__all__ = ["results"]


def _appendix_a(arms: dict) -> float | None:
    """The run's appendix-A statistic, the mean over its arms of min(before, null 5 % quantile) - after
    (off-diagonal mass in the input basis): > 0 on average where the arms align (each arm's registered ``aligned`` is
    its own margin > 0). One number per run: its arms share the random labels, the patch embedding's initialisation
    and the data (one arm seed), so the run, not the arm, is the independent unit."""
    margins = [min(a["before"], a["null_q05"]) - a["after"] for a in arms.values()
               if all(isinstance(a.get(k), (int, float)) for k in ("before", "after", "null_q05"))]
    return sum(margins) / len(margins) if margins and len(margins) == len(arms) else None


def _fig2_margin(c: dict) -> float | None:
    """Fig 2's registered margin: the language-pretrained models' smallest median outlier fraction minus the vision
    models' largest (> 0: above every vision model), shown by the descriptive decision."""
    lang, vision = c.get("language_pretrained") or {}, c.get("vision_trained") or {}
    return min(lang.values()) - max(vision.values()) if lang and vision else None


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    out = {}
    for key, c in metrics["claims"].items():
        # independent runs: a paired claim's arm-A seeds; appendix A's arms train once each; Fig 2's trained
        # vision models are one draw of the zoo offline and fixed public checkpoints in the paper suite
        if c.get("arms_A"):
            seeds = len(c["arms_A"])
        else:
            seeds = 1 if "arms" in c or suite == "offline" else None
        value, n = c.get("mean"), c.get("n_units", len(c.get("arms") or {}) or None)
        if key == "appA_covariance_alignment":
            value = _appendix_a(c.get("arms") or {})
        elif key == "fig2_outliers":
            n = len(c.get("language_pretrained") or {}) + len(c.get("vision_trained") or {})
            value, n = _fig2_margin(c), n or None
        out[key] = {"value": value, "interval": [c.get("lo"), c.get("hi")] if "lo" in c else None,
                    "n": n, "seeds": seeds, "verdict": c["verdict"], "note": c.get("reason")}
    return out
