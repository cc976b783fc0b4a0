"""The calibrated null of an alignment table, summarised for Figs 2 and 3's metrics (``prh run-convergence``)."""

from __future__ import annotations

import numpy as np

__all__ = ["null_summary"]


def null_summary(alignment: dict) -> dict | None:
    """The calibrated null of an alignment table (``prh align --null-permutations P``), summarised:
    mean observed score, mean of the permutation null of the best layer pair (what layer
    search finds by chance), the fraction of cells with p < 0.05 and the mean Aristotelian calibrated score
    (the authors' clip((s - tau) / (s_max - tau)) over the same permutations). None without a null."""
    calib = alignment.get("calibration")
    if not calib:
        return None
    scores, p = np.asarray(alignment["scores"], dtype=float), np.asarray(calib["p_value"], dtype=float)
    self_set = alignment["x_names"] == alignment["y_names"]  # a set against itself: leave out the diagonal
    off = ~np.eye(len(scores), dtype=bool) if self_set else np.ones(scores.shape, dtype=bool)
    scores, p, null = scores[off], p[off], np.asarray(calib["null_max_mean"], dtype=float)[off]
    arist = np.asarray(calib["aristotelian"], dtype=float)[off] if "aristotelian" in calib else None
    return {"permutations": calib["permutations"], "score_mean": float(np.nanmean(scores)),
            "null_max_mean": float(np.nanmean(null)), "fraction_p_below_0.05": float(np.nanmean(p < 0.05)),
            "min_p": float(1.0 / (calib["permutations"] + 1)),
            "aristotelian_mean": None if arist is None else float(np.nanmean(arist))}
