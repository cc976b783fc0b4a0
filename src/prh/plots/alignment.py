"""The alignment table as a heatmap: one cell per (x model, y model), the best
layer-pair score of PRH appendix A, with the layer pair that achieved it.

    prh plot 'alignment_{dataset}_{metric}_{xset}__{yset}' --input table=results/alignment/<ds>/<metric>/<x>__<y>.json \\
        --out results/figures/alignment_<ds>_<metric>_<x>__<y>.pdf
"""

from __future__ import annotations

import numpy as np

from prh.plots import save_figure


def plot_alignment(table: dict, out: str, *, title: str | None = None) -> list:
    """Draw ``table`` (the JSON ``prh align`` writes) to ``out`` (.pdf, and .png beside it)."""
    import matplotlib.pyplot as plt

    # a null cell (a model whose score is undefined) is drawn blank and marked "n/a": one dead model does not take
    # the figure down
    scores = np.array([[np.nan if v is None else v for v in row] for row in table["scores"]], dtype=float)
    x_names, y_names = table["x_names"], table["y_names"]
    settings = table.get("settings", {})
    nx, ny = scores.shape
    fig, ax = plt.subplots(figsize=(1.0 + 0.55 * ny, 1.2 + 0.45 * nx))
    im = ax.imshow(scores, cmap="viridis", aspect="auto")
    ax.set_xticks(range(ny), y_names, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(nx), x_names, fontsize=7)
    pairs = table.get("best_pairs")
    if nx * ny <= 400:
        for i in range(nx):
            for j in range(ny):
                if not np.isfinite(scores[i, j]):
                    ax.text(j, i, "n/a", ha="center", va="center", fontsize=5, color="gray")
                    continue
                label = f"{scores[i, j]:.2f}"
                if pairs is not None and pairs[i][j] is not None:
                    label += "\n{}:{}".format(*pairs[i][j])
                bright = scores[i, j] > np.nanmean(scores)
                ax.text(j, i, label, ha="center", va="center", fontsize=5, color="black" if bright else "white")
    fig.colorbar(im, ax=ax, label=settings.get("metric", "score"))
    ax.set_title(
        title
        or "{metric}, k={topk}, N={n}".format(
            metric=settings.get("metric", "?"), topk=settings.get("topk", "?"), n=settings.get("n", "?")
        ),
        fontsize=9,
    )
    return save_figure(fig, out)


