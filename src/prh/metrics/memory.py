"""The host memory of an alignment job, from its feature files' headers; torch-free.

Snakemake calls ``align_memory_mb`` for a rule's ``resources: mem_mb`` while it plans, so this
module imports neither torch nor the engine (every Snakemake start imports what the
rules name).
"""

from __future__ import annotations

from prh.errors import PRHError
from prh.io import features_layout
from prh.metrics.names import metric_entry

__all__ = ["ITEMSIZE", "align_memory_mb"]

# bytes per element of the engine's dtypes (prh.metrics.files.DTYPES)
ITEMSIZE = {"float32": 4, "float64": 8}


def align_memory_mb(*, x_features: list[str], y_features: list[str], metric, topk: int = 10, cca_dim: int = 10,
                    dtype: str = "float32", base_mb: int = 2000) -> int:
    """Host memory (MB) of one ``alignment_tables`` job, from the files' headers (what a rule's
    ``resources: mem_mb`` asks for); ``metric``: one metric or the list a job computes together.

    ``base_mb`` (Python, torch) + 4 working copies of the largest single layer (read, clamped,
    cast, normalised: N × D × bytes of ``dtype``) + one 64 MiB k-NN similarity block + the
    states that stay resident: every y model's (the neighbour metrics' twice: they are concatenated
    into one stack of layers), and one x model's. Per layer and item, each metric's ``nbytes`` in the table
    (prh.metrics.names): 8 k bytes of k-NN lists (shared by the k-NN metrics), 24 k for cknna (indices, values,
    back-pointers), 4 N for each CKA (an N × N Gram per layer), 4 cca_dim for svcca. Independent of how many
    layers are read at once, since only one is. A file that does not exist yet (a dry run), or cannot be read
    (truncated by a killed copy: the job itself names it), counts 0, so `snakemake -n` plans instead of printing a
    traceback.
    """
    metrics = [metric] if isinstance(metric, str) else list(metric)
    # one state per state builder (the k-NN metrics share their lists); the neighbour metrics' are stacked over models
    entries = {e.state: e for e in map(metric_entry, metrics)}.values()
    if dtype not in ITEMSIZE:
        raise ValueError(f"dtype must be one of {list(ITEMSIZE)}, got {dtype!r}")
    size = ITEMSIZE[dtype]

    def sizes(path):
        try:
            n, n_layers, width = features_layout(path)["shape"]
        except (OSError, PRHError):  # not made yet (a dry run), or truncated: the job names it, the plan goes on
            return 0.0, 0.0, 0.0
        per_item = [(e.source, e.item_bytes(topk=topk, n=n, cca_dim=cca_dim)) for e in entries]
        lists = sum(b for source, b in per_item if source == "neighbours")
        dense = sum(b for source, b in per_item if source != "neighbours")
        return n * width * size / 2**20, n_layers * n * lists / 2**20, n_layers * n * dense / 2**20

    x, y = [sizes(p) for p in x_features], [sizes(p) for p in y_features]
    layer = max((s[0] for s in x + y), default=0.0)
    resident = sum(2 * s[1] + s[2] for s in y) + max((s[1] + s[2] for s in x), default=0.0)
    return int(base_mb + 64 + 4 * layer + resident)
