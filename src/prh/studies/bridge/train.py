"""Stage 1 of the bridge (seed 001, Figs 3/6/12): training on images with a random-label ratio ρ.

Random labels (after Zhang et al. 2017, as the seed's Figs 3/12): of the N training items
exactly round(ρ N), chosen by a seeded permutation, get a label drawn uniformly from the
``num_classes`` classes (it may equal the true one); the others keep their true label::

    y'_i = u_i ~ U{0..c-1}   if i in S (|S| = round(ρ N)),   y'_i = y_i   otherwise.

Training: AdamW on cross-entropy against y', two learning rates (new parts: the patch
embedding and head; pretrained parts: the bridged blocks), a constant schedule; after
every epoch the accuracy on the (noisy) training labels and on held-out items with their
true labels is recorded (the seed's train / test curves).

Labelled image sets: a shapes-world dataset dir (labels = a task of ``prh.data.tasks``) or
a hub dataset dir (``labels.npy``, task ``label``: CIFAR-10/100 in the paper config).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["random_labels", "load_labelled", "to_tensor", "train_bridge", "accuracy"]


def random_labels(labels, *, ratio: float, num_classes: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Replace the labels of exactly round(ratio * N) seeded items by uniform random classes.

    Returns
    -------
    (new labels int64 array, boolean mask of the replaced items)
    """
    labels = np.asarray(labels, dtype=np.int64)
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio={ratio} must lie in [0, 1] (the fraction of random labels)")
    if num_classes < 2 or labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in 0..num_classes-1 with num_classes >= 2, got num_classes={num_classes}")
    rng = np.random.default_rng([seed, 1])
    n_random = int(round(ratio * len(labels)))
    mask = np.zeros(len(labels), dtype=bool)
    mask[rng.permutation(len(labels))[:n_random]] = True
    out = labels.copy()
    out[mask] = rng.integers(0, num_classes, size=n_random)
    return out, mask


def load_labelled(data: str | Path, *, tasks: list[str] | None = None, n: int | None = None
                  ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, int]]:
    """(images N x H x W x 3 uint8, {task: labels}, {task: num_classes}) of a dataset dir, first ``n`` items.

    A shapes dataset (``scenes.jsonl``) gives the world tasks (all when ``tasks`` is None); a hub
    dataset (``labels.npy``) gives the one task ``label``.
    """
    from prh.io import read_json, read_jsonl

    data = Path(data)
    images = np.load(data / "images.npy", mmap_mode="r")
    n = len(images) if n is None else min(int(n), len(images))
    if (data / "scenes.jsonl").exists():
        from prh.data.tasks import TASKS, task_labels

        scenes = [r["scene"] for r in read_jsonl(data / "scenes.jsonl")][:n]
        labels = task_labels(scenes, tasks)
        classes = {t: TASKS[t].num_classes for t in labels}
    elif (data / "labels.npy").exists():
        if tasks not in (None, ["label"]):
            raise ValueError(f"{data} is a hub dataset with one task 'label'; got tasks={tasks}")
        y = np.load(data / "labels.npy")[:n].astype(np.int64)
        names = (read_json(data / "meta.json") if (data / "meta.json").exists() else {}).get("label_names")
        labels, classes = {"label": y}, {"label": len(names) if names else int(y.max()) + 1}
    else:
        raise FileNotFoundError(f"{data} has neither scenes.jsonl (shapes world) nor labels.npy (hub dataset); "
                                "build it with `prh make-shapes` or `prh hub-dataset --label-column ...`")
    return np.ascontiguousarray(images[:n]), labels, classes


def to_tensor(images: np.ndarray, device: str | torch.device = "cpu") -> torch.Tensor:
    """uint8 N x H x W x 3 -> float N x 3 x H x W in [-1, 1], on ``device``."""
    x = torch.from_numpy(np.array(images, copy=True)).to(device)
    return x.permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def _device(model) -> torch.device:
    return next(model.parameters()).device


@torch.no_grad()
def accuracy(model, images: np.ndarray, labels: np.ndarray, *, batch_size: int = 128) -> float:
    """Top-1 accuracy of ``model`` (eval mode) on uint8 images."""
    was = model.training
    model.eval()
    hits = 0
    for s in range(0, len(images), batch_size):
        logits = model(to_tensor(images[s:s + batch_size], _device(model)))
        hits += int((logits.argmax(1).cpu().numpy() == labels[s:s + batch_size]).sum())
    model.train(was)
    return hits / max(len(images), 1)


def train_bridge(model, images: np.ndarray, labels: np.ndarray, *, epochs: int = 2, batch_size: int = 32,
                 lr_new: float = 1e-3, lr_blocks: float = 1e-4, weight_decay: float = 0.01, seed: int = 0,
                 eval_images: np.ndarray | None = None, eval_labels: np.ndarray | None = None) -> dict:
    """Train the trainable parameters of ``model`` (``set_bridge``) on (images, labels).

    Returns ``{"epoch": [0..epochs], "train_accuracy": [...], "test_accuracy": [...], "loss": [...]}``:
    epoch 0 is before training; train accuracy is the running accuracy of the epoch's minibatches on
    the training labels given (free, in train mode), test accuracy on (eval_images, eval_labels).
    """
    if epochs < 0 or batch_size < 1:
        raise ValueError(f"epochs={epochs} must be >= 0 and batch_size={batch_size} >= 1")
    labels = np.asarray(labels, dtype=np.int64)
    new = [p for m in (model.embed, model.head) for p in m.parameters() if p.requires_grad]
    ids = {id(p) for p in new}
    old = [p for p in model.parameters() if p.requires_grad and id(p) not in ids]
    groups = [{"params": new, "lr": lr_new}] + ([{"params": old, "lr": lr_blocks}] if old else [])
    opt = torch.optim.AdamW(groups, weight_decay=weight_decay)
    gen = np.random.default_rng([seed, 2])
    torch.manual_seed(seed)

    def record(loss, train_acc):
        curves["train_accuracy"].append(train_acc)
        curves["test_accuracy"].append(None if eval_images is None else accuracy(model, eval_images, eval_labels))
        curves["loss"].append(loss)

    curves = {"epoch": list(range(epochs + 1)), "train_accuracy": [], "test_accuracy": [], "loss": []}
    record(None, None)
    model.train()
    for _ in range(epochs):
        order, total, hits = gen.permutation(len(images)), 0.0, 0
        for s in range(0, len(images), batch_size):
            idx = np.sort(order[s:s + batch_size])
            logits = model(to_tensor(images[idx], _device(model)))
            loss = F.cross_entropy(logits, torch.from_numpy(labels[idx]).to(logits.device))
            hits += int((logits.argmax(1).cpu().numpy() == labels[idx]).sum())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += loss.item() * len(idx)
        record(total / len(images), hits / len(images))
    return curves
