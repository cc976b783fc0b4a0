# Per-layer pooled features (PRH appendix C.2): one job per (model, dataset).
# Zoo models read their checkpoint dir under results/models/<model>/ (made by the zoo
# rules); hub models are fetched by name at a pinned revision and run on a GPU.
# A killed job resumes from its last finished batch (<out>.partial/, see prh.features).
# Shapes datasets' language features are the mean over each scene's caption samples (caption_args).
# Datasets read only by a linear probe (PROBE_ONLY_DATASETS: VTAB) keep the last layer (--layers last).
import os

rule extract_vision:
    input:
        unpack(zoo_checkpoint("vision")),
        images=f"{R}/data/{{dataset}}/images.npy",
    output:
        feats=f"{R}/features/{{dataset}}/{{model}}.safetensors",
        meta=f"{R}/features/{{dataset}}/{{model}}.json",
    wildcard_constraints:
        model=_names_regex("vision"),
        dataset=DATASET,
    params:
        model=model_arg,
        revision=revision_arg,
        data=lambda w, input: os.path.dirname(input.images),
        batch_size=FEAT["vision_batch_size"],
        layers=layers_arg,  # "last" where a linear probe is the only reader (PROBE_ONLY_DATASETS)
        device=config["device"],
        dtype=FEAT["vision_dtype"],  # float32 as the reference (schema default)
        # on CUDA, batches sized from the memory budget (issue 34); a CPU keeps vision_batch_size
        budget=f"--gpu-memory-budget-gb {FEAT['gpu_memory_budget_gb']}" if FEAT.get("gpu_memory_budget_gb") else "",
    log:
        log_path("extract_vision", "{dataset}", "{model}"),
    benchmark:
        bench_path("extract_vision", "{dataset}", "{model}")
    threads: n_threads
    resources:
        mem_mb=mem_mb,
        runtime=runtime,
        gpu=n_gpus,
    conda:
        CONDA_ENV
    shell:
        "prh extract-vision --model {params.model} {params.revision} --data {params.data}"
        " --out {output.feats} --name {wildcards.model} --batch-size {params.batch_size}"
        " --layers {params.layers} --device {params.device} --dtype {params.dtype} {params.budget} > {log} 2>&1"


rule extract_language:
    input:
        unpack(zoo_checkpoint("language")),
        captions=f"{R}/data/{{dataset}}/captions.jsonl",
    output:
        feats=f"{R}/features/{{dataset}}/{{model}}.safetensors",
        meta=f"{R}/features/{{dataset}}/{{model}}.json",
    wildcard_constraints:
        model=_names_regex("language"),
        dataset=DATASET,
    params:
        model=model_arg,
        revision=revision_arg,
        devices=device_args,
        data=lambda w, input: os.path.dirname(input.captions),
        batch_size=FEAT["language_batch_size"],
        pooling=FEAT["language_pooling"],
        options=lambda w: f"{language_args(w)} {caption_args(w)}".strip(),
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
    conda:
        CONDA_ENV
    shell:
        "prh extract-language --model {params.model} {params.revision} --data {params.data}"
        " --out {output.feats} --name {wildcards.model} --batch-size {params.batch_size}"
        " --pooling {params.pooling} {params.options} --device {params.device} {params.devices}"
        " > {log} 2>&1"
