"""Figure 9 (PRH section 6): alignment against caption density, from ``density.json``.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prh.plots import save_figure

__all__ = ["plot_density"]


def _fmt(v) -> str:
    return "nan" if v is None else f"{v:.2g}"


def plot_density(data: dict, out: str | Path) -> list[Path]:
    """Mean language-vision alignment per density level (x: mean words per caption, log
    scale) with the standard deviation over language models as the band; with a world
    kernel, a second panel of the language models' alignment with it."""
    import matplotlib.pyplot as plt

    levels = data["levels"]
    has_world = "world_mean" in levels[0]
    fig, axes = plt.subplots(1, 2 if has_world else 1, figsize=(9 if has_world else 5, 3.8), squeeze=False)
    x = np.array([lv["words"] for lv in levels])
    panels = [("mean", "std", f"language-vision alignment ({data['settings']['metric']}, k={data['settings']['topk']})")]
    if has_world:
        panels.append(("world_mean", "world_std", "language alignment with the world kernel"))
    for ax, (key, band, ylabel) in zip(axes[0], panels):
        y = np.array([lv[key] for lv in levels], dtype=float)
        s = np.array([np.nan if lv[band] is None else lv[band] for lv in levels], dtype=float)
        ax.plot(x, y, marker="o", color="tab:blue")
        ax.fill_between(x, y - s, y + s, color="tab:blue", alpha=0.2, label="± std over language models")
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [f"{w:.0f}" for w in x], fontsize=7)
        ax.minorticks_off()
        for px, py, lv in zip(x, y, levels):
            ax.annotate(lv["label"], (px, py), fontsize=6, rotation=30, xytext=(2, 4), textcoords="offset points")
        ax.set_xlabel("mean words per caption (caption density)")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.legend(fontsize=7)
    t = data["trend"]
    axes[0][0].set_title(f"slope {_fmt(t['slope_per_doubling'])}/doubling, Spearman r={_fmt(t['spearman_r'])} "
                         f"(p={_fmt(t['spearman_p'])}), {t['lm_increase']}/{t['n_language']} LMs up", fontsize=8)
    if has_world:
        w = data["world"]
        axes[0][1].set_title(f"Spearman r={_fmt(w['spearman_r'])} (p={_fmt(w['spearman_p'])})", fontsize=8)
    return save_figure(fig, out)


