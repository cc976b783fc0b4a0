# Figures drawn from the alignment tables (every experiment's own figures live
# in its rule file), and the experiments' summary metrics for `dvc metrics show`.


def alignment_figure(path):
    """results/alignment/<ds>/<metric>/<x>__<y>.json -> results/figures/alignment_<ds>_<metric>_<x>__<y>.pdf"""
    dataset, metric, name = path.split("/")[-3:]
    return f"{R}/figures/alignment_{dataset}_{metric}_{name[:-len('.json')]}.pdf"


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
    shell:
        "prh plot-alignment --alignment {input} --out {output.pdf} > {log} 2>&1"


TARGETS += [alignment_figure(VISION_ALIGNMENT), alignment_figure(CROSS_ALIGNMENT)]


def untrained_zoo_models():
    """Zoo models left at their random initialisation: the baselines of 'the models learn'."""
    zoo = config["zoo"]
    return [m for m, s in zoo["vision"].items() if s["objective"] == "random"] + [
        m for m, s in zoo["language"].items() if s.get("steps") == 0
    ]


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
    shell:
        "prh zoo-metrics --vision {input.vision} --language {input.language}"
        " --untrained {params.untrained} --out {output} > {log} 2>&1"


if SUITE == "offline":
    TARGETS.append(rules.zoo_metrics.output[0])
