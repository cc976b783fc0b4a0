"""Training and Jacobian jobs of the plan cost (``job_work``): one formula per rule family (LTE, bridge arms, seed 000,
colour terms) counts the FLOPs on the job's busiest GPU and the weight bytes it loads; ``work_gpu_seconds`` turns
them into GPU-seconds at the float32 peak."""

from __future__ import annotations

import re
from pathlib import Path

from prh.cluster.rates import (CAPTION_TOKENS, CLASS_NAME_TOKENS, COLOR_PROMPT_TOKENS, COLOR_PROMPTS, FP32_BYTES,
                               FP32_PEAK_FLOPS, GMACS, LOAD_BYTES_PER_S, STARTUP_S, TIMM_SHAPES, TRAIN_MFU, TRANSFORMERS,
                               dataset_items, vit_tokens)

__all__ = ["job_work", "work_gpu_seconds", "timm_matmuls", "WORK"]


def timm_matmuls(name: str, side: int) -> list[tuple[int, int, int, bool]]:
    """(out, in, rows per image, LoRA'd) of each matmul of a timm ViT (qkv, proj, fc1, fc2 on patches + 1 tokens)
    or Mixer (token MLP C/2 on C rows, channel MLP 4C; TIMM_SHAPES), after the patch embedding (a Conv2d)."""
    m = re.match(r"(vit_[a-z]+)_patch(\d+)|(mixer_[a-z])(\d+)", name)
    (c, depth), p = TIMM_SHAPES[m.group(1) or m.group(3)], int(m.group(2) or m.group(4))
    s = (side // p) ** 2
    block = ([(3 * c, c, s + 1), (c, c, s + 1), (4 * c, c, s + 1), (c, 4 * c, s + 1)] if m.group(1) else
             [(c // 2, s, c), (s, c // 2, c), (4 * c, c, s), (c, 4 * c, s)])
    return [(c, 3 * p * p, s, False)] + [(o, i, r, True) for o, i, r in block] * depth


def _lte_paper(wc: dict, config: dict, results) -> tuple:
    """``lte_paper``: ``run_vision`` (lte.paper.vision) on nproc x nnodes ranks, all held: per lr_grid entry a standard
    and an LTE run of samples x sweep_fraction (scored on 0.08 n items), then standard, lora, lora_merge of samples and
    LTE of samples x lte_factor (0.2 n); steps = samples // batch_size. FLOPs of the busiest rank: standard (DDP) steps
    x batch x 3 f / ranks; LoRA arms (lora, lora_merge: one head, one rank) steps x ceil(heads / ranks) x batch / heads
    x (2 f + 2 f_whole + 6 rank L) + merges x heads x 2 rank sum(out x in); + ~evals x items scored x f on rank 0.
    f = 2 sum(out x in x rows) (``_timm_matmuls``), f_whole that of layers trained whole, L = sum((out + in) x rows)
    of the LoRA'd ones (frozen W: a forward and an input gradient); merges: steps // merge_every, or the evals."""
    lp = config["lte"]["paper"]
    c, world, n = lp["vision"], int(lp["nproc"]) * int(lp["nnodes"]), dataset_items(wc["dataset"], config["datasets"], results)
    mm = timm_matmuls(lp["models"][wc["model"]]["timm"], int(c["image_size"]))
    f = 2 * sum(o * i * r for o, i, r, _ in mm)
    lte_step = 2 * f + sum(2 * o * i * r if not lo else 6 * c["rank"] * (o + i) * r for o, i, r, lo in mm)
    merge = 2 * c["rank"] * sum(o * i for o, i, _, lo in mm if lo)
    b, t, heads, full = int(c["batch_size"]), c["merge_every"], c["heads"], c["samples"]
    sweep = [(full * c["sweep_fraction"], .08, h, m) for h, m, g in ((0, None, "standard"), (heads, t, "lte"))
             for _ in c["lr_grid"][g]]
    flops = 0.0  # runs: (samples, share of n scored, heads (0: standard), merge_every)
    for samples, scored, h, m in sweep + [(full, .2, 0, None), (full, .2, 1, None), (full, .2, 1, t),
                                          (full * c["lte_factor"], .2, heads, t)]:
        steps = max(1, int(samples) // b)
        every = max(1, steps // c["evals"])
        evals = -(-steps // (max(m, every // m * m) if m else every))
        train = steps * b * 3 * f / world if not h else steps * -(-h // world) * (b // h) * lte_step
        flops += train + evals * scored * n * f + (steps // m if m else evals) * h * merge
    return flops, 0.0, world


def _bridge_arm(wc: dict, config: dict, results) -> tuple:
    """``bridge_arm``: epochs x n_train x T x (4 + 2 k / blocks) x P + ((epochs + 1) x n_eval + n_probe) x T x 2 P
    (stage 1, frozen blocks passing input gradients; held-out accuracy per epoch; stage-2 features; not the CPU
    probes). P = 12 blocks width^2 (TRANSFORMERS) or paper.models.<source>.n_params; T = (train_data's image_size /
    patch_size)^2 + 1; bridge.<suite>.config: source, patch_size, n_*, epochs; the arm's k and epochs
    (bridge.<suite>.arms, or a sweep's name ``{init}_r{ratio}_k{blocks}_s{seed}[_e{epochs}]``)."""
    b = config["bridge"][config["suite"]]
    c, arm = b.get("config") or {}, (b.get("arms") or {}).get(wc["arm"])
    if arm is None:
        m = re.search(r"_k(all|\d+)_s\d+(?:_e(\d+))?\Z", wc["arm"])
        arm = {"blocks": m.group(1), "epochs": m.group(2)}
    depth, width = TRANSFORMERS.get(c.get("source", "minilm"), (0, 0))
    p = 12 * depth * width ** 2 or float(config["paper"]["models"][c["source"]]["n_params"])
    epochs = int(c.get("epochs", 2) if arm.get("epochs") is None else arm["epochs"])
    k = 1.0 if str(arm.get("blocks", "all")) == "all" or not depth else min(1.0, int(arm["blocks"]) / depth)
    t = (int(config["datasets"][b["train_data"]].get("image_size", 64)) // int(c.get("patch_size", 16))) ** 2 + 1
    return (epochs * c.get("n_train", 640) * t * (4 + 2 * k) * p + ((epochs + 1) * c.get("n_eval", 128)
            + c.get("n_probe", 600)) * t * 2 * p), FP32_BYTES * p, None


def _item_flops(model: str, config: dict, dataset: str) -> tuple[float, float]:
    """(forward FLOPs of one item, P = paper.models.<m>.n_params): language 2 P x CAPTION_TOKENS (CLASS_NAME_TOKENS
    for a set without text_column); vision 2 x GMACS, else 2 P x ViT tokens."""
    spec, ds = config["paper"]["models"][model], config["datasets"][dataset]
    p, arch = float(spec["n_params"]), str(spec.get("repo", "")).split(".")[0]
    if spec.get("modality") == "language":
        return 2 * p * (CAPTION_TOKENS if ds.get("text_column") else CLASS_NAME_TOKENS), p
    return (2e9 * GMACS[arch] if arch in GMACS else 2 * p * vit_tokens(arch, int(ds.get("image_size", 224)))), p


def _ntk(items: int, f: float, p: float, ph: dict) -> float:
    """One NTK: items x (1 + 2 R) f (jacrev: a forward and R = n_readouts backward passes), the count sketch
    (items x R x P adds when P > exact_max_params) and the Gram 2 (items R)^2 m (m = sketch_dim, or P)."""
    r, sk = ph["n_readouts"], p > ph["exact_max_params"]
    return items * (1 + 2 * r) * f + sk * items * r * p + 2 * (items * r) ** 2 * (ph["sketch_dim"] if sk else p)


def _phase_model(wc: dict, config: dict, results) -> tuple:
    """``phase_model``: _ntk(n_ntk) + _ntk(min(n_stability, n_ntk)) + check x (1 + 2 R) f + train_steps x
    train_batch_size x 3 f (phase.*, on phase.paired_dataset); check = min(sketch_check_items, 2^27 / (R P)) exact
    items when sketched, none below 2 (dynamics.model_ntk)."""
    ph = config["phase"]
    data = ph["paired_dataset"][config["suite"]] or config["suites"][config["suite"]]["paired_dataset"]
    (f, p), r = _item_flops(wc["model"], config, data), ph["n_readouts"]
    check = min(ph["sketch_check_items"], 2 ** 27 // int(r * p)) if p > ph["exact_max_params"] else 0
    return (_ntk(ph["n_ntk"], f, p, ph) + _ntk(min(ph["n_stability"], ph["n_ntk"]), f, p, ph) + (check > 1) * check
            * (1 + 2 * r) * f + ph["train_steps"] * ph["train_batch_size"] * 3 * f), FP32_BYTES * p, None


def _phase_adaptive_lr(wc: dict, config: dict, results) -> tuple:
    """``phase_adaptive_lr``: 2 runs (fixed, adaptive; a load each) x min(n_pairs, vision x language) pairs x (steps x
    batch_size x 3 f + ceil(steps / every) x _ntk(n_items) + round(items x test_fraction) x f) (phase.adaptive_lr.*;
    f, P: the mean over the phase vision models, as the pairs are a uniform sample; models as common.smk)."""
    ph, suite, sets, name = config["phase"], config["suites"][config["suite"]], config["model_sets"], config["suite"]
    data, a = ph["paired_dataset"][name] or suite["paired_dataset"], ph["adaptive_lr"]
    vision = sets[ph["vision_models"][name] or suite["vision_models"]]
    runs = 2 * min(a["n_pairs"], len(vision) * len(sets[ph["language_models"][name] or suite.get(
        "language_panel", suite["language_models"])]))
    f, p = (sum(_item_flops(v, config, data)[k] for v in vision) / len(vision) for k in (0, 1))
    n_test = round(dataset_items(data, config["datasets"], results) * ph["test_fraction"])
    ntks = -(-a["steps"] // a["every"]) * _ntk(min(a["n_items"], ph["n_ntk"]), f, p, ph)
    return runs * (a["steps"] * a["batch_size"] * 3 * f + ntks + n_test * f), runs * FP32_BYTES * p, None


def _color_language(wc: dict, config: dict, results) -> tuple:
    """``color_language``: sum over color.language_models of 2 P x len(color.language.terms) x COLOR_PROMPTS x
    COLOR_PROMPT_TOKENS (a forward pass over the prompts) and a load of P (a terms_file counts as the terms)."""
    names = config["color"]["language_models"][config["suite"]]
    ps = [float(config["paper"]["models"][m]["n_params"]) for m in (config["model_sets"][names] if isinstance(
        names, str) else names)]
    prompts = len(config["color"]["language"]["terms"]) * COLOR_PROMPTS * COLOR_PROMPT_TOKENS
    return sum(2 * p * prompts for p in ps), FP32_BYTES * sum(ps), None


def _preflight(wc: dict, config: dict, results) -> tuple:
    """``preflight`` (prh.preflight): one load of the smallest model of each family (``paper.models.<m>.family``) and a
    batch of two items (FLOPs left out)."""
    smallest: dict[str, float] = {}
    for spec in (config["paper"].get("models") or {}).values():
        key = f"{spec['modality']}:{spec.get('family') or spec['repo'].rsplit('.', 1)[-1]}"
        smallest[key] = min(smallest.get(key, float("inf")), float(spec["n_params"]))
    return 0.0, 2 * sum(smallest.values()), None


WORK = {"lte_paper": _lte_paper, "bridge_arm": _bridge_arm, "phase_model": _phase_model,
        "phase_adaptive_lr": _phase_adaptive_lr, "color_language": _color_language, "preflight": _preflight}


def job_work(*, rule: str, wildcards: dict, config: dict, results: str | Path = "results") -> tuple | None:
    """(FLOPs on the busiest GPU, weight bytes loaded, GPUs held or None: the job's ``gpu``) of a WORK job; None
    for another rule, or when the config lacks what the formula reads."""
    try:
        return WORK[rule](wildcards, config, results) if rule in WORK else None
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError):
        return None


def work_gpu_seconds(*, flops: float, load_bytes: float, gpus: int, fp32_peak_flops: float = FP32_PEAK_FLOPS,
                     mfu: float = TRAIN_MFU, startup_s: float = STARTUP_S, load_bytes_per_s: float = LOAD_BYTES_PER_S,
                     **_) -> float:
    """GPU-seconds of a ``job_work`` job: gpus x (startup + load_bytes / load rate + flops / (mfu x fp32 peak))."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]")
    return gpus * (startup_s + load_bytes / load_bytes_per_s + flops / (mfu * fp32_peak_flops))

