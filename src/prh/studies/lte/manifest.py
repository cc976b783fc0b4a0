"""LoRA-the-Explorer's manifest (Huh's thesis, chapter 4 and appendix 8).

What the study declares (outputs, figures, commands, claims) is manifest.yaml beside this file;
here is ``results``: the ledger's reading of the study's results (prh.studies.ledger).

Each replicate is one training run, so the weighed verdicts read one number per run: ``update_rank`` and
``merge_interval`` a statistic on one scale (``run_mean``), ``least_squares`` and ``head_orthogonality``, whose parts
are on different scales (losses and steps; |cos| and accuracy), the sign of the run's registered outcome (+1 every part
holds, -1 not; ``sign_flip``: the exact sign test). ``samples_to_match`` reads its ratio.
"""

from __future__ import annotations

import math

__all__ = ["results"]

KEYS = ("samples_to_match", "least_squares", "update_rank", "head_orthogonality", "merge_interval")


def _rank_ratio(c: dict) -> float | None:
    """update_rank: the smallest ratio of LTE's effective rank to its line 2r (least squares and the ViT), > 1 where
    LTE's part holds. LoRA's part (effective rank <= r) holds by construction, a rank-r update, and sits near its line,
    so its ratio r / effective rank enters only where it is broken (< 1): > 1 exactly where the registered rule holds."""
    ls, vit, vr = c.get("least_squares") or {}, c.get("vit") or {}, c.get("vit_r")
    parts = [(ls.get("lte_min"), 2 * (ls.get("r") or 0)), (vit.get("lte"), 2 * (vr or 0)),
             (ls.get("r"), ls.get("lora_max")), (vr, vit.get("lora"))]
    if any(not isinstance(x, (int, float)) or not isinstance(line, (int, float)) for x, line in parts):
        return None
    lte = [x / line if line > 0 else math.nan for x, line in parts[:2]]
    lora = [r / e for r, e in parts[2:] if e > 0 and r / e < 1]  # a broken bound only
    return min(lte + lora)


def _smallest_fall(rows: list[dict]) -> float | None:
    """merge_interval: the smallest fall of test accuracy from one merge interval T to the next, over every head
    count (>= 0 exactly where the registered rule, non-increasing in T for every N, holds)."""
    steps = []
    for n in sorted({r["heads"] for r in rows}):
        acc = [r["test_accuracy"] for r in sorted((r for r in rows if r["heads"] == n), key=lambda r: r["merge_every"])]
        steps += [a - b for a, b in zip(acc, acc[1:])]
    return min(steps) if steps else None


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    out = {}
    for key in (k for k in KEYS if k in metrics):
        c = metrics[key]
        row = {"value": c.get("value"), "n": None, "seeds": 1, "verdict": c["verdict"]}
        if key == "update_rank":
            row["value"] = _rank_ratio(c)
        elif key == "merge_interval":
            row["value"] = _smallest_fall(c.get("rows") or [])
        elif key in ("least_squares", "head_orthogonality") and c["verdict"] in ("reproduced", "not reproduced"):
            row["effects"] = [1.0 if c["verdict"] == "reproduced" else -1.0]
        out[key] = row
    return out
