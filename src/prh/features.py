"""Per-layer pooled features and bits-per-byte (PRH section 3, appendix C.2).

Vision: every block's output of a timm model, through ``forward_intermediates``;
ViTs give the class (prefix) token of each block (the reference's ``blocks.i.add_1``
output, before the final norm), CNNs the global average pool of each stage.
Language: ``output_hidden_states=True``; every hidden state, embeddings included,
mean-pooled over the valid tokens (or the last valid token, optionally after the
appendix C.2 prompt ``An image with the caption '<caption>'. This is an image of a``).
Bits-per-byte (Figure 3's x-axis): ``bpb(t) = sum_j -log2 p(x_j | x_<j) / bytes_utf8(t)``.

Captions are sorted by token length and batched, then put back in input order, so a
batch is padded only to its own longest caption. Padding is masked everywhere and
position ids are taken from the mask, so left or right padding gives the same numbers.
Every finished batch can be checkpointed (``checkpoint_dir``): a killed job resumes
from the last finished batch. ``prh extract-vision`` / ``prh extract-language`` run
this on a dataset directory and write ``results/features/<dataset>/<model>.safetensors``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

__all__ = [
    "PRH_PROMPT",
    "resolve_device",
    "resolve_dtype",
    "preprocess_images",
    "extract_vision_features",
    "extract_language_features",
    "bits_per_byte",
    "start_token",
    "token_nats",
    "length_batches",
]

# PRH appendix C.2; the model's next token would be the <fill>.
PRH_PROMPT = "An image with the caption '{caption}'. This is an image of a"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` -> CUDA when available, else CPU; ``"cuda"`` without a GPU is an error."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA GPU is visible; use device='auto' or 'cpu'")
    return device


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | str = "cpu") -> torch.dtype:
    """``"auto"`` -> bfloat16 on CUDA, float32 on CPU (DESIGN.md, "Execution")."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype={dtype!r} is not supported; choose 'auto' or one of {list(DTYPES)}")
    return DTYPES[dtype]


def _place(model: torch.nn.Module, device, dtype) -> torch.device:
    """Move ``model`` unless it is dispatched (device_map) or quantised; return its input device."""
    dispatched = getattr(model, "hf_device_map", None) is not None or getattr(model, "is_quantized", False)
    if not dispatched:
        model.to(device=resolve_device(device), dtype=dtype)
    model.eval()
    emb = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    return emb.weight.device if emb is not None else next(model.parameters()).device


class _Checkpoint:
    """One safetensors file per finished batch in ``directory`` (``<tag>_<batch>.safetensors``).

    A manifest holds a fingerprint of the inputs; a changed fingerprint discards old batches.
    """

    def __init__(self, directory, tag: str, fingerprint: str):
        self.dir = Path(directory) if directory is not None else None
        self.tag = tag
        if self.dir is None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        manifest = self.dir / f"{tag}.json"
        if manifest.exists() and json.loads(manifest.read_text()).get("fingerprint") != fingerprint:
            print(f"checkpoint {manifest} was made for other inputs; starting over", file=sys.stderr)
            for f in self.dir.glob(f"{tag}_*.safetensors"):
                f.unlink()
        from prh.io import write_json

        write_json(manifest, {"fingerprint": fingerprint})

    def _path(self, k: int) -> Path:
        return self.dir / f"{self.tag}_{k:06d}.safetensors"

    def get(self, k: int) -> torch.Tensor | None:
        if self.dir is None or not self._path(k).exists():
            return None
        from safetensors.torch import load_file

        return load_file(str(self._path(k)))["x"]

    def put(self, k: int, x: torch.Tensor) -> None:
        if self.dir is None:
            return
        from safetensors.torch import save_file

        from prh.io import atomic_path

        with atomic_path(self._path(k)) as tmp:
            save_file({"x": x.contiguous().cpu()}, str(tmp))


def _fingerprint(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.tobytes() if isinstance(p, np.ndarray) else json.dumps(p, default=str).encode())
    return h.hexdigest()


def _model_id(model) -> list:
    n = sum(p.numel() for p in model.parameters())
    return [type(model).__name__, n, getattr(getattr(model, "config", None), "_name_or_path", "")]


# ---------------------------------------------------------------- vision


def preprocess_images(images: np.ndarray, *, input_size, mean, std, interpolation="bilinear", crop_pct=1.0):
    """uint8 N x H x W x 3 -> float N x 3 x h x w: resize, centre-crop, ``(x / 255 - mean) / std``.

    With ``crop_pct < 1`` the image is resized to ``size / crop_pct`` and centre-cropped
    to ``size`` (timm's eval transform); with 1 it is resized straight to ``input_size``.
    """
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 N x H x W x 3, got {images.dtype} {images.shape}")
    _, h, w = input_size
    x = torch.from_numpy(np.array(images, copy=True)).permute(0, 3, 1, 2).float() / 255.0
    rh, rw = (round(h / crop_pct), round(w / crop_pct))
    if (x.shape[2], x.shape[3]) != (rh, rw):
        x = F.interpolate(x, size=(rh, rw), mode=interpolation, antialias=True, align_corners=False)
    top, left = (rh - h) // 2, (rw - w) // 2
    x = x[:, :, top : top + h, left : left + w]
    mean = torch.tensor(mean, dtype=x.dtype).view(1, 3, 1, 1)
    std = torch.tensor(std, dtype=x.dtype).view(1, 3, 1, 1)
    return (x - mean) / std


def _pool_blocks(model, x: torch.Tensor, pooling: str) -> list[torch.Tensor]:
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
    dev = _place(model, device, dtype)
    n = len(images)
    ckpt = None
    if checkpoint_dir is not None:
        ckpt = _Checkpoint(checkpoint_dir, "vision", _fingerprint(
            "vision", pooling, batch_size, str(dtype), list(input_size), list(mean), list(std),
            interpolation, crop_pct, _model_id(model), np.asarray(images)))
    out = []
    for k, start in enumerate(tqdm(range(0, n, batch_size), desc="vision batches", disable=not progress)):
        feats = ckpt.get(k) if ckpt else None
        if feats is None:
            x = preprocess_images(images[start : start + batch_size], input_size=input_size, mean=mean,
                                  std=std, interpolation=interpolation, crop_pct=crop_pct)
            feats = _stack_layers(_pool_blocks(model, x.to(dev, dtype), pooling)).cpu()
            if ckpt:
                ckpt.put(k, feats)
        out.append(feats)
    return torch.cat(out)


# ---------------------------------------------------------------- language


def length_batches(lengths, batch_size: int, *, group_by_length: bool = True,
                   max_tokens: int | None = None) -> list[np.ndarray]:
    """Index batches of at most ``batch_size`` items.

    Grouped: sorted longest first (a batch too large for memory fails at once), and with
    ``max_tokens`` a batch also stops growing before ``items x longest`` exceeds it, so
    short captions go in large batches and long ones in small (peak memory ~ max_tokens).
    Not grouped: input order, ``max_tokens`` ignored.
    """
    lengths = np.asarray(lengths)
    if not group_by_length:
        order = np.arange(len(lengths))
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    order = np.argsort(-lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        size = batch_size
        if max_tokens is not None:  # the first item is the batch's longest
            size = max(1, min(batch_size, max_tokens // max(int(lengths[order[start]]), 1)))
        batches.append(order[start : start + size])
        start += size
    return batches


def _pad(encodings: list[dict], *, pad_id: int, side: str, length: int | None = None) -> dict:
    """Pad token lists to one length on ``side``; input_ids with ``pad_id``, other fields with 0."""
    length = length or max(len(e["input_ids"]) for e in encodings)
    batch = {}
    for key in encodings[0]:
        rows = []
        for e in encodings:
            fill = [pad_id if key == "input_ids" else 0] * (length - len(e[key]))
            rows.append(fill + list(e[key]) if side == "left" else list(e[key]) + fill)
        batch[key] = torch.tensor(rows, dtype=torch.long)
    return batch


def _forward_inputs(model, batch: dict, dev, **extra) -> dict:
    """Model kwargs; position ids from the mask, so left padding does not shift positions."""
    params = inspect.signature(model.forward).parameters
    inputs = {k: v.to(dev) for k, v in batch.items() if k in params}
    if "position_ids" in params:
        inputs["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0).to(dev)
    inputs.update({k: v for k, v in extra.items() if k in params})
    return inputs


def _encode(tokenizer, texts, *, add_special_tokens=True):
    enc = tokenizer(list(texts), add_special_tokens=add_special_tokens)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    return [{k: enc[k][i] for k in keys} for i in range(len(texts))]


def _check_texts(texts) -> list[str]:
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t]
    if bad:
        raise ValueError(f"texts must be non-empty strings; items {bad[:5]} are not")
    return texts


def _run_language(model, tokenizer, encodings, *, batch_size, device, dtype, group_by_length, checkpoint_dir,
                  tag, key, progress, step, max_tokens=None) -> list:
    """Shared loop: length-grouped batches, ``step(inputs, mask) -> per-item tensor``, input order restored."""
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    dtype = resolve_dtype(dtype, resolve_device(device))
    dev = _place(model, device, dtype)
    lengths = [len(e["input_ids"]) for e in encodings]
    batches = length_batches(lengths, batch_size, group_by_length=group_by_length, max_tokens=max_tokens)
    pad_to = None if group_by_length else max(lengths)
    ckpt = None
    if checkpoint_dir is not None:
        ckpt = _Checkpoint(checkpoint_dir, tag, _fingerprint(
            tag, key, batch_size, group_by_length, max_tokens, str(dtype), _model_id(model),
            [e["input_ids"] for e in encodings]))
    results = [None] * len(encodings)
    for k, idx in enumerate(tqdm(batches, desc=f"{tag} batches", disable=not progress)):
        out = ckpt.get(k) if ckpt else None
        if out is None:
            batch = _pad([encodings[i] for i in idx], pad_id=tokenizer.pad_token_id,
                         side=tokenizer.padding_side, length=pad_to)
            out = step(batch, dev).cpu()
            if ckpt:
                ckpt.put(k, out)
        for j, i in enumerate(idx):
            results[i] = out[j]
    return results


@torch.inference_mode()
def extract_language_features(
    model, tokenizer, texts, *, batch_size=32, device="cpu", dtype=torch.float32, pooling="mean",
    prompt_template=None, group_by_length=True, max_batch_tokens=None, checkpoint_dir=None, progress=True,
) -> torch.Tensor:
    """Every hidden state (embeddings included), pooled over each text's valid tokens.

    ``mean``: ``f_l(t) = sum_j m_j h_l,j / sum_j m_j`` (m = attention mask);
    ``last``: ``h_l`` at the last valid token. Tokens as the tokenizer makes them
    (its own BOS/CLS/SEP, as the PRH reference does).

    Parameters
    ----------
    model, tokenizer : from ``prh.models.hub.load_language_model``.
    texts : list of non-empty strings.
    pooling : "mean" or "last".
    prompt_template : None, or a format string with ``{caption}`` (``PRH_PROMPT``, appendix C.2).
    group_by_length : sort by token length before batching (False: input order, padded to the longest text).
    max_batch_tokens : with grouping, cap items x longest per batch (bounds peak memory); None: no cap.
    checkpoint_dir : save each finished batch there and resume from it (the caller removes it).

    Returns
    -------
    float32 CPU tensor N x (num_layers + 1) x D.
    """
    if pooling not in ("mean", "last"):
        raise ValueError(f"pooling={pooling!r}; choose 'mean' or 'last'")
    texts = _check_texts(texts)
    if prompt_template is not None:
        if "{caption}" not in prompt_template:
            raise ValueError(f"prompt_template={prompt_template!r} must contain '{{caption}}'")
        texts = [prompt_template.replace("{caption}", t) for t in texts]

    def step(batch, dev):
        extra = {"logits_to_keep": 1, "use_cache": False}
        hs = model(**_forward_inputs(model, batch, dev, **extra), output_hidden_states=True).hidden_states
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

    rows = _run_language(model, tokenizer, _encode(tokenizer, texts), batch_size=batch_size, device=device,
                         dtype=dtype, group_by_length=group_by_length, checkpoint_dir=checkpoint_dir,
                         max_tokens=max_batch_tokens,
                         tag="language", key=[pooling, prompt_template], progress=progress, step=step)
    return torch.stack(rows)


@torch.inference_mode()
def start_token(tokenizer) -> int | None:
    """The context-only token put before a scored text: the tokenizer's BOS, else its EOS."""
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def token_nats(logits: torch.Tensor, ids: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """Per row, the summed cross-entropy (nats) of the next-token targets ``ids[:, 1:]``
    where ``scored`` (B x T-1) is true; float64, one value per row. Rows are done one at
    a time, which bounds the float32 T x V copy of the logits."""
    nats = []
    for b in range(logits.shape[0]):
        ce = F.cross_entropy(logits[b, :-1].float(), ids[b, 1:], reduction="none")
        nats.append(torch.where(scored[b], ce, 0.0).sum())
    return torch.stack(nats).double()


def bits_per_byte(
    model, tokenizer, texts, *, batch_size=32, device="cpu", dtype=torch.float32, group_by_length=True,
    max_batch_tokens=None, checkpoint_dir=None, progress=True,
) -> np.ndarray:
    """Bits-per-byte of each text under a causal LM (PRH Figure 3).

    ``bpb(t) = sum_{j>=1} -log2 p(x_j | x_0..x_{j-1}) / len(t.encode("utf-8"))``.
    BOS: the text is tokenised without special tokens and one start token x_0 is
    prepended (the tokenizer's BOS, else its EOS, e.g. GPT-2's ``<|endoftext|>``);
    x_0 is context only, so every token of the text is scored and the byte count is
    the text's own. A tokenizer with neither leaves the first text token unscored.

    Returns
    -------
    float64 array, one value per text.
    """
    texts = _check_texts(texts)
    start = start_token(tokenizer)
    encodings = _encode(tokenizer, texts, add_special_tokens=False)
    if start is not None:
        encodings = [{k: [start if k == "input_ids" else (1 if k == "attention_mask" else 0)] + list(v)
                      for k, v in e.items()} for e in encodings]

    def step(batch, dev):
        logits = model(**_forward_inputs(model, batch, dev, use_cache=False)).logits
        ids = batch["input_ids"].to(logits.device)
        mask = batch["attention_mask"].to(logits.device).bool()
        scored = mask[:, 1:] & mask[:, :-1]  # target and its context both real tokens
        return token_nats(logits, ids, scored)

    nats = _run_language(model, tokenizer, encodings, batch_size=batch_size, device=device, dtype=dtype,
                         group_by_length=group_by_length, checkpoint_dir=checkpoint_dir, tag="bpb", key=[start],
                         progress=progress, step=step, max_tokens=max_batch_tokens)
    nbytes = np.array([len(t.encode("utf-8")) for t in texts], dtype=np.float64)
    return np.array([float(x) for x in nats]) / math.log(2) / nbytes


def remove_checkpoint(checkpoint_dir) -> None:
    """Delete a checkpoint directory once the final output is written."""
    if checkpoint_dir is not None and Path(checkpoint_dir).exists():
        shutil.rmtree(checkpoint_dir)
