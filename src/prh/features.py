"""Per-layer pooled features (PRH section 3, appendix C.2).

Vision: every block's output of a timm model, through ``forward_intermediates``;
ViTs give the class (prefix) token of each block (the reference's ``blocks.i.add_1``
output, before the final norm), CNNs the global average pool of each stage.
Language: ``output_hidden_states=True``; every hidden state, embeddings included,
mean-pooled over the valid tokens (or the last valid token, optionally after the
appendix C.2 prompt ``An image with the caption '<caption>'. This is an image of a``).
Texts run in length-grouped, resumable batches (``prh.batching``). ``prh extract-vision`` /
``prh extract-language`` (``prh.extract``) run this on a dataset directory and write
``results/features/<dataset>/<model>.safetensors``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from prh.batching import (
    BatchCheckpoint,
    check_texts,
    encode_texts,
    fingerprint,
    forward_inputs,
    group_starts,
    model_id,
    run_batches,
)
from prh.device import place_model, resolve_device, resolve_dtype

__all__ = ["PRH_PROMPT", "resize_side", "preprocess_images", "pool_blocks", "extract_vision_features", "extract_language_features"]

# PRH appendix C.2; the model's next token would be the <fill>.
PRH_PROMPT = "An image with the caption '{caption}'. This is an image of a"


# ---------------------------------------------------------------- vision


def resize_side(size: int, crop_pct: float = 1.0) -> int:
    """Side timm's eval transform resizes to before the centre crop: ``floor(size / crop_pct)``
    (``timm.data.transforms_factory.transforms_imagenet_eval``; 224 at crop_pct 0.9 -> 248)."""
    if not 0 < crop_pct <= 1:
        raise ValueError(f"crop_pct={crop_pct} must be in (0, 1]")
    return int(math.floor(size / crop_pct))


def preprocess_images(images: np.ndarray, *, input_size, mean, std, interpolation="bilinear", crop_pct=1.0):
    """uint8 N x H x W x 3 -> float N x 3 x h x w: resize, centre-crop, ``(x / 255 - mean) / std``.

    With ``crop_pct < 1`` the image is resized to ``resize_side(size, crop_pct)`` =
    ``floor(size / crop_pct)`` and centre-cropped to ``size`` (timm's eval transform, the
    reference's ``create_transform``); with 1 it is resized straight to ``input_size``. An image
    already at that side is only cropped (no resampling): store images at the side the model
    resizes to and the model sees what timm's transform gives on the original square image.
    """
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 N x H x W x 3, got {images.dtype} {images.shape}")
    _, h, w = input_size
    x = torch.from_numpy(np.array(images, copy=True)).permute(0, 3, 1, 2).float() / 255.0
    rh, rw = resize_side(h, crop_pct), resize_side(w, crop_pct)
    if (x.shape[2], x.shape[3]) != (rh, rw):
        x = F.interpolate(x, size=(rh, rw), mode=interpolation, antialias=True, align_corners=False)
    top, left = (rh - h) // 2, (rw - w) // 2
    x = x[:, :, top : top + h, left : left + w]
    mean = torch.tensor(mean, dtype=x.dtype).view(1, 3, 1, 1)
    std = torch.tensor(std, dtype=x.dtype).view(1, 3, 1, 1)
    return (x - mean) / std


def pool_blocks(model, x: torch.Tensor, pooling: str) -> list[torch.Tensor]:
    """One B x D_l tensor per block (ViT) or stage (CNN)."""
    if not hasattr(model, "forward_intermediates"):
        raise ValueError(f"{type(model).__name__} has no forward_intermediates; use a timm model that has it")
    if hasattr(model, "num_prefix_tokens"):  # ViT-like: a token sequence per block
        outs = model.forward_intermediates(
            x, indices=None, return_prefix_tokens=True, output_fmt="NLC", intermediates_only=True
        )
        if pooling == "cls":
            if not model.num_prefix_tokens:
                raise ValueError("pooling='cls' but the model has no class token; use pooling='avg'")
            return [prefix[:, 0] for _, prefix in outs]
        return [(o[0] if isinstance(o, tuple) else o).mean(dim=1) for o in outs]
    if pooling != "avg":
        raise ValueError(f"pooling={pooling!r} needs a class token; {type(model).__name__} is a CNN: use 'avg'")
    return [o.mean(dim=(2, 3)) for o in model.forward_intermediates(x, indices=None, intermediates_only=True)]


def _stack_layers(layers: list[torch.Tensor]) -> torch.Tensor:
    """B x L x max(D_l): CNN stages differ in width; narrower ones are zero-padded (norms unchanged)."""
    width = max(t.shape[-1] for t in layers)
    return torch.stack([F.pad(t.float(), (0, width - t.shape[-1])) for t in layers], dim=1)


@torch.inference_mode()
def extract_vision_features(
    model, images, *, pooling, mean, std, input_size, batch_size=64, device="cpu", dtype=torch.float32,
    interpolation="bilinear", crop_pct=1.0, checkpoint_dir=None, progress=True,
) -> torch.Tensor:
    """Pooled output of every block (ViT) or stage (CNN) of a timm model.

    Parameters
    ----------
    model : a timm model with ``forward_intermediates`` (moved to ``device``/``dtype`` here).
    images : uint8 numpy N x H x W x 3.
    pooling : "cls" (class token of each block) or "avg" (mean over tokens / pixels).
    mean, std, input_size, interpolation, crop_pct : the preprocess dict of ``load_vision_model``.
    batch_size, device ("auto"|"cuda"|"cpu"), dtype : how to run it.
    checkpoint_dir : save each finished batch there and resume from it (the caller removes it).

    Returns
    -------
    float32 CPU tensor N x L x D; stages narrower than D are zero-padded at the end.
    """
    if pooling not in ("cls", "avg"):
        raise ValueError(f"pooling={pooling!r}; choose 'cls' or 'avg'")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    dtype = resolve_dtype(dtype, resolve_device(device))
    dev = place_model(model, device, dtype)
    n = len(images)
    ckpt = None
    if checkpoint_dir is not None:
        ckpt = BatchCheckpoint(checkpoint_dir, "vision", fingerprint(
            "vision", pooling, batch_size, str(dtype), list(input_size), list(mean), list(std),
            interpolation, crop_pct, model_id(model), np.asarray(images)))
    out = []
    for k, start in enumerate(tqdm(range(0, n, batch_size), desc="vision batches", disable=not progress)):
        feats = ckpt.get(k) if ckpt else None
        if feats is None:
            x = preprocess_images(images[start : start + batch_size], input_size=input_size, mean=mean,
                                  std=std, interpolation=interpolation, crop_pct=crop_pct)
            feats = _stack_layers(pool_blocks(model, x.to(dev, dtype), pooling)).cpu()
            if ckpt:
                ckpt.put(k, feats)
        out.append(feats)
    return torch.cat(out)


# ---------------------------------------------------------------- language


@torch.inference_mode()
def extract_language_features(
    model, tokenizer, texts, *, batch_size=32, device="cpu", dtype=torch.float32, pooling="mean",
    prompt_template=None, group_by_length=True, max_batch_tokens=None, checkpoint_dir=None, progress=True,
    samples_per_item=None,
) -> torch.Tensor:
    """Every hidden state (embeddings included), pooled over each text's valid tokens.

    ``mean``: ``f_l(t) = sum_j m_j h_l,j / sum_j m_j`` (m = attention mask);
    ``last``: ``h_l`` at the last valid token. Tokens as the tokenizer makes them
    (its own BOS/CLS/SEP, as the PRH reference does).

    With ``samples_per_item`` = K_1..K_N the texts are N items' independently drawn captions,
    concatenated (item 1's first): every text is pooled as above, all in one length-grouped
    pass, and item i gets the mean of its captions' pooled features,
    ``F_l(i) = (1 / K_i) sum_k f_l(t_ik)`` (K_i = 1 gives the single caption's features exactly).

    Parameters
    ----------
    model, tokenizer : from ``prh.models.loaders.load_language_model``.
    texts : list of non-empty strings.
    pooling : "mean" or "last".
    prompt_template : None, or a format string with ``{caption}`` (``PRH_PROMPT``, appendix C.2).
    group_by_length : sort by token length before batching (False: input order, padded to the longest text).
    max_batch_tokens : with grouping, cap items x longest per batch (bounds peak memory); None: no cap.
    checkpoint_dir : save each finished batch there and resume from it (the caller removes it).

    Returns
    -------
    float32 CPU tensor N x (num_layers + 1) x D (N texts, or N items with ``samples_per_item``).
    """
    if pooling not in ("mean", "last"):
        raise ValueError(f"pooling={pooling!r}; choose 'mean' or 'last'")
    texts = check_texts(texts)
    starts = None if samples_per_item is None else group_starts(samples_per_item, len(texts))
    if prompt_template is not None:
        if "{caption}" not in prompt_template:
            raise ValueError(f"prompt_template={prompt_template!r} must contain '{{caption}}'")
        texts = [prompt_template.replace("{caption}", t) for t in texts]

    def step(batch, dev):
        extra = {"logits_to_keep": 1, "use_cache": False}
        hs = model(**forward_inputs(model, batch, dev, **extra), output_hidden_states=True).hidden_states
        mask = batch["attention_mask"].to(hs[0].device).bool()
        if pooling == "mean":
            m = mask.unsqueeze(-1)
            # where(), not multiply: a fully masked (padding) query row may hold NaN.
            pooled = [torch.where(m, h.float(), 0.0).sum(1) / m.sum(1) for h in hs]
        else:
            pos = torch.arange(mask.shape[1], device=mask.device)
            last = torch.where(mask, pos, -1).argmax(dim=1)
            pooled = [h.float()[torch.arange(h.shape[0], device=h.device), last.to(h.device)] for h in hs]
        return torch.stack([p.to(pooled[0].device) for p in pooled], dim=1)

    rows = run_batches(model, tokenizer, encode_texts(tokenizer, texts), batch_size=batch_size, device=device,
                         dtype=dtype, group_by_length=group_by_length, checkpoint_dir=checkpoint_dir,
                         max_tokens=max_batch_tokens,
                         tag="language", key=[pooling, prompt_template], progress=progress, step=step)
    if starts is None:
        return torch.stack(rows)
    bounds = [*starts.tolist(), len(rows)]
    return torch.stack([torch.stack(rows[a:b]).mean(0) for a, b in zip(bounds[:-1], bounds[1:])])


