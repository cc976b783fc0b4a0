"""Figures of seed 001 (bridge training): Figs 2, 3, 8 and 10 of Luo & Shen, from the study's JSON.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from prh.plots import save_figure

__all__ = ["plot_fig2", "plot_fig3", "plot_fig8", "plot_fig10"]

INIT_COLOR = {"pretrained": "tab:orange", "scratch": "tab:blue", "shuffled": "tab:green"}
FAMILY_COLOR = {"language_pretrained": "tab:orange", "language_init": "tab:gray", "vision_trained": "tab:blue",
                "vision_random": "tab:cyan", "language_trained": "tab:red"}


def _title(ax, text, verdict=None):
    ax.set_title(text + (f"\nverdict: {verdict}" if verdict else ""), fontsize=9)


def plot_fig2(outliers: dict, figures: dict, out):
    """Per model: outlier fraction of every matrix (dots) and the median (bar), coloured by family."""
    verdict = figures["verdicts"].get("fig2_outliers")
    models = outliers["models"]
    names = sorted(models, key=lambda m: (models[m]["family"], m))
    fig, ax = plt.subplots(figsize=(max(5, 0.45 * len(names) + 2), 3.6))
    for i, m in enumerate(names):
        r = models[m]
        vals = np.array([s["outlier_fraction"] for s in r["matrices"].values()])
        color = FAMILY_COLOR.get(r["family"], "k")
        ax.bar(i, r["summary"]["median_outlier_fraction"], color=color, alpha=0.5)
        ax.plot(np.full(len(vals), i) + np.linspace(-0.2, 0.2, len(vals)), vals, ".", color=color, ms=3)
    ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
    ax.set_yscale("symlog", linthresh=1e-5)
    ax.set_ylabel(f"fraction beyond {outliers['settings']['threshold']:g} robust SDs")
    for fam, col in FAMILY_COLOR.items():
        if any(models[m]["family"] == fam for m in names):
            ax.bar(0, 0, color=col, alpha=0.5, label=fam)
    ax.legend(fontsize=7)
    _title(ax, "Fig 2: outlier weights per matrix (bar: median)", verdict)
    return save_figure(fig, out)


def plot_fig3(figures: dict, out):
    """Stage-1 curves (train accuracy on the given labels, test on true labels) and stage-2 probe accuracy."""
    arms = {n: a for n, a in figures["arms"].items() if a["arm"]["blocks"] == "all" and a["arm"]["epochs"] > 0}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    for name, a in sorted(arms.items()):
        c = a["curves"]
        style = "-" if a["arm"]["init"] == "pretrained" else "--" if a["arm"]["init"] == "scratch" else ":"
        ep = np.array(c["epoch"])
        tr = np.array([np.nan if v is None else v for v in c["train_accuracy"]])
        te = np.array([np.nan if v is None else v for v in c["test_accuracy"]])
        line, = ax1.plot(ep, tr, style, marker="o", label=f"{name} train")
        ax1.plot(ep, te, style, marker="x", color=line.get_color(), alpha=0.6, label=f"{name} test")
    ax1.set_xlabel("epoch (stage 1)")
    ax1.set_ylabel("accuracy")
    ax1.legend(fontsize=6)
    _title(ax1, "stage 1: train (given labels) / test (true labels)")
    for i, (name, a) in enumerate(sorted(figures["arms"].items(), key=lambda kv: kv[0])):
        ax2.errorbar(i, a["mean_accuracy"], yerr=_yerr(a), fmt="o", color=INIT_COLOR.get(a["arm"]["init"], "k"))
        ax2.plot(i, a["mean_chance"], "_", color="gray")
    ax2.set_xticks(range(len(figures["arms"])), sorted(figures["arms"]), rotation=60, ha="right", fontsize=7)
    ax2.set_ylabel("mean probe accuracy (95% CI over tasks)")
    v = figures["verdicts"]
    _title(ax2, "stage 2: linear probes", f"rho=1 {v.get('fig3_random_labels')}, rho=0 {v.get('fig3_correct_labels')}")
    return save_figure(fig, out)


def _yerr(arm: dict):
    """Error bar of an arm's mean accuracy from its interval; None (a bare point) when one task gives none."""
    ci, m = arm["ci"], arm["mean_accuracy"]
    return None if ci["lo"] is None else [[m - ci["lo"]], [ci["hi"] - m]]


def plot_fig8(figures: dict, out):
    """Stage-2 probe accuracy against the number of bridged blocks k (pretrained, rho = 1)."""
    arms = [a for a in figures["arms"].values() if a["arm"]["init"] == "pretrained" and a["arm"]["ratio"] == 1.0]
    n_blocks = max([a["arm"]["blocks"] for a in arms if a["arm"]["blocks"] != "all"], default=0) + 1
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for a in sorted(arms, key=lambda a: (a["arm"]["epochs"] > 0, str(a["arm"]["blocks"]))):
        if a["arm"]["epochs"] == 0:
            ax.axhline(a["mean_accuracy"], color="gray", ls=":", label="no bridge")
            continue
        k = n_blocks if a["arm"]["blocks"] == "all" else a["arm"]["blocks"]
        ax.errorbar(k, a["mean_accuracy"], yerr=_yerr(a), fmt="o", color="tab:orange")
        ax.annotate("all" if a["arm"]["blocks"] == "all" else str(k), (k, a["mean_accuracy"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("blocks bridged k (0 = patch embedding + head only)")
    ax.set_ylabel("mean probe accuracy (95% CI)")
    ax.legend(fontsize=7)
    v = figures["verdicts"]
    _title(ax, "Fig 8: partial bridge", f"k=2~all {v.get('fig8_first2_matches_all')}, k=0~all {v.get('null_k0_matches_all')}")
    return save_figure(fig, out)


def plot_fig10(figures: dict, out):
    """Outlier fraction per backbone matrix before and after stage 1, per arm."""
    arms = {n: a for n, a in figures["arms"].items() if a["arm"]["epochs"] > 0}
    fig, ax = plt.subplots(figsize=(max(5, 0.7 * len(arms) + 2), 3.6))
    for i, (name, a) in enumerate(sorted(arms.items())):
        for j, (key, col) in enumerate((("outliers_before", "tab:gray"), ("outliers_after", "tab:red"))):
            vals = np.array(a[key])
            ax.plot(i + (j - 0.5) * 0.3 + np.linspace(-0.1, 0.1, len(vals)), vals, ".", color=col, ms=3,
                    label=key.split("_")[1] if i == 0 else None)
            ax.plot([i + (j - 0.5) * 0.3 - 0.12, i + (j - 0.5) * 0.3 + 0.12], [np.median(vals)] * 2, color=col)
    ax.set_xticks(range(len(arms)), sorted(arms), rotation=60, ha="right", fontsize=7)
    ax.set_yscale("symlog", linthresh=1e-5)
    ax.set_ylabel("fraction beyond 6 robust SDs")
    ax.legend(fontsize=7)
    v = figures["verdicts"]
    _title(ax, "Fig 10: outliers before / after stage 1",
           f"pre>scratch {v.get('fig10_pretrained_more_outliers')}, labels reduce {v.get('fig10_correct_labels_reduce')}")
    return save_figure(fig, out)


