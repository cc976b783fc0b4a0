"""Alignment against the number of items N (issue 38), from ``sweep.json``.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prh.plots import save_figure

__all__ = ["plot_sample_size"]

GROUPS = {"vision-vision": "tab:blue", "language-vision": "tab:orange", "model-kernel": "tab:green"}


def plot_sample_size(data: dict, out: str | Path) -> list[Path]:
    """One panel per metric and k rule (log N): per pair group the mean raw score (solid) and calibrated
    score (dashed) over its pairs, the null's mean ± 2 sd as a band, and for mutual k-NN at k fixed the
    chance level k / (N - 1)."""
    import matplotlib.pyplot as plt

    cells = data["cells"]
    panels = sorted({(c["metric"], c["k_mode"]) for c in cells})
    fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.4), squeeze=False)
    for ax, (metric, mode) in zip(axes[0], panels):
        for group, color in GROUPS.items():
            mine = [c for c in cells if c["metric"] == metric and c["k_mode"] == mode and c["group"] == group]
            if not mine:
                continue
            ns = sorted({c["n"] for c in mine})
            mean = {key: np.array([np.mean([c[key] for c in mine if c["n"] == n]) for n in ns])
                    for key in ("raw", "calibrated", "null_mean", "null_std")}
            ax.plot(ns, mean["raw"], marker="o", color=color, label=f"{group} raw")
            ax.plot(ns, mean["calibrated"], marker="s", ls="--", color=color, label=f"{group} calibrated")
            ax.fill_between(ns, mean["null_mean"] - 2 * mean["null_std"], mean["null_mean"] + 2 * mean["null_std"],
                            color=color, alpha=0.15, lw=0)
        if metric == "mutual_knn" and mode == "fixed":
            ns = np.array(sorted({c["n"] for c in cells}))
            k = next(c["k"] for c in cells if c["metric"] == metric and c["k_mode"] == mode)
            ax.plot(ns, k / (ns - 1), color="grey", ls=":", label="chance k/(N-1)")
        ax.set_xscale("log")
        grid = sorted({c["n"] for c in cells})
        ax.set_xticks(grid, [f"{n:,}" for n in grid], fontsize=7)
        ax.minorticks_off()
        ax.axhline(0, color="black", lw=0.5)
        rule = {"fixed": f"k = {data['settings']['k_fixed']}", "fraction": f"k = {data['settings']['k_fraction']:g} N",
                "none": ""}[mode]
        ax.set_title(f"{metric} {rule}".strip(), fontsize=9)
        ax.set_xlabel("N (items)")
    axes[0][0].set_ylabel("alignment (bands: null mean ± 2 sd)")
    legend = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, h)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    return save_figure(fig, out)
