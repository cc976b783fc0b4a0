"""The shapes world's sample sheet: images with their captions at every density level.

A figure for the report, so a reader can see the world the offline suite runs on
(PRH section 4.1's latent Z observed as an image X and captions Y at the six
density levels of ``prh.data.captions``). One row per item: the image, then one
caption per level, sparsest first. Items are chosen to show 1, 2, 3 and 4 objects.

    prh plot --list   # the figures, with their inputs (prh.figures)
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from prh.plots import save_figure

FONT_SIZE = 7.0
LINE_IN = 1.3 * FONT_SIZE / 72  # height of one text line, inches (sizes the rows)
WRAP = 150  # characters per caption line


def pick_items(scenes: list[dict], n_items: int) -> list[int]:
    """The first item with 1, 2, 3, ... objects, then the next items in order, up to ``n_items``."""
    picked: list[int] = []
    for count in sorted({len(s["objects"]) for s in scenes}):
        picked.append(next(i for i, s in enumerate(scenes) if len(s["objects"]) == count))
    picked += [i for i in range(len(scenes)) if i not in picked]
    return sorted(picked[:n_items], key=lambda i: (len(scenes[i]["objects"]), i))


def plot_sample_sheet(data: str | Path, out: str | Path, *, n_items: int = 4) -> list[Path]:
    """Draw ``n_items`` items of the dataset ``data`` (its dir or its ``images.npy``) with all their captions;
    write ``out`` (.pdf) and .png.

    Returns the paths written.
    """
    import matplotlib.pyplot as plt

    from prh.data.captions import LEVEL_DESCRIPTIONS, LEVELS
    from prh.data.shapes import load_dataset

    if n_items < 1:
        raise ValueError(f"n_items must be at least 1, got {n_items}")
    data = Path(data)
    data = data.parent if data.is_file() else data
    ds = load_dataset(data)
    items = pick_items(ds.scenes, n_items)
    blocks = []  # per item, per level: the wrapped lines
    for i in items:
        blocks.append([textwrap.wrap(f"{lv} · {LEVELS[lv]} ({LEVEL_DESCRIPTIONS[lv]}): {text}", WRAP)
                       for lv, text in enumerate(ds.texts[i])])
    image_in, width_in, title_in = 1.6, 11.0, 0.35
    heights = [max(image_in, (sum(map(len, b)) + 0.5 * len(b)) * LINE_IN) for b in blocks]
    total_in = sum(heights) + title_in + 0.15 * len(items)
    fig = plt.figure(figsize=(width_in, total_in))
    grid = fig.add_gridspec(len(items), 2, height_ratios=heights, width_ratios=[image_in, width_in - image_in],
                            wspace=0.03, hspace=0.15, top=1 - title_in / total_in, bottom=0.01, left=0.01, right=0.99)
    renderer = fig.canvas.get_renderer()
    for row, (i, block, height) in enumerate(zip(items, blocks, heights)):
        ax = fig.add_subplot(grid[row, 0])
        ax.imshow(ds.images[i], interpolation="nearest")
        ax.set_anchor("N")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel(f"item {i}", fontsize=FONT_SIZE)
        text_ax = fig.add_subplot(grid[row, 1])
        text_ax.axis("off")
        y, axes_px = 1.0, text_ax.get_window_extent(renderer).height
        for lv, lines in enumerate(block):
            text = text_ax.text(0.0, y, "\n".join(lines), va="top", ha="left", fontsize=FONT_SIZE,
                                transform=text_ax.transAxes, color="black" if lv % 2 else "#1f3a93")
            # place the next level below what this one really took, measured, not guessed
            y -= (text.get_window_extent(renderer).height + 0.35 * FONT_SIZE * fig.dpi / 72) / axes_px
    fig.suptitle(f"The shapes world: {Path(data).name}, captions at {len(LEVELS)} densities (sparsest first)",
                 fontsize=9, y=1 - 0.08 / total_in, va="top")
    return save_figure(fig, out)


