"""Alignment against the number of items N, from ``sweep.json``.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prh.plots import save_figure

__all__ = ["plot_sample_size"]

GROUPS = {"vision-vision": "tab:blue", "language-vision": "tab:orange", "model-kernel": "tab:green"}


def floor(cell: dict, layers: dict) -> float | None:
    """The chance level a cell's null should sit at: k / (N - 1) for mutual k-NN (exact under independence);
    sqrt(d_a d_b) / N for linear CKA (independent isotropic Gaussian features of widths d_a, d_b, d << N; real
    features have fewer effective dimensions, so their null lies below it). None for other cells."""
    pair = layers.get(cell["pair"], {})
    if cell["metric"] == "mutual_knn":
        return cell["k"] / (cell["n"] - 1)
    if cell["metric"] == "cka" and pair.get("width_a") and pair.get("width_b"):
        return float(np.sqrt(pair["width_a"] * pair["width_b"]) / cell["n"])
    return None


def plot_sample_size(data: dict, out: str | Path) -> list[Path]:
    """Top row, one panel per metric and k rule (log N): per pair group the mean raw score (solid) and
    calibrated score (dashed) over its pairs, the null's mean ± 2 sd as a band, and for mutual k-NN at k fixed
    the chance level k / (N - 1). Bottom row, where the sweep records the widths: each model pair's null mean
    (± 2 sd) against its floor (``floor``: k / (N - 1), sqrt(d_a d_b) / N), log-log, with y = x, so the k/N and
    d/N floors are read across N and width."""
    import matplotlib.pyplot as plt

    cells = data["cells"]
    panels = sorted({(c["metric"], c["k_mode"]) for c in cells})
    layers = data.get("layers", {})
    floors = [(m, [c for c in cells if c["metric"] == m and c["group"] != "model-kernel" and floor(c, layers)])
              for m in ("mutual_knn", "cka")]
    floors = [(m, mine) for m, mine in floors if mine]
    rows = 1 + bool(floors)
    fig, axes = plt.subplots(rows, len(panels), figsize=(3.4 * len(panels), 3.4 * rows), squeeze=False)
    for ax in axes[1][len(floors):] if rows > 1 else []:
        ax.set_visible(False)
    for ax, (metric, mine) in zip(axes[1] if rows > 1 else [], floors):
        for group, color in GROUPS.items():
            pts = [(floor(c, layers), c["null_mean"], c["null_std"]) for c in mine if c["group"] == group]
            pts = [p for p in pts if p[1] > 0]  # log axes
            if pts:
                x, y, sd = map(np.array, zip(*pts))
                ax.errorbar(x, y, yerr=2 * sd, fmt="o", ms=3, color=color, alpha=0.7, elinewidth=0.6)
        lo, hi = min(floor(c, layers) for c in mine), max(floor(c, layers) for c in mine)
        ax.plot([lo, hi], [lo, hi], color="grey", ls="-.", lw=0.8, label="floor (y = x)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ticks = np.geomspace(lo, hi, 3) if hi > lo else np.array([lo])  # a short log range: 3 labelled ticks
        ax.set_xticks(ticks, [f"{t:.2g}" for t in ticks], fontsize=7)
        ax.minorticks_off()
        what = "k / (N - 1)" if metric == "mutual_knn" else "√(d_a d_b) / N"
        ax.set_title(f"{metric} null vs its floor", fontsize=9)
        ax.set_xlabel(what)
        ax.set_ylabel("null mean (± 2 sd)")
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
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, h)
    fig.legend(list(legend.values()), list(legend), loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.12 / rows, 1, 1))
    return save_figure(fig, out)
