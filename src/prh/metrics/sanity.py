"""Features fit to be scored: a diverged model must fail loudly, not score as chance.

NaN or inf rows (a diverged model, a failed extraction), a model whose every layer is one constant vector (the
neighbour search would rank ties, CKA divide by zero) and values whose L2 norm overflows the working dtype
(normalisation then gives zero vectors) are refused, at extraction (``prh.extract``) and at alignment
(``prh.metrics.files``, ``registry.layer_state_set``), with one ``FeaturesError`` naming the file, the model, the
layer and the rows.
"""

from __future__ import annotations

import torch

from prh.errors import FeaturesError

__all__ = ["layer_problem", "constant_layer", "check_features", "rows_text", "REMEDY"]

REMEDY = ("the model diverged or its extraction failed: extract it again (`snakemake --forcerun <rule> <file>`), or "
          "take the model out of its model set")


def rows_text(rows: torch.Tensor, n: int, shown: int = 5) -> str:
    """``3 of 100 rows (4, 17, 90)``, the first ``shown`` row numbers of a boolean mask or an index list."""
    idx = torch.nonzero(rows).flatten().tolist() if rows.dtype == torch.bool else list(rows)
    listed = ", ".join(map(str, idx[:shown])) + (", ..." if len(idx) > shown else "")
    return f"{len(idx)} of {n} rows ({listed})"


def layer_problem(h: torch.Tensor, *, normalize: bool = True) -> str | None:
    """What makes one N × D layer unfit to score (NaN or inf rows; with ``normalize``, norms that overflow), or None."""
    finite = torch.isfinite(h).all(dim=1)
    if not bool(finite.all()):
        return f"NaN or inf in {rows_text(~finite, len(h))}"
    if normalize and h.is_floating_point():
        norms = torch.linalg.vector_norm(h, dim=1)
        if not bool(torch.isfinite(norms).all()):
            return (f"values up to {float(h.abs().max()):.3g} overflow the L2 normalisation in "
                    f"{str(h.dtype).removeprefix('torch.')} in {rows_text(~torch.isfinite(norms), len(h))}")
    return None


def constant_layer(h: torch.Tensor) -> bool:
    """Every row of the N × D layer is the same vector."""
    return len(h) > 1 and bool((h == h[:1]).all())


def check_features(feats: torch.Tensor, *, where: str, layer_dims=None) -> None:
    """Raise ``FeaturesError`` naming ``where`` (file and model) when an N × L × D tensor is unfit to score: a layer
    with NaN or inf rows, or every layer constant. (Overflow depends on the working dtype: alignment checks it.)"""
    dims = layer_dims or [feats.shape[2]] * feats.shape[1]
    constant = 0
    for layer, d in enumerate(dims):
        h = feats[:, layer, :d]
        problem = layer_problem(h, normalize=False)
        if problem:
            raise FeaturesError(f"{where}, layer {layer}: {problem}; {REMEDY}")
        constant += constant_layer(h)
    if dims and constant == len(dims):
        raise FeaturesError(f"{where}: every layer is one constant vector for all {feats.shape[0]} items (the model "
                            f"carries no information: it would score as chance); {REMEDY}")
