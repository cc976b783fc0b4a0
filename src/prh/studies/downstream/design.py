"""What the downstream rules read while Snakemake parses them; torch- and scipy-free: the params.yaml keys of
``prh score-mc`` (its rule's one ``--config`` argument, ``prh.slices``)."""

from __future__ import annotations

__all__ = ["MC_CONFIG"]

# the shapes-world multiple choice (offline Fig 4): items and endings per item
MC_CONFIG = {"downstream": ("n_items", "n_choices")}
