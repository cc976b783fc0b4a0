# Seed 000 "phase incompatibility": one NTK job per model (NTK, AGOP, stability),
# Table 2's adaptive-LR runs and one analysis job (pairs, Table 1, verdicts); the figures are
# registered in prh.figures and drawn by figures.smk.
# Offline: ~10 CPU-minutes in all at the default sizes; paper: one GPU job per checkpoint.
# Each rule gets only the keys of the `phase` block its command reads (prh.studies.phase.design.SLICES).
from prh.studies.phase.design import SLICES as PHASE_SLICES
from prh.studies.phase.design import choose_pairs

PHASE_OUT = study_outputs("phase")  # its files, by key (its manifest.yaml)
PHASE_CFG = config["phase"]
PHASE_CONFIG = {command: slice_arg(config, {"phase": keys}) for command, keys in PHASE_SLICES.items()}
PHASE_VISION = (
    model_set(PHASE_CFG["vision_models"][SUITE]) if PHASE_CFG["vision_models"][SUITE] else suite_models("vision")
)
PHASE_LANGUAGE = (
    model_set(PHASE_CFG["language_models"][SUITE]) if PHASE_CFG["language_models"][SUITE] else model_set(LANGUAGE_PANEL)
)
PHASE_MODELS = PHASE_VISION + PHASE_LANGUAGE
PHASE_DATA = PHASE_CFG["paired_dataset"][SUITE] or SUITE_CFG["paired_dataset"]
PHASE_FIGURES = ("phase_fig01a_landscape", "phase_fig01b_families", "phase_fig02_histograms")
# The paired set's files a model job reads; a shapes set's scenes.jsonl holds the world's task labels of the stability steps
PHASE_DATA_FILES = {
    "images": f"{R}/data/{PHASE_DATA}/images.npy",
    "captions": f"{R}/data/{PHASE_DATA}/captions.jsonl",
    **(shapes_files(PHASE_DATA) if config["datasets"][PHASE_DATA]["kind"] == "shapes" else {}),
}
# Per model: its NTK job's JSON, its features on the paired set, what --path gets (zoo checkpoint dir
# or hub name), and its Table 1 family: the first `phase.groups` key its arch (zoo) or family (hub) starts with
PHASE_NTK = {m: PHASE_OUT["ntk"].format(model=m) for m in PHASE_MODELS}
PHASE_FEATURES = {m: feature_file(PHASE_DATA, m) for m in PHASE_MODELS}
PHASE_PATH = {m: model_dir(m) if MODELS[m]["source"] == "zoo" else MODELS[m]["repo"] for m in PHASE_MODELS}
_PHASE_KIND = {m: str(MODELS[m].get("arch") or MODELS[m].get("family") or m).lower() for m in PHASE_MODELS}
PHASE_GROUP = {
    m: next((g for k, g in PHASE_CFG["groups"].items() if kind.startswith(k.lower())), kind)
    for m, kind in _PHASE_KIND.items()
}
PHASE_LR_PAIRS = choose_pairs(
    PHASE_VISION, PHASE_LANGUAGE, n_pairs=PHASE_CFG["adaptive_lr"]["n_pairs"], seed=config["seed"]
)


rule phase_model:
    input:
        **PHASE_DATA_FILES,
        # a zoo model's checkpoint (hub models are fetched by name)
        **PREFLIGHT_INPUT,
        checkpoint=lambda w: f"{model_dir(w.model)}/config.json" if MODELS[w.model]["source"] == "zoo" else [],
    output:
        **study_outputs("phase", "ntk", "grams"),
    log:
        log_path("phase_model", "{model}"),
    benchmark:
        bench_path("phase_model", "{model}")
    wildcard_constraints:
        model=one_of(PHASE_MODELS),
    resources:
        mem_mb=lambda w: 3000 if MODELS[w.model]["source"] == "zoo" else 32000,
        runtime=lambda w: 20 if MODELS[w.model]["source"] == "zoo" else 120,
        gpu=lambda w: gpus_for(w.model),  # 0 for zoo models
    params:
        path=lambda w: PHASE_PATH[w.model],
        revision=lambda w: (
            f"--revision {shlex.quote(MODELS[w.model]['revision'])}" if MODELS[w.model].get("revision") else ""
        ),
        modality=lambda w: MODELS[w.model]["modality"],
        data=lambda w, input: os.path.dirname(input.images),
        config=PHASE_CONFIG["model"],
        seed=config["seed"],
    shell:
        "OMP_NUM_THREADS={threads} prh --gpus {resources.gpu} run-phase-model --name {wildcards.model} --path {params.path:q} {params.revision}"
        " --modality {params.modality} --data {params.data} --out {output.ntk} --config {params.config}"
        " --seed {params.seed} > {log} 2>&1"


rule phase_adaptive_lr:
    input:
        **PREFLIGHT_INPUT,
        images=PHASE_DATA_FILES["images"],
        ntk=sorted({PHASE_NTK[ell] for _, ell in PHASE_LR_PAIRS}),
        features=sorted({PHASE_FEATURES[ell] for _, ell in PHASE_LR_PAIRS}),
        checkpoints=sorted({f"{model_dir(v)}/config.json" for v, _ in PHASE_LR_PAIRS if MODELS[v]["source"] == "zoo"}),
    output:
        **study_outputs("phase", "adaptive_lr"),
    log:
        log_path("phase_adaptive_lr", "phase_adaptive_lr"),
    benchmark:
        bench_path("phase_adaptive_lr", "phase_adaptive_lr")
    resources:
        **(dict(mem_mb=3000, runtime=20, gpu=0) if SUITE == "offline" else dict(mem_mb=32000, runtime=240, gpu=1)),
    params:
        pairs=shlex.quote(
            json.dumps(
                [
                    {
                        "vision": {"name": v, "path": PHASE_PATH[v]},
                        "language": {"name": ell, "ntk": PHASE_NTK[ell], "features": PHASE_FEATURES[ell]},
                    }
                    for v, ell in PHASE_LR_PAIRS
                ]
            )
        ),
        data=lambda w, input: os.path.dirname(input.images),
        config=PHASE_CONFIG["adaptive_lr"],
        seed=config["seed"],
    shell:
        "OMP_NUM_THREADS={threads} prh --gpus {resources.gpu} run-phase-adaptive-lr --pairs {params.pairs} --data {params.data}"
        " --config {params.config} --out {output} --seed {params.seed} > {log} 2>&1"


rule phase_analyse:
    input:
        ntk=list(PHASE_NTK.values()),
        features=list(PHASE_FEATURES.values()),
        adaptive_lr=rules.phase_adaptive_lr.output[0],
    output:
        **study_outputs("phase", "pairs", "model_table", "table1", "metrics"),
    log:
        log_path("phase_analyse", "phase_analyse"),
    benchmark:
        bench_path("phase_analyse", "phase_analyse")
    resources:
        **JOB_SIZES["phase_analyse"],
    params:
        models=shlex.quote(
            json.dumps(
                {
                    m: {
                        "modality": MODELS[m]["modality"],
                        "group": PHASE_GROUP[m],
                        "ntk": PHASE_NTK[m],
                        "features": PHASE_FEATURES[m],
                    }
                    for m in PHASE_MODELS
                }
            )
        ),
        config=PHASE_CONFIG["analysis"],
        seed=config["seed"],
    shell:
        "OMP_NUM_THREADS={threads} prh run-phase-analysis --models {params.models} --config {params.config}"
        " --adaptive-lr {input.adaptive_lr} --pairs {output.pairs} --model-table {output.model_table}"
        " --table1 {output.table1} --metrics {output.metrics} --seed {params.seed} > {log} 2>&1"


TARGETS += figure_targets(*PHASE_FIGURES)  # drawn by the registry's plot rules (figures.smk)
TARGETS += [rules.phase_analyse.output.metrics, rules.phase_analyse.output.table1]
