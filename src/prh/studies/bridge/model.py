"""A language model's transformer blocks behind a new patch embedding (seed 001, Fig 6, stage 1).

The paper feeds images to GPT-2 by replacing its token embedding with a patch embedding
and training on (partly random) image labels. Here the backbone is any Hugging Face
transformer whose blocks take and return B x T x D hidden states (BERT-style
``encoder.layer``, GPT-2-style ``h`` + ``ln_f``):

    x (B x 3 x H x W) -> patches P (B x T x 3p²) -> E = LN([cls; P W_e + b] + pos)   (new, trainable)
    h_0 = E,  h_l = block_l(h_{l-1})                                                (language blocks)
    logits = head(mean_t norm(h_L))                                                 (new, trainable)

``build_model(init=...)`` gives three backbones of the same architecture: ``pretrained``
(the checkpoint), ``scratch`` (``AutoModel.from_config``: the architecture's own random
init) and ``shuffled`` (each tensor of the checkpoint's blocks with its entries permuted:
same weight statistics, no learned structure). ``set_bridge(model, blocks=k)`` trains the
patch embedding, the first k blocks and the head, and freezes the rest (k = 0: only the
embedding and head learn; the seed's partial bridge training, Figs 8/13).

The patch projection W_e starts isotropic (i.i.d. N(0, 0.02²)), the assumption of the
appendix-A argument (``covariance``).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["PatchEmbedding", "BridgeModel", "load_backbone", "build_model", "set_bridge", "INITS"]

INITS = ("pretrained", "scratch", "shuffled")
INIT_STD = 0.02  # BERT's and GPT-2's initializer_range


class PatchEmbedding(nn.Module):
    """Non-overlapping p x p patches -> linear projection, a class token, learned positions, LayerNorm."""

    def __init__(self, *, image_size: int, patch_size: int, width: int, channels: int = 3):
        super().__init__()
        if patch_size < 1 or image_size % patch_size:
            raise ValueError(f"patch_size={patch_size} must divide image_size={image_size}")
        self.patch_size = patch_size
        n_tokens = (image_size // patch_size) ** 2 + 1
        self.proj = nn.Linear(channels * patch_size**2, width)
        nn.init.normal_(self.proj.weight, std=INIT_STD)
        nn.init.zeros_(self.proj.bias)
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.pos = nn.Parameter(torch.randn(1, n_tokens, width) * INIT_STD)
        self.norm = nn.LayerNorm(width)

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        """B x C x H x W -> B x T x (C p²), patches in row-major order."""
        b, c, _, _ = x.shape
        p = self.patch_size
        x = x.unfold(2, p, p).unfold(3, p, p)  # B, C, H/p, W/p, p, p
        return x.permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.proj(self.patches(x))
        t = torch.cat([self.cls.expand(len(t), -1, -1), t], dim=1) + self.pos
        return self.norm(t)


class BridgeModel(nn.Module):
    """Patch embedding -> language blocks -> final norm -> mean over tokens -> linear head."""

    def __init__(self, embed: PatchEmbedding, blocks: nn.ModuleList, final_norm: nn.Module, num_classes: int):
        super().__init__()
        self.embed, self.blocks, self.final_norm = embed, blocks, final_norm
        self.head = nn.Linear(embed.proj.out_features, num_classes)

    def forward(self, x: torch.Tensor, *, return_layers: bool = False):
        h = self.embed(x)
        pooled = [h.mean(1)]
        for block in self.blocks:
            out = block(h)
            h = out[0] if isinstance(out, tuple) else out
            pooled.append(h.mean(1))
        pooled[-1] = self.final_norm(h).mean(1)
        logits = self.head(pooled[-1])
        return (logits, torch.stack(pooled, dim=1)) if return_layers else logits


def _parts(model: nn.Module) -> tuple[nn.ModuleList, nn.Module]:
    """(blocks, final norm) of a Hugging Face base or LM-head model."""
    base = getattr(model, "transformer", None) or getattr(model, "model", None) or model
    if hasattr(base, "encoder") and hasattr(base.encoder, "layer"):  # BERT family (MiniLM)
        return base.encoder.layer, nn.Identity()
    if hasattr(base, "h"):  # GPT-2 family
        return base.h, getattr(base, "ln_f", None) or nn.Identity()
    if hasattr(base, "layers"):  # LLaMA family
        return base.layers, getattr(base, "norm", None) or nn.Identity()
    raise ValueError(f"{type(model).__name__}: no transformer blocks found (encoder.layer, h or layers); "
                     "use a BERT-, GPT-2- or LLaMA-style checkpoint")


def load_backbone(source: str = "minilm", *, revision: str | None = None, init: str = "pretrained",
                  seed: int = 0) -> tuple[nn.ModuleList, nn.Module, int]:
    """(blocks, final norm, width) of ``source`` with weights per ``init`` (module docstring).

    ``source``: ``minilm`` (the packaged all-MiniLM-L6-v2, SHA-256 checked), a
    ``save_pretrained`` directory or a hub repo id (``gpt2``), loaded by
    ``prh.models.loaders.load_language_model`` at ``revision``.
    """
    if init not in INITS:
        raise ValueError(f"init={init!r} must be one of {INITS}")
    from prh.models.loaders import load_language_model

    if source == "minilm":
        from prh.models.minilm import minilm_dir

        source, revision = str(minilm_dir()), None
    model, _ = load_language_model(source, revision)
    if init == "scratch":
        from transformers import AutoModel

        torch.manual_seed(seed)
        model = AutoModel.from_config(model.config)
    blocks, norm = _parts(model)
    if init == "shuffled":
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in list(blocks.parameters()) + list(norm.parameters()):
                flat = p.reshape(-1)
                flat.copy_(flat[torch.randperm(flat.numel(), generator=gen)])
    width = int(getattr(model.config, "hidden_size", None) or model.config.n_embd)
    return blocks, norm, width


def build_model(*, source: str = "minilm", revision: str | None = None, init: str = "pretrained",
                image_size: int = 64, patch_size: int = 16, num_classes: int = 10, seed: int = 0) -> BridgeModel:
    """A ``BridgeModel``: new patch embedding and head (seeded) on ``source``'s blocks (``init``)."""
    if num_classes < 2:
        raise ValueError(f"num_classes={num_classes} must be at least 2")
    blocks, norm, width = load_backbone(source, revision=revision, init=init, seed=seed)
    torch.manual_seed(seed)
    embed = PatchEmbedding(image_size=image_size, patch_size=patch_size, width=width)
    model = BridgeModel(embed, blocks, norm, num_classes)
    return model.float().train()


def set_bridge(model: BridgeModel, *, blocks: int | str = "all") -> list[str]:
    """Make the patch embedding, the first ``blocks`` blocks and the head trainable, freeze the rest.

    ``blocks="all"`` trains every block and the final norm. Returns the trainable parameter names.
    """
    n = len(model.blocks)
    k = n if blocks == "all" else blocks
    if not isinstance(k, int) or not 0 <= k <= n:
        raise ValueError(f"blocks={blocks!r} must be 'all' or an int in 0..{n}")
    for p in model.parameters():
        p.requires_grad_(False)
    trainable = [model.embed, model.head, *model.blocks[:k]] + ([model.final_norm] if k == n else [])
    for module in trainable:
        for p in module.parameters():
            p.requires_grad_(True)
    return [name for name, p in model.named_parameters() if p.requires_grad]
