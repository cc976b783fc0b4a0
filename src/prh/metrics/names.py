"""The metric names, torch-free: the workflow reads them when Snakemake parses the rules.

Every Snakemake start (a no-op rerun, a dry run, each test that plans the DAG) imports what
the rules name; ``import torch`` alone costs ~2.7 s of it, so the names live apart from the
engine. ``registry`` and ``knn`` take them from here.
"""

from __future__ import annotations

__all__ = ["KNN_METRICS", "SUPPORTED_METRICS", "check_metric"]

SUPPORTED_METRICS = [
    "cycle_knn",
    "mutual_knn",
    "lcs_knn",
    "cka",
    "unbiased_cka",
    "cknna",
    "svcca",
    "edit_distance_knn",
]
# The k-NN list metrics: scored together from neighbour positions (knn.list_scores)
KNN_METRICS = ("mutual_knn", "cycle_knn", "lcs_knn", "edit_distance_knn")


def check_metric(metric: str) -> None:
    if metric not in SUPPORTED_METRICS:
        raise ValueError(f"metric must be one of {SUPPORTED_METRICS}, got {metric!r}")
