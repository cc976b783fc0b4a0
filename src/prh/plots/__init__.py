"""Figures. One function per figure; each reads the numbers an experiment wrote
(JSON), never recomputes them. Use ``save_figure`` to write PDF + PNG atomically."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files; no display is ever needed

from prh.io import atomic_path  # noqa: E402


def nan_if_none(value):
    """JSON writes NaN as null (prh.io.write_json); plots want the float back."""
    return float("nan") if value is None else value


def save_figure(fig, out: str | os.PathLike, *, dpi: int = 150) -> list[Path]:
    """Save ``fig`` as ``out`` (.pdf) and the PNG beside it, each atomically; close the figure.

    Returns the two paths written.
    """
    import matplotlib.pyplot as plt

    out = Path(out)
    if out.suffix not in (".pdf", ".png"):
        raise ValueError(f"figure path {out} must end in .pdf or .png (both are written)")
    paths = [out.with_suffix(".pdf"), out.with_suffix(".png")]
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=path.suffix[1:], dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return paths


