"""The metric table, torch-free: one ``Metric`` entry per alignment metric, which everything else reads.

Every Snakemake start (a no-op rerun, a dry run, each test that plans the DAG) imports what
the rules name; ``import torch`` alone costs ~2.7 s of it, so the table lives apart from the
engine and names its functions as ``"module:function"`` strings of ``prh.metrics``, which
``registry`` resolves (it imports the modules). From the table come the names (``SUPPORTED_METRICS``:
the workflow's alignment outputs, the config check of ``alignment.metric``), the engine's dispatch
(``registry``: which states share a neighbour search or a centred product, how they score, stack
and permute), the memory plan (``memory``) and the figures' panels (``prh.plots.metric_agreement``).

Adding a metric is its implementation (a state builder and a scorer, in ``kernel``, ``knn`` or a module of
its own in prh.metrics that ``registry`` imports), one entry in ``METRICS`` and its plain reference
in ``DIRECT`` of tests/test_metrics_engine.py, which the metric tests then run it against.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ALIGN_CONFIG", "KNN_METRICS", "METRICS", "SOURCES", "PERMUTATIONS", "SUPPORTED_METRICS", "Metric", "check_metric",
           "metric_entry"]

# What a layer's state is built from, each computed once per layer for every metric that reads it
# (registry.layer_state_set): "neighbours", the k-NN lists and similarities of one search (knn.knn);
# "product", the centred product X̄X̄ᵀ (N x N, kernel.centered_product); "features", the L2-normalised layer.
SOURCES = ("neighbours", "product", "features")
# How a layer-stacked state re-indexes when the items are permuted (registry.permute_state), per tensor:
# "lists" holds item indices in item rows, "rows" is per item, "rows_cols" is item x item, "same" is per layer.
PERMUTATIONS = ("lists", "rows", "rows_cols", "same")


@dataclass(frozen=True)
class Metric:
    """One alignment metric.

    name : what configs, commands and files call it
    source : one of ``SOURCES``, what its state is built from
    state : ``"module:function"``, ``f(source, **settings) -> the state of one layer`` (a tensor, or a dict of
        tensors whose first entry is N x ...): metrics naming the same function share one state (the k-NN
        lists metrics share one tensor of lists); a "product" builder may overwrite its input
    score : ``"module:function"``. Source "neighbours": the metric is scored in the neighbour pass
        (``registry.pair_score_set``: per A layer one position table, per block of B layers one neighbour-position
        lookup), ``f(names, state_a, state_b, *, layer, table, pos) -> {name: Lb scores}`` for A's layer ``layer``
        against a block of B layers, every metric naming the same function in one call on the first one's state
        (a dict state's neighbour lists are its "idx"). Otherwise ``f(state_a, state_b) -> La x Lb`` (float64)
    permute : one of ``PERMUTATIONS`` for a tensor state; for a dict state, (key, permutation) per entry
    settings : the keyword settings its state builder (and ``limits``) take, among "topk" and "cca_dim"
    nbytes : bytes of its state per layer and item, (fixed, per neighbour k, per item N, per cca_dim), for ``memory``
    topk : its score depends on k (figure titles carry k)
    limits : ``"module:function"``, ``f(n, width, **settings) -> problem or None``: what it cannot score, checked
        from a features file's header before it is read (``files.file_layer_states``)
    """

    name: str
    source: str
    state: str
    score: str
    permute: str | tuple[tuple[str, str], ...]
    settings: tuple[str, ...] = ()
    nbytes: tuple[int, int, int, int] = (0, 0, 0, 0)
    topk: bool = False
    limits: str = ""

    def item_bytes(self, *, topk: int, n: int, cca_dim: int) -> int:
        """Bytes of its state per layer and item (``nbytes``) at k = ``topk``, N = ``n`` items and ``cca_dim``."""
        fixed, per_k, per_n, per_cca = self.nbytes
        return fixed + per_k * topk + per_n * n + per_cca * cca_dim


def _lists(name: str) -> Metric:
    """A k-NN list metric: its state is the neighbour lists themselves, scored by ``knn.list_scores``."""
    return Metric(name, "neighbours", "knn:neighbour_lists", "knn:pass_scores", "lists", nbytes=(0, 8, 0, 0), topk=True)


# The order is the workflow's and the figures' (the alignment outputs, prh run-metric-agreement's variants)
METRICS = (
    _lists("cycle_knn"),
    _lists("mutual_knn"),
    _lists("lcs_knn"),
    Metric("cka", "product", "kernel:unit_gram", "kernel:gram_scores", "rows_cols", nbytes=(0, 0, 4, 0)),
    Metric("unbiased_cka", "product", "kernel:ucentered_from_product", "kernel:gram_scores", "rows_cols",
           nbytes=(0, 0, 4, 0)),
    Metric("cknna", "neighbours", "kernel:cknna_layer_state", "kernel:cknna_pass_scores",
           (("idx", "lists"), ("vals", "rows"), ("back", "rows"), ("self", "same")), nbytes=(0, 24, 0, 0), topk=True),
    Metric("svcca", "features", "kernel:svcca_state", "kernel:svcca_scores", "rows", settings=("cca_dim",),
           nbytes=(0, 0, 0, 4), limits="kernel:svcca_limits"),
    _lists("edit_distance_knn"),
)
_BY_NAME = {m.name: m for m in METRICS}

SUPPORTED_METRICS = [m.name for m in METRICS]
# The params.yaml keys `prh align` reads (its rules' one --config argument, prh.slices); the metric is its own flag
ALIGN_CONFIG = {"alignment": ("topk", "quantile", "cca_dim", "dtype", "knn_precision")}
# The k-NN list metrics: scored together from neighbour positions (knn.list_scores)
KNN_METRICS = tuple(m.name for m in METRICS if m.score == "knn:pass_scores")


def check_metric(metric: str) -> None:
    if metric not in _BY_NAME:
        raise ValueError(f"metric must be one of {SUPPORTED_METRICS}, got {metric!r}")


def metric_entry(metric: str) -> Metric:
    """The table's entry of ``metric`` (ValueError naming the metrics for an unknown one)."""
    check_metric(metric)
    return _BY_NAME[metric]
