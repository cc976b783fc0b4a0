"""One model of the zoo as the NTK needs it: a pooled-feature function of (parameters, one item).

Models load through the project's loaders (``prh.models.loaders``): a zoo or hub vision
model (timm; its pooled output with ``num_classes=0``: the class token after the final
norm for ViTs, the global average pool for CNNs), or a language model (transformers;
its base model's last hidden state, mean-pooled over the caption's tokens, as
``prh.features`` pools). Items are the paired evaluation set's images (preprocessed as
the feature extractor does) or captions (tokenised one by one, no padding, so each
item is exact and items of one length are vmapped together).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from prh import features as fx
from prh.models import loaders as hub

__all__ = ["ProbeModel", "load_probe_model"]


@dataclass
class ProbeModel:
    """``feature_fn(params, item) -> φ`` (d,); ``batch_features(items) -> B × d`` (autograd, for training)."""

    name: str
    modality: str
    module: torch.nn.Module
    feature_fn: Callable
    batch_features: Callable
    items: list
    dim: int
    n_params: int

    def params(self) -> dict[str, torch.Tensor]:
        return {k: v.detach() for k, v in self.module.named_parameters()}


def _vision(name, path, images, revision):
    from torch.func import functional_call

    net, pre = hub.load_vision_model(path, revision=revision)
    net = net.float().eval()
    kw = {k: pre[k] for k in ("input_size", "mean", "std", "interpolation", "crop_pct")}
    x = fx.preprocess_images(np.asarray(images), **kw)
    buffers = dict(net.named_buffers())

    def feature_fn(p, item):
        return functional_call(net, (p, buffers), (item[None],))[0]

    def batch_features(idx):
        return net(x[idx])

    dim = int(net(x[:1]).shape[-1])
    return ProbeModel(name, "vision", net, feature_fn, batch_features, [x[i] for i in range(len(x))], dim,
                      hub.count_params(net))


def _language(name, path, texts, revision):
    from torch.func import functional_call

    net, tok = hub.load_language_model(path, revision=revision)
    base = getattr(net, "base_model", net).float().eval()
    ids = [torch.tensor(e, dtype=torch.long) for e in tok(list(texts))["input_ids"]]
    buffers = dict(base.named_buffers())
    emb = base.get_input_embeddings().weight
    emb_name = next(k for k, v in base.named_parameters() if v is emb)

    def feature_fn(p, item):
        # embeddings looked up here and passed as inputs_embeds: the forward then has no
        # data-dependent checks on token ids, which vmap cannot trace
        x = torch.nn.functional.embedding(item, p[emb_name])[None]
        out = functional_call(base, (p, buffers), (), {"inputs_embeds": x})
        return out.last_hidden_state[0].mean(0)

    def batch_features(idx):
        enc = tok([texts[i] for i in idx], padding=True, return_tensors="pt")
        mask = enc["attention_mask"]
        h = base(input_ids=enc["input_ids"], attention_mask=mask).last_hidden_state
        return (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)

    dim = int(base.config.hidden_size)
    return ProbeModel(name, "language", base, feature_fn, batch_features, ids, dim, hub.count_params(base))


def load_probe_model(*, name: str, path: str, modality: str, images=None, texts=None,
                     revision: str | None = None) -> ProbeModel:
    """Load ``path`` (zoo checkpoint dir or hub name) and bind it to the items it will see.

    Parameters
    ----------
    name : the model's name in params.yaml.
    path : what ``prh.models.loaders`` loads (zoo dir, timm name, HF repo id or ``pkg:<package>``).
    modality : "vision" (needs ``images``: uint8 N × H × W × 3) or "language" (needs ``texts``).
    """
    if modality == "vision":
        if images is None:
            raise ValueError(f"model {name!r} is a vision model: pass images (uint8 N x H x W x 3)")
        return _vision(name, path, images, revision)
    if modality == "language":
        if texts is None:
            raise ValueError(f"model {name!r} is a language model: pass texts (a list of captions)")
        return _language(name, path, texts, revision)
    raise ValueError(f"modality={modality!r}; choose 'vision' or 'language'")
