"""Fig 8.1: least squares with LoRA, with and without merges (thesis appendix 8.3, section 4.3.1).

A linear model W (m = n = 32, W_0 = 0) parameterised with rank-4 LoRA heads learns
y = W* x, x ~ N(0, I), W* of rank 8 or 32, scaled so that ||W*||_F^2 = m. The loss is
the population loss

    L(W) = E ||(W - W*) x||^2 / m = ||W - W*||_F^2 / m        (L(0) = 1),

computed exactly; heads train on minibatches. Without merges the model is W_0 + s B A,
of rank <= r, so L >= sum_{i > r} sigma_i(W*)^2 / m (Eckart-Young), the rank-r SVD bound.
With merges every T steps (T in {1, 5, 20, 100}; T = None is no merge) the updates
accumulate into a full-rank W. As in appendix 8.3, A is redrawn at every merge (uniform,
``merge='reset_ab'``); optimiser SGD.
"""

from __future__ import annotations

import torch
from torch import nn

from prh.config import schema_defaults
from prh.studies.lte.engine import key, train_lte

__all__ = ["DEFAULTS", "make_target", "run_least_squares", "steps_to", "svd_bound"]

DEFAULTS = schema_defaults("lte")["least_squares"]  # workflow/schemas/lte.schema.yaml


def make_target(*, dim: int, rank: int, seed: int) -> torch.Tensor:
    """A random dim x dim matrix of rank ``rank`` (Gaussian factors) with ||W*||_F^2 = dim."""
    if not 1 <= rank <= dim:
        raise ValueError(f"rank={rank} must be between 1 and dim={dim}")
    gen = torch.Generator().manual_seed(key(seed, 3, rank))
    w = torch.randn(dim, rank, generator=gen) @ torch.randn(rank, dim, generator=gen)
    return w * (dim ** 0.5 / w.norm())


def svd_bound(target: torch.Tensor, rank: int) -> float:
    """min over rank-``rank`` W of ||W - W*||_F^2 / m: the energy beyond the top ``rank`` singular values."""
    s = torch.linalg.svdvals(target.double())
    return float((s[rank:] ** 2).sum() / target.shape[0])


def steps_to(history: list[dict], threshold: float) -> int | None:
    """The first recorded step whose loss is below ``threshold`` (None if never)."""
    return next((h["step"] for h in history if h["loss"] < threshold), None)


def run_least_squares(*, seed: int = 0, **config) -> dict:
    """Every (target rank, heads, T) run of Fig 8.1; config keys as ``DEFAULTS``."""
    unknown = set(config) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"least_squares config: unknown key(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    c = {**DEFAULTS, **config}
    dim, runs = c["dim"], []
    for target_rank in c["target_ranks"]:
        target = make_target(dim=dim, rank=target_rank, seed=seed)
        bound = svd_bound(target, c["lora_rank"])

        def sample(gen, n):
            return (torch.randn(n, dim, generator=gen),)

        def loss_fn(model, batch, target=target):
            x = batch[0]
            return ((model(x) - x @ target.T) ** 2).sum(1).mean() / dim

        def evaluate(model, target=target):
            w = next(m for m in model.modules() if hasattr(m, "weight")).weight
            return {"loss": float(((w - target) ** 2).sum() / dim)}

        for heads in c["heads"]:
            for t in c["merge_every"]:
                base = nn.Linear(dim, dim, bias=False)
                nn.init.zeros_(base.weight)
                out = train_lte(model=nn.Sequential(base), sample=sample, loss_fn=loss_fn, heads=heads, rank=c["lora_rank"],
                                alpha=c["alpha"], steps=c["steps"], merge_every=t, lr=c["lr"], optimizer="sgd",
                                merge=c["merge"], init=c["init"], seed=seed, eval_every=c["eval_every"],
                                evaluate=evaluate, batch_size=c["batch_size"])
                hist = out["history"]
                runs.append({"target_rank": target_rank, "heads": heads, "merge_every": t, "svd_bound": bound,
                             "steps": [h["step"] for h in hist], "loss": [h["loss"] for h in hist],
                             "final_loss": hist[-1]["loss"] if hist else None,
                             "min_loss": min(h["loss"] for h in hist) if hist else None,
                             "steps_to_threshold": steps_to(hist, c["threshold"]), "merges": out["merges"],
                             "update_erank": hist[-1]["update_erank"] if hist else None,
                             "bytes_per_merge": out["bytes_per_merge"]})
    return {"config": c, "seed": seed, "runs": runs}
