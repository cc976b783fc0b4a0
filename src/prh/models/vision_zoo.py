"""The offline vision zoo's architectures: small timm models, named by ``arch``.

PRH section 2 compares many vision models that differ in architecture, objective,
size and training budget. The offline suite builds such a population on a CPU: every
architecture here is a timm model class with a small config, so a zoo checkpoint is
``timm.create_model(timm_name, pretrained=False, **timm_kwargs)`` plus a state dict,
and one extraction path (timm ``forward_intermediates``) serves zoo and hub models
alike.

Families (all take 64 x 64 RGB input):

- ``resnet_*``: ResNet with basic blocks (He et al. 2016), deep 3x3 stem, 4 stages.
- ``convnext_*``: ConvNeXt (Liu et al. 2022), a modern depthwise CNN, 4 stages.
- ``densenet_*``: DenseNet (Huang et al. 2017), concatenating CNN, 4 dense blocks.
  timm has no JSON-configurable plain (VGG-style) CNN: ``vgg*`` fixes its layer list
  and a 4096-wide head, so DenseNet stands in as the CNN without residual sums.
- ``vit_*``: VisionTransformer (Dosovitskiy et al. 2021), patch 8 (an 8 x 8 grid
  of tokens) and a class token. The timm name ``vit_tiny_patch16_224`` is only the
  registered constructor; ``timm_kwargs`` override its patch size, width and depth.

``num_classes=0`` everywhere: the model's output is its pooled feature (the class
token for ViTs, global average pool for CNNs); task heads live in the trainer.

    >>> from prh.models.vision_zoo import build_model, save_checkpoint
    >>> model, config = build_model(arch="resnet_xs", seed=0)
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch

from prh.io import atomic_path, load_model_weights, read_model_config, write_json

__all__ = ["ARCHS", "IMAGE_SIZE", "MEAN", "STD", "build_model", "save_checkpoint", "load_checkpoint"]

IMAGE_SIZE = 64
# Fixed, data-independent normalisation: uint8 / 255 mapped to about [-2, 2].
MEAN = [0.5, 0.5, 0.5]
STD = [0.25, 0.25, 0.25]

# arch -> timm constructor, its kwargs (JSON only) and the pooling the extractor uses.
ARCHS: dict[str, dict] = {
    "resnet_xs": {
        "timm_name": "resnet18",
        "timm_kwargs": {"layers": [1, 1, 1, 1], "channels": [16, 32, 64, 128], "stem_type": "deep", "stem_width": 8},
        "pooling": "avg",
    },
    "resnet_s": {
        "timm_name": "resnet18",
        "timm_kwargs": {"layers": [2, 2, 2, 2], "channels": [24, 48, 96, 192], "stem_type": "deep", "stem_width": 12},
        "pooling": "avg",
    },
    "convnext_xs": {
        "timm_name": "convnext_atto",
        # patch 2 (not 4) keeps a 2 x 2 map after four stages on 64 x 64 input;
        # layer scale starts at 0.1, not 1e-6, so blocks matter within a short budget.
        "timm_kwargs": {"depths": [1, 1, 2, 1], "dims": [16, 32, 64, 128], "patch_size": 2,
                        "conv_mlp": True, "ls_init_value": 0.1},
        "pooling": "avg",
    },
    "densenet_xs": {
        "timm_name": "densenet121",
        "timm_kwargs": {"growth_rate": 12, "block_config": [2, 2, 2, 2]},
        "pooling": "avg",
    },
    "vit_xs": {
        "timm_name": "vit_tiny_patch16_224",
        "timm_kwargs": {"img_size": 64, "patch_size": 8, "embed_dim": 64, "depth": 4, "num_heads": 2},
        "pooling": "cls",
    },
    "vit_s": {
        "timm_name": "vit_tiny_patch16_224",
        "timm_kwargs": {"img_size": 64, "patch_size": 8, "embed_dim": 96, "depth": 6, "num_heads": 3},
        "pooling": "cls",
    },
}


def arch_spec(arch: str) -> dict:
    """The registry entry of ``arch`` (a deep copy), with ``num_classes=0`` added to its kwargs."""
    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r} is not in the vision zoo; choose one of: {', '.join(ARCHS)}")
    spec = copy.deepcopy(ARCHS[arch])
    spec["timm_kwargs"]["num_classes"] = 0
    return spec


def build_model(*, arch: str, seed: int = 0) -> tuple[torch.nn.Module, dict]:
    """Create an untrained zoo model, its weights drawn from ``seed``.

    Parameters
    ----------
    arch : a key of ``ARCHS``.
    seed : seeds torch's global generator before timm draws the initial weights.

    Returns
    -------
    (model, config) : the timm model (train mode) and the checkpoint's ``config.json``
        content: ``timm_name``, ``timm_kwargs``, ``input_size``, ``mean``, ``std``,
        ``pooling``, ``arch``, ``feature_dim``, ``n_params``.
    """
    import timm

    spec = arch_spec(arch)
    torch.manual_seed(seed)
    model = timm.create_model(spec["timm_name"], pretrained=False, **spec["timm_kwargs"])
    config = {
        "timm_name": spec["timm_name"],
        "timm_kwargs": spec["timm_kwargs"],
        "input_size": [3, IMAGE_SIZE, IMAGE_SIZE],
        "mean": list(MEAN),
        "std": list(STD),
        "interpolation": "bilinear",
        "crop_pct": 1.0,
        "pooling": spec["pooling"],
        "arch": arch,
        "feature_dim": int(model.num_features),
        "n_params": int(sum(p.numel() for p in model.parameters())),
    }
    return model, config


def save_checkpoint(out_dir: str | os.PathLike, *, model: torch.nn.Module, config: dict) -> Path:
    """Write ``config.json`` and ``model.safetensors`` (the backbone only) into ``out_dir``.

    The weights are written first and the config last, so a directory whose
    ``config.json`` exists holds complete weights.
    """
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    with atomic_path(out_dir / "model.safetensors") as tmp:
        save_file(state, str(tmp))
    write_json(out_dir / "config.json", config)
    return out_dir


def load_checkpoint(path: str | os.PathLike) -> tuple[torch.nn.Module, dict]:
    """Load a zoo checkpoint directory as the contract says: ``create_model`` + ``load_state_dict``.

    ``prh.models.loaders.load_vision_model`` is the loader the workflow uses; this one
    returns the full config (training info included) for tests and inspection.
    """
    import timm

    path = Path(path)
    if not (path / "config.json").exists():
        raise ValueError(f"path={str(path)!r} has no config.json; give a directory written by save_checkpoint")
    config = read_model_config(path / "config.json")
    model = timm.create_model(config["timm_name"], pretrained=False, **config["timm_kwargs"])
    model.load_state_dict(load_model_weights(path / "model.safetensors"))
    return model.eval(), config
