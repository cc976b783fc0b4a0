"""Texts through a model in length-grouped, resumable batches.

Texts are sorted by token length and batched, then put back in input order, so a
batch is padded only to its own longest text. Padding is masked everywhere and
position ids are taken from the mask, so left or right padding gives the same numbers.
Every finished batch can be checkpointed (``checkpoint_dir``): a killed job resumes
from the last finished batch; a changed fingerprint of the inputs discards old batches.
Used by feature extraction (``prh.features``), bits per byte and multiple-choice
scoring (``prh.evaluation.likelihood``) and the caption summariser.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from prh.device import HostStaging, place_model, resolve_device, resolve_dtype

__all__ = ["BatchCheckpoint", "Encodings", "fingerprint", "hash_array", "model_id", "length_batches", "activation_bytes", "pad_batch", "forward_inputs",
           "encode_texts", "check_texts", "group_starts", "run_batches", "remove_checkpoint", "step_or_split",
           "budget_bytes", "batch_for_budget", "MAX_BUDGET_ITEMS", "MIN_FILL"]

class BatchCheckpoint:
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


FINGERPRINT_CHUNK_BYTES = 64 << 20  # an array is hashed this many bytes at a time


def hash_array(h, a: np.ndarray, chunk_bytes: int = FINGERPRINT_CHUNK_BYTES) -> None:
    """Feed ``h`` the bytes ``a.tobytes()`` would give (C order), ``chunk_bytes`` at a time along the first axis: a
    memory-mapped image set is read, never copied whole (``tobytes`` had added 768 MiB of RSS for an 805 MB VTAB
    split, and a 10k-image split is 8 GB)."""
    if a.ndim == 0 or a.nbytes <= chunk_bytes:
        h.update(np.ascontiguousarray(a).tobytes())
        return
    rows = max(1, chunk_bytes // max(1, a[0].nbytes))
    for start in range(0, len(a), rows):
        h.update(memoryview(np.ascontiguousarray(a[start:start + rows])).cast("B"))


def fingerprint(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, Encodings):  # as the list of its texts' input_ids, without building that list
            p.hash_ids_json(h)
        elif isinstance(p, np.ndarray):
            hash_array(h, p)
        else:
            h.update(json.dumps(p, default=str).encode())
    return h.hexdigest()


def model_id(model) -> list:
    n = sum(p.numel() for p in model.parameters())
    return [type(model).__name__, n, getattr(getattr(model, "config", None), "_name_or_path", "")]


MIN_FILL = 0.8  # under a memory budget, a batch's real tokens / (items x its longest) never falls below this


def length_batches(lengths, batch_size: int, *, group_by_length: bool = True,
                   max_tokens: int | None = None, item_bytes=None, max_bytes: float | None = None,
                   min_fill: float | None = None) -> list[np.ndarray]:
    """Index batches of at most ``batch_size`` items.

    Grouped: sorted longest first (a batch too large for memory fails at once), and with
    ``max_tokens`` a batch also stops growing before ``items x longest`` exceeds it, so
    short captions go in large batches and long ones in small (peak memory ~ max_tokens).
    With ``max_bytes`` and ``item_bytes(length)`` (bytes of activations of one item padded
    to ``length``, e.g. ``activation_bytes``) likewise ``items x item_bytes(longest) <= max_bytes``
    (at least one item per batch). With ``min_fill`` a batch also stops before its real tokens fall below
    ``min_fill x items x longest`` (the items come longest first, so each one added lowers the share): padding is
    then at most 1 - min_fill of every batch, whatever the length profile (up to 4,096 WIT-like captions
    padded to the longest had left 13.8 % of the processed tokens real). Not grouped: input order, ``max_tokens``,
    ``max_bytes`` and ``min_fill`` ignored.
    """
    lengths = np.asarray(lengths)
    if not group_by_length:
        order = np.arange(len(lengths))
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    order = np.argsort(-lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        size = batch_size
        longest = max(int(lengths[order[start]]), 1)  # the first item is the batch's longest
        if max_tokens is not None:
            size = max(1, min(size, max_tokens // longest))
        if max_bytes is not None:
            size = max(1, min(size, int(max_bytes // max(item_bytes(longest), 1))))
        if min_fill is not None:
            real = np.cumsum(np.maximum(lengths[order[start : start + size]], 1))
            fill = real / (np.arange(1, len(real) + 1) * longest)
            size = max(1, int(np.argmax(fill < min_fill)) if (fill < min_fill).any() else len(real))
        batches.append(order[start : start + size])
        start += size
    return batches


def activation_bytes(config, length: int, dtype_bytes: int) -> int:
    """Estimated accelerator bytes of activations for one item of ``length`` tokens, hidden states streamed.

    ``length x (4 H + 2 I) x b + A x length^2 x 4``: a few H-wide tensors (the residual stream,
    the normed input, the attention output, the streamed hidden state) and the MLP's two
    I-wide intermediates in the working dtype (b bytes), plus one fp32 attention-score matrix per
    head (A heads; 0 with a fused kernel, counted anyway as the bound). H, I, A from the model
    config (``intermediate_size`` / ``n_inner`` / ``ffn_dim``, else 4 H).
    """
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = int(getattr(text, "hidden_size", None) or getattr(text, "n_embd"))
    inner = next((int(v) for k in ("intermediate_size", "n_inner", "ffn_dim")
                  if (v := getattr(text, k, None))), 4 * hidden)
    heads = int(getattr(text, "num_attention_heads", None) or getattr(text, "n_head", 1))
    return int(length * (4 * hidden + 2 * inner) * dtype_bytes + heads * length**2 * 4)


def pad_batch(encodings: list[dict], *, pad_id: int, side: str, length: int | None = None) -> dict:
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


def forward_inputs(model, batch: dict, dev, **extra) -> dict:
    """Model kwargs; position ids from the mask, so left padding does not shift positions."""
    params = inspect.signature(model.forward).parameters
    inputs = {k: v.to(dev) for k, v in batch.items() if k in params}
    if "position_ids" in params:
        inputs["position_ids"] = (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0).to(dev)
    inputs.update({k: v for k, v in extra.items() if k in params})
    return inputs


class Encodings(Sequence):
    """The token lists of many texts, stored flat (int32): what ``encode_texts`` returns. Item i is a dict of Python
    lists, as the tokenizer's per-text encoding, built when read; so N texts of T tokens hold 4 bytes per token and
    field instead of the ~180 bytes per token of the tokenizer's own objects (7.6 GB for the 400,000 caption
    samples of a 100,000-item world)."""

    def __init__(self, fields: dict[str, np.ndarray], offsets: np.ndarray):
        self.fields, self.offsets = fields, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> dict:
        if not -len(self) <= i < len(self):
            raise IndexError(f"text {i} of {len(self)}")
        a, b = self.offsets[i % len(self)], self.offsets[i % len(self) + 1]
        return {k: v[a:b].tolist() for k, v in self.fields.items()}

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def padded(self, ids, *, pad_id: int, side: str, length: int | None = None) -> dict:
        """``pad_batch([self[i] for i in ids], ...)``, gathered from the flat arrays in one indexing step instead of
        a Python list per text and field."""
        ids = np.asarray(ids)
        lens = self.lengths()[ids]
        length = int(length or lens.max())
        col = np.arange(length)
        shift = (length - lens)[:, None] if side == "left" else np.zeros((len(ids), 1), dtype=np.int64)
        pos = col[None, :] - shift                       # position within the text, or out of range on padding
        real = (pos >= 0) & (pos < lens[:, None])
        flat = np.where(real, self.offsets[ids][:, None] + pos, 0)
        batch = {}
        for key, values in self.fields.items():
            fill = pad_id if key == "input_ids" else 0
            batch[key] = torch.from_numpy(np.where(real, values[flat], fill).astype(np.int64))
        return batch

    @property
    def nbytes(self) -> int:
        return self.offsets.nbytes + sum(v.nbytes for v in self.fields.values())

    def hash_ids_json(self, h) -> None:
        """Feed ``h`` the bytes ``json.dumps`` gives the list of every text's input_ids (as ``fingerprint`` of that
        list would), a text at a time."""
        ids = self.fields["input_ids"]
        h.update(b"[")
        for i in range(len(self)):
            h.update((", " if i else "").encode() + json.dumps(ids[self.offsets[i]:self.offsets[i + 1]].tolist()).encode())
        h.update(b"]")


def encode_texts(tokenizer, texts, *, add_special_tokens=True, chunk: int = 4096) -> Encodings:
    """Tokenize ``texts`` (no padding), ``chunk`` texts at a time, into compact ``Encodings``: input_ids,
    attention_mask and token_type_ids where the tokenizer gives them."""
    texts = list(texts)
    parts: dict[str, list] = {}
    lengths = []
    for start in range(0, len(texts), chunk):
        enc = tokenizer(texts[start:start + chunk], add_special_tokens=add_special_tokens)
        for k in ("input_ids", "attention_mask", "token_type_ids"):
            if k in enc:
                parts.setdefault(k, []).append(np.fromiter(itertools.chain.from_iterable(enc[k]), dtype=np.int64))
        lengths += [len(ids) for ids in enc["input_ids"]]
    fields = {}
    for k, arrays in parts.items():
        flat = np.concatenate(arrays)
        if len(flat) and not (np.iinfo(np.int32).min <= flat.min() and flat.max() <= np.iinfo(np.int32).max):
            raise ValueError(f"{k} holds a value beyond int32 ({flat.min()}..{flat.max()}); not a tokenizer's output")
        fields[k] = flat.astype(np.int32)
    return Encodings(fields, np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]))


def check_texts(texts) -> list[str]:
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t]
    if bad:
        raise ValueError(f"texts must be non-empty strings; items {bad[:5]} are not")
    return texts


def group_starts(samples_per_item, n_texts: int) -> np.ndarray:
    """Offsets of consecutive groups of texts: item i owns texts ``starts[i] : starts[i] + K_i``.

    ``samples_per_item``: K_1..K_N, integers >= 1 summing to ``n_texts`` (the texts of item 1 first).
    """
    counts = np.asarray(samples_per_item)
    if counts.ndim != 1 or not len(counts) or not np.issubdtype(counts.dtype, np.integer) or counts.min() < 1:
        bad = np.flatnonzero(counts < 1)[:5].tolist() if counts.ndim == 1 and len(counts) else "-"
        raise ValueError(f"samples_per_item must be a non-empty list of integers >= 1 (bad items: {bad}); "
                         "an item needs at least one text to average")
    if int(counts.sum()) != n_texts:
        raise ValueError(f"samples_per_item sums to {int(counts.sum())} but there are {n_texts} texts; "
                         "pass one count per item, the items' texts concatenated in order")
    return np.concatenate([[0], np.cumsum(counts)[:-1]])


MAX_BUDGET_ITEMS = 4096  # items of one batch sized by a memory budget (beyond it, no measured gain)


def budget_bytes(memory_budget_gb, dev) -> float | None:
    """Bytes a batch's activations may use: a number of GB; "auto" on CUDA: 80 % of the free memory, in whole GB
    (a resumed job on the same card gets the same batches and keeps its checkpoints); None, or "auto" off CUDA: no
    budget (the fixed batch size)."""
    if not (memory_budget_gb is None or memory_budget_gb == "auto"
            or (isinstance(memory_budget_gb, (int, float)) and memory_budget_gb > 0)):
        raise ValueError(f"memory_budget_gb={memory_budget_gb!r} must be a number of GB > 0, 'auto' or None")
    if isinstance(memory_budget_gb, (int, float)):
        return memory_budget_gb * 1e9
    if memory_budget_gb == "auto" and torch.device(dev).type == "cuda":
        return max(1, int(0.8 * torch.cuda.mem_get_info(torch.device(dev))[0] // 1e9)) * 1e9
    return None


def batch_for_budget(item_bytes: float, max_bytes: float) -> int:
    """Items per batch under a budget: the largest power of two (stable across runs that measure ``item_bytes``
    a little differently) with ``item_bytes`` x items <= ``max_bytes``, between 1 and MAX_BUDGET_ITEMS."""
    if item_bytes <= 0 or max_bytes <= 0:
        raise ValueError(f"item_bytes={item_bytes} and max_bytes={max_bytes} must be > 0")
    items = max(1, min(MAX_BUDGET_ITEMS, int(max_bytes // item_bytes)))
    return 1 << (items.bit_length() - 1)


def step_or_split(step, make_batch, idx: np.ndarray, dev):
    """``step(make_batch(idx), dev)``; a batch the accelerator has no memory for is run as two halves
    (recursively, down to one item), so a budget estimated too high costs time, not the job."""
    try:
        return step(make_batch(idx), dev)
    except torch.OutOfMemoryError:
        if len(idx) == 1:
            raise
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        print(f"out of accelerator memory on a batch of {len(idx)}: running it as two halves", file=sys.stderr)
        half = len(idx) // 2
        parts = [step_or_split(step, make_batch, part, dev) for part in (idx[:half], idx[half:])]
        return torch.cat([p.to(parts[0].device) for p in parts])


def run_batches(model, tokenizer, encodings, *, batch_size, device, dtype, group_by_length, checkpoint_dir,
                  tag, key, progress, step, max_tokens=None, memory_budget_gb=None) -> list:
    """Shared loop: length-grouped batches, ``step(inputs, mask) -> per-item tensor``, input order restored.

    ``memory_budget_gb``: activation bytes a batch may use (``activation_bytes`` per item), in GB;
    "auto": 80 % of the CUDA memory free once the model is placed (no cap on a CPU); None: no cap.
    With a budget, batches are sized from it in both directions: as many items as fit (up to
    ``MAX_BUDGET_ITEMS``; ``max_tokens`` still caps), not ``batch_size``, which then only applies
    without one (a CPU with "auto"), and no batch is padded beyond ``1 - MIN_FILL`` of its tokens. A batch that
    still runs out of memory is split in halves.
    Each batch's output is moved to the CPU once (through page-locked memory on CUDA) and written into its items'
    rows of one N x ... tensor, which is returned (indexable as the list of per-item rows it replaces).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    budget_bytes(memory_budget_gb, "cpu")  # the argument's check, before the model moves
    dtype = resolve_dtype(dtype, resolve_device(device))
    dev = place_model(model, device, dtype)
    max_bytes = budget_bytes(memory_budget_gb, dev)
    item_bytes = None
    if max_bytes is not None:
        size = torch.empty(0, dtype=dtype).element_size()
        item_bytes = lambda length: activation_bytes(model.config, length, size)  # noqa: E731
    compact = isinstance(encodings, Encodings)
    lengths = encodings.lengths().tolist() if compact else [len(e["input_ids"]) for e in encodings]
    batches = length_batches(lengths, MAX_BUDGET_ITEMS if max_bytes is not None else batch_size,
                             group_by_length=group_by_length, max_tokens=max_tokens,
                             item_bytes=item_bytes, max_bytes=max_bytes,
                             min_fill=MIN_FILL if max_bytes is not None else None)
    pad_to = None if group_by_length else max(lengths)
    ckpt = None
    if checkpoint_dir is not None:
        ckpt = BatchCheckpoint(checkpoint_dir, tag, fingerprint(
            tag, key, batch_size, group_by_length, max_tokens, *([max_bytes, MIN_FILL] if max_bytes else []), str(dtype),
            model_id(model),
            encodings if compact else [e["input_ids"] for e in encodings]))
    results, host = None, HostStaging()
    for k, idx in enumerate(tqdm(batches, desc=f"{tag} batches", disable=not progress)):
        out = ckpt.get(k) if ckpt else None
        if out is None:
            def make_batch(ids):
                if compact:
                    return encodings.padded(ids, pad_id=tokenizer.pad_token_id, side=tokenizer.padding_side,
                                            length=pad_to)
                return pad_batch([encodings[i] for i in ids], pad_id=tokenizer.pad_token_id,
                                 side=tokenizer.padding_side, length=pad_to)

            out = host.copy(step_or_split(step, make_batch, idx, dev))
            if ckpt:
                ckpt.put(k, out)
        if results is None:  # every item's row has one shape: the output is filled in place, never stacked
            results = torch.empty((len(encodings), *out.shape[1:]), dtype=out.dtype)
        results.index_copy_(0, torch.as_tensor(np.asarray(idx), dtype=torch.long), out)
    return results if results is not None else torch.empty(0)


def remove_checkpoint(checkpoint_dir) -> None:
    """Delete a checkpoint directory once the final output is written."""
    if checkpoint_dir is not None and Path(checkpoint_dir).exists():
        shutil.rmtree(checkpoint_dir)
