"""The eight PRH alignment metrics as (per-layer state, per-pair score), and ``measure``.

A metric here is three functions:

* ``layer_states``: everything that depends on one model alone, for every
  layer at once (neighbour lists, centred Grams, singular vectors);
* ``pair_scores``: the La × Lb score matrix from two models' states;
* ``permute_state``: the state of the same features with items re-indexed, the
  cheap way to draw from a permutation null (``calibration.py``).

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

from prh.metrics import kernel
from prh.metrics import knn as knn_lib

__all__ = [
    "SUPPORTED_METRICS",
    "KNN_METRICS",
    "as_tensor",
    "prepare_features",
    "layer_states",
    "pair_scores",
    "permute_state",
    "measure",
]

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
KNN_METRICS = {
    "mutual_knn": knn_lib.mutual_knn_scores,
    "cycle_knn": knn_lib.cycle_knn_scores,
    "lcs_knn": knn_lib.lcs_knn_scores,
    "edit_distance_knn": knn_lib.edit_distance_knn_scores,
}
GRAM_METRICS = {"cka": kernel.centered_gram, "unbiased_cka": kernel.ucentered_gram}
# Above this many items an N × N Gram per layer no longer fits comfortably (1 GiB in float32).
MAX_GRAM_ITEMS = 16384


def check_metric(metric: str) -> None:
    if metric not in SUPPORTED_METRICS:
        raise ValueError(f"metric must be one of {SUPPORTED_METRICS}, got {metric!r}")


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
    if layer_dims is not None:
        if len(layer_dims) != t.shape[1] or max(layer_dims) > t.shape[2]:
            raise ValueError(f"layer_dims {list(layer_dims)} does not fit features of shape {tuple(t.shape)}")
        flat = torch.cat([t[:, i, :d].abs().reshape(-1) for i, d in enumerate(layer_dims)])
    else:
        flat = t.abs().reshape(-1)
    pos = q * (flat.numel() - 1)
    lo = int(np.floor(pos))
    # kthvalue is a selection, O(n): torch.quantile refuses tensors over 2^24 elements.
    v_lo = torch.kthvalue(flat, lo + 1).values.double()
    v_hi = torch.kthvalue(flat, min(lo + 2, flat.numel())).values.double() if pos > lo else v_lo
    c = float(v_lo + (pos - lo) * (v_hi - v_lo))
    return t.clamp(-c, c)


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
    k-NN metrics: L × N × k neighbour indices; cka/unbiased_cka: L × N × N unit
    Grams; cknna: dict of L-stacked tensors; svcca: L × N × cca_dim.
    """
    check_metric(metric)
    x = as_tensor(feats, ndim=3, name="feats", dtype=dtype, device="cpu")
    n, n_layers, _ = x.shape
    if metric in GRAM_METRICS and n > MAX_GRAM_ITEMS:
        raise ValueError(
            f"{metric} needs an N x N Gram per layer and N={n} > {MAX_GRAM_ITEMS}; "
            "use a k-NN metric (mutual_knn, cknna) or fewer items"
        )
    per_layer = []
    for layer in tqdm(range(n_layers), desc=f"{metric} states", disable=not progress, leave=False):
        h = x[:, layer, :].to(device)
        if normalize:
            h = F.normalize(h, dim=1)
        if metric in KNN_METRICS:
            per_layer.append(knn_lib.knn(h, topk, block_rows=block_rows)[0])
        elif metric in GRAM_METRICS:
            per_layer.append(GRAM_METRICS[metric](h))
        elif metric == "cknna":
            per_layer.append(kernel.cknna_state(h, topk, block_rows=block_rows))
        else:
            per_layer.append(kernel.svcca_state(h, cca_dim))
    if metric == "cknna":
        return {key: torch.stack([s[key] for s in per_layer]) for key in per_layer[0]}
    return torch.stack(per_layer)


def pair_scores(metric: str, state_a, state_b) -> torch.Tensor:
    """La × Lb matrix (float64) of ``metric`` between every layer of A and every layer of B."""
    check_metric(metric)
    if metric in GRAM_METRICS:
        return kernel.gram_scores(state_a, state_b)
    if metric == "svcca":
        return kernel.svcca_scores(state_a, state_b)
    if metric == "cknna":
        rows = [kernel.cknna_scores(state_a, state_b, layer=a) for a in range(state_a["idx"].shape[0])]
    else:
        rows = [KNN_METRICS[metric](idx_a, state_b) for idx_a in state_a]
    return torch.stack(rows)


def permute_state(metric: str, state, perm: torch.Tensor):
    """State of the features ``X[perm]`` (items re-indexed), without recomputing anything.

    Neighbour lists map through the inverse permutation: S'(i) = π⁻¹(S(π(i))).
    """
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), device=perm.device)
    if metric in KNN_METRICS:
        return inv[state[:, perm]]
    if metric in GRAM_METRICS:
        return state[:, perm][:, :, perm]
    if metric == "svcca":
        return state[:, perm]
    return {
        "idx": inv[state["idx"][:, perm]],
        "vals": state["vals"][:, perm],
        "back": state["back"][:, perm],
        "self": state["self"],
    }


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
