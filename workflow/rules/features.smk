# Per-layer pooled features (PRH appendix C.2): one job per (model, dataset).
# Zoo models read their checkpoint dir under results/models/<model>/ (made by the zoo
# rules); hub models are fetched by name at a pinned revision and run on a GPU.
# A killed job resumes from its last finished batch (<out>.partial/, see prh.features).
import math
import os
import re
import shlex

FEAT = config["features"]  # defaults filled in by the schema


def _names_regex(modality):
    names = [m for m, s in MODELS.items() if s.get("modality") == modality]
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!)"


def _spec(wildcards):
    return MODELS[wildcards.model]


def _is_zoo(wildcards):
    return _spec(wildcards)["source"] == "zoo"


def zoo_checkpoint(modality):
    """Input function: the zoo checkpoint files of a zoo model; nothing for a hub model."""

    def inputs(wildcards):
        if not _is_zoo(wildcards):
            return {}
        d = f"{R}/models/{wildcards.model}"
        files = {"config": f"{d}/config.json"}
        if modality == "vision":
            files["weights"] = f"{d}/model.safetensors"
        return files

    return inputs


def model_arg(wildcards):
    """What `--model` gets: the zoo checkpoint dir, or the hub name (timm name or repo id)."""
    spec = _spec(wildcards)
    return f"{R}/models/{wildcards.model}" if spec["source"] == "zoo" else spec["repo"]


def revision_arg(wildcards):
    rev = _spec(wildcards).get("revision")
    return f"--revision {rev}" if rev and not _is_zoo(wildcards) else ""


def _gb_params(wildcards):
    """Billions of parameters (zoo models: ~0)."""
    return float(_spec(wildcards).get("n_params") or 0) / 1e9


def n_gpus(wildcards):
    """0 for zoo models; hub models: as many 80 GB GPUs as the bf16 weights (+15%) need."""
    if _is_zoo(wildcards) or config["device"] == "cpu":
        return 0
    return max(1, math.ceil(_gb_params(wildcards) * 2 * 1.15 / 80))


def device_args(wildcards):
    """`--device-map auto` spreads a model over several GPUs when one cannot hold it."""
    return "--device-map auto" if n_gpus(wildcards) > 1 else ""


def mem_mb(wildcards):
    # Host memory: the dataset, one batch, and the bf16 weights passing through on load.
    return 4000 if _is_zoo(wildcards) else int(8000 + 2200 * _gb_params(wildcards))


def runtime(wildcards):
    # Minutes: loading ~1 min per 10 GB of weights plus the forward passes.
    return 20 if _is_zoo(wildcards) else int(30 + 4 * _gb_params(wildcards))


def language_args(wildcards):
    """Optional flags; a function, not a string, so the template's {caption} is not read as a wildcard."""
    args = []
    if FEAT.get("prompt_template"):
        args.append(f"--prompt-template {shlex.quote(FEAT['prompt_template'])}")
    if FEAT.get("max_batch_tokens"):
        args.append(f"--max-batch-tokens {int(FEAT['max_batch_tokens'])}")
    return " ".join(args)


def n_threads(wildcards):
    return 1 if _is_zoo(wildcards) else 4


rule extract_vision:
    input:
        unpack(zoo_checkpoint("vision")),
        images=f"{R}/data/{{dataset}}/images.npy",
    output:
        feats=f"{R}/features/{{dataset}}/{{model}}.safetensors",
        meta=f"{R}/features/{{dataset}}/{{model}}.json",
    wildcard_constraints:
        model=_names_regex("vision"),
    params:
        model=model_arg,
        revision=revision_arg,
        data=lambda w, input: os.path.dirname(input.images),
        batch_size=FEAT["vision_batch_size"],
        device=config["device"],
    log:
        log_path("extract_vision", "{dataset}", "{model}"),
    benchmark:
        bench_path("extract_vision", "{dataset}", "{model}")
    threads: n_threads
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
        gpu=n_gpus,
    shell:
        "prh extract-vision --model {params.model} {params.revision} --data {params.data}"
        " --out {output.feats} --name {wildcards.model} --batch-size {params.batch_size}"
        " --device {params.device} > {log} 2>&1"


rule extract_language:
    input:
        unpack(zoo_checkpoint("language")),
        captions=f"{R}/data/{{dataset}}/captions.jsonl",
    output:
        feats=f"{R}/features/{{dataset}}/{{model}}.safetensors",
        meta=f"{R}/features/{{dataset}}/{{model}}.json",
    wildcard_constraints:
        model=_names_regex("language"),
    params:
        model=model_arg,
        revision=revision_arg,
        devices=device_args,
        data=lambda w, input: os.path.dirname(input.captions),
        batch_size=FEAT["language_batch_size"],
        pooling=FEAT["language_pooling"],
        options=language_args,
        device=config["device"],
    log:
        log_path("extract_language", "{dataset}", "{model}"),
    benchmark:
        bench_path("extract_language", "{dataset}", "{model}")
    threads: n_threads
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
        gpu=n_gpus,
    shell:
        "prh extract-language --model {params.model} {params.revision} --data {params.data}"
        " --out {output.feats} --name {wildcards.model} --batch-size {params.batch_size}"
        " --pooling {params.pooling} {params.options} --device {params.device} {params.devices}"
        " > {log} 2>&1"
