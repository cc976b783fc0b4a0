"""The sample_size study's manifest (alignment against the number of items N).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).
"""

from __future__ import annotations

import math

__all__ = ["results"]


def _together(c: dict) -> list[float] | None:
    """kernel_tracks_models: the run's co-movement, the smaller of the model-kernel and model-model
    calibrated changes, signed + where they share a sign and - where they do not (0 where either is 0): one effect per
    run for the sign-flip test; None where either change is not recorded."""
    a, b = c.get("value"), c.get("model_model_change")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (a, b)):
        return None
    return [math.copysign(min(abs(a), abs(b)), a * b) if a * b else 0.0]


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    seeds = 1 if suite == "offline" else None  # offline: one draw of the zoo; paper: fixed public checkpoints
    out = {key: {"value": c.get("value"), "n": c.get("n"), "seeds": seeds, "verdict": c["verdict"],
                 "note": c.get("reason")} for key, c in metrics["claims"].items()}
    if "kernel_tracks_models" in out and (effects := _together(metrics["claims"]["kernel_tracks_models"])) is not None:
        out["kernel_tracks_models"]["effects"] = effects
    return out
