# Paper suite data: hub datasets materialised under results/data/<name>/ at
# their pinned revisions, the seeded OpenWebText sample, and the language-modelling
# score of PRH Figure 3's x-axis (1 - bits-per-byte), one GPU job per language model.
import json
import os
from functools import partial

from prh.cluster import runtime_rule
from prh.evaluation.lm_score import SAMPLE_CONFIG, SCORE_CONFIG

HUB_DATASET_FILES = {"images": "images.npy", "captions": "captions.jsonl", "labels": "labels.npy", "meta": "meta.json"}
HUB_DATASETS = {name: spec for name, spec in config["datasets"].items() if spec["kind"] == "hub"}  # schema-filled
LM_SAMPLE = f"{R}/data/openwebtext_sample"
# The causal LMs whose score the paper suite's figures plot: the suite's language set, PRH's test set and Fig 4's set
_FIG4_LMS = (config.get("downstream") or {}).get("language_models", {}).get("paper")
LM_SCORE_MODELS = (
    []
    if SUITE != "paper"
    else list(
        dict.fromkeys(
            n
            for n in [
                *suite_models("language"),
                *config["model_sets"].get("prh_test_language", []),
                *(model_set(_FIG4_LMS) if _FIG4_LMS else []),
            ]
            if MODELS[n]["source"] == "hub"
        )
    )
)


# The paper suite's pre-flight report (rule preflight, below, prh.preflight): gated access, the first row
# of every hub dataset, the manual downloads and one batch per model family, minutes before any GPU job. It is an
# input of every GPU rule, ancient, so a new report does not make the jobs that passed an earlier one stale.
PREFLIGHT = f"{R}/preflight.json"
PREFLIGHT_INPUT = {"preflight": ancient(PREFLIGHT)} if SUITE == "paper" else {}


# `runtime=` of the forward-pass GPU rules: twice each job's estimate at the plan's rates, never below the old limit
GPU_RUNTIME = partial(runtime_rule, config=config, results=R)
# every paper model (hub, plain-URL and seeded random checkpoints): one batch of each family's smallest
PREFLIGHT_MODELS = sorted(
    m for m, s in MODELS.items() if s["source"] != "zoo" and m in (config["paper"].get("models") or {})
)
PREFLIGHT_CONFIG = {k: config.get(k) for k in ("paper", "datasets", "downstream", "bridge", "cluster")}


rule preflight:
    output:
        PREFLIGHT,
    log:
        log_path("preflight", "all"),
    benchmark:
        bench_path("preflight", "all")
    threads: 4
    resources:
        mem_mb=16000,
        runtime=60,
        # as many cards as the largest planned model, so one model is spread over several as its jobs will be
        gpu=max([gpus_for(m) for m in PREFLIGHT_MODELS] or [0]) if SUITE == "paper" else 0,
    params:
        config=lambda w: json_param(PREFLIGHT_CONFIG),
        models=" ".join(PREFLIGHT_MODELS),
        device=config["device"],
    shell:
        "prh --gpus {resources.gpu} preflight --config {params.config} --models {params.models}"
        " --device {params.device} --out {output} > {log} 2>&1"


rule hub_dataset:
    input:
        # a local folder built by `prh prepare-*` from a download (prepare.smk), when params.yaml says so
        lambda w: PREPARED_METADATA.get(w.dataset, []),
    output:
        # a hub dataset dir (its data contract): images, captions, labels and meta
        **{key: f"{R}/data/{{dataset}}/{name}" for key, name in HUB_DATASET_FILES.items()},
    log:
        log_path("hub_dataset", "{dataset}"),
    benchmark:
        bench_path("hub_dataset", "{dataset}")
    wildcard_constraints:
        dataset=one_of(HUB_DATASETS),
    resources:
        **JOB_SIZES["hub_dataset"],
    params:
        spec=lambda w: HUB_DATASETS[w.dataset],
        out=lambda w, output: os.path.dirname(output.meta),
        carve=lambda w: json.dumps(HUB_DATASETS[w.dataset]["carve"]),
        data_files=lambda w: json.dumps(HUB_DATASETS[w.dataset]["data_files"]),
    shell:
        "prh fetch-dataset --repo {params.spec[repo]:q} --revision {params.spec[revision]:q}"
        " --config {params.spec[config]:q} --split {params.spec[split]:q}"
        " --image-column {params.spec[image_column]:q} --text-column {params.spec[text_column]:q}"
        " --label-column {params.spec[label_column]:q} --n {params.spec[n]} --seed {params.spec[seed]}"
        " --image-size {params.spec[image_size]} --out {params.out:q}"
        " --carve {params.carve:q} --data-files {params.data_files:q} > {log} 2>&1"


rule lm_sample:
    output:
        texts=f"{LM_SAMPLE}/texts.jsonl",
        meta=f"{LM_SAMPLE}/meta.json",
    log:
        log_path("lm_sample", "openwebtext"),
    benchmark:
        bench_path("lm_sample", "openwebtext")
    resources:
        **JOB_SIZES["lm_sample"],
    params:
        config=slice_arg(config, SAMPLE_CONFIG),
        out=lambda w, output: os.path.dirname(output.meta),
    shell:
        "prh sample-lm-text --config {params.config} --out {params.out} > {log} 2>&1"


# A job that runs one hub language model ({model}: lm_score here, downstream.smk's downstream_harness): which
# models, and the params that load it (a model larger than one GPU is spread over the job's GPUs)
HUB_LM = one_of(n for n, m in MODELS.items() if m["source"] == "hub" and m["modality"] == "language")
HUB_LM_PARAMS = dict(
    repo=lambda w: MODELS[w.model]["repo"],
    revision=lambda w: MODELS[w.model]["revision"],
    device=config["device"],
    device_map=lambda w: device_map_arg(w.model),
)


rule lm_score:
    input:
        **PREFLIGHT_INPUT,
        texts=f"{LM_SAMPLE}/texts.jsonl",
    output:
        lm_score_json("{model}"),
    log:
        log_path("lm_score", "{model}"),
    benchmark:
        bench_path("lm_score", "{model}")
    wildcard_constraints:
        model=HUB_LM,
    resources:
        **MODEL_JOB,
        # ~4M tokens: minutes for 1B parameters on one GPU, about an hour at 70B
        runtime=GPU_RUNTIME("lm_score", lambda w: int(30 + MODELS[w.model]["n_params"] / 1e9)),
    params:
        **HUB_LM_PARAMS,
        sample=lambda w, input: os.path.dirname(input.texts),
        config=slice_arg(config, SCORE_CONFIG),
    shell:
        "prh --gpus {resources.gpu} score-lm --model {params.repo:q} --revision {params.revision:q} --name {wildcards.model}"
        " --sample {params.sample} --out {output} --config {params.config}"
        " --device {params.device} {params.device_map} > {log} 2>&1"


TARGETS.extend(lm_score_json(m) for m in LM_SCORE_MODELS)
