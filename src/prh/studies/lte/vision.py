"""A small ViT trained from scratch on the shapes world with LTE (thesis Figs 4.5, 4.6, 8.5, Table 4.9).

The model is a ViT (Dosovitskiy et al. 2021) small enough for a CPU: 32 x 32 input (the
world's 64 x 64 images average-pooled), 8 x 8 patches, a class token, pre-norm blocks
whose linear layers (patch embedding, qkv, proj, fc1, fc2) all get LoRA; LayerNorms have
no affine parameters (appendix 8.1: removing them helped both methods). The objective is
the zoo's supervised one (``prh.models.train_vision``): one linear head per shapes-world
task (``prh.data.tasks``) on the class token, loss = mean over tasks of the cross-entropy;
accuracy = mean over tasks. Task heads, class token and position embedding are the
"small" parameters LTE averages.

Arms (section 4.3.1): ``standard`` (DDP), ``lora`` (one head, no merges), ``lora_merge``
(one head merged every T steps, ReLoRA-like, Fig 4.5), ``lte`` (N heads, rank r, T); LTE
gets a fixed cumulative batch (each head B / N, appendix 8.1) and 2x standard's samples.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from prh.studies.lte.engine import train_lte, train_standard

__all__ = [
    "TimmClassifier",
    "TinyViT",
    "build_model",
    "load_labelled_tensors",
    "load_shapes_tensors",
    "make_task",
    "run_arm",
]


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim, elementwise_affine=False)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim, elementwise_affine=False)
        self.fc1, self.fc2 = nn.Linear(dim, mlp_ratio * dim), nn.Linear(mlp_ratio * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(att)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyViT(nn.Module):
    """ViT with linear patch embedding; ``forward`` returns task name -> logits."""

    def __init__(self, *, num_classes: dict[str, int], image_size: int = 32, patch: int = 8, dim: int = 64,
                 depth: int = 2, attn_heads: int = 2, mlp_ratio: int = 2):
        super().__init__()
        if image_size % patch or dim % attn_heads:
            raise ValueError(f"image_size={image_size} must be a multiple of patch={patch} and "
                             f"dim={dim} of attn_heads={attn_heads}")
        self.patch = patch
        self.embed = nn.Linear(3 * patch * patch, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(0.02 * torch.randn(1, (image_size // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, attn_heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.heads = nn.ModuleDict({t: nn.Linear(dim, k) for t, k in num_classes.items()})

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        p = self.patch
        tokens = F.unfold(x, p, stride=p).transpose(1, 2)  # N x patches x 3 p p
        h = torch.cat([self.cls.expand(len(x), -1, -1), self.embed(tokens)], 1) + self.pos
        f = self.norm(self.blocks(h))[:, 0]
        return {t: head(f) for t, head in self.heads.items()}


class TimmClassifier(nn.Module):
    """A timm model (the paper config: ViT-S/32, MLP-Mixer) with one task, ``label``; LoRA skips its ``head``."""

    def __init__(self, *, name: str, num_classes: dict[str, int], **kwargs):
        import timm

        super().__init__()
        if list(num_classes) != ["label"]:
            raise ValueError(f"a timm model takes one task 'label', got {list(num_classes)}")
        self.model = timm.create_model(name, pretrained=False, num_classes=num_classes["label"], **kwargs)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"label": self.model(x)}


def build_model(model_config: dict, *, num_classes: dict[str, int]) -> nn.Module:
    """``{"timm": name, ...}`` -> TimmClassifier, else TinyViT(**model_config)."""
    config = dict(model_config)
    if "timm" in config:
        config.pop("image_size", None)
        return TimmClassifier(name=config.pop("timm"), num_classes=num_classes, **config)
    return TinyViT(num_classes=num_classes, **config)


class Rows:
    """Rows ``rows`` of a (memory-mapped) tensor, read only when indexed: no copy of a 7.5 GB image array."""

    def __init__(self, x: torch.Tensor, rows: np.ndarray):
        self.x, self.rows = x, torch.as_tensor(rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, idx) -> torch.Tensor:
        return self.x[self.rows[idx]]


def _split(x, y, *, test_fraction: float, val_fraction: float, seed: int) -> dict:
    from prh.data.tasks import train_test_split

    rest, test = train_test_split(len(x), test_fraction=test_fraction, seed=seed)
    cut = int(len(rest) * (1 - val_fraction))
    pick = (lambda idx: Rows(x, idx)) if x.dtype == torch.uint8 else (lambda idx: x[idx])
    return {name: (pick(idx), y[idx]) for name, idx in (("train", rest[:cut]), ("val", rest[cut:]), ("test", test))}


def load_labelled_tensors(path: str, *, image_size: int = 224, test_fraction: float = 0.2, val_fraction: float = 0.1,
                          seed: int = 0) -> dict:
    """A hub dataset folder (``prh hub-dataset``: images.npy, labels.npy; e.g. CIFAR-10/100) as one task ``label``.

    Images stay uint8 N x S x S x 3, memory-mapped (50,000 CIFAR images at 224 px are 7.5 GB);
    ``make_task`` standardises each batch as it is drawn.
    """
    from pathlib import Path

    images = np.load(Path(path) / "images.npy", mmap_mode="c")
    if images.shape[1] != image_size:
        raise ValueError(f"image_size={image_size} but {path}/images.npy holds {images.shape[1]} px images; "
                         f"set the dataset's image_size to {image_size} in params.yaml")
    labels = torch.from_numpy(np.load(Path(path) / "labels.npy"))[:, None]
    if int(labels.min()) < 0:
        raise ValueError(f"{path}/labels.npy has unlabelled items (-1); LTE's paper config needs a labelled set")
    return {"tasks": ["label"], "num_classes": {"label": int(labels.max()) + 1},
            **_split(torch.from_numpy(images), labels, test_fraction=test_fraction, val_fraction=val_fraction,
                     seed=seed)}


def load_shapes_tensors(path: str, *, image_size: int = 32, test_fraction: float = 0.2, val_fraction: float = 0.1,
                        seed: int = 0) -> dict:
    """The shapes dataset at ``path`` as standardised float images and task labels, split train / val / test
    (a folder without scenes, a hub set, goes to ``load_labelled_tensors``)."""
    from pathlib import Path

    from prh.data.shapes import load_dataset
    from prh.data.tasks import TASKS, task_labels
    from prh.models.train_vision import normalise, standardise

    if not (Path(path) / "scenes.jsonl").exists():
        return load_labelled_tensors(path, image_size=image_size, test_fraction=test_fraction,
                                     val_fraction=val_fraction, seed=seed)
    ds = load_dataset(path)
    x = standardise(normalise(torch.from_numpy(ds.images)))
    if x.shape[-1] != image_size:
        x = F.adaptive_avg_pool2d(x, image_size)
    labels = task_labels(ds.scenes)
    y = torch.from_numpy(np.stack([labels[t] for t in sorted(labels)], 1))
    return {"tasks": sorted(labels), "num_classes": {t: TASKS[t].num_classes for t in sorted(labels)},
            **_split(x, y, test_fraction=test_fraction, val_fraction=val_fraction, seed=seed)}


def make_task(data: dict, *, split: str = "test", device: str = "cpu", eval_batch: int = 512):
    """(sample, loss_fn, evaluate) closures over ``data``: i.i.d. minibatches of train, metrics on ``split``."""
    x_train, y_train = data["train"]
    x_eval, y_eval = data[split]
    y_eval = y_eval.to(device)

    def prep(x):  # uint8 N x H x W x 3 (hub sets) -> standardised floats; shapes sets come prepared
        if x.dtype == torch.uint8:
            from prh.models.train_vision import normalise, standardise

            x = standardise(normalise(x))
        return x.to(device)
    tasks = data["tasks"]

    def sample(gen, n):
        idx = torch.randint(len(x_train), (n,), generator=gen)  # on the CPU: the same stream on any device
        return prep(x_train[idx]), y_train[idx].to(device)

    def losses(model, x, y):
        out = model(x)
        return [F.cross_entropy(out[t], y[:, i]) for i, t in enumerate(tasks)], out

    def loss_fn(model, batch):
        return torch.stack(losses(model, *batch)[0]).mean()

    def evaluate(model):
        outs = [model(prep(x_eval[i:i + eval_batch])) for i in range(0, len(x_eval), eval_batch)]
        out = {t: torch.cat([o[t] for o in outs]) for t in tasks}
        ls = [F.cross_entropy(out[t], y_eval[:, i]) for i, t in enumerate(tasks)]
        acc = [float((out[t].argmax(1) == y_eval[:, i]).float().mean()) for i, t in enumerate(tasks)]
        return {"loss": float(torch.stack(ls).mean()), "accuracy": float(np.mean(acc))}

    return sample, loss_fn, evaluate


def run_arm(*, data: dict, model_config: dict, arm: str, samples: int, batch_size: int, lr: float, seed: int,
            heads: int = 1, rank: int = 8, alpha: float = 16.0, merge_every: int | None = None,
            optimizer: str = "adam", schedule: str = "cosine", merge: str = "reset_b", evals: int = 10,
            split: str = "test", same_init: bool = False, same_data: bool = False, track=None,
            device: str = "cpu") -> dict:
    """Train one arm to ``samples`` cumulative samples; returns its history and communication counts.

    ``batch_size`` is the cumulative batch B: standard steps on B items, each LTE head on B / N.
    """
    if arm not in ("standard", "lora", "lora_merge", "lte"):
        raise ValueError(f"arm={arm!r} is unknown; choose standard, lora, lora_merge or lte")
    if batch_size % heads:
        raise ValueError(f"batch_size={batch_size} must be a multiple of heads={heads} (each head gets B / N)")
    steps = max(1, samples // batch_size)
    sample, loss_fn, evaluate = make_task(data, split=split, device=device)
    torch.manual_seed(seed)
    model = build_model(model_config, num_classes=data["num_classes"]).to(device)
    eval_every = max(1, steps // evals)
    common = dict(model=model, sample=sample, loss_fn=loss_fn, evaluate=evaluate, lr=lr, seed=seed,
                  optimizer=optimizer, schedule=schedule, eval_every=eval_every)
    if arm == "standard":
        out = train_standard(steps=steps, batch_size=batch_size, skip=("head",), **common)
        return {"arm": arm, "history": out["history"], "bytes_per_sync": out["bytes_per_step"], "steps": steps}
    if arm != "lte":
        heads = 1
    if merge_every is not None:
        eval_every = max(merge_every, eval_every // merge_every * merge_every)  # evaluate at merges
    common["eval_every"] = eval_every
    out = train_lte(heads=heads, rank=rank, alpha=alpha, steps=steps,
                    merge_every=None if arm == "lora" else merge_every, merge=merge,
                    batch_size=batch_size // heads, skip=("head",), same_init=same_init, same_data=same_data,
                    track=track, rank_every_eval=True, **common)
    b = out["bytes_per_merge"]
    return {"arm": arm, "history": out["history"], "bytes_per_sync": b["lora"] + b["small"],
            "bytes_per_merge": b, "steps": steps, "merges": out["merges"], "heads": heads, "rank": rank,
            "merge_every": merge_every}
