# Downstream language scores against alignment (PRH section 2.4, Fig 4): each language
# model's alignment to the strongest vision model against a downstream score. Offline:
# HellaSwag-style caption completion in the shapes world (downstream_mc), the strongest
# vision model by mean probe accuracy. Paper: HellaSwag / GSM8K by lm-evaluation-harness with one setting
# for every LM (downstream_harness, downstream.harness), and the vision model named in params (DINOv2 giant).
from prh.evaluation.harness import CONFIG as HARNESS_CONFIG
from prh.studies.downstream.design import MC_CONFIG

DOWN = config["downstream"]
# Fig 4's own model sets (paper: every LM the paper's Fig 4 shows, against DINOv2 ViT-g); null = the suite's
DOWN_LSET = DOWN["language_models"][SUITE] or SUITE_CFG["language_models"]
DOWN_VSET = DOWN["vision_models"][SUITE] or SUITE_CFG["vision_models"]
DOWN_CROSS = alignment_json(SUITE_CFG["paired_dataset"], DOWN_LSET, DOWN_VSET)
if SUITE != "offline" and DOWN["strongest_vision"] not in model_set(DOWN_VSET):
    raise ValueError(
        f"downstream.strongest_vision={DOWN['strongest_vision']!r} is not in the model set "
        f"downstream.vision_models.{SUITE}={DOWN_VSET!r} ({model_set(DOWN_VSET)}): add it there"
    )
# the LMs' 1 - bpb colours Fig 4's points: offline the zoo's language JSON, paper one `prh score-lm` JSON per LM
DOWN_LANGUAGE = CONV_LANGUAGE if SUITE == "offline" else [lm_score_json(m) for m in model_set(DOWN_LSET)]


rule downstream_mc:
    input:
        models=[f"{model_dir(m)}/config.json" for m in model_set(DOWN_LSET) if MODELS[m]["source"] == "zoo"],
        captions=shapes_files(SUITE_CFG["paired_dataset"])["captions"],
        scenes=shapes_files(SUITE_CFG["paired_dataset"])["scenes"],
    output:
        **study_outputs("downstream", "shapes_mc"),
    log:
        log_path("downstream_mc", "downstream_mc"),
    benchmark:
        bench_path("downstream_mc", "downstream_mc")
    resources:
        **JOB_SIZES["downstream_mc"],
    params:
        models=lambda w, input: [os.path.dirname(p) for p in input.models],
        names=[m for m in model_set(DOWN_LSET) if MODELS[m]["source"] == "zoo"],
        data=lambda w, input: os.path.dirname(input.captions),
        config=slice_arg(config, MC_CONFIG),
        seed=config["seed"],
    shell:
        "OMP_NUM_THREADS={threads} prh score-mc --data {params.data} --models {params.models}"
        " --names {params.names} --config {params.config}"
        " --seed {params.seed} --no-progress --out {output} > {log} 2>&1"


rule downstream_harness:
    input:
        **PREFLIGHT_INPUT,
    output:
        **study_outputs("downstream", "harness"),  # one LM's lm-evaluation-harness scores
    log:
        log_path("downstream_harness", "{model}"),
    benchmark:
        bench_path("downstream_harness", "{model}")
    wildcard_constraints:
        model=HUB_LM,
    resources:
        **MODEL_JOB,
        # ~40M prompt tokens (10-shot HellaSwag x 4 endings) and 1,319 x 256 greedy GSM8K steps: ~1 h at 7B on one GPU
        runtime=GPU_RUNTIME("downstream_harness", lambda w: int(30 + 8 * MODELS[w.model]["n_params"] / 1e9)),
    params:
        **HUB_LM_PARAMS,
        config=slice_arg(config, HARNESS_CONFIG),
    shell:
        "prh --gpus {resources.gpu} eval-harness --model {params.repo:q} --revision {params.revision:q} --name {wildcards.model}"
        " --config {params.config}"
        " --device {params.device} {params.device_map} --out {output} > {log} 2>&1"


rule downstream_harness_merge:
    input:
        expand(rules.downstream_harness.output.harness, model=model_set(DOWN_LSET)),
    output:
        **study_outputs("downstream", "harness_scores"),
    log:
        log_path("downstream_harness_merge", "downstream_harness_merge"),
    benchmark:
        bench_path("downstream_harness_merge", "downstream_harness_merge")
    resources:
        **JOB_SIZES["downstream_harness_merge"],
    shell:
        "prh merge-harness --scores {input} --out {output} > {log} 2>&1"


rule downstream:
    input:
        cross=DOWN_CROSS,
        scores=rules.downstream_mc.output[0] if SUITE == "offline" else rules.downstream_harness_merge.output[0],
        language=DOWN_LANGUAGE,
        probes=CONV_PROBES if SUITE == "offline" else [],
    output:
        **study_outputs("downstream", "downstream", "metrics"),
    log:
        log_path("downstream", "downstream"),
    benchmark:
        bench_path("downstream", "downstream")
    resources:
        **JOB_SIZES["downstream"],
    params:
        which=lambda w, input: (
            f"--probes {input.probes}" if input.probes else f"--strongest-vision {DOWN.get('strongest_vision')}"
        ),
    shell:
        "prh run-downstream --cross-alignment {input.cross} --scores {input.scores} {params.which}"
        " --language {input.language} --downstream {output.downstream} --metrics {output.metrics} > {log} 2>&1"


TARGETS += [rules.downstream.output.metrics, *figure_targets("downstream_fig04")]
