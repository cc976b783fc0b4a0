"""LTE figures (thesis chapter 4 and appendix 8), drawn from the JSON that ``prh run-lte`` wrote.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

import csv
from pathlib import Path

from prh.io import atomic_path
from prh.plots import nan_if_none, save_figure

__all__ = [
    "plot_head_orthogonality",
    "plot_least_squares",
    "plot_lte_vs_standard",
    "plot_update_rank",
    "write_table",
]

ARM_STYLE = {"standard": ("standard (DDP)", "k"), "lora": ("LoRA, no merge", "tab:red"),
             "lora_merge": ("LoRA + merge (1 head)", "tab:orange"), "lte": ("LTE", "tab:blue")}


def plot_least_squares(data: dict, out) -> list[Path]:
    """Fig 8.1: population loss against steps, one panel per target rank; dashed: the rank-r SVD bound."""
    import matplotlib.pyplot as plt

    c = data["config"]
    ranks = sorted({r["target_rank"] for r in data["runs"]})
    fig, axes = plt.subplots(1, len(ranks), figsize=(5 * len(ranks), 3.8), squeeze=False)
    ts = [t for t in c["merge_every"]]
    colors = plt.get_cmap("viridis")(range(0, 256, 256 // max(1, len(ts))))
    for ax, rank in zip(axes[0], ranks):
        for run in (r for r in data["runs"] if r["target_rank"] == rank):
            t = run["merge_every"]
            color = "tab:red" if t is None else colors[ts.index(t)]
            ax.plot(run["steps"], run["loss"], color=color, ls="-" if run["heads"] == 1 else "--",
                    label=f"T={'∞' if t is None else t}, {run['heads']} head{'s' if run['heads'] > 1 else ''}")
        bound = next(r["svd_bound"] for r in data["runs"] if r["target_rank"] == rank)
        ax.axhline(bound, color="grey", ls=":", label=f"rank-{c['lora_rank']} SVD bound")
        ax.set_yscale("log")
        ax.set_xlabel("optimisation steps (per head)")
        ax.set_ylabel("||W - W*||² / m")
        ax.set_title(f"target rank {rank}, LoRA rank {c['lora_rank']}")
    axes[0][-1].legend(fontsize=7, ncol=2)
    return save_figure(fig, out)


def plot_lte_vs_standard(data: dict, out) -> list[Path]:
    """Figs 4.5/4.6: test accuracy and loss against samples seen and against synchronisations."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for arm, run in data["arms"].items():
        label, color = ARM_STYLE[arm]
        h = run["history"]
        for row, key in enumerate(("accuracy", "loss")):
            for col, x in enumerate(("samples", "syncs")):
                if x == "syncs" and arm == "lora":
                    continue  # never synchronises
                axes[row][col].plot([e[x] for e in h], [e[key] for e in h], color=color, marker=".", label=label)
    for row, key in enumerate(("test accuracy (mean over tasks)", "test loss")):
        axes[row][0].set_ylabel(key)
    for col, x in enumerate(("samples seen (all heads)", "synchronisations")):
        axes[1][col].set_xlabel(x)
    axes[0][1].set_xscale("log")
    axes[1][1].set_xscale("log")
    c = data["config"]
    axes[0][0].set_title(f"LTE: N={c['heads']}, r={c['rank']}, T={c['merge_every']}; lr {data['lr']}")
    axes[0][0].legend(fontsize=8)
    return save_figure(fig, out)


def plot_head_orthogonality(data: dict, out) -> list[Path]:
    """Fig 4.7: mean |cos| and Grassmann distance between heads over training, four settings."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for name, s in data["settings"].items():
        steps = [p["step"] for p in s["curve"]]
        for ax, key in zip(axes, ("abs_cos", "grassmann")):
            ax.plot(steps, [nan_if_none(p[key]) for p in s["curve"]], marker=".",
                    label=f"{name} (test acc {s['test_accuracy']:.3f})")
    axes[0].set_ylabel("mean pairwise |cos(B_i A_i, B_j A_j)|")
    axes[1].set_ylabel("mean pairwise Grassmann distance")
    for ax in axes:
        ax.set_xlabel("steps per head")
    axes[0].legend(fontsize=7)
    return save_figure(fig, out)


def plot_update_rank(data: dict, out) -> list[Path]:
    """Fig 8.5: effective rank of the accumulated update W - W_0 (mean over layers) over training."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for arm, run in data["arms"].items():
        label, color = ARM_STYLE[arm]
        h = [e for e in run["history"] if e.get("update_erank") is not None]
        ax.plot([e["samples"] for e in h], [e["update_erank"] for e in h], color=color, marker=".", label=label)
    r = data["config"]["rank"]
    ax.axhline(r, color="grey", ls=":", label=f"r = {r}")
    ax.axhline(2 * r, color="grey", ls="--", label=f"2r = {2 * r}")
    ax.set_xlabel("samples seen")
    ax.set_ylabel("effective rank of W - W_0")
    ax.legend(fontsize=8)
    return save_figure(fig, out)


def write_table(data: dict, out) -> list[Path]:
    """Table 4.9 (mini) as CSV: heads, rank, T, test loss, test accuracy, merges, bytes per merge."""
    out = Path(out).with_suffix(".csv")
    keys = ["heads", "rank", "merge_every", "test_loss", "test_accuracy", "samples", "merges", "bytes_per_merge"]
    with atomic_path(out) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for row in data["rows"]:
            w.writerow({k: row[k] for k in keys})
    return [out]


