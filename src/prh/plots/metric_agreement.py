"""Figures of the metric studies (PRH Fig 10, appendix A; Figs 12-14, appendix B).

Each function reads one JSON written by :mod:`prh.studies.metric_agreement.locality` or
:mod:`prh.studies.metric_agreement.run` and draws it.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prh.metrics.names import METRICS, SUPPORTED_METRICS
from prh.plots import nan_if_none, save_figure

__all__ = ["FIG13_METRICS", "FIG14_METRICS", "TOPK_METRICS", "fig10_locality", "fig12_metric_agreement", "fig13_cross_metrics", "fig14_cross_metrics"]

# The panels of PRH Figs 13 and 14: the paper's choice for Fig 13, and every other metric of the registry
# (prh.metrics.names) for Fig 14, so a metric added there is drawn rather than silently left out.
FIG13_METRICS = ["cka", "unbiased_cka", "svcca", "mutual_knn"]
FIG14_METRICS = sorted(set(SUPPORTED_METRICS) - set(FIG13_METRICS))
# the metrics with a k (the k-NN lists and CKNNA: their entries' topk), titled with it
TOPK_METRICS = tuple(m.name for m in METRICS if m.topk)


def fig10_locality(data: dict, out: Path) -> list[Path]:
    """Fig 10: centred, standardised cross-modal CKNNA over LMs (by 1 - bpb), one line per k,
    one panel per vision family and one for all vision models."""
    import matplotlib.pyplot as plt

    panels = [*data["family_order"], "all"]
    ncol = min(3, len(panels))
    nrow = int(np.ceil(len(panels) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.4 * nrow), squeeze=False, sharey=True)
    lms = [lm["name"] for lm in data["lms"]]
    x = np.arange(len(lms))
    cmap = plt.get_cmap("viridis")
    per_k = data["per_k"]
    n = data["settings"]["n"]
    for ax, panel in zip(axes.flat, panels):
        for i, row in enumerate(per_k):
            colour = cmap(i / max(1, len(per_k) - 1))
            label = f"k={row['k']}" + (" (N-1)" if row["k"] == n - 1 else "")
            ax.plot(x, [nan_if_none(v) for v in row["family_mean"][panel]], marker="o", ms=3, color=colour, label=label)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xticks(x, lms, rotation=45, ha="right", fontsize=7)
        n_models = len(data["vision"]) if panel == "all" else sum(f == panel for f in data["families"].values())
        ax.set_title(f"{panel} ({n_models} vision models)", fontsize=9)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("alignment − weakest LM, / std")
    if len(panels) < axes.size:  # a free cell holds the legend, off the lines
        axes.flat[len(panels)].legend(*axes.flat[0].get_legend_handles_labels(), loc="center", title="CKNNA")
    else:
        axes.flat[0].legend(fontsize=6, title="CKNNA", title_fontsize=7)
    fig.suptitle("Cross-modal alignment over k (LMs ordered by 1 − bits per byte)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out)


def fig12_metric_agreement(data: dict, out: Path) -> list[Path]:
    """Fig 12: annotated heat map of the Spearman ρ between every two (metric, bsz) variants."""
    import matplotlib.pyplot as plt

    rho = np.array([[nan_if_none(v) for v in row] for row in data["spearman"]], dtype=float)
    labels = data["labels"]
    size = 0.55 * len(labels) + 2
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(rho, cmap="viridis", vmin=min(0.0, np.nanmin(rho)), vmax=1.0)
    for i in range(len(labels)):
        for j in range(len(labels)):
            if np.isfinite(rho[i, j]):
                ax.text(j, i, f"{rho[i, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="black" if rho[i, j] > 0.6 else "white")
    ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    fig.colorbar(im, ax=ax, label="Spearman ρ", shrink=0.8)
    s = data["settings"]
    ax.set_title(f"Vision-vision alignment: {s['n_models']} models, {s['n_pairs']} pairs; "
                 f"max p = {nan_if_none(data['summary']['max_p']):.2g}", fontsize=9)
    return save_figure(fig, out)


def _cross_panels(data: dict, metrics: list[str], out: Path, title: str) -> list[Path]:
    import matplotlib.pyplot as plt

    present = [m for m in metrics if m in data["per_metric"]]
    if not present:
        raise ValueError(f"cross_metrics.json has none of the metrics {metrics}; it has {data['metrics']}")
    ncol = min(2, len(metrics))
    nrow = int(np.ceil(len(metrics) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.6 * ncol, 3.6 * nrow), squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, metric in zip(axes.flat, metrics):
        if metric not in data["per_metric"]:
            ax.text(0.5, 0.5, f"{metric}\nnot computed", ha="center", va="center", transform=ax.transAxes)
            ax.axis("off")
            continue
        rec = data["per_metric"][metric]
        x = [lm["lm_score"] for lm in rec["lms"]]
        for i, (fam, f) in enumerate(rec["families"].items()):
            ax.plot(x, [nan_if_none(v) for v in f["mean_alignment"]], marker="o", ms=3, color=colours(i % 10),
                    label=f"{fam} (ρ={nan_if_none(f['spearman_r']):.2f})")
        pooled = rec["pooled"]
        k = rec["settings"].get("topk")
        knn = metric in TOPK_METRICS
        ax.set_title(f"{metric}{f' (k={k})' if knn else ''}\npooled Spearman ρ={nan_if_none(pooled['spearman_r']):.2f} "
                     f"(p={nan_if_none(pooled['spearman_p']):.2g})", fontsize=8)
        ax.set_xlabel("LM score: 1 − bits per byte", fontsize=8)
        ax.legend(fontsize=6, title="vision family", title_fontsize=6)
    for ax in axes[:, 0]:
        ax.set_ylabel("alignment to vision (family mean)", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out)


def fig13_cross_metrics(data: dict, out: Path) -> list[Path]:
    """Fig 13: language-vision alignment vs 1 - bpb for cka, unbiased_cka, svcca, mutual_knn."""
    return _cross_panels(data, FIG13_METRICS, out, "Cross-modal alignment for various metrics")


def fig14_cross_metrics(data: dict, out: Path) -> list[Path]:
    """Fig 14: the same for the registry's other metrics (cknna, cycle_knn, edit_distance_knn, lcs_knn)."""
    return _cross_panels(data, FIG14_METRICS, out, "Cross-modal alignment measured with various metrics")


