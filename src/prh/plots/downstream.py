"""PRH Figure 4: alignment to the strongest vision model against downstream scores.

Reads the ``downstream.json`` written by :mod:`prh.studies.downstream.run` (``prh run-downstream``).

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prh.plots import nan_if_none, save_figure

__all__ = ["plot_downstream"]

MAX_AREA = 400.0  # marker area (points^2) of the largest model
MIN_AREA = 12.0  # floor, so that a model 1000x smaller than the largest stays visible


def plot_downstream(data: dict, out) -> list[Path]:
    """One panel per task: x = alignment to the strongest vision model, y = task score.

    Marker area = ``MAX_AREA * n_params / max n_params`` (floored at ``MIN_AREA``; a model
    without a parameter count gets ``MIN_AREA``), colour = rank of 1 - bits-per-byte
    (viridis, 1 = worst language model; grey: no bpb), the least-squares line, a dashed
    chance line when the offline task gives one, and Spearman / Pearson r in the title.
    """
    import matplotlib.pyplot as plt
    from matplotlib import colors as mcolors

    tasks = data["tasks"]
    if not tasks:
        raise ValueError("the downstream JSON has no tasks: rerun `prh run-downstream` with scores")
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.2 * len(tasks) + 1.0, 4.4), squeeze=False,
                             layout="constrained")
    n_ranked = max(int(data.get("n_ranked") or 0), 1)
    norm = mcolors.Normalize(vmin=1, vmax=max(n_ranked, 2))
    cmap = plt.get_cmap("viridis")
    sizes = [p["n_params"] for t in tasks.values() for p in t["points"] if p.get("n_params")]
    biggest = max(sizes) if sizes else None
    scatter = None
    for ax, (task, t) in zip(axes[0], tasks.items()):
        pts = t["points"]
        x = np.array([p["alignment"] for p in pts], dtype=float)
        y = np.array([p["score"] for p in pts], dtype=float)
        area = [max(MIN_AREA, MAX_AREA * p["n_params"] / biggest) if p.get("n_params") and biggest else MIN_AREA
                for p in pts]
        ranked = [p.get("lm_rank") is not None for p in pts]
        if any(ranked):
            idx = [i for i, r in enumerate(ranked) if r]
            scatter = ax.scatter(x[idx], y[idx], s=[area[i] for i in idx], c=[pts[i]["lm_rank"] for i in idx],
                                 cmap=cmap, norm=norm, edgecolor="k", linewidth=0.5, alpha=0.9, zorder=3)
        rest = [i for i, r in enumerate(ranked) if not r]
        if rest:
            ax.scatter(x[rest], y[rest], s=[area[i] for i in rest], color="lightgrey", edgecolor="k", linewidth=0.5,
                       zorder=3, label="no bpb")
            ax.legend(fontsize=7, loc="lower right")
        for p in pts:
            ax.annotate(p["model"], (p["alignment"], p["score"]), fontsize=6, xytext=(4, 3), textcoords="offset points")
        fit, c = t["fit"], t["correlations"]
        if len(pts) >= 2 and fit.get("slope") is not None and np.ptp(x) > 0:
            grid = np.linspace(x.min(), x.max(), 2)
            ax.plot(grid, fit["slope"] * grid + fit["intercept"], color="tab:red", lw=1.2, zorder=2)
        title = (f"{task}\nSpearman r={nan_if_none(c['spearman_r']):.2f} (p={nan_if_none(c['spearman_p']):.2g}), "
                 f"Pearson r={nan_if_none(c['pearson_r']):.2f}, n={c['n']}")
        if t.get("missing"):
            title += "\nno score: " + ", ".join(t["missing"])
        ax.set_title(title, fontsize=8)
        ax.set_xlabel(f"alignment to {data['strongest_vision']} ({data.get('settings', {}).get('metric', 'mutual_knn')})",
                      fontsize=8)
        ax.set_ylabel(f"{task} ({data.get('settings', {}).get('units', 'score')})", fontsize=8)
        chance = ((data.get("provenance") or {}).get("settings") or {}).get("chance")
        if chance is not None:
            ax.axhline(chance, color="0.5", ls="--", lw=0.8, label="chance")
            ax.legend(fontsize=7, loc="lower right")
        ax.margins(x=0.15, y=0.1)
    if scatter is not None:
        fig.colorbar(scatter, ax=axes[0].tolist(), label="rank of 1 - bits-per-byte (higher = better LM)")
    fig.suptitle("Alignment to vision vs downstream performance (PRH Fig. 4); marker area ~ parameters", fontsize=10)
    return save_figure(fig, out)


