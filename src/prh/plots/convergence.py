"""Figures of the convergence experiments (PRH Figs 2 and 3, and the platonic reference).

Each function reads one JSON written by :mod:`prh.studies.convergence.run` and draws it.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

from pathlib import Path

import re

import numpy as np

from prh.plots import nan_if_none, save_figure

__all__ = ["plot_competence", "plot_model_map", "plot_language_vision", "plot_preregistered", "plot_platonic",
           "plot_relational"]


def _runs(names) -> dict[str, list[tuple[int, str]]]:
    """Language zoo checkpoints by training run: ``<run>_<steps>`` -> {run: [(steps, name), ...]} sorted by
    steps; a name without a step suffix, or a lone checkpoint, is its own run (one point)."""
    runs = {}
    for name in names:
        m = re.fullmatch(r"(.+)_(\d+)", name)
        run, steps = (m.group(1), int(m.group(2))) if m else (name, -1)
        runs.setdefault(run, []).append((steps, name))
    # a lone checkpoint (e.g. bert_m_300) is a model of its own, named in full
    return {(v[0][1] if len(v) == 1 and v[0][0] != 0 else run): sorted(v) for run, v in runs.items()}


def _run_colors(names) -> dict:
    """One colour per training run, the same in every panel of a figure."""
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    return {run: cmap(i % 10) for i, run in enumerate(sorted(_runs(names)))}


def _trajectories(ax, points: dict[str, tuple[float, float]], colors: dict) -> None:
    """Checkpoints of one run joined in step order (the run is the unit); step-0 (untrained)
    models drawn as a grey band of their y range, not as points. Runs are named in the legend, not by
    point labels, so nothing overlaps."""
    runs = _runs(points)
    untrained = [points[name][1] for pts in runs.values() for steps, name in pts if steps == 0]
    if untrained:
        ax.axhspan(min(untrained), max(untrained), color="0.85", zorder=0, label=f"untrained models ({len(untrained)})")
    for run, pts in runs.items():
        trained = [name for steps, name in pts if steps != 0]
        if trained:
            xy = np.array([points[name] for name in trained], dtype=float)
            ax.plot(xy[:, 0], xy[:, 1], "-o", color=colors[run], ms=4, lw=1, mec="k", mew=0.4, label=run)
    ax.legend(fontsize=5, loc="best", ncol=2)


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
    cov = data.get("coverage")  # paper suite: which of the paper's 78 models are present (design.fig2_coverage)
    if cov:
        missing = "; ".join(f"{g['n_missing']} of {g['count']} {g['group']}" for g in cov["groups"] if g["n_missing"])
        differs = ", ".join(g["group"] for g in cov["groups"] if g.get("architecture_differs"))
        fig.text(0.5, -0.06, f"{cov['n_present']} of the paper's {cov['paper_count']} models"
                 + (f"; missing: {missing}" if missing else "")
                 + (f"; architecture not the paper's: {differs}" if differs else ""),
                 ha="center", va="top", fontsize=6, wrap=True)
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
    """Fig 3, pre-registered: each trained causal LM's mean calibrated alignment with the named
    vision set against each co-primary predictor, checkpoints of one run joined; and, where the run has
    it, the amendment of 2026-11-26 (one point per run: its gain over the untrained same-size model)."""
    import matplotlib.pyplot as plt

    test = data["language_vision_preregistered"]
    amended = data.get("language_vision_amended")
    amended = amended if amended and amended.get("points") else None  # not testable: no panel
    preds = list(test["predictors"])
    ncols = len(preds) + (1 if amended else 0)
    fig, axes = plt.subplots(1, ncols, figsize=(4.2 * ncols, 3.8), squeeze=False, constrained_layout=True)
    untrained = {p["untrained"]: p["untrained_outcome"] for p in (amended or {}).get("points", [])}
    colors = _run_colors([p["language"] for p in test["points"]])
    for ax, name in zip(axes[0], preds):
        points = {p["language"]: (p[name], p["outcome"]) for p in test["points"]}
        if untrained:  # the floor: drawn as a band at its outcomes (x is not used for step-0 models)
            points.update({lm: (np.nan, y) for lm, y in untrained.items()})
        _trajectories(ax, points, colors)
        r = test["predictors"][name]
        ax.set_title(f"{name}\nSpearman r={nan_if_none(r['spearman_r']):.2f}, p_Holm={nan_if_none(r['p_holm']):.2g}, "
                     f"n={test['n']} checkpoints", fontsize=7)
        ax.set_xlabel(name)
        ax.set_ylabel("mean calibrated alignment with vision")
    if amended:
        ax = axes[0][-1]
        primary = amended["primary"]
        for p in amended["points"]:
            ax.scatter(p[primary], p["gain"], s=30, edgecolor="k", zorder=3, label=p["run"],
                       color=colors.get(p["run"], "tab:blue"))
        ax.axhline(0, color="0.5", lw=0.8, ls="--", label="no gain")
        ax.legend(fontsize=5, loc="best", ncol=2)
        ax.set_title(f"amended (unit = run, n={amended['n']}): gain over untrained\nSpearman r="
                     f"{nan_if_none(amended['spearman_r']):.2f}, p_Holm={nan_if_none(amended['p_holm']):.2g}; "
                     f"{amended['verdict']}", fontsize=7)
        ax.set_xlabel(f"{primary} (final checkpoint)")
        ax.set_ylabel("alignment gain over the untrained model")
    fig.suptitle(f"registered: one point per checkpoint; gate passed: {test['gate_passed']}; verdict: {test['verdict']}",
                 fontsize=8)
    return save_figure(fig, out)


def plot_platonic(data: dict, out: Path) -> list[Path]:
    """Platonic reference: alignment with the world kernel against competence / 1 - bpb; language
    checkpoints of one run joined, the untrained language models as a band."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), constrained_layout=True)
    panels = [("vision", "competence", "mean probe accuracy"), ("language", "lm_score", "1 - bits per byte")]
    for ax, (mod, key, label) in zip(axes, panels):
        rows = {n: r for n, r in data[mod].items() if r.get(key) is not None}
        if mod == "language":
            _trajectories(ax, {n: (r[key], r["score"]) for n, r in rows.items()}, _run_colors(rows))
        else:
            ax.scatter([r[key] for r in rows.values()], [r["score"] for r in rows.values()], s=30, edgecolor="k")
            for n, r in rows.items():
                ax.annotate(n, (r[key], r["score"]), fontsize=6, xytext=(3, 3), textcoords="offset points")
        c = data["correlations"][mod]
        ax.set_title(f"{mod}: Spearman r={nan_if_none(c['spearman_r']):.2f} (p={nan_if_none(c['spearman_p']):.2g}, "
                     f"n={c['n']})", fontsize=8)
        ax.set_xlabel(label)
        ax.set_ylabel(f"alignment with world kernel (k={data['settings']['topk']})")
    return save_figure(fig, out)


def plot_relational(data: dict, out: Path) -> list[Path]:
    """The relational test (``prh relational-test``): (a) competence first: each run's relational accuracy
    by data mix against chance; (b) the test: accuracy against the gain over the untrained model, one point per run;
    (c) each run's trajectory of calibrated alignment over its checkpoints, the untrained model of its size dashed."""
    import matplotlib.pyplot as plt

    points, w, gate = data["points"], data["weighed"], data["gate"]
    families = sorted({p["family"] for p in points})
    mixes = sorted({p["mix"] for p in points})
    colors = {m: plt.cm.viridis(i / max(1, len(mixes) - 1)) for i, m in enumerate(mixes)}
    markers = dict(zip(families, "osD^v"))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.9), constrained_layout=True)
    ax = axes[0]
    for i, p in enumerate(points):
        jitter = (i % 7 - 3) * 0.012
        ax.scatter(p["mix"] + jitter + 0.06 * families.index(p["family"]), p["accuracy"], color=colors[p["mix"]],
                   marker=markers[p["family"]], edgecolor="k", s=22, zorder=3)
    ax.axhline(data["competence"]["chance_mean"], color="0.4", ls="--", lw=0.8, label="chance")
    ax.set_xlabel("relational share of the QA slots (data mix)")
    ax.set_ylabel("relational multiple-choice accuracy")
    ax.set_title(f"competence: {data['competence']['runs_above_chance']} of {data['n']} runs above chance", fontsize=8)
    ax.legend(fontsize=6)
    ax = axes[1]
    for p in points:
        ax.scatter(p["accuracy"], p["gain"], color=colors[p["mix"]], marker=markers[p["family"]], edgecolor="k",
                   s=26, zorder=3)
    ax.axhline(0, color="0.5", lw=0.8, ls="--")
    per = ", ".join(f"{f}: r={nan_if_none(s['spearman_r']):.2f}" for f, s in data["strata"].items())
    ax.set_title(f"unit = run (n={data['n']}); {per}\npooled r={nan_if_none(w['value']):.2f}, "
                 f"p={nan_if_none(w['p']):.2g}, power {data['power']['power']:.2f}; {data['verdict']}", fontsize=8)
    ax.set_xlabel("relational accuracy (final checkpoint)")
    ax.set_ylabel("calibrated alignment gain over untrained")
    ax = axes[2]
    for p in points:
        steps = [t["step"] for t in p["trajectory"]]
        ax.plot(steps, [t["outcome"] for t in p["trajectory"]], color=colors[p["mix"]], lw=0.8, alpha=0.7,
                ls="-" if families.index(p["family"]) == 0 else ":")
    for f in families:
        base = next(p["untrained_outcome"] for p in points if p["family"] == f)
        ax.axhline(base, color="k", lw=1, ls="--", label=f"untrained {f}")
    ax.set_xscale("symlog", linthresh=100)
    ax.set_xlim(left=0)
    ax.set_xlabel("training step")
    ax.set_ylabel("calibrated alignment with vision")
    ax.set_title("trajectories (colour: mix; line: size)", fontsize=8)
    handles = [plt.Line2D([], [], color=colors[m], marker="o", ls="", label=f"mix {m:g}") for m in mixes]
    handles += [plt.Line2D([], [], color="0.3", marker=markers[f], ls="", label=f) for f in families]
    ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=6)
    fig.suptitle(f"relational language test (pre-registered); gate: {gate['n_passed']} of "
                 f"{gate['n_runs']} final checkpoints follow the left-most swap", fontsize=9)
    return save_figure(fig, out)
