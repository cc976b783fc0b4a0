"""What the metric-agreement rules read while Snakemake parses them; torch- and scipy-free: the params.yaml keys
each command reads, by block (its rule's one ``--config`` argument, ``prh.slices``)."""

from __future__ import annotations

__all__ = ["AGREEMENT_CONFIG", "LOCALITY_CONFIG"]

# prh run-metric-agreement: the alignment tables' settings it recomputes the smaller batch sizes with, and those sizes
AGREEMENT_CONFIG = {"alignment": ("topk", "quantile", "cca_dim"), "metric_agreement": ("batch_sizes",)}
# prh run-locality: Fig 10's neighbourhood sizes and the clamp of the features
LOCALITY_CONFIG = {"metric_agreement": ("locality_ks",), "alignment": ("quantile",)}
