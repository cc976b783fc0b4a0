"""Seed 000's design choices the workflow makes while it parses the rules; torch-free.

``choose_pairs`` names the (vision, language) pairs of Table 2's adaptive-LR run, one
``phase_adaptive_lr`` input each, so Snakemake calls it on every start; it lives apart from
``adaptive_lr`` (which trains them) and imports no torch (issue 18).
"""

from __future__ import annotations

import numpy as np

__all__ = ["choose_pairs"]


def choose_pairs(vision: list[str], language: list[str], *, n_pairs: int, seed: int) -> list[tuple[str, str]]:
    """A seeded sample of ``n_pairs`` (vision, language) pairs (all of them when there are fewer)."""
    allp = [(v, ell) for v in vision for ell in language]
    pick = np.random.default_rng(seed).permutation(len(allp))[: min(n_pairs, len(allp))]
    return [allp[i] for i in sorted(pick)]
