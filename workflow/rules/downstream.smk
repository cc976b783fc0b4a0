# Downstream language scores against alignment (PRH section 2.4, Fig 4): each language
# model's alignment to the strongest vision model against a downstream score. Offline:
# HellaSwag-style caption completion in the shapes world (downstream_mc), the strongest
# vision model by mean probe accuracy. Paper: published HellaSwag / GSM8K scores (a CSV
# with its sources) and the vision model named in params (DINOv2 giant).
DOWN = config["downstream"]
DOWN_OUT = f"{R}/experiments/downstream"
# Fig 4's own model sets (paper: every LM the paper's Fig 4 shows, against DINOv2 ViT-g); null = the suite's
DOWN_LSET = DOWN["language_models"][SUITE] or SUITE_CFG["language_models"]
DOWN_VSET = DOWN["vision_models"][SUITE] or SUITE_CFG["vision_models"]
DOWN_CROSS = alignment_json(SUITE_CFG["paired_dataset"], DOWN_LSET, DOWN_VSET)
if SUITE != "offline" and DOWN["strongest_vision"] not in model_set(DOWN_VSET):
    raise ValueError(f"downstream.strongest_vision={DOWN['strongest_vision']!r} is not in the model set "
                     f"downstream.vision_models.{SUITE}={DOWN_VSET!r} ({model_set(DOWN_VSET)}): add it there")
# the LMs' 1 - bpb colours Fig 4's points: offline the zoo's language JSON, paper one `prh score-lm` JSON per LM
DOWN_LANGUAGE = CONV_LANGUAGE if SUITE == "offline" else [lm_score_json(m) for m in model_set(DOWN_LSET)]


rule downstream_mc:
    input:
        models=[f"{model_dir(m)}/config.json" for m in model_set(DOWN_LSET) if MODELS[m]["source"] == "zoo"],
        captions=shapes_files(SUITE_CFG["paired_dataset"])["captions"],
        scenes=shapes_files(SUITE_CFG["paired_dataset"])["scenes"],
    output:
        f"{DOWN_OUT}/shapes_mc.json",
    params:
        models=lambda w, input: [os.path.dirname(p) for p in input.models],
        names=[m for m in model_set(DOWN_LSET) if MODELS[m]["source"] == "zoo"],
        data=lambda w, input: os.path.dirname(input.captions),
        n_items=DOWN["n_items"],
        n_choices=DOWN["n_choices"],
        seed=config["seed"],
    log:
        log_path("downstream_mc", "downstream_mc"),
    benchmark:
        bench_path("downstream_mc", "downstream_mc")
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh score-mc --data {params.data} --models {params.models}"
        " --names {params.names} --n-items {params.n_items} --n-choices {params.n_choices}"
        " --seed {params.seed} --no-progress --out {output} > {log} 2>&1"


rule downstream:
    input:
        cross=DOWN_CROSS,
        scores=rules.downstream_mc.output[0] if SUITE == "offline" else DOWN.get("scores_csv"),
        language=DOWN_LANGUAGE,
        probes=CONV_PROBES if SUITE == "offline" else [],
    output:
        data=f"{DOWN_OUT}/downstream.json",
        metrics=f"{DOWN_OUT}/metrics.json",
    params:
        which=lambda w, input: f"--probes {input.probes}" if input.probes
        else f"--strongest-vision {DOWN.get('strongest_vision')}",
        out_dir=lambda w, output: os.path.dirname(output.metrics),
    log:
        log_path("downstream", "downstream"),
    benchmark:
        bench_path("downstream", "downstream")
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh run-downstream --cross-alignment {input.cross} --scores {input.scores} {params.which}"
        " --language {input.language} --out-dir {params.out_dir} > {log} 2>&1"


TARGETS += [f"{DOWN_OUT}/metrics.json", *figure_targets("fig04_downstream")]
