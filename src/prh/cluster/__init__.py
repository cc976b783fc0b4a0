"""GPU jobs on a cluster: how many GPUs a hub model needs, and what a planned run costs.

One formula for the GPU count: every rule that loads a hub model asks for
``gpus_needed`` GPUs and passes ``--device-map auto`` exactly when that is more than one;
the SLURM profile's notes and docs/paper_suite.md's table are generated from it (a test checks).

``plan_cost`` turns the jobs of a Snakemake dry run (rule, wildcards, resources) into
GPU-hours *reserved* (what the jobs ask SLURM for: ``gpu x runtime``) and *estimated*
(what they should use on an H100), per rule family::

    estimated GPU-seconds of a job = gpus x (startup + weight load + compute)
    startup     = STARTUP_S                                   (Python, CUDA, imports)
    weight load = 2 bytes x n_params / LOAD_BYTES_PER_S        (bf16 from a shared file system)
    compute     = 2 x n_params x tokens / (MFU x PEAK_FLOPS)   (a forward pass: 2 FLOPs per parameter per token)
                  (+ for generation: steps x 2 bytes x n_params / HBM_BYTES_PER_S, decoding is memory-bound)

Training and Jacobian jobs (``job_work``: LTE, bridge arms, seed 000, colour terms; one formula per family
counts the FLOPs on the job's busiest GPU; ``prh.cluster.work``) run in float32 (no autocast, TF32 off): GPUs held x (STARTUP_S +
weight bytes / LOAD_BYTES_PER_S + FLOPs / (MFU x FP32_PEAK_FLOPS)). A job with no formula, or whose config
lacks what it reads, counts its reservation as the estimate, marked. ``snakemake -n`` of the paper suite prints
the table (workflow/rules/common.smk); ``prh plan-cost`` runs that dry run and prints or saves it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from prh.cluster.rates import (ACTIVATION_OVERHEAD, BYTES_PER_PARAM, CAPTION_TOKENS, DENSE_CAPTION_TOKENS,
                               FP32_PEAK_FLOPS, HBM_BYTES_PER_S, LOAD_BYTES_PER_S, MFU, PEAK_FLOPS, PLAN_COST_ENV,
                               HARNESS_TASKS, STARTUP_S, TF32_PEAK_FLOPS, TOKENS_PER_WORD, TRAIN_MFU, VISION_MFU,
                               dataset_items, vit_tokens)
from prh.cluster.work import job_work, work_gpu_seconds
from prh.io import write_json

__all__ = ["gpus_needed", "gpu_table", "job_tokens", "estimate_gpu_seconds", "job_work", "work_gpu_seconds", "plan_cost",
           "format_plan_cost", "emit_plan_cost", "main", "PLAN_COST_ENV", "PEAK_FLOPS", "FP32_PEAK_FLOPS", "MFU",
           "STARTUP_S", "LOAD_BYTES_PER_S", "HBM_BYTES_PER_S", "read_rates", "plan_rates", "RATES_ENV", "RATE_KEYS",
           "runtime_minutes", "runtime_rule", "RUNTIME_HEADROOM"]


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



def job_tokens(*, rule: str, wildcards: dict, config: dict, results: str | Path = "results") -> tuple[float, float]:
    """(tokens of forward passes, decoding steps) of one planned job; (0, 0) for a rule the estimate does not model.

    - ``extract_vision``: items x ``_vit_tokens`` of the timm name and the dataset's stored ``image_size``; a model
      that declares ``gmacs`` (a CNN): items x gmacs x 1e9 / n_params
    - ``extract_language``: items x CAPTION_TOKENS; ``extract_language_density`` (every level in one
      job): items x (TOKENS_PER_WORD x sum of num_words + DENSE_CAPTION_TOKENS, the dense caption)
    - ``lm_score``: paper.lm_score.n_bytes / 4 (about 4 bytes per token)
    - ``downstream_harness``: per task of downstream.harness, items x requests x (shots + 1) x tokens of an example,
      and ceil(items / batch_size) x generated tokens decoding steps (``HARNESS_TASKS``; items capped by ``limit``)
    - ``summarise_captions``: prefill items x levels x DENSE_CAPTION_TOKENS, and
      ceil(items / batch) x sum over levels of TOKENS_PER_WORD x num_words decoding steps
    """
    datasets = config.get("datasets", {})
    ds = wildcards.get("dataset")
    if rule == "extract_vision":
        stored = int(datasets.get(ds, {}).get("image_size", 224))
        spec = config.get("paper", {}).get("models", {}).get(wildcards["model"], {})
        if spec.get("gmacs"):  # a CNN declares its MACs per image: as tokens of 2 x n_params FLOPs each
            return dataset_items(ds, datasets, results) * float(spec["gmacs"]) * 1e9 / float(spec["n_params"]), 0.0
        arch = str(spec.get("repo", "")).split(".")[0]
        return dataset_items(ds, datasets, results) * vit_tokens(arch, stored), 0.0
    if rule == "extract_language":
        return dataset_items(ds, datasets, results) * CAPTION_TOKENS, 0.0
    num_words = list((config.get("density") or {}).get("num_words") or [])
    if rule == "extract_language_density":
        # one job writes every level (density.smk): num_words summaries, then the dense caption
        per_item = sum(TOKENS_PER_WORD * w for w in num_words) + DENSE_CAPTION_TOKENS
        return dataset_items(ds, datasets, results) * per_item, 0.0
    if rule == "lm_score":
        return float((config.get("paper", {}).get("lm_score") or {}).get("n_bytes", 16e6)) / 4, 0.0
    if rule == "downstream_harness":
        h = (config.get("downstream") or {}).get("harness") or {}
        tokens = steps = 0.0
        for task, spec in (h.get("tasks") or {}).items():
            items, requests, per_example, gen = HARNESS_TASKS[task]
            items = min(items, h.get("limit") or items)
            tokens += items * requests * (int(spec.get("num_fewshot", 0)) + 1) * per_example
            steps += math.ceil(items / int(h.get("batch_size") or 1)) * gen
        return tokens, steps
    if rule == "summarise_captions":
        density = config.get("density") or {}
        suite = config["suites"][config["suite"]]
        items = density.get("max_items") or dataset_items(suite.get("density_dataset", suite["paired_dataset"]), datasets,
                                                   results)
        steps = math.ceil(items / int(density.get("batch_size") or 1)) * sum(TOKENS_PER_WORD * w for w in num_words)
        return items * len(num_words) * DENSE_CAPTION_TOKENS, steps
    return 0.0, 0.0



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
        # the hub model of a forward-pass job: its wildcard, or the captioner of summarise_captions
        name = wc["model"] if "model" in wc else (config.get("density") or {}).get("captioner")
        tokens, steps = job_tokens(rule=rule, wildcards=wc, config=config, results=results)
        work = job_work(rule=rule, wildcards=wc, config=config, results=results)
        # a job over several nodes asks `gpu` per node (lte_paper: nproc) and holds every rank's card (work[2])
        held = max(gpus, work[2]) if work and work[2] else gpus
        reserved = held * float(res.get("runtime") or 0) / 60
        modelled = bool(work or (name in models and (tokens or steps)))
        estimated = (work_gpu_seconds(flops=work[0], load_bytes=work[1], gpus=held, **_training_rates(rates)) / 3600
                     if work
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
    assumptions = {"peak_flops": PEAK_FLOPS, "fp32_peak_flops": FP32_PEAK_FLOPS, "tf32_peak_flops": TF32_PEAK_FLOPS,
                   "vision_dtype": _vision_dtype(config),
                   "mfu": MFU, "vision_mfu": VISION_MFU, "train_mfu": TRAIN_MFU, "startup_s": STARTUP_S, "load_bytes_per_s": LOAD_BYTES_PER_S,
                   "hbm_bytes_per_s": HBM_BYTES_PER_S, "caption_tokens": CAPTION_TOKENS,
                   "dense_caption_tokens": DENSE_CAPTION_TOKENS, **rates}
    return {"families": dict(sorted(families.items(), key=lambda kv: -kv[1]["reserved_gpu_h"])), "total": total,
            "assumptions": assumptions}


RUNTIME_HEADROOM = 2.0  # a GPU job's time limit over its estimated wall time


def runtime_minutes(*, rule: str, wildcards: dict, config: dict, results: str | Path = "results", floor: int,
                    headroom: float = RUNTIME_HEADROOM) -> int:
    """A forward-pass GPU job's time limit in minutes: ``headroom`` x its estimated wall time (``estimate_gpu_seconds``
    on one GPU: a model spread over several runs its layers one card after the other) at the plan's rates
    (``plan_rates``: the measured ``cluster.rates_file``, else the assumed ones), never below ``floor``. A job the
    cost model does not cover keeps ``floor``. At the H200's measured 18 % MFU, four Fig 4 harness jobs had needed
    15-20 % more than their fixed limits, and lm-eval cannot resume."""
    models = (config.get("paper") or {}).get("models") or {}
    name = wildcards["model"] if "model" in wildcards else (config.get("density") or {}).get("captioner")
    if name not in models or not models[name].get("n_params"):
        return int(floor)
    tokens, steps = job_tokens(rule=rule, wildcards=wildcards, config=config, results=results)
    if not (tokens or steps):
        return int(floor)
    seconds = estimate_gpu_seconds(n_params=models[name]["n_params"], gpus=1, tokens=tokens, decode_steps=steps,
                                   **_rates_of(rule, config, plan_rates(config)))
    return max(int(floor), math.ceil(headroom * seconds / 60))


def runtime_rule(rule: str, floor, *, config: dict, results: str | Path = "results"):
    """A Snakemake ``runtime=`` callable of a forward-pass GPU rule: ``runtime_minutes`` of the job's wildcards, with
    ``floor`` a number of minutes or a callable of the wildcards."""
    return lambda w: runtime_minutes(rule=rule, wildcards=dict(w.items()), config=config, results=results,
                                     floor=floor(w) if callable(floor) else floor)


RATE_KEYS = ("peak_flops", "fp32_peak_flops", "tf32_peak_flops", "mfu", "vision_mfu", "train_mfu", "startup_s",
             "load_bytes_per_s", "hbm_bytes_per_s")
RATES_ENV = "PRH_PLAN_RATES"  # set by `prh plan-cost --rates FILE`: the dry run reads its measured rates


def read_rates(path: str | Path) -> dict:
    """The ``rates`` a ``benchmarks/bench_device.py`` JSON measured (``RATE_KEYS``), with ``rates_from``: the card and
    the file. An unknown key or a utilisation outside (0, 1] is an error naming the file."""
    from prh.errors import ConfigError

    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"rates file {str(path)!r} cannot be read ({type(e).__name__}: {e}); write it with "
                          f"benchmarks/bench_device.py --json FILE, or unset cluster.rates_file") from None
    rates = data.get("rates") if isinstance(data, dict) else None
    if not isinstance(rates, dict) or not rates:
        raise ConfigError(f"{path}: no `rates` mapping; write it with benchmarks/bench_device.py --json {path}")
    unknown = sorted(set(rates) - set(RATE_KEYS))
    if unknown:
        raise ConfigError(f"{path}: unknown rates {unknown}; allowed: {list(RATE_KEYS)}")
    for key in ("mfu", "vision_mfu", "train_mfu"):
        if key in rates and not 0 < rates[key] <= 1:
            raise ConfigError(f"{path}: {key}={rates[key]} must be in (0, 1]")
    return {**{k: float(v) for k, v in rates.items()}, "rates_from": f"{data.get('device', '?')} ({path})"}


def plan_rates(config: dict) -> dict:
    """The measured rates of this plan: ``$PRH_PLAN_RATES`` (``prh plan-cost --rates``), else ``cluster.rates_file``,
    else none (the assumptions)."""
    path = os.environ.get(RATES_ENV) or (config.get("cluster") or {}).get("rates_file")
    return read_rates(path) if path else {}


def _vision_dtype(config: dict) -> str:
    from prh.config import schema_defaults

    return str((config.get("features") or {}).get("vision_dtype") or schema_defaults("features")["vision_dtype"])


def _training_rates(rates: dict) -> dict:
    """``work_gpu_seconds`` rates of the training and Jacobian families: fp32 work at ``train_mfu`` (default the
    assumed MFU). Neither measured utilisation applies to them: ``mfu`` is bf16 language extraction's, ``vision_mfu``
    fp32 inference's (with ``--rates``, LTE's 57.5 estimated GPU-hours had become 161.5 at the H200's 14 %)."""
    out = {k: v for k, v in rates.items() if k not in ("rates_from", "mfu", "vision_mfu", "train_mfu")}
    return {**out, "mfu": rates.get("train_mfu", TRAIN_MFU)}


def _rates_of(rule: str, config: dict, rates: dict) -> dict:
    """``estimate_gpu_seconds`` rates of one job: vision extraction in float32 runs at the fp32 peak."""
    rates = {k: v for k, v in rates.items() if k != "rates_from"}
    fp32_peak = rates.pop("fp32_peak_flops", FP32_PEAK_FLOPS)
    # vision: its own measured share; a caller that sets only mfu sets it for vision too
    vision_mfu = rates.pop("vision_mfu", None if "mfu" in rates else VISION_MFU)
    tf32_peak = rates.pop("tf32_peak_flops", TF32_PEAK_FLOPS)
    if rule == "extract_vision":
        if _vision_dtype(config) == "float32":
            rates["peak_flops"] = fp32_peak
        elif _vision_dtype(config) == "tf32":
            rates["peak_flops"] = tf32_peak
        if vision_mfu is not None:
            rates["mfu"] = vision_mfu
    return rates


def format_plan_cost(cost: dict) -> str:
    """The summary table ``snakemake -n`` and ``prh plan-cost`` print."""
    a = cost["assumptions"]
    card = (f"rates measured on {a['rates_from']}" if a.get("rates_from") else
            "H100 peaks, utilisation measured on one H200 (training assumed)")
    tf32 = (f", vision at {a.get('tf32_peak_flops', TF32_PEAK_FLOPS) / 1e12:.0f} TFLOP/s TF32"
            if a["vision_dtype"] == "tf32" else "")
    lines = [f"GPU-hours of the planned jobs (reserved: gpu x runtime asked of SLURM; estimated, {card}: "
             f"{a['mfu']:.0%} of {a['peak_flops'] / 1e12:.0f} TFLOP/s bf16, {a['fp32_peak_flops'] / 1e12:.0f} TFLOP/s"
             f" float32 (training, Jacobians{', vision' if a['vision_dtype'] == 'float32' else ''})"
             f"{tf32}, "
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
    p.add_argument("--rates", default=None, help="rates measured by benchmarks/bench_device.py (its JSON) instead of "
                                                 "the assumed ones")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, help="arguments of the dry run (after --)")
    a = p.parse_args(argv)
    args = a.snakemake_args[1:] if a.snakemake_args[:1] == ["--"] else a.snakemake_args
    args = args or ["--profile", "profiles/slurm", "--config", "suite=paper"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cost.json"
        proc = subprocess.run([sys.executable, "-m", "snakemake", "--dry-run", *args],
                              env={**os.environ, PLAN_COST_ENV: str(out), **({RATES_ENV: a.rates} if a.rates else {})},
                              capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            sys.exit(f"prh plan-cost: the dry run failed or planned no GPU job:\n{(proc.stdout + proc.stderr)[-4000:]}")
        cost = json.loads(out.read_text())
    if a.json:
        write_json(a.json, cost)
    print(format_plan_cost(cost))
