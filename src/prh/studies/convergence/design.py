"""What the convergence rules read while Snakemake parses them; scipy- and torch-free.

``SLICES`` names the keys of the ``convergence`` block each command reads: its rule passes only
those, so editing e.g. ``platonic_sensitivity`` reruns the platonic reference, not Figs 2 and 3.
The commands fill a key left out with its schema default, so a slice must name every key its
command reads (tests/test_convergence.py checks that each key is read by a slice or the workflow).
"""

from __future__ import annotations

__all__ = ["SLICES", "WORKFLOW_KEYS"]

# command -> the keys of the `convergence` block it reads (workflow/schemas/convergence.schema.yaml documents each)
SLICES = {
    "run-convergence": ("solve_fraction", "bins", "seed", "min_umap_models", "n_neighbors", "preregistered", "amended"),
    "run-platonic": ("topk", "quantile", "platonic_sensitivity"),
}
# keys only the rules read (which models and datasets the jobs take)
WORKFLOW_KEYS = ("vision_models", "vtab_tasks", "relational")  # relational: zoo_language.smk reads it (issue 48)
