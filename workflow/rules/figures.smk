# Every figure: one plot rule per entry of the figure registry (src/prh/figures.py:
# name -> plot function, inputs, report caption), each calling `prh plot NAME`. Rule
# files say which figures the run builds (TARGETS += figure_targets(...)); this file
# says how each is drawn. Also the zoo's summary metrics for `dvc metrics show`.

# {fields} of the registry's input paths that come from params.yaml; the others are wildcards (common.smk constrains them).
FIGURE_CONTEXT = {"sample_sheet_dataset": SAMPLE_SHEET_DATASET}
# Zoo models of the run's sets left at their random initialisation: the baselines of "the models learn"
UNTRAINED_ZOO_MODELS = [
    m for m in config["model_sets"].get("zoo_vision", []) if ZOO_VISION.get(m, {}).get("objective") == "random"
] + [m for m in config["model_sets"].get("zoo_language", []) if ZOO_LANGUAGE.get(m, {}).get("steps") == 0]


for _fig in FIGURES.values():

    rule:
        name:
            _fig.rule
        input:
            **_fig.paths(FIGURE_CONTEXT),
        output:
            **{ext: f"{R}/figures/{_fig.name}.{ext}" for ext in _fig.formats[1:]},
            main=report(
                f"{R}/figures/{_fig.name}.{_fig.formats[0]}",
                caption=f"../report/{_fig.caption}.rst",
                category=_fig.category,
            ),
        log:
            log_path("plot", _fig.name),
        benchmark:
            bench_path("plot", _fig.name)
        resources:
            **JOB_SIZES["plot"],
        params:
            name=shlex.quote(_fig.name),
            # `--input key=path` for each input (the registry's keys, in its order)
            inputs=lambda w, input: " ".join(f"--input {k}={shlex.quote(v)}" for k, v in input.items()),
            numbers=ReportNumbers(),
        shell:
            "prh plot {params.name} --out {output.main} {params.inputs} > {log} 2>&1"


# the two headline tables' heatmaps: results/alignment/<ds>/<metric>/<x>__<y>.json -> alignment_<ds>_<metric>_<x>__<y>
TARGETS += [
    f"{R}/figures/alignment_{'_'.join(path[:-len('.json')].split('/')[-3:])}.{ext}"
    for path in (VISION_ALIGNMENT, CROSS_ALIGNMENT)
    for ext in ("pdf", "png")
]


rule zoo_metrics:
    input:
        vision=rules.probe_vision.output[0],
        language=rules.lm_eval.output[0],
        language_probes=rules.probe_language.output[0],
        mc=rules.downstream_mc.output[0],
    output:
        metrics=f"{R}/experiments/zoo/metrics.json",
        competence=ZOO_COMPETENCE,
    log:
        log_path("zoo_metrics", "metrics"),
    benchmark:
        bench_path("zoo_metrics", "metrics")
    resources:
        **JOB_SIZES["zoo_metrics"],
    params:
        untrained=UNTRAINED_ZOO_MODELS,
        gate=json_param(config["convergence"]["preregistered"]["gate"]),
        gate_min_steps=config["convergence"]["preregistered"]["min_steps_for_gate"],
    shell:
        "prh summarise-zoo --vision {input.vision} --language {input.language}"
        " --language-probes {input.language_probes} --mc {input.mc} --gate {params.gate}"
        " --gate-min-steps {params.gate_min_steps} --untrained {params.untrained} --out {output.metrics}"
        " --competence-out {output.competence} > {log} 2>&1"


if SUITE == "offline":
    TARGETS.append(rules.zoo_metrics.output.metrics)
