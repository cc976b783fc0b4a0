"""Per-layer pooled features (PRH section 3, appendix C.2).

Vision: every block's output of a timm model, through ``forward_intermediates`` (ViTs: pooled
by hooks as each block finishes, checked once against it);
ViTs give the class (prefix) token of each block (the reference's ``blocks.i.add_1``
output, before the final norm), CNNs the global average pool of each stage.
Language: the hidden states of ``output_hidden_states=True`` (streamed: pooled by hooks on the
blocks as each is made, checked once against it); every hidden state, embeddings included,
mean-pooled over the valid tokens (or the last valid token, optionally after the
appendix C.2 prompt ``An image with the caption '<caption>'. This is an image of a``).
Texts run in length-grouped, resumable batches (``prh.batching``). ``prh extract-vision`` /
``prh extract-language`` (``prh.extract``) run this on a dataset directory and write
``results/features/<dataset>/<model>.safetensors``.
"""

from __future__ import annotations

import math
import warnings
import weakref

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from prh.batching import (BatchCheckpoint, batch_for_budget, budget_bytes, check_texts, encode_texts, fingerprint,
                           forward_inputs, group_starts, model_id, run_batches, step_or_split)
from prh.device import place_model, resolve_device, resolve_dtype
from prh.evaluation.likelihood import hidden_nats, tail_nats

__all__ = ["PRH_PROMPT", "LAYERS", "check_layers", "resize_side", "preprocess_images", "pool_blocks",
           "extract_vision_features", "hidden_state_blocks", "streamed_hidden_pools", "extract_language_features"]

# PRH appendix C.2; the model's next token would be the <fill>.
PRH_PROMPT = "An image with the caption '{caption}'. This is an image of a"
# model -> whether its per-block hooks reproduce output_hidden_states / forward_intermediates
# (checked once per model, on one text or image)
_HOOKS_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# which layers a features file keeps: every block, or only the last (all a linear probe reads)
LAYERS = ("all", "last")


def check_layers(layers: str) -> None:
    if layers not in LAYERS:
        raise ValueError(f"layers={layers!r}; choose 'all' (every block) or 'last' (a probe's only input)")


# ---------------------------------------------------------------- vision


def resize_side(size: int, crop_pct: float = 1.0) -> int:
    """Side timm's eval transform resizes to before the centre crop: ``floor(size / crop_pct)``
    (``timm.data.transforms_factory.transforms_imagenet_eval``; 224 at crop_pct 0.9 -> 248)."""
    if not 0 < crop_pct <= 1:
        raise ValueError(f"crop_pct={crop_pct} must be in (0, 1]")
    return int(math.floor(size / crop_pct))


def preprocess_images(images: np.ndarray, *, input_size, mean, std, interpolation="bilinear", crop_pct=1.0,
                      device="cpu"):
    """uint8 N x H x W x 3 -> float N x 3 x h x w: resize, centre-crop, ``(x / 255 - mean) / std``.

    With ``crop_pct < 1`` the image is resized to ``resize_side(size, crop_pct)`` =
    ``floor(size / crop_pct)`` and centre-cropped to ``size`` (timm's eval transform, the
    reference's ``create_transform``); with 1 it is resized straight to ``input_size``. An image
    already at that side is only cropped (no resampling): store images at the side the model
    resizes to and the model sees what timm's transform gives on the original square image.
    ``device``: where the resize and normalisation run (the uint8 pixels are moved there first: a
    quarter of the bytes of the float result, and a GPU resizes faster than the host's cores).
    """
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 N x H x W x 3, got {images.dtype} {images.shape}")
    _, h, w = input_size
    x = torch.from_numpy(np.array(images, copy=True)).to(device).permute(0, 3, 1, 2).float() / 255.0
    rh, rw = resize_side(h, crop_pct), resize_side(w, crop_pct)
    if (x.shape[2], x.shape[3]) != (rh, rw):
        x = F.interpolate(x, size=(rh, rw), mode=interpolation, antialias=True, align_corners=False)
    top, left = (rh - h) // 2, (rw - w) // 2
    x = x[:, :, top : top + h, left : left + w]
    mean = torch.tensor(mean, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(std, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


def pool_blocks(model, x: torch.Tensor, pooling: str, layers: str = "all") -> list[torch.Tensor]:
    """One B x D_l tensor per block (ViT) or stage (CNN); ``layers="last"``: the last one only
    (timm then keeps only that block's output, not every block's)."""
    if not hasattr(model, "forward_intermediates"):
        raise ValueError(f"{type(model).__name__} has no forward_intermediates; use a timm model that has it")
    check_layers(layers)
    indices = 1 if layers == "last" else None  # timm: an int n = the last n blocks
    if hasattr(model, "num_prefix_tokens"):  # ViT-like: a token sequence per block
        if pooling == "cls" and not model.num_prefix_tokens:
            raise ValueError("pooling='cls' but the model has no class token; use pooling='avg'")

        def intermediates(x):
            outs = model.forward_intermediates(
                x, indices=indices, return_prefix_tokens=True, output_fmt="NLC", intermediates_only=True
            )
            if pooling == "cls":
                return [prefix[:, 0] for _, prefix in outs]
            return [(o[0] if isinstance(o, tuple) else o).mean(dim=1) for o in outs]

        if layers == "all" and isinstance(getattr(model, "blocks", None), torch.nn.Sequential):
            streamed = _HOOKS_CHECKED.get(model)
            if streamed is None:  # once per model: the hooks against forward_intermediates on one image
                ref, got = intermediates(x[:1]), _streamed_blocks(model, x[:1], pooling)
                streamed = _HOOKS_CHECKED[model] = len(ref) == len(got) and all(
                    torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-4) for a, b in zip(ref, got))
                if not streamed:
                    warnings.warn(f"{type(model).__name__}: block hooks do not reproduce forward_intermediates; "
                                  "holding every block's output instead", stacklevel=2)
            if streamed:
                return _streamed_blocks(model, x, pooling)
        return intermediates(x)
    if pooling != "avg":
        raise ValueError(f"pooling={pooling!r} needs a class token; {type(model).__name__} is a CNN: use 'avg'")
    return [o.mean(dim=(2, 3)) for o in model.forward_intermediates(x, indices=indices, intermediates_only=True)]


def _streamed_blocks(model, x: torch.Tensor, pooling: str) -> list[torch.Tensor]:
    """``pool_blocks`` of a timm ViT with every block's output pooled as it is made (forward hooks,
    then ``forward_features``), so one B x T x D block output is alive at a time, not all L."""
    pooled = []

    def keep(module, args, out):
        # clone: a view of the class token would keep the whole B x T x D block output's storage alive
        pooled.append(out[:, 0].clone() if pooling == "cls" else out[:, model.num_prefix_tokens:].mean(dim=1))

    handles = [block.register_forward_hook(keep) for block in model.blocks]
    try:
        model.forward_features(x)
    finally:
        for handle in handles:
            handle.remove()
    return pooled


def _stack_layers(layers: list[torch.Tensor]) -> torch.Tensor:
    """B x L x max(D_l): CNN stages differ in width; narrower ones are zero-padded (norms unchanged)."""
    width = max(t.shape[-1] for t in layers)
    return torch.stack([F.pad(t.float(), (0, width - t.shape[-1])) for t in layers], dim=1)


@torch.inference_mode()
def extract_vision_features(
    model, images, *, pooling, mean, std, input_size, batch_size=64, device="cpu", dtype=torch.float32,
    interpolation="bilinear", crop_pct=1.0, checkpoint_dir=None, progress=True, layers="all", memory_budget_gb=None,
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
    layers : "all", or "last" for the last block / stage only (L = 1: what a linear probe reads).
    memory_budget_gb : GB of activations a batch may use, or "auto" (80 % of the free GPU memory); with a budget
        on CUDA the batch is sized from it in both directions (``vision_batch_size``: one probe batch measures the
        peak memory per image), not ``batch_size``; a batch the card still cannot hold runs as two halves. On a
        CPU (or None) ``batch_size`` stands.

    Returns
    -------
    float32 CPU tensor N x L x D; stages narrower than D are zero-padded at the end.
    """
    if pooling not in ("cls", "avg"):
        raise ValueError(f"pooling={pooling!r}; choose 'cls' or 'avg'")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    budget_bytes(memory_budget_gb, "cpu")  # the argument's check
    dtype = resolve_dtype(dtype, resolve_device(device))
    dev = place_model(model, device, dtype)
    n = len(images)

    def run(ids, dev):
        x = preprocess_images(images[ids[0]: ids[-1] + 1], input_size=input_size, mean=mean, std=std,
                              interpolation=interpolation, crop_pct=crop_pct, device=dev)
        return _stack_layers(pool_blocks(model, x.to(dtype), pooling, layers))

    max_bytes = budget_bytes(memory_budget_gb, dev) if torch.device(dev).type == "cuda" else None
    if max_bytes is not None:
        batch_size = vision_batch_size(lambda k: run(np.arange(k), dev), n=n, max_bytes=max_bytes, dev=dev)
    ckpt = None
    if checkpoint_dir is not None:
        ckpt = BatchCheckpoint(checkpoint_dir, "vision", fingerprint(
            "vision", pooling, batch_size, str(dtype), list(input_size), list(mean), list(std),
            interpolation, crop_pct, model_id(model), np.asarray(images), *(["last"] if layers == "last" else []),
            *(["tf32"] if torch.device(dev).type == "cuda" and torch.backends.cuda.matmul.allow_tf32 else [])))
    out = []
    for k, start in enumerate(tqdm(range(0, n, batch_size), desc="vision batches", disable=not progress)):
        feats = ckpt.get(k) if ckpt else None
        if feats is None:
            feats = step_or_split(run, lambda ids: ids, np.arange(start, min(n, start + batch_size)), dev).cpu()
            if ckpt:
                ckpt.put(k, feats)
        out.append(feats)
    return torch.cat(out)


def vision_batch_size(forward, *, n: int, max_bytes: float, dev, probe: int = 8) -> int:
    """Images per batch under ``max_bytes`` on CUDA: ``forward(k)`` runs the first k = min(probe, n) images once, its
    peak memory above the memory in use before it, per image, sizes the batch (``batch_for_budget``)."""
    k = max(1, min(probe, n))
    torch.cuda.synchronize(dev)
    before = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    forward(k)
    torch.cuda.synchronize(dev)
    per_image = max(1, torch.cuda.max_memory_allocated(dev) - before) / k
    return batch_for_budget(per_image, max_bytes)


# ---------------------------------------------------------------- language


def hidden_state_blocks(model):
    """``(base model, its list of transformer blocks)`` of a transformers model, or None.

    The blocks are the base model's first ``nn.ModuleList`` with ``num_hidden_layers`` entries
    (``model.layers`` of LLaMA, ``h`` of GPT-2 and BLOOM, ``encoder.layer`` of BERT/RoBERTa).
    """
    config = getattr(model, "config", None)
    base = getattr(model, "base_model", None)
    if config is None or base is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = getattr(text, "num_hidden_layers", None)
    for module in base.modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return base, module
    return None


def streamed_hidden_pools(model, blocks, batch, dev, pool, *, layers="all", last=None) -> list[torch.Tensor]:
    """``pool(h_l, mask)`` of every hidden state h_0..h_L of one batch, pooled as soon as it exists.

    ``blocks = hidden_state_blocks(model)``. With ``output_hidden_states=True``, transformers
    returns h_0 = the input of block 0, h_l = the output of block l - 1, and h_L = the base
    model's ``last_hidden_state`` (after the final norm where there is one), all alive until the
    forward ends. Here forward hooks pool h_0..h_(L-1) when they are made and keep only the
    pooled B x D (float32, on the model's device: the caller moves the stacked B x (L+1) x D to the
    CPU once per batch, not once per layer, which on a GPU was a device-to-host sync per layer);
    h_L is pooled from the base model's output (no LM head runs). ``layers="last"``: h_L only, no hooks.
    ``last``: called with the unpooled h_L too (the fused bits-per-byte pass applies the LM head to it).
    """
    base, module_list = blocks
    mask = batch["attention_mask"].bool()
    pooled: list[torch.Tensor] = []

    def keep(h):  # on the input's device: blocks of a model spread over cards (device_map) live on several
        pooled.append(pool(h[0] if isinstance(h, tuple) else h, mask).to(dev))

    handles = []
    if layers == "all":
        handles.append(module_list[0].register_forward_pre_hook(
            lambda mod, args, kwargs: keep(args[0] if args else kwargs["hidden_states"]), with_kwargs=True))
        handles += [block.register_forward_hook(lambda mod, args, out: keep(out)) for block in module_list[:-1]]
    try:
        out = base(**forward_inputs(base, batch, dev, use_cache=False))
    finally:
        for handle in handles:
            handle.remove()
    final = out[0] if isinstance(out, tuple) else out.last_hidden_state
    if last is not None:
        last(final)
    keep(final)
    return pooled


@torch.inference_mode()
def extract_language_features(
    model, tokenizer, texts, *, batch_size=32, device="cpu", dtype=torch.float32, pooling="mean",
    prompt_template=None, group_by_length=True, max_batch_tokens=None, checkpoint_dir=None, progress=True,
    samples_per_item=None, layers="all", gpu_memory_budget_gb=None, score_tail=None,
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
    layers : "all" (embeddings and every block) or "last" (the final hidden state only).
    gpu_memory_budget_gb : bytes of activations one batch may use, in GB (``prh.batching.activation_bytes``
        estimates them per item from the model config); length-grouped batches shrink to fit.
        "auto": 80 % of the accelerator memory free after the weights are placed; None: no cap.

    Hidden states are streamed (``streamed_hidden_pools``): hooks on the transformer blocks pool
    each layer's hidden state as soon as it exists and move the B x D result to the CPU, so at
    most a couple of full B x T x D hidden states are alive at once instead of all L + 1. On the
    first batch the hooks are checked against ``output_hidden_states=True`` on one text; an
    architecture where they disagree (or whose blocks are not found) falls back to it, with a warning.

    score_tail : int, or None. Given (``prh.evaluation.likelihood.fused_bpb_tail``), the same pass also returns
        each text's summed nats for bits per byte (``hidden_nats``: the LM head on h_L, the last ``score_tail``
        tokens unscored), so a causal LM's features and bits per byte cost one forward pass, not two.

    Returns
    -------
    float32 CPU tensor N x (num_layers + 1) x D (N texts, or N items with ``samples_per_item``);
    N x 1 x D with ``layers="last"``. With ``score_tail``: (that tensor, float64 nats of each text).
    """
    if pooling not in ("mean", "last"):
        raise ValueError(f"pooling={pooling!r}; choose 'mean' or 'last'")
    texts = check_texts(texts)
    starts = None if samples_per_item is None else group_starts(samples_per_item, len(texts))
    if prompt_template is not None:
        if "{caption}" not in prompt_template:
            raise ValueError(f"prompt_template={prompt_template!r} must contain '{{caption}}'")
        texts = [prompt_template.replace("{caption}", t) for t in texts]

    check_layers(layers)

    def pool(h, mask):
        if pooling == "mean":
            m = mask.to(h.device).unsqueeze(-1)  # where(), not multiply: a padding query row may hold NaN; float32
            return torch.where(m, h, 0.0).sum(1, dtype=torch.float32) / m.sum(1)  # sums, no float32 copy of h
        pos = torch.arange(mask.shape[1], device=h.device)
        last = torch.where(mask.to(h.device), pos, -1).argmax(dim=1)
        return h[torch.arange(h.shape[0], device=h.device), last].float()

    final: dict = {}  # the batch's h_L (streamed) or logits (reference path), for the fused bits per byte

    def all_hidden_states(batch, dev):
        """The reference path: every hidden state held at once (``output_hidden_states=True``)."""
        extra = {"logits_to_keep": 1 if score_tail is None else 0, "use_cache": False}
        out = model(**forward_inputs(model, batch, dev, **extra), output_hidden_states=True)
        hs = out.hidden_states
        if score_tail is not None:
            final["logits"] = out.logits
        mask = batch["attention_mask"].bool()
        return torch.stack([pool(h, mask).to(dev) for h in (hs[-1:] if layers == "last" else hs)], dim=1)

    blocks = hidden_state_blocks(model)

    def step(batch, dev):
        streamed = blocks is not None and _HOOKS_CHECKED.get(model)
        if blocks is not None and streamed is None:  # once per model: check the hooks on one text
            one = {k: v[:1] for k, v in batch.items()}
            ref = all_hidden_states(one, dev)
            try:
                got = torch.stack(streamed_hidden_pools(model, blocks, one, dev, pool, layers=layers), dim=1)
                streamed = got.shape == ref.shape and torch.allclose(got, ref, rtol=1e-3, atol=1e-4)
            except RuntimeError:  # blocks whose output is not batch-first (XLNet: T x B x D) pool to other shapes
                streamed = False
            _HOOKS_CHECKED[model] = streamed
            if not streamed:
                warnings.warn(f"{type(model).__name__}: per-block hooks do not reproduce output_hidden_states; "
                              "falling back to holding every hidden state (more accelerator memory)", stacklevel=2)
        final.clear()  # nothing of the check above, or of a batch that ran out of memory, stays alive
        if not streamed:
            feats = all_hidden_states(batch, dev)
        else:
            feats = torch.stack(streamed_hidden_pools(model, blocks, batch, dev, pool, layers=layers,
                                                      last=lambda h: final.__setitem__("h", h)), dim=1)
        if score_tail is None:
            return feats
        nats = (tail_nats(final.pop("logits"), batch, tail=score_tail) if "logits" in final
                else hidden_nats(model, final.pop("h"), batch, tail=score_tail))
        # one checkpointable row per text: its features, then its float64 nats bit for bit as two float32 columns
        return torch.cat([feats.flatten(1), nats.to(feats.device).contiguous().view(torch.float32).view(-1, 2)], 1)

    rows = run_batches(model, tokenizer, encode_texts(tokenizer, texts), batch_size=batch_size, device=device,
                         dtype=dtype, group_by_length=group_by_length, checkpoint_dir=checkpoint_dir,
                         max_tokens=max_batch_tokens, memory_budget_gb=gpu_memory_budget_gb,
                         tag="language", key=[pooling, prompt_template, *(["last"] if layers == "last" else []),
                                              *([] if score_tail is None else ["bpb", score_tail])],
                         progress=progress, step=step)
    nats = None
    if score_tail is not None:
        nats = rows[:, -2:].contiguous().view(torch.float64)[:, 0]
        width = model.config.get_text_config().hidden_size
        rows = rows[:, :-2].reshape(len(rows), -1, width)  # raises unless a whole number of layers
    if starts is None:
        feats = rows
    else:
        bounds = [*starts.tolist(), len(rows)]
        feats = torch.stack([rows[a:b].mean(0) for a, b in zip(bounds[:-1], bounds[1:])])
    return feats if nats is None else (feats, nats)


