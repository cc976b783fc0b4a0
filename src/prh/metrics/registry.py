"""The alignment metrics as (per-layer state, per-pair score), dispatched from the metric table, and ``measure``.

A metric here is three functions, read from its entry of ``names.METRICS`` (no function here names a metric):

* ``layer_states``: everything that depends on one model alone, for every
  layer at once (neighbour lists, centred Grams, singular vectors);
* ``pair_scores``: the La × Lb score matrix from two models' states;
* ``permute_state``: the state of the same features with items re-indexed, the
  cheap way to draw from a permutation null (``calibration.py``).

Metrics computed together share their entries' sources (one neighbour search, one centred product) and the
neighbour metrics one pass over A's layers (``layer_state_set``, ``pair_score_set``).

``measure(metric, A, B)`` is the single-pair case (one layer each) and agrees
with the reference code's ``AlignmentMetrics.measure`` (PRH appendix B) up to
the differences named in the metric docstrings (lcs_knn divided by k, no 1e-6
in the CKA/CKNNA denominators, exact SVCCA).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from prh.errors import FeaturesError
from prh.metrics import kernel
from prh.metrics import knn as knn_lib
from prh.metrics.names import KNN_METRICS, METRICS, SOURCES, SUPPORTED_METRICS, check_metric, metric_entry
from prh.metrics.sanity import REMEDY, constant_layer, layer_problem

__all__ = ["SUPPORTED_METRICS", "KNN_METRICS", "IMPLEMENTATIONS", "as_tensor", "prepare_features", "abs_quantile",
           "layer_states", "layer_state", "layer_state_set", "stack_states", "cat_states", "join_states",
           "layer_tensor", "layer_slice", "pair_scores", "pair_score_set", "permute_state", "settings_of", "measure"]

# Above this many items an N × N Gram per layer no longer fits comfortably (1 GiB in float32): the limit of the
# metrics built from the centred product (source "product").
MAX_GRAM_ITEMS = 16384
# The modules the table's "module:function" names point into. A metric implemented in a new module of
# prh.metrics adds it here: imported, not loaded by name, so every command's code hash names it.
IMPLEMENTATIONS = {"kernel": kernel, "knn": knn_lib}


def _resolve(target: str):
    module, _, name = target.partition(":")
    if not hasattr(IMPLEMENTATIONS.get(module), name):
        raise ImportError(f"prh/metrics/names.py names {target!r}, which no module of IMPLEMENTATIONS in "
                          f"prh/metrics/registry.py defines ({', '.join(IMPLEMENTATIONS)})")
    return getattr(IMPLEMENTATIONS[module], name)


# every entry's functions, resolved once: a name the implementations lack fails on import, naming it
STATE = {m.name: _resolve(m.state) for m in METRICS}
SCORE = {m.name: _resolve(m.score) for m in METRICS}
LIMITS = {m.name: _resolve(m.limits) for m in METRICS if m.limits}
# names.PERMUTATIONS: how a layer-stacked tensor re-indexes for items permuted by perm (inv its inverse)
PERMUTE = {
    "lists": lambda t, perm, inv: inv[t[:, perm]],  # S'(i) = π⁻¹(S(π(i)))
    "rows": lambda t, perm, inv: t[:, perm],
    "rows_cols": lambda t, perm, inv: t[:, perm][:, :, perm],
    "same": lambda t, perm, inv: t,
}


def as_tensor(feats, *, ndim: int, name: str, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """A numpy array or torch tensor as a ``dtype`` tensor on ``device``, checking its rank."""
    t = torch.as_tensor(np.asarray(feats) if not isinstance(feats, torch.Tensor) else feats)
    if t.ndim != ndim:
        shape = "N x D" if ndim == 2 else "N x L x D"
        raise ValueError(f"{name} must be {shape} ({ndim}-D), got shape {tuple(t.shape)}")
    return t.to(device=device, dtype=dtype)


def prepare_features(feats, q: float = 0.95, *, layer_dims=None):
    """Clamp every element to ±c, c = the q-quantile of |x| over the whole N × L × D tensor.

    Parameters
    ----------
    feats : tensor or array N × L × D
    q : float in (0, 1]
        ``q=1`` returns ``feats`` unchanged. The quantile interpolates linearly
        between order statistics, as ``numpy.quantile``.
    layer_dims : list of L ints, optional
        The real width of each layer when narrower layers were zero-padded to D
        (CNN stages; the features' meta records it). The quantile is then taken
        over the real entries only, so padding does not lower the clamp.

    Returns
    -------
    torch.Tensor N × L × D (float), clamped
    """
    if not 0 < q <= 1:
        raise ValueError(f"q must be in (0, 1], got {q}")
    t = feats if isinstance(feats, torch.Tensor) else torch.as_tensor(np.asarray(feats))
    if t.ndim != 3:
        raise ValueError(f"feats must be N x L x D (3-D), got shape {tuple(t.shape)}")
    if q == 1:
        return t
    if layer_dims is not None and (len(layer_dims) != t.shape[1] or max(layer_dims) > t.shape[2]):
        raise ValueError(f"layer_dims {list(layer_dims)} does not fit features of shape {tuple(t.shape)}")
    dims = layer_dims if layer_dims is not None else [t.shape[2]] * t.shape[1]
    c = abs_quantile(lambda: (t[:, i, :d] for i, d in enumerate(dims)), q)
    return t.clamp(-c, c)


# float dtype -> the signed integer of the same width: for x >= 0 the bit patterns order as the values
_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}


def abs_quantile(chunks, q: float) -> float:
    """The q-quantile of |x| over every element of ``chunks()`` (an iterable of float tensors,
    one dtype), exactly as ``numpy.quantile``'s linear rule on the order statistics:
    ``pos = q (n - 1)``, ``c = v_(lo) + (pos - lo) (v_(lo+1) - v_(lo))`` with ``lo = floor(pos)``.

    The order statistics are found by a radix selection on the bit patterns of |x| (for
    x >= 0 they order as the values), 16 bits per pass: a histogram of 65,536 counts per
    pass, so memory is one chunk, however many chunks there are (a features file read
    layer by layer). ``chunks`` is called once per pass (2 for float32, 1 for 16-bit
    floats) and must give the same elements each time.
    """
    if not 0 < q <= 1:
        raise ValueError(f"q must be in (0, 1], got {q}")
    n, nbits, dtype = 0, 0, None
    ranks: list[int] = []      # the wanted order statistics (1-based), as ranks left within the prefix
    prefixes: list[int] = []   # their bit patterns' high digits found so far
    level = 0
    while level == 0 or 16 * level < nbits:
        hists: dict = {}
        for chunk in chunks():
            if dtype is None:
                if chunk.dtype not in _BITS:
                    raise ValueError(f"abs_quantile needs float chunks ({list(_BITS)}), got {chunk.dtype}")
                dtype, nbits = chunk.dtype, 8 * chunk.element_size()
            bits = chunk.abs().contiguous().view(_BITS[dtype]).reshape(-1).long()
            n += bits.numel() if level == 0 else 0
            shift = nbits - 16 * (level + 1)
            digits = (bits >> shift) & 0xFFFF
            for p in set(prefixes) or {None}:
                sel = digits if p is None else digits[(bits >> (shift + 16)) == p]
                hists[p] = hists.get(p, 0) + torch.bincount(sel, minlength=1 << 16)
        if n == 0:
            raise ValueError("abs_quantile got no elements")
        if level == 0:
            pos = q * (n - 1)
            lo = int(np.floor(pos))
            ranks = [lo + 1, min(lo + 2, n)] if pos > lo else [lo + 1]
            prefixes = [None] * len(ranks)
        for r, p in enumerate(prefixes):
            cum = hists[p].cumsum(0)
            digit = int(torch.searchsorted(cum, torch.tensor(ranks[r])))  # first digit with cum >= rank
            ranks[r] -= int(cum[digit - 1]) if digit else 0
            prefixes[r] = digit if p is None else (p << 16 | digit)
        level += 1
    v_lo, v_hi = (float(torch.tensor([p], dtype=_BITS[dtype]).view(dtype)) for p in (prefixes[0], prefixes[-1]))
    return float(v_lo + (pos - lo) * (v_hi - v_lo))


def layer_states(
    metric: str,
    feats,
    *,
    topk: int = 10,
    cca_dim: int = 10,
    normalize: bool = True,
    device="cpu",
    dtype=torch.float32,
    block_rows: int | None = None,
    progress: bool = False,
):
    """Per-layer state of one model for ``metric`` (computed once, reused for every pairing).

    Parameters
    ----------
    feats : tensor or array N × L × D
    normalize : bool
        L2-normalise each item's vector within each layer first.

    Returns
    -------
    The layer-stacked state (``stack_states``), e.g. k-NN metrics: L × N × k neighbour indices;
    cka/unbiased_cka: L × N × N unit Grams; cknna: dict of L-stacked tensors; svcca: L × N × cca_dim.
    """
    check_metric(metric)
    x = as_tensor(feats, ndim=3, name="feats", dtype=dtype, device="cpu")
    n_layers = x.shape[1]
    if n_layers and all(constant_layer(x[:, layer, :]) for layer in range(n_layers)):
        raise FeaturesError(f"features unfit to score: every layer is one constant vector for all {x.shape[0]} items "
                            f"(it would score as chance); {REMEDY}")
    kw = dict(topk=topk, cca_dim=cca_dim, normalize=normalize, device=device, block_rows=block_rows)
    per_layer = [layer_state(metric, x[:, layer, :], **kw)
                 for layer in tqdm(range(n_layers), desc=f"{metric} states", disable=not progress, leave=False)]
    return stack_states(metric, per_layer)


def layer_state(metric: str, h: torch.Tensor, *, topk: int = 10, cca_dim: int = 10, normalize: bool = True,
                device="cpu", block_rows: int | None = None):
    """The state of one layer ``h`` (N × D, already in the working dtype): what ``layer_states``
    stacks. ``normalize``: ``h_i / ||h_i||`` first; then the metric's state builder (its table entry)."""
    return layer_state_set([metric], h, topk=topk, cca_dim=cca_dim, normalize=normalize, device=device,
                           block_rows=block_rows)[metric]


def settings_of(metric: str, *, topk: int, cca_dim: int) -> dict:
    """The keyword settings of ``metric``'s state builder and limits (its entry's ``settings``)."""
    return {key: value for key, value in (("topk", topk), ("cca_dim", cca_dim)) if key in metric_entry(metric).settings}


def _source(source: str, h: torch.Tensor, *, topk: int, block_rows: int | None, knn_precision: str):
    """One of ``names.SOURCES`` of the normalised layer ``h``."""
    if source == "neighbours":
        return knn_lib.knn(h, topk, block_rows=block_rows, precision=knn_precision)
    if source == "product":
        return kernel.centered_product(h)
    return h


def layer_state_set(metrics, h: torch.Tensor, *, topk: int = 10, cca_dim: int = 10, normalize: bool = True,
                    device="cpu", block_rows: int | None = None, knn_precision: str = "fp32") -> dict:
    """``{metric: layer_state(metric, h)}`` for several metrics, sharing what they have in common:
    each source (``names.SOURCES``) is computed once, so one neighbour search serves the k-NN metrics and
    cknna, one centred product X̄X̄ᵀ both CKAs, and metrics naming one state builder share its state.
    The states are the same tensors the metrics compute alone. ``knn_precision``: ``knn.knn``'s
    (the same lists in every precision but at exact ties)."""
    entries = [metric_entry(metric) for metric in metrics]
    n = h.shape[0]
    dense = [e.name for e in entries if e.source == "product"]
    if dense and n > MAX_GRAM_ITEMS:
        raise ValueError(
            f"{dense[0]} needs an N x N Gram per layer and N={n} > {MAX_GRAM_ITEMS}; "
            "use a k-NN metric (mutual_knn, cknna) or fewer items"
        )
    problem = layer_problem(h, normalize=normalize)
    if problem:  # NaN rows or an overflowing norm would score as chance
        raise FeaturesError(f"features unfit to score: {problem}; {REMEDY}")
    h = h.to(device)
    if normalize:
        h = F.normalize(h, dim=1)
    built: dict = {}  # state builder ("module:function") -> the state it built
    for source in SOURCES:
        builders = {e.state: e for e in entries if e.source == source}  # one entry per builder, in order
        if not builders:
            continue
        value = _source(source, h, topk=topk, block_rows=block_rows, knn_precision=knn_precision)
        for i, (target, e) in enumerate(builders.items()):
            # a product builder may overwrite its input (ucentered_from_product): the last one gets the original
            given = value.clone() if source == "product" and i < len(builders) - 1 else value
            try:
                built[target] = STATE[e.name](given, **settings_of(e.name, topk=topk, cca_dim=cca_dim))
            except torch.linalg.LinAlgError as err:
                raise FeaturesError(f"{e.name}: a decomposition of the features failed "
                                    f"({' '.join(str(err).split())[:200]}); {REMEDY}") from None
    return {e.name: built[e.state] for e in entries}


def stack_states(metric: str, per_layer: list):
    """Layer-stack a list of ``layer_state`` results (dim 0 = layer), as ``layer_states`` returns them
    (a dict state key by key); ``metric`` names what they are."""
    if isinstance(per_layer[0], dict):
        return {key: torch.stack([s[key] for s in per_layer]) for key in per_layer[0]}
    return torch.stack(per_layer)


def cat_states(metric: str, states: list):
    """Concatenate layer-stacked states along the layer axis (several models' or permutations' layers as one stack)."""
    if isinstance(states[0], dict):
        return {key: torch.cat([s[key] for s in states]) for key in states[0]}
    return torch.cat(states)


def join_states(metrics, parts: list[dict], *, stack: bool) -> dict:
    """``{metric: the metric's states of parts}`` (dicts metric -> state, one per layer or per model), stacked on a
    new layer axis (``stack_states``) or concatenated along it (``cat_states``). As in ``layer_state_set``, metrics
    naming one state builder share one joined tensor, and with one (the k-NN lists) a neighbour metric's dict state
    holds it as its "idx": its lists, from the same search."""
    join = stack_states if stack else cat_states
    joined: dict = {}
    out = {}
    for metric in metrics:
        target = metric_entry(metric).state
        if target not in joined:
            joined[target] = join(metric, [p[metric] for p in parts])
        out[metric] = joined[target]
    neighbours = [m for m in metrics if metric_entry(m).source == "neighbours"]
    lists = next((out[m] for m in neighbours if not isinstance(out[m], dict)), None)
    for m in neighbours:
        if lists is not None and isinstance(out[m], dict):
            out[m]["idx"] = lists  # the same lists (one neighbour search): one tensor
    return out


def layer_tensor(state) -> torch.Tensor:
    """A layer-stacked state's L × N × ... tensor: the state, or a dict state's first entry."""
    return next(iter(state.values())) if isinstance(state, dict) else state


def _lists(state) -> torch.Tensor:
    """The neighbour lists of a neighbour metric's state (a dict state's "idx")."""
    return state["idx"] if isinstance(state, dict) else state


def layer_slice(state, sl: slice):
    """Layers ``sl`` of a layer-stacked state (views, no copy)."""
    return {key: value[sl] for key, value in state.items()} if isinstance(state, dict) else state[sl]


def pair_scores(metric: str, state_a, state_b) -> torch.Tensor:
    """La × Lb matrix (float64) of ``metric`` between every layer of A and every layer of B."""
    return pair_score_set([metric], {metric: state_a}, {metric: state_b})[metric]


def pair_score_set(metrics, states_a: dict, states_b: dict) -> dict:
    """``{metric: pair_scores(metric, states_a[metric], states_b[metric])}``. The neighbour metrics of the set
    (source "neighbours": the k-NN metrics and cknna) share, per A layer, one position table
    (``knn.position_table``) and, per block of B layers, one neighbour-position lookup (``knn.neighbour_positions``);
    the others score their states in one call each."""
    entries = [metric_entry(metric) for metric in metrics]
    neighbours = [e.name for e in entries if e.source == "neighbours"]
    out = _neighbour_pass(neighbours, states_a, states_b) if neighbours else {}
    for e in entries:
        if e.source != "neighbours":
            out[e.name] = SCORE[e.name](states_a[e.name], states_b[e.name])
    return {m: out[m] for m in metrics}


def _neighbour_pass(metrics: list, states_a: dict, states_b: dict) -> dict:
    """The La × Lb scores of the neighbour metrics ``metrics``: per A layer one position table, per block of B
    layers one neighbour-position lookup, which every group of metrics (those naming one scorer) reads when its
    lists are the first metric's (checked once per call, not per layer), else it finds its own."""
    groups: dict = {}
    for m in metrics:
        groups.setdefault(metric_entry(m).score, []).append(m)
    idx_a, idx_b = _lists(states_a[metrics[0]]), _lists(states_b[metrics[0]])
    lb, n, k = idx_b.shape
    shared = {}
    for score, group in groups.items():
        own_a, own_b = _lists(states_a[group[0]]), _lists(states_b[group[0]])
        same_a = own_a is idx_a or torch.equal(own_a, idx_a)
        shared[score] = same_a, same_a and (own_b is idx_b or torch.equal(own_b, idx_b))
    rows: dict = {m: [] for m in metrics}
    for layer in range(idx_a.shape[0]):
        table = knn_lib.position_table(idx_a[layer])
        extra, positions = knn_lib.pass_plan(metrics, k, table)
        parts: dict = {m: [] for m in metrics}
        for sl in knn_lib.b_blocks(lb, n, k, extra):
            pos = knn_lib.neighbour_positions(idx_a[layer], idx_b[sl], table) if positions else None
            for score, group in groups.items():
                same_a, same_b = shared[score]
                got = SCORE[group[0]](group, states_a[group[0]], layer_slice(states_b[group[0]], sl), layer=layer,
                                      table=table if same_a else False, pos=pos if same_b else None)
                for m in group:
                    parts[m].append(got[m])
        for m in metrics:
            rows[m].append(torch.cat(parts[m]))
    return {m: torch.stack(r) for m, r in rows.items()}


def permute_state(metric: str, state, perm: torch.Tensor):
    """State of the features ``X[perm]`` (items re-indexed), without recomputing anything: each tensor
    re-indexed as the metric's entry says (``names.PERMUTATIONS``).

    Neighbour lists map through the inverse permutation: S'(i) = π⁻¹(S(π(i))).
    """
    how = metric_entry(metric).permute
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    if isinstance(state, dict):
        kinds = dict(how)
        return {key: PERMUTE[kinds[key]](value, perm, inv) for key, value in state.items()}
    return PERMUTE[how](state, perm, inv)


def measure(metric: str, feats_a, feats_b, *, topk: int = 10, cca_dim: int = 10, dtype=torch.float32, device="cpu") -> float:
    """Alignment of two N × D feature sets (rows are paired items), as in PRH appendix B.

    Features are used as given (normalise them first, or use ``layer_pair_scores``).

    Parameters
    ----------
    metric : one of SUPPORTED_METRICS
    feats_a, feats_b : tensor or array N × D and N × D'
    topk : int
        k of the k-NN metrics and cknna.
    cca_dim : int
        Number of singular directions kept by svcca.

    Returns
    -------
    float
    """
    check_metric(metric)
    a = as_tensor(feats_a, ndim=2, name="feats_a", dtype=dtype, device=device)
    b = as_tensor(feats_b, ndim=2, name="feats_b", dtype=dtype, device=device)
    if a.shape[0] != b.shape[0]:
        raise ValueError(f"feats_a and feats_b must have the same items N, got {a.shape[0]} and {b.shape[0]}")
    kw = dict(topk=topk, cca_dim=cca_dim, normalize=False, dtype=dtype, device=device)
    return float(pair_scores(metric, layer_states(metric, a[:, None], **kw), layer_states(metric, b[:, None], **kw))[0, 0])
