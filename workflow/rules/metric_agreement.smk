# Locality and metric agreement (PRH appendices A and B). Fig 10: CKNNA of every (language,
# vision) pair on the paired set for each k, centred on the weakest LM and standardised
# (prh run-locality). Figs 12-14: the vision-vision and language-vision tables under all eight
# metrics (the align rule, once per metric), their Spearman agreement over vision pairs at the
# full set and at smaller batch sizes, and cross-modal alignment against 1 - bpb per metric.
from prh.studies.metric_agreement.design import AGREEMENT_CONFIG, LOCALITY_CONFIG

AGREE_VSET, AGREE_LSET = SUITE_CFG["vision_models"], LANGUAGE_PANEL
# each vision model with its family (the colour of its points)
AGREE_FAMILIES = json_param({m: MODELS[m].get("family", m) for m in model_set(AGREE_VSET)})


rule locality:
    input:
        language=set_features(SUITE_CFG["paired_dataset"], AGREE_LSET),
        vision=set_features(SUITE_CFG["paired_dataset"], AGREE_VSET),
        bpb=CONV_LANGUAGE,
    output:
        **study_outputs("metric_agreement", "locality", "locality_metrics"),
    log:
        log_path("locality", "locality"),
    benchmark:
        bench_path("locality", "locality")
    threads: 2
    resources:
        **JOB_SIZES["locality"],
    params:
        language_names=model_set(AGREE_LSET),
        vision_names=model_set(AGREE_VSET),
        config=slice_arg(config, LOCALITY_CONFIG),
        families=AGREE_FAMILIES,
        device=config["device"],
    shell:
        "prh run-locality --x-names {params.language_names} --x-features {input.language}"
        " --y-names {params.vision_names} --y-features {input.vision} --config {params.config}"
        " --language {input.bpb} --families {params.families}"
        " --threads {threads} --device {params.device} --locality {output.locality} --metrics {output.locality_metrics}"
        " > {log} 2>&1"


rule metric_agreement:
    input:
        vision=[
            alignment_json(SUITE_CFG["vision_dataset"], AGREE_VSET, AGREE_VSET, metric=m) for m in SUPPORTED_METRICS
        ],
        cross=[alignment_json(SUITE_CFG["paired_dataset"], AGREE_LSET, AGREE_VSET, metric=m) for m in SUPPORTED_METRICS],
        features=set_features(SUITE_CFG["vision_dataset"], AGREE_VSET),
        bpb=CONV_LANGUAGE,
    output:
        **study_outputs("metric_agreement", "metric_agreement", "cross_metrics", "metrics"),
    log:
        log_path("metric_agreement", "metric_agreement"),
    benchmark:
        bench_path("metric_agreement", "metric_agreement")
    threads: 2
    resources:
        **JOB_SIZES["metric_agreement"],
    params:
        config=slice_arg(config, AGREEMENT_CONFIG),
        vision_names=model_set(AGREE_VSET),
        families=AGREE_FAMILIES,
        device=config["device"],
    shell:
        "prh run-metric-agreement --vision-alignments {input.vision} --vision-names {params.vision_names}"
        " --vision-features {input.features} --config {params.config}"
        " --cross-alignments {input.cross} --language {input.bpb} --families {params.families}"
        " --threads {threads} --device {params.device} --metric-agreement {output.metric_agreement}"
        " --cross-metrics {output.cross_metrics} --metrics {output.metrics} > {log} 2>&1"


TARGETS += [
    rules.metric_agreement.output.metrics,
    rules.locality.output.locality_metrics,
    *figure_targets(
        "metric_agreement_fig10_locality",
        "metric_agreement_fig12",
        "metric_agreement_fig13_cross_metrics",
        "metric_agreement_fig14_cross_metrics",
    ),
]
