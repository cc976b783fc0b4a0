# Alignment between model sets (PRH appendix A/B): every layer of each model
# against every layer of each other model, best pair kept. Each model's
# neighbour sets are computed once per job, however many pairs it enters.

# The two alignments every suite needs: vision-vision on the vision-only set,
# language-vision on the paired set.
VISION_ALIGNMENT = alignment_json(
    SUITE_CFG["vision_dataset"], SUITE_CFG["vision_models"], SUITE_CFG["vision_models"]
)
CROSS_ALIGNMENT = alignment_json(
    SUITE_CFG["paired_dataset"], SUITE_CFG["language_models"], SUITE_CFG["vision_models"]
)


rule align:
    input:
        x=lambda w: set_features(w.dataset, w.xset),
        y=lambda w: set_features(w.dataset, w.yset),
    output:
        f"{R}/alignment/{{dataset}}/{{metric}}/{{xset}}__{{yset}}.json",
    params:
        x_names=lambda w: model_set(w.xset),
        y_names=lambda w: model_set(w.yset),
        topk=ALIGN["topk"],
        quantile=ALIGN["quantile"],
        cca_dim=ALIGN["cca_dim"],
        # the calibrated null of the headline metric (the figures' tables); other metrics (Figs 12-14) skip it
        permutations=lambda w: ALIGN["null_permutations"] if w.metric == ALIGN["metric"] else 0,
        dtype=ALIGN["dtype"],
        seed=lambda w: config["seed"] if ALIGN["null_permutations"] and w.metric == ALIGN["metric"] else 0,  # only the null uses it
        device=config["device"],
        # a language model's layer 0 is its token embeddings, a bag of words: left out of the layer search
        skip=lambda w: int(ALIGN["skip_language_embedding"][SUITE]
                           and all(MODELS[m]["modality"] == "language" for m in model_set(w.xset))),
    wildcard_constraints:
        dataset=DATASET,
        metric=METRIC,
        xset=MODEL_SET,
        yset=MODEL_SET,
    log:
        log_path("align", "{dataset}", "{metric}", "{xset}__{yset}"),
    benchmark:
        bench_path("align", "{dataset}", "{metric}", "{xset}__{yset}")
    threads: 2
    resources:
        mem_mb=align_mem_mb,
        runtime=60,
    conda:
        CONDA_ENV
    shell:
        "prh align --metric {wildcards.metric} --topk {params.topk} --quantile {params.quantile}"
        " --x-names {params.x_names} --x-features {input.x}"
        " --y-names {params.y_names} --y-features {input.y}"
        " --cca-dim {params.cca_dim} --null-permutations {params.permutations} --seed {params.seed} --skip-x-layers {params.skip}"
        " --dtype {params.dtype} --device {params.device} --threads {threads} --out {output} > {log} 2>&1"
