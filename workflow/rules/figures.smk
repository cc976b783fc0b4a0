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
