"""LoRA-the-Explorer's manifest (Huh's thesis, chapter 4 and appendix 8)."""

from __future__ import annotations

from prh.manifest import EXPERIMENTS as E
from prh.manifest import ClaimSpec, Figure, Study

__all__ = ["STUDY", "results"]

L, LTE = "lte", "LoRA-the-Explorer"
RUN = "training run (one seed)"
STUDY = Study(
    name=L, title="LoRA-the-Explorer: training from scratch with parallel low-rank heads (thesis ch. 4)",
    source="Huh, thesis (003_bf5b686d19a1075e.txt), chapter 4 and appendix 8",
    outputs=("least_squares.json", "vision.json", "table.json", "orthogonality.json", "metrics.json"),
    figures=(
        Figure("lte_fig8.1_least_squares", "prh.plots.lte:plot_least_squares",
               {"least_squares": f"{E}/{L}/least_squares.json"}, f"{L}/least_squares", LTE, L),
        Figure("lte_fig4.6_vs_standard", "prh.plots.lte:plot_lte_vs_standard", {"vision": f"{E}/{L}/vision.json"},
               f"{L}/vs_standard", LTE, L),
        Figure("lte_fig4.7_head_orthogonality", "prh.plots.lte:plot_head_orthogonality",
               {"orthogonality": f"{E}/{L}/orthogonality.json"}, f"{L}/orthogonality", LTE, L),
        Figure("lte_fig8.5_update_rank", "prh.plots.lte:plot_update_rank", {"vision": f"{E}/{L}/vision.json"},
               f"{L}/update_rank", LTE, L),
        Figure("lte_table4.9_mini", "prh.plots.lte:write_table", {"table": f"{E}/{L}/table.json"}, f"{L}/table", LTE, L,
               formats=("csv",)),
    ),
    commands=("run-lte", "run-lte-verdicts"),
    claims=(
        ClaimSpec("samples_to_match", "thesis section 4.3.5", "LTE reaches standard training's accuracy with about "
                  "1.4x its samples", "LTE samples to reach standard's final accuracy / standard's samples", RUN,
                  "ratio <= max_ratio; inconclusive when standard beats LoRA by less than min_gap"),
        ClaimSpec("least_squares", "thesis appendix 8.3 (Fig 8.1)", "without merges LoRA stays above the rank-r bound; "
                  "merged LTE goes below the threshold, slower as T grows", "losses and steps to threshold", RUN,
                  "all three hold"),
        ClaimSpec("update_rank", "thesis appendix 8.8 (Fig 8.5)", "LTE's accumulated update has rank > 2r; LoRA's <= r",
                  "mean effective rank of W_final - W_0", RUN, "both hold on least squares and the ViT"),
        ClaimSpec("head_orthogonality", "thesis Fig 4.7", "heads with different init and data are the most orthogonal "
                  "and the most accurate", "mean |cos| between heads; test accuracy", RUN,
                  "the same setting has the lowest |cos| and the best accuracy"),
        ClaimSpec("merge_interval", "thesis Table 4.9", "at a fixed budget accuracy falls as the merge interval grows",
                  "test accuracy per heads and T", RUN, "non-increasing in T for every head count"),
    ),
    verdict_inputs={"metrics": "metrics.json"},
)


def results(suite: str, alpha: float, *, metrics: dict) -> dict:
    return {key: {"value": metrics[key].get("value"), "n": None, "seeds": 1, "verdict": metrics[key]["verdict"]}
            for key in ("samples_to_match", "least_squares", "update_rank", "head_orthogonality", "merge_interval")
            if key in metrics}
