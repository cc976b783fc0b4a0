# Paper suite data (issue 5): hub datasets materialised under results/data/<name>/ at
# their pinned revisions, the seeded OpenWebText sample, and the language-modelling
# score of PRH Figure 3's x-axis (1 - bits-per-byte), one GPU job per language model.
import json
import os

# the schema's defaults, so a config that skipped validation still renders every flag
HUB_DEFAULTS = dict(revision=None, config=None, split="train", image_column="image", text_column=None,
                    label_column=None, n=None, seed=0, image_size=224)
HUB_DEFAULTS.update(carve=None, data_files=None)  # a split carved from another; the repo files read
HUB_DATASETS = {
    name: {**HUB_DEFAULTS, **spec} for name, spec in config["datasets"].items() if spec["kind"] == "hub"
}
LM_CFG = config["paper"]["lm_score"]  # schema-filled (paper.schema.yaml)
LM_SAMPLE = f"{R}/data/openwebtext_sample"
# The causal LMs whose score the paper suite's figures plot: the suite's language set, PRH's test set and Fig 4's set
_FIG4_LMS = (config.get("downstream") or {}).get("language_models", {}).get("paper")
LM_SCORE_MODELS = [] if SUITE != "paper" else list(dict.fromkeys(
    n for n in [*suite_models("language"), *config["model_sets"].get("prh_test_language", []),
                *(model_set(_FIG4_LMS) if _FIG4_LMS else [])] if MODELS[n]["source"] == "hub"))


rule hub_dataset:
    input:
        # a local folder built by `prh prepare-*` from a download (prepare.smk), when params.yaml says so
        lambda w: PREPARED_METADATA.get(w.dataset, []),
    output:
        images=f"{R}/data/{{dataset}}/images.npy",
        captions=f"{R}/data/{{dataset}}/captions.jsonl",
        labels=f"{R}/data/{{dataset}}/labels.npy",
        meta=f"{R}/data/{{dataset}}/meta.json",
    params:
        spec=lambda w: HUB_DATASETS[w.dataset],
        out=lambda w, output: os.path.dirname(output.meta),
        carve=lambda w: json.dumps(HUB_DATASETS[w.dataset]["carve"]),
        data_files=lambda w: json.dumps(HUB_DATASETS[w.dataset]["data_files"]),
    wildcard_constraints:
        dataset=one_of(HUB_DATASETS),
    log:
        log_path("hub_dataset", "{dataset}"),
    benchmark:
        bench_path("hub_dataset", "{dataset}")
    resources:
        # images are decoded into a memory-mapped file (prh.data.hub_datasets): memory does not grow with N x S^2
        mem_mb=8000,
        runtime=120,
    conda:
        CONDA_ENV
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
    params:
        lm=LM_CFG,
        out=lambda w, output: os.path.dirname(output.meta),
    log:
        log_path("lm_sample", "openwebtext"),
    benchmark:
        bench_path("lm_sample", "openwebtext")
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        CONDA_ENV
    shell:
        "prh sample-lm-text --repo {params.lm[repo]:q} --revision {params.lm[revision]:q} --split {params.lm[split]:q}"
        " --text-column {params.lm[text_column]:q} --n-bytes {params.lm[n_bytes]}"
        " --chunk-chars {params.lm[chunk_chars]} --shuffle-buffer {params.lm[shuffle_buffer]}"
        " --seed {params.lm[seed]} --out {params.out} > {log} 2>&1"


rule lm_score:
    input:
        texts=f"{LM_SAMPLE}/texts.jsonl",
    output:
        lm_score_json("{model}"),
    params:
        repo=lambda w: MODELS[w.model]["repo"],
        revision=lambda w: MODELS[w.model]["revision"],
        sample=lambda w, input: os.path.dirname(input.texts),
        batch_size=LM_CFG["batch_size"],
        device=config["device"],
        # a model larger than one GPU is spread over the job's GPUs
        device_map=lambda w: device_map_arg(w.model),
    wildcard_constraints:
        model=one_of(n for n, m in MODELS.items() if m["source"] == "hub" and m["modality"] == "language"),
    log:
        log_path("lm_score", "{model}"),
    benchmark:
        bench_path("lm_score", "{model}")
    resources:
        gpu=lambda w: gpus_for(w.model),
        mem_mb=lambda w: host_mem_mb(w.model),
        # ~4M tokens: minutes for 1B parameters on one GPU, about an hour at 70B
        runtime=lambda w: int(30 + MODELS[w.model]["n_params"] / 1e9),
    conda:
        CONDA_ENV
    shell:
        "prh score-lm --model {params.repo:q} --revision {params.revision:q} --name {wildcards.model}"
        " --sample {params.sample} --out {output} --batch-size {params.batch_size}"
        " --device {params.device} {params.device_map} > {log} 2>&1"


TARGETS.extend(lm_score_json(m) for m in LM_SCORE_MODELS)
