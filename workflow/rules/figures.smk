# Figures drawn from the alignment tables (every experiment's own figures live
# in its rule file), and the experiments' summary metrics for `dvc metrics show`.


rule plot_alignment:
    input:
        f"{R}/alignment/{{dataset}}/{{metric}}/{{xset}}__{{yset}}.json",
    output:
        pdf=f"{R}/figures/alignment_{{dataset}}_{{metric}}_{{xset}}__{{yset}}.pdf",
        png=report(
            f"{R}/figures/alignment_{{dataset}}_{{metric}}_{{xset}}__{{yset}}.png",
            caption="../report/alignment.rst",
            category="Alignment",
        ),
    wildcard_constraints:
        dataset=DATASET,
        metric=METRIC,
        xset=MODEL_SET,
        yset=MODEL_SET,
    log:
        log_path("plot_alignment", "{dataset}_{metric}_{xset}__{yset}"),
    benchmark:
        bench_path("plot_alignment", "{dataset}_{metric}_{xset}__{yset}")
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh plot-alignment --alignment {input} --out {output.pdf} > {log} 2>&1"


TARGETS += [alignment_figure(VISION_ALIGNMENT), alignment_figure(CROSS_ALIGNMENT)]


rule zoo_metrics:
    input:
        vision=f"{R}/experiments/zoo/vision.json",
        language=f"{R}/experiments/zoo/language.json",
    output:
        f"{R}/experiments/zoo/metrics.json",
    params:
        untrained=untrained_zoo_models(),
    log:
        log_path("zoo_metrics", "metrics"),
    benchmark:
        bench_path("zoo_metrics", "metrics")
    resources:
        mem_mb=500,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh zoo-metrics --vision {input.vision} --language {input.language}"
        " --untrained {params.untrained} --out {output} > {log} 2>&1"


if SUITE == "offline":
    TARGETS.append(rules.zoo_metrics.output[0])
