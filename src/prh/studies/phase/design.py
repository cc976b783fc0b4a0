"""Seed 000's design choices the workflow makes while it parses the rules; torch-free.

``choose_pairs`` names the (vision, language) pairs of Table 2's adaptive-LR run, one
``phase_adaptive_lr`` input each, so Snakemake calls it on every start; it lives apart from
``adaptive_lr`` (which trains them) and imports no torch. ``SLICES`` names the keys
of the ``phase`` block each command reads: its rule passes only those, so editing e.g. a
plotting threshold (``rules``) reruns the analysis, not every model's NTK job.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SLICES", "choose_pairs"]

_NTK = ("n_ntk", "n_readouts", "exact_max_params", "sketch_dim", "chunk", "agop_k")
# command -> the keys of the `phase` block it reads (workflow/schemas/phase.schema.yaml documents each)
SLICES = {
    "model": _NTK + ("sketch_check_items", "train_steps", "train_lr", "train_batch_size", "n_stability"),
    "adaptive_lr": _NTK + ("test_fraction", "adaptive_lr"),
    "analysis": ("test_fraction", "topk", "quantile", "spectral_k_max", "rules", "alpha", "permutations"),
}


def choose_pairs(vision: list[str], language: list[str], *, n_pairs: int, seed: int) -> list[tuple[str, str]]:
    """A seeded sample of ``n_pairs`` (vision, language) pairs (all of them when there are fewer)."""
    allp = [(v, ell) for v in vision for ell in language]
    pick = np.random.default_rng(seed).permutation(len(allp))[: min(n_pairs, len(allp))]
    return [allp[i] for i in sorted(pick)]
