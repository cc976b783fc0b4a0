"""The small AlexNet of the alignment-and-uniformity encoders Baradad et al. (2021) published.

``learning_with_noise``'s small-scale encoders (``encoder.pth``, 14 of them; align_uniform/encoder.py there) are not
ResNet-18s: they are a 5-convolution, 3-linear AlexNet for 64 x 64 crops, saved as a bare ``state_dict`` whose keys
are ``blocks.<i>.<j>.*``. This module rebuilds that layout (same module tree, so the same keys) without the last
block, the 128-d L2-normalised projection head (``blocks.7``), which the checkpoint's layout drops as MoCo's is
dropped from a ResNet: the representation is the encoder up to before its embedding layer.

It offers what ``prh.features.pool_blocks`` reads of a timm CNN: ``forward_intermediates(x, indices,
intermediates_only=True)``, one N x C x H x W map per block (the linear blocks as N x D x 1 x 1).
``widths`` and ``hidden`` shrink it for the stand-in hub; the real encoder uses the defaults.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["SmallAlexNet", "INPUT_SIDE"]

INPUT_SIDE = 64  # the encoders were trained and probed on 64 x 64 crops (Resize(70), CenterCrop(64) at eval)


def _conv(cin: int, cout: int, pool: bool) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, kernel_size=3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers, *([nn.MaxPool2d(3, 2)] if pool else []))


class SmallAlexNet(nn.Module):
    """Blocks 0-4: 3x3 convolutions (batch norm, ReLU; max-pooled after 0, 1 and 4); block 5: flatten, linear to
    ``hidden``; block 6: linear ``hidden`` to ``hidden`` (both without bias, batch norm, ReLU). At 64 px the last
    map is 7 x 7."""

    def __init__(self, widths=(96, 192, 384, 384, 192), hidden: int = 4096, in_chans: int = 3):
        super().__init__()
        widths = [int(w) for w in widths]
        if len(widths) != 5:
            raise ValueError(f"widths={widths}: give the 5 convolution widths")
        ins = [in_chans, *widths[:-1]]
        convs = [_conv(i, o, pool=k in (0, 1, 4)) for k, (i, o) in enumerate(zip(ins, widths))]
        fc6 = nn.Sequential(nn.Flatten(), nn.Linear(widths[-1] * 7 * 7, hidden, bias=False), nn.BatchNorm1d(hidden),
                            nn.ReLU(inplace=True))
        fc7 = nn.Sequential(nn.Linear(hidden, hidden, bias=False), nn.BatchNorm1d(hidden), nn.ReLU(inplace=True))
        self.blocks = nn.ModuleList([*convs, fc6, fc7])
        self.num_features = hidden

    def forward_intermediates(self, x: torch.Tensor, indices: int | list[int] | None = None,
                              intermediates_only: bool = False, **_):
        """Every block's output (``indices``: an int n keeps the last n, a list those blocks), 4-D."""
        n = len(self.blocks)
        keep = (range(n) if indices is None else range(n - indices, n) if isinstance(indices, int)
                else [i % n for i in indices])
        if x.shape[-1] != INPUT_SIDE or x.shape[-2] != INPUT_SIDE:
            raise ValueError(f"SmallAlexNet takes {INPUT_SIDE} x {INPUT_SIDE} images (its linear block reads a 7 x 7 "
                             f"map), got {tuple(x.shape[-2:])}")
        outs = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in keep:
                outs.append(x if x.ndim == 4 else x[:, :, None, None])
        return outs if intermediates_only else (x, outs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x
