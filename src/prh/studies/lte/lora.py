"""LoRA layers for LTE (thesis section 4.1.2, eqs. 4.1-4.2; appendix 8.2, 8.4).

A ``LoRALinear`` wraps a linear layer's weight W (m x n, a frozen buffer, shared by
every head replica on a rank) and holds ``heads`` pairs B_k (m x r), A_k (r x n):

    f(x) = W x + (s / heads) sum_k B_k A_k x - s V x + b,      s = alpha / r

With one head this is LoRA (eq. 4.1); with N heads it is multi-head LoRA (eq. 4.2).
V is the correction term of appendix 8.2 (the head's own B A at the last merge;
zero unless the merge keeps B). B starts at 0, so a fresh head is the base layer.
A starts semi-orthogonal (Bernstein et al. 2023, the best init of Fig 8.2a) or, as in
appendix 8.3, uniform with bound 1 / sqrt(fan-out).
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["LoRALinear", "init_a", "inject_lora", "lora_layers", "small_parameters"]

INITS = ("orthogonal", "uniform")


def init_a(rank: int, fan_in: int, *, gen: torch.Generator, init: str = "orthogonal",
           dtype=torch.float32) -> torch.Tensor:
    """A fresh A (rank x fan_in): semi-orthogonal rows (``orthogonal``) or U(-1/sqrt(rank), 1/sqrt(rank))."""
    if init not in INITS:
        raise ValueError(f"init={init!r} is unknown; choose one of: {', '.join(INITS)}")
    g = torch.randn(max(rank, fan_in), min(rank, fan_in), generator=gen, dtype=torch.float64)
    if init == "uniform":
        a = (torch.rand(rank, fan_in, generator=gen, dtype=torch.float64) * 2 - 1) / math.sqrt(rank)
    else:
        q, r = torch.linalg.qr(g)
        q = q * torch.sign(torch.diagonal(r))  # a unique Q: Haar-distributed
        a = q.T if rank <= fan_in else q
    return a.to(dtype).contiguous()


class LoRALinear(nn.Module):
    """A linear layer W x + (s / heads) sum_k B_k A_k x - s V x + b (module docstring)."""

    def __init__(self, base: nn.Linear, *, rank: int, alpha: float, heads: int = 1):
        super().__init__()
        if rank < 1 or heads < 1:
            raise ValueError(f"rank={rank} and heads={heads} must be >= 1")
        m, n = base.weight.shape
        self.rank, self.heads, self.scale = rank, heads, alpha / rank
        self.register_buffer("weight", base.weight.detach().clone())
        self.bias = None if base.bias is None else nn.Parameter(base.bias.detach().clone())
        dt = base.weight.dtype
        self.A = nn.ParameterList([nn.Parameter(torch.zeros(rank, n, dtype=dt)) for _ in range(heads)])
        self.B = nn.ParameterList([nn.Parameter(torch.zeros(m, rank, dtype=dt)) for _ in range(heads)])
        self.V: torch.Tensor | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape)

    def delta(self) -> torch.Tensor:
        """The layer's LoRA contribution (s / heads) sum_k B_k A_k - s V (an m x n matrix)."""
        d = torch.cat(list(self.B), 1) @ torch.cat(list(self.A), 0) * (self.scale / self.heads)
        return d if self.V is None else d - self.scale * self.V

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = nn.functional.linear(x, self.weight, self.bias)
        for a, b in zip(self.A, self.B):
            out = out + (x @ a.T) @ b.T * (self.scale / self.heads)
        if self.V is not None:
            out = out - self.scale * (x @ self.V.T)
        return out


def inject_lora(model: nn.Module, *, rank: int, alpha: float, heads: int = 1,
                skip: tuple[str, ...] = ()) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (in place) by a ``LoRALinear``, except names containing ``skip``."""
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and not any(s in full for s in skip):
                setattr(module, child_name, LoRALinear(child, rank=rank, alpha=alpha, heads=heads))
    if not lora_layers(model):
        raise ValueError("model has no nn.Linear layer to parameterise with LoRA")
    return model


def lora_layers(model: nn.Module) -> list[LoRALinear]:
    """The model's LoRA layers in module order (the order every rank packs and merges them)."""
    return [m for m in model.modules() if isinstance(m, LoRALinear)]


def small_parameters(model: nn.Module) -> list[nn.Parameter]:
    """Trainable parameters outside LoRA (embeddings, norms, biases, task heads), in module order."""
    lora_ids = {id(p) for layer in lora_layers(model) for p in (*layer.A, *layer.B)}
    return [p for p in model.parameters() if id(p) not in lora_ids and p.requires_grad]
