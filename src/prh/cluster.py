"""GPU jobs on a cluster: how many GPUs a hub model needs, and what a planned run costs.

One formula for the GPU count (issue 22): every rule that loads a hub model asks for
``gpus_needed`` GPUs and passes ``--device-map auto`` exactly when that is more than one;
the SLURM profile's notes and the README's table are generated from it (a test checks).

``plan_cost`` turns the jobs of a Snakemake dry run (rule, wildcards, resources) into
GPU-hours *reserved* (what the jobs ask SLURM for: ``gpu x runtime``) and *estimated*
(what they should use on an H100), per rule family::

    estimated GPU-seconds of a job = gpus x (startup + weight load + compute)
    startup     = STARTUP_S                                   (Python, CUDA, imports)
    weight load = 2 bytes x n_params / LOAD_BYTES_PER_S        (bf16 from a shared file system)
    compute     = 2 x n_params x tokens / (MFU x PEAK_FLOPS)   (a forward pass: 2 FLOPs per parameter per token)
                  (+ for generation: steps x 2 bytes x n_params / HBM_BYTES_PER_S, decoding is memory-bound)

Training and Jacobian jobs (``job_work``: LTE, bridge arms, seed 000, colour terms; one formula per family
counts the FLOPs on the job's busiest GPU) run in float32 (no autocast, TF32 off): GPUs held x (STARTUP_S +
weight bytes / LOAD_BYTES_PER_S + FLOPs / (MFU x FP32_PEAK_FLOPS)). A job with no formula, or whose config
lacks what it reads, counts its reservation as the estimate, marked. ``snakemake -n`` of the paper suite prints
the table (workflow/rules/common.smk); ``prh plan-cost`` runs that dry run and prints or saves it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from prh.io import write_json

__all__ = ["gpus_needed", "gpu_table", "job_tokens", "estimate_gpu_seconds", "job_work", "work_gpu_seconds", "plan_cost",
           "format_plan_cost", "emit_plan_cost", "main", "PLAN_COST_ENV", "PEAK_FLOPS", "FP32_PEAK_FLOPS", "MFU",
           "STARTUP_S", "LOAD_BYTES_PER_S", "HBM_BYTES_PER_S"]

BYTES_PER_PARAM = 2            # bf16 weights
ACTIVATION_OVERHEAD = 0.2      # activations, KV cache and CUDA context on top of the weights
PEAK_FLOPS = 989e12            # H100 SXM, bf16 dense
FP32_PEAK_FLOPS = 67e12        # H100 SXM, fp32 on CUDA cores: vision runs in features.vision_dtype (float32, as the
                               # reference) and PyTorch leaves TF32 matmuls off by default
MFU = 0.4                      # sustained share of the peak for batched bf16 forward passes (assumed)
STARTUP_S = 60.0               # per job: interpreter, imports, CUDA context, dataset read (assumed)
LOAD_BYTES_PER_S = 2e9         # weights from a shared file system into GPU memory (assumed)
HBM_BYTES_PER_S = 3.35e12      # H100 SXM memory bandwidth (decoding reads every weight once per step)
CAPTION_TOKENS = 32            # tokens of one paired caption (WIT-style alt text; assumed)
DENSE_CAPTION_TOKENS = 1400    # tokens of one dense DCI caption (issue 22)
TOKENS_PER_WORD = 1.33
PLAN_COST_ENV = "PRH_PLAN_COST_JSON"  # set by `prh plan-cost`: the dry run writes its summary there
UNKNOWN_ITEMS = 10_000         # items of a dataset whose size neither meta.json nor params give
FP32_BYTES = 4                 # the training / Jacobian families load and run float32 weights
CLASS_NAME_TOKENS = 4          # a caption that is a class name (hub sets without a text column), with special tokens
COLOR_PROMPTS, COLOR_PROMPT_TOKENS = 3, 12  # color.TEMPLATES per term; the longest (8 words) + term + specials
# forward GMACs per image of CNNs and Swin at timm's input size (torch.utils.flop_counter); others: 2 P tokens
GMACS = {"resnet34": 3.66, "resnet50": 4.09, "convnext_small": 8.68, "convnext_base": 15.35, "efficientnet_b1": 0.57,
         "efficientnet_b2": 0.86, "swin_small_patch4_window7_224": 8.74, "swin_base_patch4_window7_224": 15.43}
TIMM_SHAPES = {"vit_small": (384, 12), "vit_base": (768, 12), "mixer_s": (512, 8), "mixer_b": (768, 12)}  # C, depth
TRANSFORMERS = {"gpt2": (12, 768), "minilm": (6, 384)}  # (blocks, width) of bridge backbones outside paper.models

def gpus_needed(*, n_params: float, gpu_memory_gb: float, overhead: float = ACTIVATION_OVERHEAD,
                bytes_per_param: int = BYTES_PER_PARAM) -> int:
    """GPUs to hold a model: ``max(1, ceil(n_params x bytes_per_param x (1 + overhead) / (gpu_memory_gb x 1e9)))``.

    With the defaults: bf16 weights plus 20 % for activations. On 80 GB cards a 30B model gets 1,
    Mixtral-8x7B (46.7B) and LLaMA-65B 2, Llama-3-70B 3; on 40 GB cards twice as many.
    """
    if not n_params or n_params < 0:
        raise ValueError(f"n_params={n_params} must be a positive parameter count (params.yaml paper.models.<m>.n_params)")
    if not gpu_memory_gb or gpu_memory_gb <= 0:
        raise ValueError(f"gpu_memory_gb={gpu_memory_gb} must be > 0: the memory of one card (params.yaml cluster.gpu_memory_gb)")
    if overhead < 0 or bytes_per_param <= 0:
        raise ValueError(f"overhead={overhead} must be >= 0 and bytes_per_param={bytes_per_param} > 0")
    return max(1, math.ceil(float(n_params) * bytes_per_param * (1 + overhead) / (gpu_memory_gb * 1e9)))


def gpu_table(*, models: dict[str, dict], gpu_memory_gb: float) -> list[dict]:
    """Hub models that need more than one GPU: ``[{"model", "n_params", "gpus"}]``, largest first."""
    rows = [{"model": m, "n_params": int(s["n_params"]), "gpus": gpus_needed(n_params=s["n_params"],
                                                                             gpu_memory_gb=gpu_memory_gb)}
            for m, s in models.items() if s.get("n_params")]
    return sorted((r for r in rows if r["gpus"] > 1), key=lambda r: -r["n_params"])


def _items(dataset: str, datasets: dict, results: str | Path) -> int:
    """Items of a dataset: its meta.json count when materialised, else params' ``n``, else UNKNOWN_ITEMS."""
    meta = Path(results) / "data" / dataset / "meta.json"
    if meta.exists():
        count = json.loads(meta.read_text()).get("count")
        if count:
            return int(count)
    return int((datasets.get(dataset) or {}).get("n") or UNKNOWN_ITEMS)


def job_tokens(*, rule: str, wildcards: dict, config: dict, results: str | Path = "results") -> tuple[float, float]:
    """(tokens of forward passes, decoding steps) of one planned job; (0, 0) for a rule the estimate does not model.

    - ``extract_vision``: items x ``_vit_tokens`` of the timm name and the dataset's stored ``image_size``
    - ``extract_language``: items x CAPTION_TOKENS; ``extract_language_density`` (every level in one
      job): items x (TOKENS_PER_WORD x sum of num_words + DENSE_CAPTION_TOKENS, the dense caption)
    - ``lm_score``: paper.lm_score.n_bytes / 4 (about 4 bytes per token)
    - ``summarise_captions``: prefill items x levels x DENSE_CAPTION_TOKENS, and
      ceil(items / batch) x sum over levels of TOKENS_PER_WORD x num_words decoding steps
    """
    datasets = config.get("datasets", {})
    ds = wildcards.get("dataset")
    if rule == "extract_vision":
        stored = int(datasets.get(ds, {}).get("image_size", 224))
        arch = str(config.get("paper", {}).get("models", {}).get(wildcards["model"], {}).get("repo", "")).split(".")[0]
        return _items(ds, datasets, results) * _vit_tokens(arch, stored), 0.0
    if rule == "extract_language":
        return _items(ds, datasets, results) * CAPTION_TOKENS, 0.0
    num_words = list((config.get("density") or {}).get("num_words") or [])
    if rule == "extract_language_density":
        # one job writes every level (density.smk): num_words summaries, then the dense caption
        per_item = sum(TOKENS_PER_WORD * w for w in num_words) + DENSE_CAPTION_TOKENS
        return _items(ds, datasets, results) * per_item, 0.0
    if rule == "lm_score":
        return float((config.get("paper", {}).get("lm_score") or {}).get("n_bytes", 16e6)) / 4, 0.0
    if rule == "summarise_captions":
        density = config.get("density") or {}
        suite = config["suites"][config["suite"]]
        items = density.get("max_items") or _items(suite.get("density_dataset", suite["paired_dataset"]), datasets,
                                                   results)
        steps = math.ceil(items / int(density.get("batch_size") or 1)) * sum(TOKENS_PER_WORD * w for w in num_words)
        return items * len(num_words) * DENSE_CAPTION_TOKENS, steps
    return 0.0, 0.0


def _vit_tokens(arch: str, stored: int) -> int:
    """(side / patch)^2 + 1 tokens of a timm ViT: patch and side from the name (``vit_base_patch16_224``: 16, 224;
    no patch: 16), side capped by the stored size; a name without a size (DINOv2) reads the stored 518 px."""
    patch = int(m.group(1)) if (m := re.search(r"patch(\d+)", arch)) else 16
    side = min(stored, int(m.group(1))) if (m := re.search(r"_(\d{3,4})$", arch)) else stored
    return (side // patch) ** 2 + 1


def estimate_gpu_seconds(*, n_params: float, gpus: int, tokens: float, decode_steps: float = 0.0,
                         peak_flops: float = PEAK_FLOPS, mfu: float = MFU, startup_s: float = STARTUP_S,
                         load_bytes_per_s: float = LOAD_BYTES_PER_S, hbm_bytes_per_s: float = HBM_BYTES_PER_S) -> float:
    """GPU-seconds of one job: gpus x (startup + 2 n_params / load rate + 2 n_params tokens / (mfu peak)
    + decode_steps x 2 n_params / HBM bandwidth). A model spread over several GPUs (``device_map=auto``)
    runs its layers one GPU after the other, so its time is that of one GPU and every GPU is held."""
    if n_params <= 0 or gpus < 1 or tokens < 0 or decode_steps < 0:
        raise ValueError(f"n_params={n_params} must be > 0, gpus={gpus} >= 1, tokens={tokens} and "
                         f"decode_steps={decode_steps} >= 0")
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]")
    weight_bytes = BYTES_PER_PARAM * n_params
    seconds = (startup_s + weight_bytes / load_bytes_per_s + 2 * n_params * tokens / (mfu * peak_flops)
               + decode_steps * weight_bytes / hbm_bytes_per_s)
    return gpus * seconds


def _timm_matmuls(name: str, side: int) -> list[tuple[int, int, int, bool]]:
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
    c, world, n = lp["vision"], int(lp["nproc"]) * int(lp["nnodes"]), _items(wc["dataset"], config["datasets"], results)
    mm = _timm_matmuls(lp["models"][wc["model"]]["timm"], int(c["image_size"]))
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
        m = re.search(r"_k(all|\d+)_s\d+(?:_e(\d+))?$", wc["arm"])
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
    return (2e9 * GMACS[arch] if arch in GMACS else 2 * p * _vit_tokens(arch, int(ds.get("image_size", 224)))), p


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
    n_test = round(_items(data, config["datasets"], results) * ph["test_fraction"])
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


WORK = {"lte_paper": _lte_paper, "bridge_arm": _bridge_arm, "phase_model": _phase_model,
        "phase_adaptive_lr": _phase_adaptive_lr, "color_language": _color_language}


def job_work(*, rule: str, wildcards: dict, config: dict, results: str | Path = "results") -> tuple | None:
    """(FLOPs on the busiest GPU, weight bytes loaded, GPUs held or None: the job's ``gpu``) of a WORK job; None
    for another rule, or when the config lacks what the formula reads."""
    try:
        return WORK[rule](wildcards, config, results) if rule in WORK else None
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError):
        return None


def work_gpu_seconds(*, flops: float, load_bytes: float, gpus: int, fp32_peak_flops: float = FP32_PEAK_FLOPS,
                     mfu: float = MFU, startup_s: float = STARTUP_S, load_bytes_per_s: float = LOAD_BYTES_PER_S,
                     **_) -> float:
    """GPU-seconds of a ``job_work`` job: gpus x (startup + load_bytes / load rate + flops / (mfu x fp32 peak))."""
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]")
    return gpus * (startup_s + load_bytes / load_bytes_per_s + flops / (mfu * fp32_peak_flops))


def plan_cost(*, jobs: list[dict], config: dict, results: str | Path = "results", **rates) -> dict:
    """GPU-hours reserved and estimated of the planned jobs that ask for a GPU, per rule family (rule name,
    as ``prh bench-summary`` counts what a run used).

    jobs : ``[{"rule", "wildcards": {...}, "resources": {"gpu", "runtime", ...}}]`` (a dry run's plan).
    config : the merged Snakemake config (n_params of ``paper.models``, dataset sizes, density settings).
    rates : overrides of ``estimate_gpu_seconds``'s rates (peak_flops, fp32_peak_flops, mfu, startup_s, ...).

    reserved = gpu x runtime / 60; estimated = ``work_gpu_seconds`` of ``job_work`` (training, Jacobians) or
    ``estimate_gpu_seconds`` (forward passes), / 3600, else the reservation (``modelled: false``). Returns
    ``{"families": {rule: {"gpu_jobs", "reserved_gpu_h", "estimated_gpu_h", "modelled"}}, "total", "assumptions"}``.
    """
    models = (config.get("paper") or {}).get("models") or {}
    families: dict[str, dict] = {}
    for job in jobs:
        res, wc, rule = job.get("resources") or {}, job.get("wildcards") or {}, job["rule"]
        gpus = int(res.get("gpu") or 0)
        if gpus < 1:
            continue
        reserved = gpus * float(res.get("runtime") or 0) / 60
        # the hub model of a forward-pass job: its wildcard, or the captioner of summarise_captions
        name = wc["model"] if "model" in wc else (config.get("density") or {}).get("captioner")
        tokens, steps = job_tokens(rule=rule, wildcards=wc, config=config, results=results)
        work = job_work(rule=rule, wildcards=wc, config=config, results=results)
        modelled = bool(work or (name in models and (tokens or steps)))
        estimated = (work_gpu_seconds(flops=work[0], load_bytes=work[1], gpus=work[2] or gpus, **rates) / 3600 if work
                     else estimate_gpu_seconds(n_params=models[name]["n_params"], gpus=gpus, tokens=tokens,
                                               decode_steps=steps, **_rates_of(rule, config, rates)) / 3600
                     if modelled else reserved)
        fam = families.setdefault(rule, {"gpu_jobs": 0, "reserved_gpu_h": 0.0, "estimated_gpu_h": 0.0,
                                         "modelled": True})
        for key, value in (("gpu_jobs", 1), ("reserved_gpu_h", reserved), ("estimated_gpu_h", estimated)):
            fam[key] += value
        fam["modelled"] = fam["modelled"] and modelled
    total = {k: sum(f[k] for f in families.values()) for k in ("gpu_jobs", "reserved_gpu_h", "estimated_gpu_h")}
    total["estimated_modelled_gpu_h"] = sum(f["estimated_gpu_h"] for f in families.values() if f["modelled"])
    assumptions = {"peak_flops": PEAK_FLOPS, "fp32_peak_flops": FP32_PEAK_FLOPS, "vision_dtype": _vision_dtype(config),
                   "mfu": MFU, "startup_s": STARTUP_S, "load_bytes_per_s": LOAD_BYTES_PER_S,
                   "hbm_bytes_per_s": HBM_BYTES_PER_S, "caption_tokens": CAPTION_TOKENS,
                   "dense_caption_tokens": DENSE_CAPTION_TOKENS, **rates}
    return {"families": dict(sorted(families.items(), key=lambda kv: -kv[1]["reserved_gpu_h"])), "total": total,
            "assumptions": assumptions}


def _vision_dtype(config: dict) -> str:
    return str((config.get("features") or {}).get("vision_dtype") or "float32")


def _rates_of(rule: str, config: dict, rates: dict) -> dict:
    """``estimate_gpu_seconds`` rates of one job: vision extraction in float32 runs at the fp32 peak."""
    rates = dict(rates)
    fp32_peak = rates.pop("fp32_peak_flops", FP32_PEAK_FLOPS)
    if rule == "extract_vision" and _vision_dtype(config) == "float32":
        rates["peak_flops"] = fp32_peak
    return rates


def format_plan_cost(cost: dict) -> str:
    """The summary table ``snakemake -n`` and ``prh plan-cost`` print."""
    a = cost["assumptions"]
    lines = ["GPU-hours of the planned jobs (reserved: gpu x runtime asked of SLURM; estimated: H100 at "
             f"{a['mfu']:.0%} of {a['peak_flops'] / 1e12:.0f} TFLOP/s bf16, {a['fp32_peak_flops'] / 1e12:.0f} TFLOP/s"
             f" float32 (training, Jacobians{', vision' if a['vision_dtype'] == 'float32' else ''}), "
             f"{a['startup_s']:.0f} s startup, weights loaded at {a['load_bytes_per_s'] / 1e9:.0f} GB/s)",
             f"{'rule family':<30}{'GPU jobs':>9}{'reserved':>11}{'estimated':>11}"]
    for name, f in cost["families"].items():
        note = "" if f["modelled"] else "  (not modelled: estimate = reservation)"
        lines.append(f"{name:<30}{f['gpu_jobs']:>9}{f['reserved_gpu_h']:>11.1f}{f['estimated_gpu_h']:>11.1f}{note}")
    t = cost["total"]
    lines.append(f"{'total':<30}{t['gpu_jobs']:>9}{t['reserved_gpu_h']:>11.1f}{t['estimated_gpu_h']:>11.1f}")
    if not all(f["modelled"] for f in cost["families"].values()):
        lines.append(f"(modelled families alone: {t['estimated_modelled_gpu_h']:.1f} estimated GPU-hours)")
    return "\n".join(lines)


def emit_plan_cost(cost: dict) -> None:
    """What a dry run does with its summary: JSON to $PRH_PLAN_COST_JSON when ``prh plan-cost`` set it, else the
    table on stderr (so ``snakemake -n --dag | dot`` stays clean). Nothing for a plan without GPU jobs."""
    if not cost["families"]:
        return
    if os.environ.get(PLAN_COST_ENV):
        write_json(os.environ[PLAN_COST_ENV], cost)
    else:
        print(format_plan_cost(cost), file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="prh plan-cost",
        description="plan a run (snakemake --dry-run with the given arguments) and print its GPU-hours, "
                    "reserved vs estimated, per rule family",
        epilog="example: prh plan-cost --json cost.json -- --profile profiles/slurm --config suite=paper")
    p.add_argument("--json", default=None, help="also write the summary as JSON here")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="arguments of the dry run (after --)")
    a = p.parse_args(argv)
    args = a.snakemake_args[1:] if a.snakemake_args[:1] == ["--"] else a.snakemake_args
    args = args or ["--profile", "profiles/slurm", "--config", "suite=paper"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cost.json"
        proc = subprocess.run([sys.executable, "-m", "snakemake", "--dry-run", *args],
                              env={**os.environ, PLAN_COST_ENV: str(out)}, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            sys.exit(f"prh plan-cost: the dry run failed or planned no GPU job:\n{(proc.stdout + proc.stderr)[-4000:]}")
        cost = json.loads(out.read_text())
    if a.json:
        write_json(a.json, cost)
    print(format_plan_cost(cost))
