"""The thesis's chapter-4 claims, each with its statistic and a verdict (``metrics.json``).

- ``samples_to_match`` (section 4.3.5: LTE needs about 1.4x standard's samples, here
  within 2x): the first evaluation at which LTE's test accuracy reaches standard's final
  test accuracy, as a multiple of standard's samples. Counted only if standard beats
  LoRA (no merges) by at least ``min_gap`` accuracy points; otherwise ``inconclusive``.
- ``least_squares`` (appendix 8.3): without merges one head (LoRA) stays at or above the
  rank-r SVD bound; every merged run goes below ``threshold``; steps needed grow with T.
- ``update_rank`` (appendix 8.8): effective rank of the accumulated update > 2r for LTE
  (least squares: targets of rank > 2r), <= r for LoRA without merges (least squares and
  the ViT's last evaluation).
- ``head_orthogonality`` (Fig 4.7): different init and different data give the lowest
  mean |cos| between heads and the best test accuracy of the four settings.
- ``merge_interval`` (Table 4.9): at a fixed budget, test accuracy falls as T grows (per N).
"""

from __future__ import annotations

import argparse

from prh.claims import verdict
from prh.io import read_json, write_json

__all__ = ["CONFIG", "main", "samples_to_match", "verdicts"]

# the params.yaml keys `prh run-lte-verdicts` reads (its rule's one --config argument, prh.slices)
CONFIG = {"lte.claims": ("max_ratio", "min_gap")}


def samples_to_match(vision: dict) -> float | None:
    """LTE's samples when its test accuracy first reaches standard's final one, / standard's samples."""
    std = vision["arms"]["standard"]["history"][-1]
    hit = next((h for h in vision["arms"]["lte"]["history"] if h["accuracy"] >= std["accuracy"]), None)
    return None if hit is None else hit["samples"] / std["samples"]


def verdicts(*, least_squares: dict, vision: dict, table: dict, orthogonality: dict, max_ratio: float,
             min_gap: float) -> dict:
    """Every claim's statistic and verdict, from the experiments' JSON contents."""
    arms = {k: v["history"][-1] for k, v in vision["arms"].items()}
    gap = arms["standard"]["accuracy"] - arms["lora"]["accuracy"]
    ratio = samples_to_match(vision)
    v = verdict(ratio is not None and ratio <= max_ratio, conclusive=gap >= min_gap)
    match = {"statistic": "LTE samples to reach standard's final test accuracy / standard's samples",
             "value": ratio, "threshold": max_ratio, "standard_minus_lora_accuracy": gap, "min_gap": min_gap,
             "final_accuracy": {k: h["accuracy"] for k, h in arms.items()},
             "final_loss": {k: h["loss"] for k, h in arms.items()}, "verdict": v}

    ls = least_squares["runs"]
    r = least_squares["config"]["lora_rank"]
    # one head without merges is LoRA (rank <= r); N heads without merges are multi-head LoRA, not rank-bound
    unmerged = [x for x in ls if x["merge_every"] is None and x["heads"] == 1]
    merged = [x for x in ls if x["merge_every"] is not None]
    above = all(x["min_loss"] >= x["svd_bound"] - 1e-6 for x in unmerged)
    below = all(x["final_loss"] < least_squares["config"]["threshold"] for x in merged)
    order = []
    for x in merged:
        if x["merge_every"] == 1:
            same = sorted((y for y in merged if (y["target_rank"], y["heads"]) == (x["target_rank"], x["heads"])),
                          key=lambda y: y["merge_every"])
            steps = [y["steps_to_threshold"] or float("inf") for y in same]
            order.append(all(a <= b for a, b in zip(steps, steps[1:])))
    lsq = {"statistic": "min loss without merges vs rank-r SVD bound; final loss of merged runs; steps to threshold",
           "above_bound_without_merges": above, "merged_below_threshold": below,
           "steps_grow_with_T": all(order),
           "missed_threshold": [{k: x[k] for k in ("target_rank", "heads", "merge_every", "final_loss")}
                                for x in merged if x["final_loss"] >= least_squares["config"]["threshold"]],
           "runs": [{k: x[k] for k in ("target_rank", "heads", "merge_every", "svd_bound", "min_loss", "final_loss",
                                       "steps_to_threshold")} for x in ls],
           "verdict": verdict(above and below and all(order))}

    # a rank-k target's update has rank <= k: "> 2r" is testable only where the target's rank exceeds 2r
    ls_lte = min(x["update_erank"] for x in merged if x["target_rank"] > 2 * r)
    ls_lora = max(x["update_erank"] for x in unmerged)
    vr = vision["config"]["rank"]
    rank = {"statistic": "mean effective rank of W_final - W_0 over layers",
            "least_squares": {"lte_min": ls_lte, "lora_max": ls_lora, "r": r},
            "vit": {k: h.get("update_erank") for k, h in arms.items()}, "vit_r": vr,
            "verdict": verdict(ls_lte > 2 * r and ls_lora <= r + 1e-6
                                and arms["lte"]["update_erank"] > 2 * vr and arms["lora"]["update_erank"] <= vr + 1e-6)}

    st = orthogonality["settings"]
    final = {k: s["curve"][-1] if s["curve"] else {} for k, s in st.items()}
    best_cos = min(final, key=lambda k: final[k].get("abs_cos") if final[k].get("abs_cos") is not None else 2.0)
    best_acc = max(st, key=lambda k: st[k]["test_accuracy"])
    orth = {"statistic": "mean pairwise |cos| and Grassmann distance between heads at the last merge",
            "abs_cos": {k: f.get("abs_cos") for k, f in final.items()},
            "grassmann": {k: f.get("grassmann") for k, f in final.items()},
            "test_accuracy": {k: s["test_accuracy"] for k, s in st.items()},
            "verdict": verdict(best_cos == "diff init, diff data" and best_acc == "diff init, diff data")}

    falls = []
    for n in sorted({row["heads"] for row in table["rows"]}):
        rows = sorted((row for row in table["rows"] if row["heads"] == n), key=lambda row: row["merge_every"])
        falls.append(all(a["test_accuracy"] >= b["test_accuracy"] for a, b in zip(rows, rows[1:])))
    merge = {"statistic": "test accuracy at a fixed budget, per number of heads, as T grows",
             "rows": table["rows"], "verdict": verdict(all(falls))}

    bytes_ = vision["arms"]["lte"]["bytes_per_merge"]
    return {"samples_to_match": match, "least_squares": lsq, "update_rank": rank, "head_orthogonality": orth,
            "merge_interval": merge,
            "communication": {"lte_bytes_per_merge": bytes_, "lte_merges": vision["arms"]["lte"]["merges"],
                              "ddp_bytes_per_step": vision["arms"]["standard"]["bytes_per_sync"],
                              "ddp_steps": vision["arms"]["standard"]["steps"]}}


def main(argv: list[str] | None = None) -> None:
    from prh.slices import add_slice

    p = argparse.ArgumentParser(prog="prh run-lte-verdicts", description=__doc__.splitlines()[0])
    for name in ("least-squares", "vision", "table", "orthogonality"):
        p.add_argument(f"--{name}", required=True, help=f"{name}.json of `prh run-lte`")
    p.add_argument("--out", required=True)
    settings = add_slice(p, CONFIG)
    a = p.parse_args(argv)
    write_json(a.out, verdicts(least_squares=read_json(a.least_squares), vision=read_json(a.vision),
                               table=read_json(a.table), orthogonality=read_json(a.orthogonality),
                               **settings(a)["lte.claims"]))
