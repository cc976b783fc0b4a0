# Alignment against the number of items N (prh.studies.sample_size): nested subsets of one
# dataset's items (default: the paired set, whose features the zoo's rules extract anyway; presets/
# sample_size.yaml: a 100,000-item world), each model pair and (offline) each model against the world
# kernel, mutual k-NN and CKNNA at k fixed and k/N fixed and linear CKA, each with its permutation null.
from prh.studies.sample_size.run import CONFIG as SS_CONFIG

SS = config["sample_size"]
SS_DATASET = SS["dataset"][SUITE] or SUITE_CFG["paired_dataset"]
SS_VISION, SS_LANGUAGE = SS["vision_models"][SUITE], SS["language_models"][SUITE]


rule sample_size:
    input:
        feats=[feature_file(SS_DATASET, m) for m in SS_VISION + SS_LANGUAGE],
        scenes=world_scenes(SS_DATASET),
    output:
        **study_outputs("sample_size"),
    log:
        log_path("sample_size", SS_DATASET),
    benchmark:
        bench_path("sample_size", SS_DATASET)
    threads: 2
    resources:
        **JOB_SIZES["sample_size"],
    params:
        names=" ".join(SS_VISION + SS_LANGUAGE),
        language=" ".join(SS_LANGUAGE),
        scenes=scenes_arg,
        config=slice_arg(config, SS_CONFIG),
        seed=config["seed"],
        device=config["device"],
    shell:
        "OMP_NUM_THREADS={threads} prh run-sample-size --names {params.names} --features {input.feats}"
        " --language {params.language} {params.scenes} --config {params.config} --seed {params.seed} --device {params.device}"
        " --sweep {output.sweep} --metrics {output.metrics} > {log} 2>&1"


TARGETS += [rules.sample_size.output.metrics, *figure_targets("sample_size_alignment_vs_n")] if SS_VISION else []
