"""Train one offline-zoo vision model on the shapes world and save it as a zoo checkpoint.

PRH section 2 (Fig. 2) relates alignment to competence across models that differ
in architecture, objective and budget. Objectives (all with Adam, cosine schedule):

- ``supervised``: one linear head per shapes-world task on the pooled feature f(x);
  loss = mean over tasks t of cross-entropy(W_t f(x), y_t) (undefined labels, < 0, ignored).
- ``simclr`` (Chen et al. 2020): two augmented views, projection g(f(x)), NT-Xent
  ℓ_i = -log exp(s(z_i, z_j)/τ) / Σ_{k≠i} exp(s(z_i, z_k)/τ), s = cosine similarity.
  Views differ by a random resized crop and mild brightness/contrast jitter; no hue
  jitter and no flips, because colour and left/right are what the tasks ask about.
- ``denoise``: masked denoising autoencoder (Vincent et al. 2008; SimMIM-style input
  masking): a fraction of 8 x 8 patches is blanked and Gaussian noise added; a small
  conv decoder reconstructs the clean image (at quarter resolution, 16 x 16: colours and
  layout, not pixel texture) from f(x); loss = MSE.
- ``random``: the seeded initialisation, untrained.

Same arguments, same weights: every random draw comes from ``seed`` and training
runs in deterministic mode on the CPU (a test checks two runs give equal state dicts).

    prh train-vision --data results/data/shapes_train --arch resnet_xs \\
        --objective supervised --epochs 3 --out results/models/resnet_xs_sup --seed 0
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from prh.config import entry_fields
from prh.models.vision_zoo import MEAN, STD, build_model, save_checkpoint
from prh.errors import UsageError

__all__ = ["OBJECTIVES", "HYPER", "DEFAULTS", "fit_vision_model", "train_vision", "main"]

OBJECTIVES = ("supervised", "simclr", "denoise", "random")

# Hyperparameter -> (default, meaning); also the --flags of `prh train-vision`. The schema of a
# zoo.vision entry (workflow/schemas/zoo_vision.schema.yaml) is their one home.
HYPER_KEYS = ("epochs", "batch_size", "lr", "weight_decay", "n_train", "temperature", "crop_min", "jitter",
              "mask_ratio", "noise_std")
_FIELDS = entry_fields("zoo_vision.schema.yaml")
HYPER = {key: (_FIELDS[key].get("default"), _FIELDS[key]["description"].replace("%", "%%")) for key in HYPER_KEYS}
DEFAULTS = {key: value for key, (value, _) in HYPER.items()}


def normalise(batch_u8: torch.Tensor) -> torch.Tensor:
    """uint8 N x H x W x 3 -> float N x 3 x H x W in [0, 1]."""
    return batch_u8.permute(0, 3, 1, 2).float().div_(255.0)


def standardise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (x - mean) / std


def augment(x: torch.Tensor, *, gen: torch.Generator, crop_min: float, jitter: float) -> torch.Tensor:
    """One SimCLR view of images ``x`` (N x 3 x H x W in [0, 1]): random resized crop + brightness/contrast."""
    n = x.shape[0]
    area = crop_min + (1 - crop_min) * torch.rand(n, generator=gen)
    log_ratio = (torch.rand(n, generator=gen) * 2 - 1) * math.log(4 / 3)
    sx = (area * log_ratio.exp()).sqrt().clamp(max=1.0)
    sy = (area / log_ratio.exp()).sqrt().clamp(max=1.0)
    tx = (torch.rand(n, generator=gen) * 2 - 1) * (1 - sx)
    ty = (torch.rand(n, generator=gen) * 2 - 1) * (1 - sy)
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sx, tx, sy, ty
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    x = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    brightness = 1 + (torch.rand(n, 1, 1, 1, generator=gen) * 2 - 1) * jitter
    contrast = 1 + (torch.rand(n, 1, 1, 1, generator=gen) * 2 - 1) * jitter
    grey = x.mean(dim=(1, 2, 3), keepdim=True)
    return ((x * brightness - grey) * contrast + grey).clamp(0, 1)


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, *, temperature: float) -> torch.Tensor:
    """SimCLR's NT-Xent loss over the 2n views; positives are the two views of one image."""
    z = F.normalize(torch.cat([z1, z2]), dim=1)
    sim = z @ z.T / temperature
    sim.fill_diagonal_(float("-inf"))
    n = z1.shape[0]
    target = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
    return F.cross_entropy(sim, target)


class Decoder(nn.Module):
    """Pooled feature (D) -> image at ``out_size`` (3 x out_size x out_size): linear to 4 x 4, then upsampling convs."""

    def __init__(self, dim: int, *, out_size: int, width: int = 32):
        super().__init__()
        self.width = width
        self.fc = nn.Linear(dim, width * 16)
        layers: list[nn.Module] = []
        size = 4
        while size < out_size:
            layers += [nn.Upsample(scale_factor=2), nn.Conv2d(width, width, 3, padding=1), nn.GELU()]
            size *= 2
        self.up = nn.Sequential(*layers, nn.Conv2d(width, 3, 1))

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.up(self.fc(f).view(-1, self.width, 4, 4))


def _corrupt(x: torch.Tensor, *, gen: torch.Generator, mask_ratio: float, noise_std: float, patch: int = 8):
    n, _, h, w = x.shape
    keep = (torch.rand(n, 1, h // patch, w // patch, generator=gen) >= mask_ratio).float()
    keep = keep.repeat_interleave(patch, 2).repeat_interleave(patch, 3)
    return x * keep + noise_std * torch.randn(x.shape, generator=gen)


def _objective_modules(objective: str, *, dim: int, num_classes: dict[str, int], target_size: int) -> nn.Module:
    if objective == "supervised":
        return nn.ModuleDict({t: nn.Linear(dim, k) for t, k in num_classes.items()})
    if objective == "simclr":
        return nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, 64))
    return Decoder(dim, out_size=target_size)


def fit_vision_model(
    *,
    arch: str,
    objective: str,
    images: np.ndarray,
    labels: dict[str, np.ndarray] | None = None,
    num_classes: dict[str, int] | None = None,
    seed: int = 0,
    epochs: int = DEFAULTS["epochs"],
    batch_size: int = DEFAULTS["batch_size"],
    lr: float = DEFAULTS["lr"],
    weight_decay: float = DEFAULTS["weight_decay"],
    temperature: float = DEFAULTS["temperature"],
    crop_min: float = DEFAULTS["crop_min"],
    jitter: float = DEFAULTS["jitter"],
    mask_ratio: float = DEFAULTS["mask_ratio"],
    noise_std: float = DEFAULTS["noise_std"],
    progress: bool = True,
) -> tuple[nn.Module, dict]:
    """Build ``arch`` from ``seed`` and train it with ``objective`` on ``images``.

    Parameters
    ----------
    images : uint8 array N x H x W x 3.
    labels : task name -> int array (N,), needed for ``supervised``; values < 0 are ignored.
    num_classes : task name -> number of classes (default: max label + 1).

    Returns
    -------
    (model, config) : the backbone in eval mode and its ``config.json`` content with a
        ``training`` entry (objective, hyperparameters, steps, loss per epoch, seconds).
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r} is unknown; choose one of: {', '.join(OBJECTIVES)}")
    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise ValueError(f"images must be uint8 N x H x W x 3, got {images.dtype} {images.shape}")
    if objective == "supervised" and not labels:
        raise ValueError("labels is empty; objective='supervised' needs task labels (prh.data.tasks.task_labels)")
    if objective != "random" and epochs < 1:
        raise ValueError(f"epochs={epochs} must be >= 1 (objective='random' for an untrained model)")
    if objective != "random" and not 2 <= batch_size <= len(images):
        raise ValueError(f"batch_size={batch_size} must be in [2, number of images = {len(images)}]")

    model, config = build_model(arch=arch, seed=seed)
    hparams = dict(seed=seed, epochs=0 if objective == "random" else epochs, batch_size=batch_size, lr=lr,
                   weight_decay=weight_decay, n_train=len(images))
    if objective == "simclr":
        hparams.update(temperature=temperature, crop_min=crop_min, jitter=jitter)
    if objective == "denoise":
        hparams.update(mask_ratio=mask_ratio, noise_std=noise_std)
    info = {"objective": objective, **hparams, "steps": 0, "epoch_loss": [], "train_seconds": 0.0,
            "train_cpu_seconds": 0.0}
    if objective == "random":
        config["training"] = info
        return model.eval(), config

    label_t = {}
    if objective == "supervised":
        num_classes = num_classes or {t: int(y.max()) + 1 for t, y in labels.items()}
        label_t = {t: torch.as_tensor(np.asarray(y), dtype=torch.long) for t, y in labels.items()}
        info["tasks"] = sorted(label_t)
    head = _objective_modules(objective, dim=config["feature_dim"], num_classes=num_classes or {},
                              target_size=images.shape[1] // 4)
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    steps_per_epoch = len(images) // batch_size  # drop the ragged last batch: BatchNorm needs > 1 item
    total = steps_per_epoch * epochs
    warmup = max(1, total // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))
    )
    gen = torch.Generator().manual_seed(seed + 1)
    data = torch.from_numpy(images)
    model.train()
    head.train()
    start, cpu_start = time.perf_counter(), time.process_time()
    bar = tqdm(total=total, desc=f"{arch}/{objective}", disable=not progress, mininterval=5)
    for _ in range(epochs):
        order = torch.randperm(len(images), generator=gen)
        losses = []
        for b in range(steps_per_epoch):
            idx = order[b * batch_size:(b + 1) * batch_size]
            x = normalise(data[idx])
            if objective == "supervised":
                f = model(standardise(x))
                loss = torch.stack([F.cross_entropy(head[t](f), label_t[t][idx], ignore_index=-1)
                                    for t in sorted(label_t) if (label_t[t][idx] >= 0).any()]).mean()
            elif objective == "simclr":
                v1 = augment(x, gen=gen, crop_min=crop_min, jitter=jitter)
                v2 = augment(x, gen=gen, crop_min=crop_min, jitter=jitter)
                z = head(model(standardise(torch.cat([v1, v2]))))
                loss = nt_xent(z[: len(idx)], z[len(idx):], temperature=temperature)
            else:
                clean = standardise(x)
                noisy = _corrupt(clean, gen=gen, mask_ratio=mask_ratio, noise_std=noise_std)
                loss = F.mse_loss(head(model(noisy)), F.avg_pool2d(clean, 4))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            losses.append(loss.item())
            bar.update(1)
        info["epoch_loss"].append(float(np.mean(losses)))
        bar.set_postfix(loss=f"{info['epoch_loss'][-1]:.4f}")
    bar.close()
    info["steps"] = total
    info["train_seconds"] = round(time.perf_counter() - start, 2)
    # CPU seconds of this process: the cost on an idle core, even when other jobs share the machine.
    info["train_cpu_seconds"] = round(time.process_time() - cpu_start, 2)
    config["training"] = info
    return model.eval(), config


def train_vision(
    *,
    data: str,
    out: str,
    arch: str,
    objective: str,
    seed: int = 0,
    threads: int = 1,
    n_train: int | None = None,
    **hyper,
) -> dict:
    """Load the shapes training set at ``data``, train (see ``fit_vision_model``), save to ``out``.

    Returns the checkpoint's config dict (also written to ``out/config.json``).
    """
    from prh.data.shapes import load_dataset
    from prh.data.tasks import TASKS, task_labels

    if threads < 1:
        raise UsageError(f"threads={threads} must be >= 1")
    ds = load_dataset(data)
    n = len(ds.images) if n_train is None else int(n_train)
    if not 1 <= n <= len(ds.images):
        raise ValueError(f"n_train={n_train} must be between 1 and the dataset size {len(ds.images)}")
    labels = num_classes = None
    if objective == "supervised":
        labels = {t: y[:n] for t, y in task_labels(ds.scenes[:n]).items()}
        num_classes = {t: TASKS[t].num_classes for t in labels}
    # Process-wide torch settings, restored afterwards so callers (and tests) keep theirs.
    old_threads, old_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        model, config = fit_vision_model(arch=arch, objective=objective, images=ds.images[:n], labels=labels,
                                         num_classes=num_classes, seed=seed, **hyper)
    finally:
        torch.set_num_threads(old_threads)
        torch.use_deterministic_algorithms(old_det)
    config["training"]["dataset"] = {"path": str(data), "sha256": ds.meta.get("sha256")}
    save_checkpoint(out, model=model, config=config)
    return config


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh train-vision", description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="shapes dataset directory (results/data/shapes_train)")
    p.add_argument("--out", required=True, help="checkpoint directory to write (results/models/<name>)")
    p.add_argument("--arch", required=True, help="a vision zoo architecture (prh.models.vision_zoo.ARCHS)")
    p.add_argument("--objective", required=True, choices=OBJECTIVES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    for key, (value, meaning) in HYPER.items():
        kind = int if key in ("epochs", "batch_size", "n_train") else float
        p.add_argument("--" + key.replace("_", "-"), type=kind, default=value, help=meaning)
    args = vars(p.parse_args(argv))
    config = train_vision(**args)
    t = config["training"]
    print(f"{args['out']}: {config['arch']} {t['objective']} {t['steps']} steps in {t['train_seconds']} s "
          f"({t['train_cpu_seconds']} CPU s), "
          f"loss per epoch {[round(x, 4) for x in t['epoch_loss']]}")
