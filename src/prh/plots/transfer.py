"""Figures of the representation-alignment experiments (Imani, Hu & White, Figs 2, 7, 10-12).

Each function reads one JSON written by ``prh.studies.transfer.transfer`` and draws one
figure; titles and legends carry the normalised area under each alignment curve
(AUC, see ``prh.studies.transfer.align_curves``) so the report states what it shows.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from prh.plots import save_figure

__all__ = ["plot_peaks_alignment", "plot_peaks_transfer", "plot_peaks_layers", "plot_shuffled_emergence", "plot_layerwise"]

REP_STYLE = {"input": ("original (input)", "tab:orange"), "init": ("init (random hidden)", "tab:blue"),
             "trained": ("transfer (trained on S)", "tab:green")}
TASK_TITLE = {"S": "source task S", "T1": "related task T1", "T2": "unrelated task T2"}


def _band(ax, x, stat, **kw):
    mean, se = np.asarray(stat["mean"], dtype=float), np.asarray(stat["se"], dtype=float)
    line, = ax.plot(x, mean, **kw)
    ax.fill_between(x, mean - se, mean + se, color=line.get_color(), alpha=0.2, lw=0)
    return line


def _tau_limit(taus, stats) -> float:
    """The threshold past which every curve is ~0, so the axis shows where they differ."""
    taus = np.asarray(taus)
    top = max(max(s["mean"]) for s in stats)
    last = max(int(np.flatnonzero(np.asarray(s["mean"]) > 0.005 * top).max(initial=1)) for s in stats)
    return float(taus[min(last + 2, len(taus) - 1)])


def _task_axis(ax, taus, stats, task, xlabel):
    """One task's panel: x range where the curves differ, title, label, legend."""
    ax.set_xlim(0, _tau_limit(taus, stats))
    ax.set_title(TASK_TITLE[task])
    ax.set_xlabel(xlabel)
    ax.legend(fontsize=8)


def _auc(values) -> float:
    return float(np.mean(values))


def plot_peaks_alignment(d: dict, out_path) -> list[Path]:
    """Fig 10: alignment of S, T1, T2 labels with input, initial and trained hidden layer."""
    curves, aucs, taus = d["alignment"]["curves"], d["alignment"]["auc"], d["taus"]
    source = {"input": ("trained", "input"), "init": ("init", "hidden1"), "trained": ("trained", "hidden1")}
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharey=True)
    for ax, task in zip(axes, ("S", "T1", "T2")):
        stats = []
        for rep, (state, layer) in source.items():
            label, color = REP_STYLE[rep]
            stat = curves[state][layer][task]
            stats.append(stat)
            _band(ax, taus, stat, color=color, label=f"{label}: AUC {_auc(aucs[state][layer][task]):.3f}")
        _task_axis(ax, taus, stats, task, "threshold τ on singular values")
    axes[0].set_ylabel("Alignment(Φ, y, τ) = Σ$_{σ_i ≥ τ}$ (u$_i^T$y)$^2$")
    fig.suptitle(f"Peaks: training on S raises alignment with S and T1, lowers it with T2 "
                 f"(mean ± s.e. over {len(d['tasks'])} runs, n = {d['config']['n_source']})", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_path)


def plot_peaks_transfer(d: dict, out_path) -> list[Path]:
    """Fig 11: train (dashed) / test (solid) MSE against GD steps, and ‖w‖ against loss removed."""
    steps = np.asarray(d["steps"], dtype=float)
    x = np.where(steps == 0, 0.5, steps)  # step 0 drawn at 0.5 on the log axis
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for col, task in enumerate(("T1", "T2")):
        ax, ax2 = axes[0, col], axes[1, col]
        for rep, res in d["transfer"][task].items():
            label, color = REP_STYLE[rep]
            _band(ax, x, res["test_mse"], color=color, label=f"{label}, η = {res['eta']:g}")
            ax.plot(x, res["train_mse"]["mean"], color=color, ls="--", lw=1)
            at = res["weight_norm_at_reduction"]
            every = np.asarray(at["runs_reaching"]) == d["config"]["runs"]  # a mean over fewer runs jumps
            norms = np.array([np.nan if v is None else v for v in at["mean"]], dtype=float)
            ax2.plot(np.asarray(d["reduction_grid"]) * 100, np.where(every & (norms > 0), norms, np.nan),
                     color=color, label=label)
        ax.set_xscale("log")
        ax.set_xlabel("gradient-descent steps")
        ax.set_ylabel("MSE (dashed: train, solid: test)")
        ax.set_title(f"{TASK_TITLE[task]}: {d['config']['n_target']} training points")
        ax.legend(fontsize=8)
        ax2.set_yscale("log")
        ax2.set_xlabel("training loss removed (% of initial)")
        ax2.set_ylabel("‖w‖")
        ax2.set_title(f"{TASK_TITLE[task]}: ‖w‖ needed", fontsize=10)
        ax2.legend(fontsize=8)
    fig.suptitle("Linear models on each representation (best of step sizes "
                 f"{d['config']['step_sizes']}; mean over runs; ‖w‖ drawn where every run gets there)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_path)


def plot_peaks_layers(d: dict, out_path) -> list[Path]:
    """Fig 12: per-layer alignment after training the 3-hidden-layer network on S."""
    curves, aucs, taus, layers = d["alignment"]["curves"]["trained"], d["alignment"]["auc"]["trained"], d["taus"], d["layers"]
    shades = plt.get_cmap("Greens")(np.linspace(0.35, 1.0, len(layers) - 1))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), sharey=True)
    for ax, task in zip(axes, ("S", "T1", "T2")):
        stats = [curves[layer][task] for layer in layers]
        for layer, stat in zip(layers, stats):
            color = "tab:orange" if layer == "input" else shades[layers.index(layer) - 1]
            _band(ax, taus, stat, color=color, label=f"{layer}: AUC {_auc(aucs[layer][task]):.3f}")
        _task_axis(ax, taus, stats, task, "threshold τ")
    axes[0].set_ylabel("alignment")
    fig.suptitle("Three hidden layers trained on S: later layers specialise to S (darker = closer to output)",
                 fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_path)


def plot_shuffled_emergence(d: dict, out_path) -> list[Path]:
    """Fig 2: (u_iᵀy)² (bars) and σ_i (line) by index for input/true, input/shuffled, and the
    last hidden layer before and after training on the shuffled labels."""
    titles = {"input_true": "(a) input, true labels", "input_shuffled": "(b) input, shuffled labels",
              "init_shuffled": "(c) hidden before training, shuffled", "trained_shuffled": "(d) hidden after training, shuffled"}
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.4))
    for ax, (key, title) in zip(axes, titles.items()):
        p = d["panels"][key]
        idx = np.arange(1, len(p["proj2"]) + 1)
        ax.bar(idx, p["proj2"], color="tab:purple", label="(u$_i^T$y)$^2$")
        ax.set_xlabel("singular value index i")
        ax.set_title(f"{title}\nAUC {_auc(p['auc']):.3f}", fontsize=9)
        twin = ax.twinx()
        twin.plot(idx, p["sigma"], color="k", marker=".", ms=3, lw=1, label="σ$_i$")
        twin.set_ylabel("σ$_i$", fontsize=8)
    axes[0].set_ylabel("(u$_i^T$y)$^2$")
    fig.suptitle(f"{d['dataset']} (classes 0/1, n = {d['n']}): alignment emerges from training even on "
                 f"shuffled labels (3 hidden layers of width {d['width']}, {d['training']['epochs']} epochs)",
                 fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_path)


def plot_layerwise(d: dict, out_path) -> list[Path]:
    """Fig 7: alignment of the input and every hidden layer before (dashed) and after (solid) training."""
    cls, reg = d["classification"], d["peaks_regression"]
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 3.8))
    panels = [
        (axes[0], cls["taus"], cls["layers"], {s: {l: cls[s][l]["curve"] for l in cls["layers"]} for s in ("init", "trained")},
         f"{d['dataset']} 0 vs 1, width {cls['width']}"),
        (axes[1], reg["taus"], reg["layers"], {s: reg[s] for s in ("init", "trained")},
         "peaks source task (regression)"),
    ]
    for ax, taus, layers, stats, title in panels:
        colors = ["tab:orange"] + list(plt.get_cmap("Blues")(np.linspace(0.4, 1.0, len(layers) - 1)))
        for layer, color in zip(layers, colors):
            _band(ax, taus, stats["trained"][layer], color=color, label=layer)
            ax.plot(taus, stats["init"][layer]["mean"], color=color, ls="--", lw=1)
        ax.set_xlim(0, _tau_limit(taus, [stats[s][l] for s in stats for l in layers]))
        ax.set_title(title)
        ax.set_xlabel("threshold τ")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("alignment (dashed: before, solid: after training)")
    fig.suptitle("Layers closer to the output align more after training", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_path)


