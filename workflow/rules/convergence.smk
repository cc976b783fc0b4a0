# Convergence (PRH section 2, Figs 2 and 3) and the platonic reference: competence bins and the
# model map from the vision probes and vision-vision alignment, language-vision alignment against
# 1 - bpb, and (offline) each model's alignment with the world kernel. Offline, the probes are the
# shapes-world tasks and bpb comes from the zoo's language eval; in the paper suite, linear probes
# on the 19 VTAB tasks (probe_vtab) and the OpenWebText lm_score of each LM (lm_score_merge).
# Seconds on one core (UMAP compiles for ~30 s).
import json
import shlex

CONV = f"{R}/experiments/convergence"
CONV_CFG = config.get("convergence", {})
CONV_VSET, CONV_LSET = SUITE_CFG["vision_models"], SUITE_CFG["language_models"]
CONV_FIGURES = {"competence": "fig02_competence_alignment", "model_map": "fig02_model_map",
                "language_vision": "fig03_language_vision"}
# VTAB task -> (train, test) dataset names: every vtab_<task>_train with its _test
VTAB_TASKS = {name[len("vtab_"):-len("_train")]: (name, name[:-len("_train")] + "_test")
              for name in config["datasets"] if name.startswith("vtab_") and name.endswith("_train")}
if SUITE == "offline":
    CONV_PROBES, CONV_LANGUAGE = f"{R}/experiments/zoo/vision.json", f"{R}/experiments/zoo/language.json"
else:
    CONV_PROBES, CONV_LANGUAGE = f"{CONV}/vtab_probes.json", f"{CONV}/lm_scores.json"


rule probe_vtab:
    input:
        features=[f"{R}/features/{ds}/{m}.safetensors" for pair in VTAB_TASKS.values() for ds in pair
                  for m in model_set(CONV_VSET)],
        labels=[f"{R}/data/{ds}/labels.npy" for pair in VTAB_TASKS.values() for ds in pair],
    output:
        f"{CONV}/vtab_probes.json",
    params:
        tasks=lambda w, input: shlex.quote(json.dumps(
            {t: {"train": os.path.dirname(input.labels[2 * i]), "test": os.path.dirname(input.labels[2 * i + 1])}
             for i, t in enumerate(VTAB_TASKS)}, sort_keys=True)),
        names=model_set(CONV_VSET),
        # results/features/<dataset>/<model>.safetensors -> results/features
        features_root=lambda w, input: os.path.dirname(os.path.dirname(input.features[0])),
        seed=config["seed"],
    log:
        log_path("probe_vtab", "probe_vtab"),
    benchmark:
        bench_path("probe_vtab", "probe_vtab")
    threads: 4
    resources:
        mem_mb=16000,
        runtime=240,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh probe-splits --tasks {params.tasks} --names {params.names}"
        " --features-root {params.features_root} --seed {params.seed} --out {output} > {log} 2>&1"


rule lm_score_merge:
    input:
        [lm_score_json(m) for m in model_set(CONV_LSET)],
    output:
        f"{CONV}/lm_scores.json",
    log:
        log_path("lm_score_merge", "lm_score_merge"),
    benchmark:
        bench_path("lm_score_merge", "lm_score_merge")
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh lm-score-merge --scores {input} --out {output} > {log} 2>&1"


rule convergence:
    input:
        probes=CONV_PROBES,
        vision=f"{R}/alignment/{SUITE_CFG['vision_dataset']}/mutual_knn/{CONV_VSET}__{CONV_VSET}.json",
        cross=f"{R}/alignment/{SUITE_CFG['paired_dataset']}/mutual_knn/{CONV_LSET}__{CONV_VSET}.json",
        language=CONV_LANGUAGE,
    output:
        competence=f"{CONV}/competence.json",
        model_map=f"{CONV}/model_map.json",
        language_vision=f"{CONV}/language_vision.json",
        metrics=f"{CONV}/metrics.json",
    params:
        out_dir=lambda w, output: os.path.dirname(output.metrics),
        families=shlex.quote(json.dumps({m: MODELS[m].get("family", m) for m in model_set(CONV_VSET)}, sort_keys=True)),
        config=shlex.quote(json.dumps(CONV_CFG, sort_keys=True)),
    log:
        log_path("convergence", "convergence"),
    benchmark:
        bench_path("convergence", "convergence")
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh convergence --probes {input.probes} --vision-alignment {input.vision}"
        " --cross-alignment {input.cross} --language {input.language} --families {params.families}"
        " --out-dir {params.out_dir} --config {params.config} > {log} 2>&1"

rule plot_convergence:
    input:
        competence=rules.convergence.output.competence,
        model_map=rules.convergence.output.model_map,
        language_vision=rules.convergence.output.language_vision,
    output:
        **{key: report(f"{R}/figures/{stem}.pdf", caption=f"../report/convergence_{key}.rst", category="Convergence")
           for key, stem in CONV_FIGURES.items()},
        **{f"{key}_png": f"{R}/figures/{stem}.png" for key, stem in CONV_FIGURES.items()},
    params:
        in_dir=lambda w, input: os.path.dirname(input.competence),
        out_dir=lambda w, output: os.path.dirname(output.competence),
        numbers=REPORT_NUMBERS,
    log:
        log_path("plot_convergence", "plot_convergence"),
    benchmark:
        bench_path("plot_convergence", "plot_convergence")
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh plot-convergence --in-dir {params.in_dir} --out-dir {params.out_dir}"
        " --figures competence model_map language_vision > {log} 2>&1"

TARGETS += [f"{CONV}/metrics.json", *[f"{R}/figures/{stem}.pdf" for stem in CONV_FIGURES.values()]]


if SUITE == "offline":

    rule convergence_platonic:
        input:
            vision=[f"{R}/features/{SUITE_CFG['vision_dataset']}/{m}.safetensors" for m in model_set(CONV_VSET)],
            language=[f"{R}/features/{SUITE_CFG['paired_dataset']}/{m}.safetensors" for m in model_set(CONV_LSET)],
            vision_scenes=shapes_files(SUITE_CFG["vision_dataset"])["scenes"],
            paired_scenes=shapes_files(SUITE_CFG["paired_dataset"])["scenes"],
            probes=f"{R}/experiments/zoo/vision.json",
            bpb=f"{R}/experiments/zoo/language.json",
        output:
            platonic=f"{CONV}/platonic.json",
            metrics=f"{CONV}/platonic_metrics.json",
        params:
            out_dir=lambda w, output: os.path.dirname(output.metrics),
            config=shlex.quote(json.dumps(CONV_CFG, sort_keys=True)),
        log:
            log_path("convergence_platonic", "convergence_platonic"),
        benchmark:
            bench_path("convergence_platonic", "convergence_platonic")
        threads: 1
        resources:
            mem_mb=4000,
            runtime=10,
        conda:
            CONDA_ENV
        shell:
            "OMP_NUM_THREADS={threads} prh convergence-platonic --vision-features {input.vision}"
            " --vision-scenes {input.vision_scenes} --language-features {input.language}"
            " --paired-scenes {input.paired_scenes} --probes {input.probes} --language {input.bpb}"
            " --out-dir {params.out_dir} --config {params.config} > {log} 2>&1"

    rule plot_convergence_platonic:
        input:
            platonic=rules.convergence_platonic.output.platonic,
        output:
            pdf=report(f"{R}/figures/fig_platonic_reference.pdf", caption="../report/convergence_platonic.rst",
                       category="Convergence"),
            png=f"{R}/figures/fig_platonic_reference.png",
        params:
            in_dir=lambda w, input: os.path.dirname(input.platonic),
            out_dir=lambda w, output: os.path.dirname(output.pdf),
            numbers=REPORT_NUMBERS,
        log:
            log_path("plot_convergence_platonic", "plot_convergence_platonic"),
        benchmark:
            bench_path("plot_convergence_platonic", "plot_convergence_platonic")
        resources:
            mem_mb=1000,
            runtime=5,
        conda:
            CONDA_ENV
        shell:
            "prh plot-convergence --in-dir {params.in_dir} --out-dir {params.out_dir} --figures platonic > {log} 2>&1"

    TARGETS += [f"{CONV}/platonic_metrics.json", f"{R}/figures/fig_platonic_reference.pdf"]
