# Per-layer pooled features (PRH appendix C.2): one job per (model, dataset).
# Zoo models read their checkpoint dir under results/models/<model>/ (made by the zoo
# rules); hub models are fetched by name at a pinned revision and run on a GPU.
# A killed job resumes from its last finished batch (<out>.partial/, see prh.features).
# Shapes datasets' language features are the mean over each scene's caption samples (CAPTION_ARGS).
# Datasets read only by a linear probe (PROBE_ONLY_DATASETS: VTAB) keep the last layer (--layers last).
import os
import shlex

from prh.config import EXTRACT_CONFIG, vtab_tasks
from prh.models.checkpoints import checkpoint_models, resolve_checkpoint

# VTAB task -> (train, test) dataset names (convergence.smk's probes): convergence.vtab_tasks, or every
# vtab_<task>_train with its _test (prh.config.vtab_tasks; prh.checks.check_references named any task without both)
VTAB_TASKS = vtab_tasks(config)
# Datasets whose features only a linear probe reads (probe_vtab_task: VTAB_TASKS' splits) and that no
# suite aligns: their extraction keeps the last layer only (`--layers last`), ~30x less disk than every layer.
_SUITE_DATASETS = {v for cfg in config["suites"].values() for v in cfg.values() if isinstance(v, str)}
PROBE_ONLY_DATASETS = {name for pair in VTAB_TASKS.values() for name in pair if name not in _SUITE_DATASETS}

# Per model, what the extraction rules (and density.smk's extract_language_density) read: the model
# names of a modality (wildcard constraint), a zoo model's checkpoint files (hub models: none), what
# `--model` gets (the zoo checkpoint dir, or the hub name: timm name or repo id), what pins its weights
# (hub models: `--revision`; a plain-URL or seeded random checkpoint, paper.models source url / random:
# `--checkpoint` with its declaration, prh.models.checkpoints), and minutes of runtime (loading ~1 min
# per 10 GB of weights plus the forward passes).
EXTRACT_MODELS = {
    mod: one_of(m for m, s in MODELS.items() if s.get("modality") == mod) for mod in ("vision", "language")
}
ZOO_CHECKPOINT = {
    m: {
        "config": f"{model_dir(m)}/config.json",
        **({"weights": f"{model_dir(m)}/model.safetensors"} if s.get("modality") == "vision" else {}),
    }
    for m, s in MODELS.items()
    if s["source"] == "zoo"
}
MODEL_ARG = {m: model_dir(m) if s["source"] == "zoo" else s["repo"] for m, s in MODELS.items()}
REVISION_ARG = {
    m: f"--revision {shlex.quote(s['revision'])}" if s.get("revision") and s["source"] == "hub" else ""
    for m, s in MODELS.items()
}
REVISION_ARG.update({m: f"--checkpoint {json_param(resolve_checkpoint(config, m))}" for m in checkpoint_models(config)})
EXTRACT_RUNTIME = {
    m: 20 if s["source"] == "zoo" else int(30 + 4 * (float(s.get("n_params") or 0) / 1e9)) for m, s in MODELS.items()
}
# The paper suite reads bits per byte from lm_score's OpenWebText sample, never from the features: no second
# full-vocabulary pass per LM over the captions
LANGUAGE_OPTIONS = "--no-bpb" if SUITE == "paper" else ""
# Shapes datasets (offline) store several independently drawn densest captions per scene (captions.jsonl
# `samples`, world.caption_samples): a scene's features are the mean over them. Hub datasets have one
# caption per item (`text`). Density features (density.smk) replace these options: one caption per level.
CAPTION_ARGS = {
    ds: "--text-field samples --average-samples" if spec.get("kind") == "shapes" else ""
    for ds, spec in config["datasets"].items()
}


# What both extraction rules write, and their threads (a hub model's job: 4, for data loading and tokenising)
EXTRACT_OUTPUT = dict(feats=feature_file("{dataset}", "{model}"), meta=f"{R}/features/{{dataset}}/{{model}}.json")
EXTRACT_THREADS = lambda w: 1 if MODELS[w.model]["source"] == "zoo" else 4
# Per modality, the params and flags of its extraction command beyond the ones both share (density.smk's
# extract_language_density reuses the language ones).
EXTRACT_PARAMS = {
    mod: dict(
        model=lambda w: MODEL_ARG[w.model],
        revision=lambda w: REVISION_ARG[w.model],
        data=lambda w, input: os.path.dirname(input.data),
        device=config["device"],
    )
    for mod in ("vision", "language")
}
# Its keys of the features block (batch size, dtype or pooling, ...), through a lambda: Snakemake would read the
# prompt template's {caption} in a plain string as a wildcard
EXTRACT_SLICES = {mod: slice_arg(config, keys) for mod, keys in EXTRACT_CONFIG.items()}
EXTRACT_PARAMS["vision"].update(
    config=lambda w: EXTRACT_SLICES["vision"],
    layers=lambda w: "last" if w.dataset in PROBE_ONLY_DATASETS else "all",  # a linear probe is the only reader
)
EXTRACT_PARAMS["language"].update(
    config=lambda w: EXTRACT_SLICES["language"],
    devices=lambda w: device_map_arg(w.model),
    options=lambda w: f"{LANGUAGE_OPTIONS} {CAPTION_ARGS.get(w.dataset, '')}".strip(),
)


# Two rules, not one in a loop: Snakemake evaluates a shell: expression again when the job runs, after the loop has
# ended, so a loop variable in it would give every job the last iteration's command (a dry run shows the right one).
rule extract_vision:
    input:
        unpack(lambda w: ZOO_CHECKPOINT.get(w.model, {})),
        **PREFLIGHT_INPUT,
        data=f"{R}/data/{{dataset}}/images.npy",
    output:
        **EXTRACT_OUTPUT,
    log:
        log_path("extract_vision", "{dataset}", "{model}"),
    benchmark:
        bench_path("extract_vision", "{dataset}", "{model}")
    wildcard_constraints:
        model=EXTRACT_MODELS["vision"],
    threads: EXTRACT_THREADS
    resources:
        **MODEL_JOB,
        runtime=GPU_RUNTIME("extract_vision", lambda w: EXTRACT_RUNTIME[w.model]),
    params:
        **EXTRACT_PARAMS["vision"],
    shell:
        "prh --gpus {resources.gpu} extract-vision --model {params.model:q} {params.revision} --data {params.data}"
        " --out {output.feats} --name {wildcards.model} --config {params.config}"
        " --layers {params.layers} --device {params.device} > {log} 2>&1"


rule extract_language:
    input:
        unpack(lambda w: ZOO_CHECKPOINT.get(w.model, {})),
        **PREFLIGHT_INPUT,
        data=f"{R}/data/{{dataset}}/captions.jsonl",
    output:
        **EXTRACT_OUTPUT,
    log:
        log_path("extract_language", "{dataset}", "{model}"),
    benchmark:
        bench_path("extract_language", "{dataset}", "{model}")
    wildcard_constraints:
        model=EXTRACT_MODELS["language"],
    threads: EXTRACT_THREADS
    resources:
        **MODEL_JOB,
        runtime=GPU_RUNTIME("extract_language", lambda w: EXTRACT_RUNTIME[w.model]),
    params:
        **EXTRACT_PARAMS["language"],
    shell:
        "prh --gpus {resources.gpu} extract-language --model {params.model:q} {params.revision} --data {params.data}"
        " --out {output.feats} --name {wildcards.model} --config {params.config}"
        " {params.options} --device {params.device} {params.devices}"
        " > {log} 2>&1"
