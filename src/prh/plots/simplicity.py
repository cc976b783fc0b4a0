"""Figures of the simplicity-bias experiments (Huh's thesis, chapter 2).

Each function reads one JSON written by ``prh.studies.simplicity.run`` and draws
one figure; titles carry the measured Spearman correlation of effective rank
against depth, so the report states the trend it shows.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import cm, colors
from matplotlib.ticker import MaxNLocator
from scipy.signal import savgol_filter

from prh.plots import save_figure

__all__ = ["plot_random_net_rank", "plot_gaussian_product_rank", "plot_trained_linear_rank", "plot_optimizer_rank"]

OPTIMIZER_NAMES = {"gd": "GD", "nesterov": "Nesterov", "adam": "Adam", "lbfgs": "L-BFGS"}


def _trend(t: dict) -> str:
    p = f"p = {t['p_value']:.0e}" if t["p_value"] > 0 else "p < 1e-300"  # 0.0 is a float underflow
    return f"Spearman $\\rho_s$ = {t['spearman_rho']:+.2f} ({p})"


def _depth_colors(depths):
    norm = colors.Normalize(vmin=min(depths), vmax=max(depths))
    return cm.ScalarMappable(norm=norm, cmap="viridis")


def plot_random_net_rank(data: dict, out_path) -> list[Path]:
    """Thesis Fig 2.2: density of the Gram matrix's effective rank per depth, one panel per
    (activation, init), smoothed with a Savitzky–Golay filter as in the thesis."""
    settings = data["settings"]
    acts = list(dict.fromkeys(s["activation"] for s in settings.values()))
    inits = list(dict.fromkeys(s["init"] for s in settings.values()))
    fig, axes = plt.subplots(len(acts), len(inits), figsize=(4.2 * len(inits), 3.2 * len(acts)),
                             squeeze=False, sharex=True)
    for key, s in settings.items():
        ax = axes[acts.index(s["activation"]), inits.index(s["init"])]
        edges = np.asarray(s["hist"]["edges"])
        mids, sm = (edges[1:] + edges[:-1]) / 2, _depth_colors(s["depths"])
        for depth, dens in zip(s["depths"], s["hist"]["density"]):
            dens = np.asarray(dens)
            if len(dens) >= 7:
                dens = np.clip(savgol_filter(dens, 7, 2), 0, None)
            ax.plot(mids, dens, color=sm.to_rgba(depth), lw=1.2)
        ax.set_title(f"{s['activation']}, {s['init']} init\n{_trend(s['trend'])}", fontsize=9)
        ax.axvline(data["max_rank"], color="grey", ls=":", lw=0.8)
        fig.colorbar(sm, ax=ax, label="depth")
    for ax in axes[-1]:
        ax.set_xlabel("effective rank ρ of the Gram matrix (nats)")
    for ax in axes[:, 0]:
        ax.set_ylabel("density")
    cfg = data["config"]
    fig.suptitle(f"Random networks, width {cfg['width']}: {cfg['n_samples']} parameter samples, "
                 f"{cfg['n_inputs']} random inputs (dotted: log width)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_path)


def plot_gaussian_product_rank(data: dict, out_path) -> list[Path]:
    """Theorem 2.4.1 / thesis Fig 7.1: ρ(W_L⋯W_1) against L (mean ± std), and the normalised
    singular-value spectrum of the product at a few depths for the largest n."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    for key, p in data["dims"].items():
        mean, std = np.asarray(p["mean"]), np.asarray(p["std"])
        line, = ax.plot(p["depths"], mean, marker="o", ms=3,
                        label=f"n = {p['dim']}: {_trend(p['trend'])}\n"
                              f"monotone in {100 * p['monotone_fraction']:.0f}% of samples")
        ax.fill_between(p["depths"], mean - std, mean + std, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("number of factors L")
    ax.set_ylabel("effective rank ρ(W_L⋯W_1) (nats)")
    ax.legend(fontsize=7)
    big = max(data["dims"].values(), key=lambda p: p["dim"])
    spectrum, depths = np.asarray(big["spectrum"]), big["depths"]
    sm = _depth_colors(depths)
    for depth in sorted({1, 2, 4, 8, 16, max(depths)} & set(depths)):
        ax2.semilogy(np.arange(1, spectrum.shape[1] + 1), spectrum[depth - 1], color=sm.to_rgba(depth),
                     label=f"L = {depth}")
    ax2.set_xlabel("singular value index i")
    ax2.set_ylabel("mean σ_i / Σσ")
    ax2.set_title(f"n = {big['dim']}", fontsize=9)
    ax2.legend(fontsize=7)
    fig.suptitle(f"Products of i.i.d. Gaussian matrices ({data['config']['n_samples']} samples per n)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_path)


def _median_iqr(per_depth):
    a = np.asarray(per_depth, dtype=float)
    return np.nanmedian(a, 1), np.nanquantile(a, 0.25, 1), np.nanquantile(a, 0.75, 1)


def plot_trained_linear_rank(data: dict, out_path, *, optimizer: str = "gd") -> list[Path]:
    """Thesis Fig 2.6 (left): effective rank at initialisation (white) and at convergence
    (coloured) against depth, median over seeds, for the kernel and the end-to-end map;
    a third panel shows the final training loss and test error (is it converged?)."""
    run, depths, ref, cfg = data["optimizers"][optimizer], data["depths"], data["reference"], data["config"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, target, label in ((axes[0], "kernel_rank", "kernel (test Gram matrix)"),
                              (axes[1], "map_rank", "end-to-end map W_e")):
        med0 = _median_iqr(run[f"{target}_init"])[0]
        med, lo, hi = _median_iqr(run[target])
        ax.plot(depths, med0, "o", mfc="white", mec="k", label="initialisation")
        ax.errorbar(depths, med, yerr=[med - lo, hi - med], fmt="o", color="C3", label="converged (median, IQR)")
        ax.axhline(ref[target], color="C2", ls="--", label="task (W*)")
        ax.set_xlabel("depth")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(f"effective rank ρ, {label}")
        ax.set_title(_trend(run[f"trend_{target}"]), fontsize=9)
        ax.legend(fontsize=7)
    for key, name in (("train_loss", "train loss"), ("test_error", "test error")):
        med, lo, hi = _median_iqr(run[key])
        axes[2].errorbar(depths, med, yerr=[med - lo, hi - med], fmt="o-", ms=3, label=name)
    axes[2].set_yscale("log")
    axes[2].axhline(cfg["tol"], color="grey", ls=":", lw=0.8, label="convergence tol")
    axes[2].set_xlabel("depth")
    axes[2].xaxis.set_major_locator(MaxNLocator(integer=True))
    axes[2].set_ylabel("relative squared error")
    axes[2].legend(fontsize=7)
    fig.suptitle(f"Deep linear networks, {OPTIMIZER_NAMES.get(optimizer, optimizer)}, width {cfg['width']}: "
                 f"{cfg['n_train']} training samples, task rank {cfg['task_rank']}, {cfg['n_seeds']} seeds, "
                 f"{cfg['steps']} steps, best lr per depth", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, out_path)


def plot_optimizer_rank(data: dict, out_path) -> list[Path]:
    """Thesis Fig 2.5: effective rank of the converged kernel against depth, one line per optimizer."""
    depths, cfg = np.asarray(data["depths"], dtype=float), data["config"]
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    opts = list(data["optimizers"])
    for i, (opt, run) in enumerate(data["optimizers"].items()):
        med, lo, hi = _median_iqr(run["kernel_rank"])
        shift = (i - (len(opts) - 1) / 2) * 0.08  # keep error bars apart
        conv = 100 * np.mean(run["converged"])
        ax.errorbar(depths + shift, med, yerr=[med - lo, hi - med], fmt="o-", ms=3, capsize=2,
                    label=f"{OPTIMIZER_NAMES.get(opt, opt)}: {_trend(run['trend_kernel_rank'])}, {conv:.0f}% converged")
    ax.axhline(data["reference"]["kernel_rank"], color="C2", ls="--", label="task (W*)")
    ax.set_xlabel("depth")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("effective rank ρ of the converged kernel")
    ax.set_title(f"Least squares, deep linear nets ({cfg['n_seeds']} seeds, task rank {cfg['task_rank']})", fontsize=9)
    ax.legend(fontsize=6)
    fig.tight_layout()
    return save_figure(fig, out_path)


