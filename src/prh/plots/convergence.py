"""Figures of the convergence experiments (PRH Figs 2 and 3, and the platonic reference).

Each function reads one JSON written by :mod:`prh.studies.convergence.run` and draws it.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prh.plots import nan_if_none, save_figure

__all__ = ["plot_competence", "plot_model_map", "plot_language_vision", "plot_preregistered", "plot_platonic"]


def plot_competence(data: dict, out: Path) -> list[Path]:
    """Fig 2 left: mean pairwise alignment within each competence bin, ± standard error."""
    import matplotlib.pyplot as plt

    bins = data["bins"]
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    x = np.arange(len(bins))
    ax.bar(x, [nan_if_none(b["mean"]) for b in bins], yerr=[nan_if_none(b["sem"]) for b in bins], color="tab:blue", capsize=4)
    ax.set_xticks(x, [f"{b['lo']}-{b['hi'] - 1}\n({len(b['models'])} models)" for b in bins])
    ax.set_xlabel(f"tasks solved (>= {data['settings']['solve_fraction']:.0%} of best)")
    ax.set_ylabel(f"intra-bin alignment ({data['settings'].get('metric', 'mutual_knn')}, "
                  f"k={data['settings'].get('topk')})")
    ax.set_title("Competent models are more aligned?")
    return save_figure(fig, out)


def plot_model_map(data: dict, out: Path) -> list[Path]:
    """Fig 2 right: 2-D map of the models (distance -log alignment), coloured by tasks solved."""
    import matplotlib.pyplot as plt

    xy = np.asarray(data["coords"])
    fig, ax = plt.subplots(figsize=(5, 4))
    sc = ax.scatter(xy[:, 0], xy[:, 1], c=data["solved"], cmap="viridis", s=60, edgecolor="k")
    for (px, py), name in zip(xy, data["names"]):
        ax.annotate(name, (px, py), fontsize=6, xytext=(3, 3), textcoords="offset points")
    fig.colorbar(sc, ax=ax, label="tasks solved")
    ax.set_title(f"model map ({data['method'].split(' (')[0]})")
    ax.set_xticks([])
    ax.set_yticks([])
    return save_figure(fig, out)


def plot_language_vision(data: dict, out: Path) -> list[Path]:
    """Fig 3: cross-modal alignment against the LM's 1 - bpb, one line per vision family."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4))
    colors = plt.get_cmap("tab10")
    for i, (fam, fit) in enumerate(data["fits"].items()):
        pts = [p for p in data["points"] if p["family"] == fam]
        x = np.array([p["lm_score"] for p in pts])
        ax.scatter(x, [p["alignment"] for p in pts], color=colors(i % 10), s=14, alpha=0.7)
        if fit["slope"] is not None:
            grid = np.linspace(x.min(), x.max(), 2)
            ax.plot(grid, fit["slope"] * grid + fit["intercept"], color=colors(i % 10), label=fam)
    pooled = data["pooled"]
    ax.set_title(f"pooled Pearson r={nan_if_none(pooled['pearson_r']):.2f} (p={nan_if_none(pooled['pearson_p']):.2g}), "
                 f"Spearman r={nan_if_none(pooled['spearman_r']):.2f}", fontsize=8)
    ax.set_xlabel("language model score: 1 - bits per byte")
    ax.set_ylabel(f"alignment to vision ({data['settings'].get('metric')})")
    ax.legend(title="vision family", fontsize=7)
    return save_figure(fig, out)


def plot_preregistered(data: dict, out: Path) -> list[Path]:
    """Fig 3, pre-registered (issue 16): one point per trained causal LM, its mean calibrated alignment
    with the named vision set against each co-primary competence predictor."""
    import matplotlib.pyplot as plt

    test = data["language_vision_preregistered"]
    preds = list(test["predictors"])
    fig, axes = plt.subplots(1, len(preds), figsize=(4.5 * len(preds), 3.8), squeeze=False)
    for ax, name in zip(axes[0], preds):
        x = [p[name] for p in test["points"]]
        y = [p["outcome"] for p in test["points"]]
        ax.scatter(x, y, s=30, edgecolor="k")
        for p in test["points"]:
            ax.annotate(p["language"], (p[name], p["outcome"]), fontsize=5, xytext=(2, 2), textcoords="offset points")
        r = test["predictors"][name]
        ax.set_title(f"{name}: Spearman r={nan_if_none(r['spearman_r']):.2f}, p_perm={nan_if_none(r['p_permutation']):.2g},"
                     f" p_Holm={nan_if_none(r['p_holm']):.2g} (n={test['n']})", fontsize=7)
        ax.set_xlabel(name)
        ax.set_ylabel("mean calibrated alignment with vision")
    fig.suptitle(f"pre-registered, one point per LM; gate passed: {test['gate_passed']}; verdict: {test['verdict']}",
                 fontsize=8)
    return save_figure(fig, out)


def plot_platonic(data: dict, out: Path) -> list[Path]:
    """Platonic reference: alignment with the world kernel against competence / 1 - bpb."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
    panels = [("vision", "competence", "mean probe accuracy"), ("language", "lm_score", "1 - bits per byte")]
    for ax, (mod, key, label) in zip(axes, panels):
        rows = {n: r for n, r in data[mod].items() if r.get(key) is not None}
        ax.scatter([r[key] for r in rows.values()], [r["score"] for r in rows.values()], s=30, edgecolor="k")
        for n, r in rows.items():
            ax.annotate(n, (r[key], r["score"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
        c = data["correlations"][mod]
        ax.set_title(f"{mod}: Spearman r={nan_if_none(c['spearman_r']):.2f} (p={nan_if_none(c['spearman_p']):.2g}, n={c['n']})",
                     fontsize=9)
        ax.set_xlabel(label)
        ax.set_ylabel(f"alignment with world kernel (mutual_knn, k={data['settings']['topk']})")
    return save_figure(fig, out)


