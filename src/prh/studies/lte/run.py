"""``prh run-lte``: run one LTE experiment on every rank of a torchrun job; rank 0 writes the JSON.

    torchrun --standalone --nproc_per_node 2 -m prh.cli run-lte --experiment vision \\
        --data results/data/shapes_train --config '{...}' --out results/experiments/lte/vision.json

Experiments: ``least_squares`` (Fig 8.1), ``vision`` (learning-rate sweep and the four
arms of Figs 4.5/4.6 and 8.5), ``table`` (Table 4.9 mini: N x T), ``orthogonality``
(Fig 4.7). Without torchrun (no WORLD_SIZE in the environment) it runs as one rank.
The process group uses gloo on CPU and nccl when ``--device cuda``.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist

from prh.config import schema_defaults
from prh.io import json_object, write_json
from prh.studies.lte.engine import world

__all__ = ["EXPERIMENTS", "main", "run_orthogonality", "run_table", "run_vision"]

EXPERIMENTS = ("least_squares", "vision", "table", "orthogonality")
VISION_DEFAULTS = schema_defaults("lte")["vision"]  # workflow/schemas/lte.schema.yaml


def _vision_config(config: dict) -> dict:
    unknown = set(config) - set(VISION_DEFAULTS)
    if unknown:
        raise ValueError(f"vision config: unknown key(s) {sorted(unknown)}; known: {sorted(VISION_DEFAULTS)}")
    return {**VISION_DEFAULTS, **config}


def run_vision(*, data_path: str, seed: int = 0, device: str = "cpu", **config) -> dict:
    """Sweep learning rates (validation accuracy at ``sweep_fraction`` of the budget), then train the four arms."""
    from prh.studies.lte.vision import load_shapes_tensors, run_arm

    c = _vision_config(config)
    data = load_shapes_tensors(data_path, image_size=c["image_size"], seed=seed)
    shared = dict(data=data, model_config={"image_size": c["image_size"], **c["model"]}, batch_size=c["batch_size"],
                  seed=seed, rank=c["rank"], alpha=c["alpha"], evals=c["evals"], device=device)
    lte = dict(heads=c["heads"], merge_every=c["merge_every"])
    sweep, best = {}, {}
    for kind, grid in c["lr_grid"].items():
        arm = "standard" if kind == "standard" else "lte"
        sweep[kind] = {str(lr): run_arm(arm=arm, lr=lr, split="val", samples=int(c["samples"] * c["sweep_fraction"]),
                                        **lte, **shared)["history"][-1] for lr in grid}
        best[kind] = max(grid, key=lambda lr: sweep[kind][str(lr)]["accuracy"])
    arms = {
        "standard": run_arm(arm="standard", lr=best["standard"], samples=c["samples"], **shared),
        "lora": run_arm(arm="lora", lr=best["lte"], samples=c["samples"], **shared),
        "lora_merge": run_arm(arm="lora_merge", lr=best["lte"], samples=c["samples"], merge_every=c["merge_every"],
                              **shared),
        "lte": run_arm(arm="lte", lr=best["lte"], samples=int(c["samples"] * c["lte_factor"]), **lte, **shared),
    }
    return {"config": c, "seed": seed, "sweep": sweep, "lr": best, "arms": arms,
            "n_train": len(data["train"][0]), "n_test": len(data["test"][0])}


def run_table(*, data_path: str, lr: float, seed: int = 0, device: str = "cpu", **config) -> dict:
    """Table 4.9 mini: LTE for every N x T at one cumulative budget (``table_fraction`` x ``samples``), rank r,
    learning rate ``lr``."""
    from prh.studies.lte.vision import load_shapes_tensors, run_arm

    c = _vision_config(config)
    data = load_shapes_tensors(data_path, image_size=c["image_size"], seed=seed)
    rows = []
    for heads in c["table_heads"]:
        for t in c["table_merge_every"]:
            out = run_arm(arm="lte", data=data, model_config={"image_size": c["image_size"], **c["model"]},
                          batch_size=c["batch_size"], seed=seed, rank=c["rank"], alpha=c["alpha"], evals=4,
                          heads=heads, merge_every=t, lr=lr, samples=int(c["samples"] * c["table_fraction"]),
                          device=device)
            last = out["history"][-1]
            rows.append({"heads": heads, "rank": c["rank"], "merge_every": t, "test_loss": last["loss"],
                         "test_accuracy": last["accuracy"], "samples": last["samples"], "merges": out["merges"],
                         "bytes_per_merge": out["bytes_per_sync"]})
    return {"config": c, "seed": seed, "lr": lr, "rows": rows}


def run_orthogonality(*, data_path: str, lr: float, seed: int = 0, device: str = "cpu", **config) -> dict:
    """Fig 4.7: head alignment over training for same/different init x same/different data."""
    from prh.studies.lte.orthogonality import SETTINGS, head_alignment
    from prh.studies.lte.vision import load_shapes_tensors, run_arm

    c = _vision_config(config)
    data = load_shapes_tensors(data_path, image_size=c["image_size"], seed=seed)
    settings = {}
    for name, (same_init, same_data) in SETTINGS.items():
        curve = []

        def track(step, gathered, model, curve=curve):
            curve.append({"step": step, **head_alignment(gathered, rank=c["rank"])})

        out = run_arm(arm="lte", data=data, model_config={"image_size": c["image_size"], **c["model"]},
                      batch_size=c["batch_size"], seed=seed, rank=c["rank"], alpha=c["alpha"], evals=c["evals"],
                      heads=c["orth_heads"], merge_every=c["merge_every"], lr=lr, same_init=same_init,
                      same_data=same_data, samples=int(c["samples"] * c["orth_fraction"]), track=track,
                      device=device)
        last = out["history"][-1]
        settings[name] = {"same_init": same_init, "same_data": same_data, "curve": curve,
                          "test_accuracy": last["accuracy"], "test_loss": last["loss"]}
    return {"config": c, "seed": seed, "lr": lr, "settings": settings}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh run-lte", description=__doc__.splitlines()[0])
    p.add_argument("--experiment", required=True, choices=EXPERIMENTS)
    p.add_argument("--config", type=json_object, default={}, help="the params.yaml lte block's slice (JSON)")
    p.add_argument("--data", help="shapes dataset directory (vision experiments)")
    p.add_argument("--lr-from", help="vision.json whose swept LTE learning rate the table/orthogonality use")
    p.add_argument("--out", required=True, help="JSON to write (rank 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=args.device == "cuda")
    if "WORLD_SIZE" in os.environ and not dist.is_initialized():
        if args.device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    me, size = world()
    start, cpu = time.perf_counter(), time.process_time()
    if args.experiment == "least_squares":
        from prh.studies.lte.least_squares import run_least_squares

        result = run_least_squares(seed=args.seed, **args.config)
    else:
        if not args.data:
            p.error(f"--data is required for --experiment {args.experiment}")
        if args.experiment == "vision":
            result = run_vision(data_path=args.data, seed=args.seed, device=args.device, **args.config)
        else:
            if not args.lr_from:
                p.error(f"--lr-from vision.json is required for --experiment {args.experiment}")
            from prh.io import read_json

            lr = read_json(args.lr_from)["lr"]["lte"]
            fn = run_table if args.experiment == "table" else run_orthogonality
            result = fn(data_path=args.data, lr=lr, seed=args.seed, device=args.device, **args.config)
    cpu_total = torch.tensor([time.process_time() - cpu], dtype=torch.float64, device=args.device)
    if size > 1:
        dist.all_reduce(cpu_total)
    result["run"] = {"world_size": size, "backend": dist.get_backend() if size > 1 else None,
                     "seconds": round(time.perf_counter() - start, 2), "cpu_seconds_all_ranks": float(cpu_total.cpu())}
    if me == 0:
        write_json(args.out, result)
        print(f"{args.out}: {args.experiment} on {size} rank(s) in {result['run']['seconds']} s")
    if size > 1:
        dist.destroy_process_group()
