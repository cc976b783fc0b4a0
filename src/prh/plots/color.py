"""PRH Figure 8 (colour from co-occurrence) and the section 4 check (contrastive kernels vs K_PMI).

Both read only the JSON that ``prh run-color`` wrote.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from prh.plots import save_figure

__all__ = ["plot_color_pmi", "plot_nce_pmi"]

# (x, y) columns of the CIELAB coordinates drawn in each row, and their labels
PROJECTIONS = [((1, 2), ("a*", "b*")), ((1, 0), ("a*", "L*"))]


def _scatter(ax, xyz, rgb, *, proj, terms=None):
    xyz = np.asarray(xyz)
    (i, j), (xl, yl) = proj
    ax.scatter(xyz[:, i], xyz[:, j], c=np.clip(rgb, 0, 1), s=28 if terms else 14, edgecolors="0.3", linewidths=0.3)
    for k, t in enumerate(terms or []):
        ax.annotate(t, (xyz[k, i], xyz[k, j]), fontsize=5, xytext=(2, 2), textcoords="offset points", color="0.25")
    ax.set_xlabel(xl, fontsize=7)
    ax.set_ylabel(yl, fontsize=7)
    ax.tick_params(labelsize=6)
    ax.set_aspect("equal", adjustable="datalim")


def _title(name, panel):
    p = panel["p_value"]
    return f"{name}\nSpearman {panel['spearman']:.2f} (p={p:.3g}), Procrustes {panel['procrustes_residual']:.2f}"


def plot_color_pmi(v: dict, lang: dict, out_path) -> list[Path]:
    """Figure 8: CIELAB | vision PMI | CIELAB of the terms | each language model; rows a*b* and a*L*.

    Every embedding is already aligned to CIELAB (Kabsch-Umeyama), so all panels share CIELAB axes;
    each point is drawn in its own colour.
    """
    import matplotlib.pyplot as plt

    panels = [("CIELAB (image colours)", v["lab"], v["rgb"], None, None),
              ("vision: pixel PMI", v["pmi"]["coords"], v["rgb"], None, v["pmi"]),
              ("CIELAB (colour terms)", lang["lab"], lang["rgb"], lang["terms"], None)]
    panels += [(f"language: {m}", r["coords"], lang["rgb"], lang["terms"], r) for m, r in lang["models"].items()]
    fig, axes = plt.subplots(len(PROJECTIONS), len(panels), figsize=(3.0 * len(panels), 5.6), squeeze=False)
    for c, (name, xyz, rgb, terms, stats) in enumerate(panels):
        for r, proj in enumerate(PROJECTIONS):
            _scatter(axes[r, c], xyz, rgb, proj=proj, terms=terms)
        axes[0, c].set_title(_title(name, stats) if stats else name, fontsize=7)
    fig.suptitle(f"Colour from co-occurrence (PRH Fig. 8): images = {Path(str(v['source'])).parent.name or v['source']}, "
                 f"{len(v['rgb'])} colours; {len(lang['terms'])} terms", fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_path)


def plot_nce_pmi(d: dict, out_path) -> list[Path]:
    """Section 4: learned ⟨f(a), f(b)⟩ against K_PMI(a, b), binary NCE and InfoNCE, with the predicted line."""
    import matplotlib.pyplot as plt

    pmi = np.asarray(d["pmi"])
    diag = np.eye(len(pmi), dtype=bool)
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.4))
    for ax, (name, r) in zip(axes, d["learners"].items()):
        k = np.asarray(r["kernel"])
        ax.scatter(pmi[~diag], k[~diag], s=6, alpha=0.5, label="pairs a ≠ b")
        ax.scatter(pmi[diag], k[diag], s=10, marker="s", color="C3", label="a = b")
        xs = np.linspace(pmi.min(), pmi.max(), 2)
        if name == "binary_nce":
            ax.plot(xs, xs + r["expected_offset"], "k--", lw=1,
                    label=f"K_PMI + log(p/(1-p)) = K_PMI {r['expected_offset']:+.2f}")
        ax.plot(xs, r["slope"] * xs + r["intercept"], color="C1", lw=1, label=f"fit: slope {r['slope']:.2f}")
        ax.set_title(f"{'binary NCE' if name == 'binary_nce' else 'InfoNCE'}: r = {r['pearson']:.3f} "
                     f"(a ≠ b: {r['pearson_offdiag']:.3f}), offset {r['offset']:+.3f}", fontsize=8)
        ax.set_xlabel("K_PMI(a, b)", fontsize=8)
        ax.set_ylabel("learned ⟨f(a), f(b)⟩", fontsize=8)
        ax.legend(fontsize=6)
        ax.tick_params(labelsize=7)
    s = d["settings"]
    fig.suptitle(f"Contrastive learners converge to K_PMI (PRH §4): {s['grid']}x{s['grid']} grid walk, window {s['window']}, "
                 f"dim {s['dim']}", fontsize=8)
    fig.tight_layout()
    return save_figure(fig, out_path)


