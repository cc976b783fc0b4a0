"""Figures of the seed 000 phase study (Figs 1a, 1b, 2), from ``prh run-phase-analysis``'s CSV and JSON.

Registered in ``prh.figures`` (inputs: ``pairs.csv`` / ``table1.csv`` as paths, ``metrics.json`` read). The
lines at the phase boundaries are the analysis's ``phase.rules`` (``low_s``, ``chaotic``, ``lazy``), which
``metrics.json`` records under ``config``:

    prh plot phase_fig01a_landscape --out results/figures/phase_fig01a_landscape.pdf
"""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from prh.plots import nan_if_none, save_figure

__all__ = ["plot_fig1a", "plot_fig1b", "plot_fig2"]

PHASE_COLOURS = {"chaotic": "tab:red", "optimal": "tab:green", "lazy": "tab:blue"}
KIND_MARKERS = {"cross": "o", "vision": "s", "language": "^"}


def _read_csv(path) -> list[dict]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            try:
                r[k] = float(v)
            except (TypeError, ValueError):
                pass
    return rows


def _rules(metrics: dict) -> dict:
    """The thresholds the analysis ran with (metrics.json ``config.rules``)."""
    return metrics["config"]["rules"]


def plot_fig1a(pairs, metrics: dict, out) -> list[Path]:
    """Fig 1a: NTK similarity S (eq. 3) against retrieval, one point per pair (``pairs.csv``), coloured by phase;
    lines at low_s, chaotic and lazy."""
    pairs, rules = _read_csv(pairs), _rules(metrics)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, key, title in ((axes[0], "s_literal", "S (eq. 3, literal)"), (axes[1], "s_centred", "S centred (NTK CKA)")):
        for p in pairs:
            ax.scatter(p[key], p["retrieval"], c=PHASE_COLOURS[p["phase"]], marker=KIND_MARKERS[p["kind"]],
                       s=22, alpha=0.75, edgecolors="none")
        for x in (rules["low_s"], rules["chaotic"], rules["lazy"]):
            ax.axvline(x, color="grey", lw=0.6, ls="--")
        ax.axhline(metrics["chance"], color="k", lw=0.8, ls=":")
        ax.set_xlabel(title)
        ax.set_xlim(-0.02, 1.02)
    c3 = metrics["claims"]["C3_s_explains_alignment"]
    axes[0].set_ylabel("top-1 retrieval (ridge map, held out)")
    axes[0].set_title(f"partial r = {c3['statistic']:.2f}, p = {nan_if_none(c3['p_value']):.3f} ({c3['verdict']})", fontsize=9)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=ph) for ph, c in PHASE_COLOURS.items()]
    handles += [plt.Line2D([], [], color="k", marker=m, ls="", label=k) for k, m in KIND_MARKERS.items()]
    handles.append(plt.Line2D([], [], color="k", ls=":", label="chance"))
    axes[1].legend(handles=handles, fontsize=7, loc="center right")
    fig.suptitle("Seed 000 Fig 1a analogue: phase landscape of model pairs (colour: phase of literal S)")
    return save_figure(fig, out)


def plot_fig1b(table, metrics: dict, out) -> list[Path]:
    """Fig 1b: per family (``table1.csv``), mean cross-modal S and mean NTK stability, the chaotic boundary
    (``phase.rules.chaotic``, as the analysis recorded it in metrics.json)."""
    table = _read_csv(table)
    chaotic = _rules(metrics)["chaotic"]
    fig, ax = plt.subplots(figsize=(6, 4))
    x = np.arange(len(table))
    ax.bar(x - 0.2, [t["avg_ntk_cross"] for t in table], 0.4, label="mean cross-modal S (eq. 3)")
    ax.bar(x + 0.2, [t["stability"] for t in table], 0.4, label="NTK stability S(before, after)")
    ax.axhline(chaotic, color="tab:red", ls="--", lw=1, label=f"chaotic / optimal boundary ({chaotic:g})")
    ax.set_xticks(x, [f"{t['family']}\n({t['modality']}, {int(t['n_models'])})" for t in table])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("S")
    ax.legend(fontsize=7)
    ax.set_title("Seed 000 Fig 1b analogue: NTK similarity per family")
    return save_figure(fig, out)


def plot_fig2(pairs, metrics: dict, out) -> list[Path]:
    """Fig 2: histograms of S for cross and within-modality pairs (``pairs.csv``), lines at low_s and chaotic."""
    pairs, rules = _read_csv(pairs), _rules(metrics)
    low, chaotic = rules["low_s"], rules["chaotic"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    bins = np.linspace(0, 1, 26)
    for ax, key, title in ((axes[0], "s_literal", "S (eq. 3, literal)"), (axes[1], "s_centred", "S centred")):
        for kind, colour in (("cross", "tab:purple"), ("vision", "tab:orange"), ("language", "tab:cyan")):
            vals = [p[key] for p in pairs if p["kind"] == kind]
            if vals:
                ax.hist(vals, bins=bins, alpha=0.55, color=colour, label=f"{kind} ({len(vals)})")
        ax.axvline(low, color="k", ls="--", lw=1)
        ax.axvline(chaotic, color="k", ls=":", lw=1)
        claim = metrics["claims"].get(f"C2a_fraction_below_{low}_{key}", {})
        ax.set_title(f"{title}: {claim.get('statistic', float('nan')):.0%} of cross pairs < {low:g}", fontsize=9)
        ax.set_xlabel(title)
    axes[0].set_ylabel("pairs")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"Seed 000 Fig 2 analogue: NTK similarity of model pairs (lines at {low:g} and {chaotic:g})")
    return save_figure(fig, out)

