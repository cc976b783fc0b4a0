# Seed 000 "phase incompatibility" (issue 19): one NTK job per model (NTK, AGOP, stability),
# Table 2's adaptive-LR runs and one analysis job (pairs, Table 1, verdicts); the figures are
# registered in prh.figures and drawn by figures.smk.
# Offline: ~10 CPU-minutes in all at the default sizes; paper: one GPU job per checkpoint.


rule phase_model:
    input:
        unpack(phase_model_inputs),
    output:
        ntk=f"{PHASE}/models/{{model}}.json",
        grams=f"{PHASE}/models/{{model}}.npy",
    wildcard_constraints:
        model=one_of(PHASE_MODELS),
    params:
        path=lambda w: phase_path(w.model),
        revision=lambda w: f"--revision {MODELS[w.model]['revision']}" if MODELS[w.model].get("revision") else "",
        modality=lambda w: MODELS[w.model]["modality"],
        data=lambda w, input: os.path.dirname(input.images),
        config=json_param(PHASE_CFG),
        seed=config["seed"],
    log:
        log_path("phase_model", "{model}"),
    benchmark:
        bench_path("phase_model", "{model}")
    threads: 1
    resources:
        mem_mb=lambda w: 3000 if MODELS[w.model]["source"] == "zoo" else 32000,
        runtime=lambda w: 20 if MODELS[w.model]["source"] == "zoo" else 120,
        gpu=lambda w: gpus_for(w.model),  # 0 for zoo models
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh run-phase-model --name {wildcards.model} --path {params.path} {params.revision}"
        " --modality {params.modality} --data {params.data} --out {output.ntk} --config {params.config}"
        " --seed {params.seed} > {log} 2>&1"


rule phase_adaptive_lr:
    input:
        images=f"{R}/data/{PHASE_DATA}/images.npy",
        ntk=sorted({phase_ntk(ell) for _, ell in PHASE_LR_PAIRS}),
        features=sorted({phase_features(ell) for _, ell in PHASE_LR_PAIRS}),
        checkpoints=sorted({f"{R}/models/{v}/config.json" for v, _ in PHASE_LR_PAIRS if MODELS[v]["source"] == "zoo"}),
    output:
        f"{PHASE}/adaptive_lr.json",
    params:
        pairs=shlex.quote(json.dumps([
            {"vision": {"name": v, "path": phase_path(v)},
             "language": {"name": ell, "ntk": phase_ntk(ell), "features": phase_features(ell)}}
            for v, ell in PHASE_LR_PAIRS])),
        data=lambda w, input: os.path.dirname(input.images),
        config=json_param(PHASE_CFG),
        seed=config["seed"],
    log:
        log_path("phase_adaptive_lr", "phase_adaptive_lr"),
    benchmark:
        bench_path("phase_adaptive_lr", "phase_adaptive_lr")
    threads: 1
    resources:
        mem_mb=3000 if SUITE == "offline" else 32000,
        runtime=20 if SUITE == "offline" else 240,
        gpu=0 if SUITE == "offline" else 1,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh run-phase-adaptive-lr --pairs {params.pairs} --data {params.data}"
        " --config {params.config} --out {output} --seed {params.seed} > {log} 2>&1"


rule phase_analyse:
    input:
        ntk=[phase_ntk(m) for m in PHASE_MODELS],
        features=[phase_features(m) for m in PHASE_MODELS],
        adaptive_lr=rules.phase_adaptive_lr.output[0],
    output:
        pairs=f"{PHASE}/pairs.csv",
        models=f"{PHASE}/models.csv",
        table1=f"{PHASE}/table1.csv",
        metrics=f"{PHASE}/metrics.json",
    params:
        models=shlex.quote(json.dumps({
            m: {"modality": MODELS[m]["modality"], "group": phase_group(m), "ntk": phase_ntk(m),
                "features": phase_features(m)} for m in PHASE_MODELS})),
        config=json_param(PHASE_CFG),
        out_dir=lambda w, output: os.path.dirname(output.metrics),
        seed=config["seed"],
    log:
        log_path("phase_analyse", "phase_analyse"),
    benchmark:
        bench_path("phase_analyse", "phase_analyse")
    threads: 1
    resources:
        mem_mb=3000,
        runtime=20,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh run-phase-analysis --models {params.models} --config {params.config}"
        " --adaptive-lr {input.adaptive_lr} --out-dir {params.out_dir} --seed {params.seed} > {log} 2>&1"


TARGETS += figure_targets(*PHASE_FIGURES)  # drawn by the registry's plot rules (figures.smk)
TARGETS += [rules.phase_analyse.output.metrics, rules.phase_analyse.output.table1]
