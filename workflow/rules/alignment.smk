# Alignment between model sets (PRH appendix A/B): every layer of each model
# against every layer of each other model, best pair kept. Each model's
# neighbour sets are computed once per job, however many pairs it enters.
from prh.metrics.memory import align_memory_mb
from prh.metrics.names import ALIGN_CONFIG

# The two alignments every suite needs: vision-vision on the vision-only set,
# language-vision on the paired set.
VISION_ALIGNMENT = alignment_json(SUITE_CFG["vision_dataset"], SUITE_CFG["vision_models"], SUITE_CFG["vision_models"])
CROSS_ALIGNMENT = alignment_json(SUITE_CFG["paired_dataset"], SUITE_CFG["language_models"], SUITE_CFG["vision_models"])
# Per model set, 1 when every row model is a language model and the suite leaves their token-embedding
# layer out (--skip-x-layers): a language model's layer 0 is its token embeddings, a bag of words.
SKIP_LANGUAGE_EMBEDDING = {
    name: int(ALIGN["skip_language_embedding"][SUITE] and all(MODELS[m]["modality"] == "language" for m in members))
    for name, members in config["model_sets"].items()
}
# The settings of the memory estimate of a job that aligns two sets of features (prh.metrics.memory.align_memory_mb:
# one layer of one file at a time)
ALIGN_MEMORY = {key: ALIGN[key] for key in ("topk", "cca_dim", "dtype")}
# What both align rules read and pass: the row set's and the column set's features and names, and how to compare
ALIGN_INPUT = dict(x=lambda w: set_features(w.dataset, w.xset), y=lambda w: set_features(w.dataset, w.yset))
ALIGN_SETS = dict(
    x_names=lambda w: model_set(w.xset),
    y_names=lambda w: model_set(w.yset),
    config=slice_arg(config, ALIGN_CONFIG),
    device=config["device"],
    skip=lambda w: SKIP_LANGUAGE_EMBEDDING[w.xset],
)


rule align:
    input:
        **ALIGN_INPUT,
    output:
        f"{R}/alignment/{{dataset}}/{{metric}}/{{xset}}__{{yset}}.json",
    log:
        log_path("align", "{dataset}", "{metric}", "{xset}__{yset}"),
    benchmark:
        bench_path("align", "{dataset}", "{metric}", "{xset}__{yset}")
    threads: 2
    resources:
        # from the feature files' headers: one layer at a time is read, so it follows one layer's size, not the file's
        mem_mb=lambda w, input: align_memory_mb(
            x_features=list(input.x),
            y_features=list(input.y),
            metric=w.metric,
            **ALIGN_MEMORY,
        ),
        runtime=60,
    params:
        **ALIGN_SETS,
        # the calibrated null of the headline metric (the figures' tables); other metrics (Figs 12-14) skip it
        permutations=lambda w: ALIGN["null_permutations"] if w.metric == ALIGN["metric"] else 0,
        seed=lambda w: config["seed"] if ALIGN["null_permutations"] and w.metric == ALIGN["metric"] else 0,  # only the null uses it
    shell:
        "prh align --metric {wildcards.metric} --config {params.config}"
        " --x-names {params.x_names} --x-features {input.x}"
        " --y-names {params.y_names} --y-features {input.y}"
        " --null-permutations {params.permutations} --seed {params.seed} --skip-x-layers {params.skip}"
        " --device {params.device} --threads {threads}"
        " --out {output} > {log} 2>&1"


# The tables Figs 12-14 read under all eight metrics (the vision-vision table and the language
# panel against the vision set) are one job each: one read of every feature file, one
# neighbour search and one centred product per layer, one position table per row layer for
# every k-NN metric (prh align --metric <all eight>). The headline metric keeps its null.
ALL_METRIC_TABLES = [
    (SUITE_CFG["vision_dataset"], SUITE_CFG["vision_models"], SUITE_CFG["vision_models"]),
    (SUITE_CFG["paired_dataset"], LANGUAGE_PANEL, SUITE_CFG["vision_models"]),
]


rule align_all_metrics:
    input:
        **ALIGN_INPUT,
    output:
        [f"{R}/alignment/{{dataset}}/{m}/{{xset}}__{{yset}}.json" for m in SUPPORTED_METRICS],
    log:
        log_path("align", "{dataset}", "all_metrics", "{xset}__{yset}"),
    benchmark:
        bench_path("align", "{dataset}", "all_metrics", "{xset}__{yset}")
    wildcard_constraints:
        dataset=one_of({t[0] for t in ALL_METRIC_TABLES}),
        xset=one_of({t[1] for t in ALL_METRIC_TABLES}),
        yset=one_of({t[2] for t in ALL_METRIC_TABLES}),
    threads: 2
    resources:
        mem_mb=lambda w, input: align_memory_mb(
            x_features=list(input.x),
            y_features=list(input.y),
            metric=SUPPORTED_METRICS,
            **ALIGN_MEMORY,
        ),
        runtime=120,
    params:
        **ALIGN_SETS,
        metrics=SUPPORTED_METRICS,
        permutations=ALIGN["null_permutations"],
        null_metric=ALIGN["metric"],
        seed=config["seed"] if ALIGN["null_permutations"] else 0,
    shell:
        "prh align --metric {params.metrics} --config {params.config}"
        " --x-names {params.x_names} --x-features {input.x}"
        " --y-names {params.y_names} --y-features {input.y}"
        " --null-permutations {params.permutations} --null-metrics {params.null_metric}"
        " --seed {params.seed} --skip-x-layers {params.skip}"
        " --device {params.device} --threads {threads}"
        " --out {output} > {log} 2>&1"


ruleorder: align_all_metrics > align
