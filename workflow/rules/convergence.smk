# Convergence (PRH section 2, Figs 2 and 3) and the platonic reference: competence bins and the
# model map from the vision probes and vision-vision alignment, language-vision alignment against
# 1 - bpb, and (offline) each model's alignment with the world kernel. Offline, the probes are the
# shapes-world tasks and bpb comes from the zoo's language eval; in the paper suite, linear probes
# on the 19 VTAB tasks (probe_vtab) and the OpenWebText lm_score of each LM (lm_score_merge).
# Seconds on one core (UMAP compiles for ~30 s).
import json
import shlex

from prh.config import language_runs
from prh.studies.convergence.design import CONFIG as CONV_SLICES
from prh.evaluation.world_gate import CONFIG as WORLD_GATE_CONFIG
from prh.studies.convergence.design import RELATIONAL_CONFIG, fig2_coverage

CONV_OUT = study_outputs("convergence")  # its files, by key (its manifest.yaml)
CONV_CFG = config["convergence"]
# each command's keys of the block (prh.studies.convergence.design.SLICES): editing one reruns only its rule
CONV_CONFIG = {command: slice_arg(config, keys) for command, keys in CONV_SLICES.items()}
CONV_VSET, CONV_LSET = SUITE_CFG["vision_models"], SUITE_CFG["language_models"]
# Fig 2's own vision set (paper: prh_fig2_vision, the loadable part of the paper's 78); Fig 3 keeps CONV_VSET
CONV_FIG2_VSET = config["convergence"]["vision_models"][SUITE] or CONV_VSET
if SUITE == "offline":
    CONV_PROBES, CONV_LANGUAGE = rules.probe_vision.output[0], rules.lm_eval.output[0]
else:
    CONV_PROBES, CONV_LANGUAGE = CONV_OUT["vtab_probes"], CONV_OUT["lm_scores"]
# paper suite: which of the paper's 78 Fig 2 models the set holds, by group (workflow/resources/prh_fig2_vision.yaml),
# written into competence.json and metrics.json and stated by the figure and its caption
CONV_COVERAGE = f"--coverage {json_param(fig2_coverage(model_set(CONV_FIG2_VSET)))}" if SUITE == "paper" else ""


# One job per VTAB task (its train and test features of every vision model; ~15 CPU-minutes each),
# then a cheap gather: the same file one job over all 19 tasks writes (tests/test_probes.py).
rule probe_vtab_task:
    input:
        features=lambda w: [f for ds in VTAB_TASKS[w.task] for f in set_features(ds, CONV_FIG2_VSET)],
        labels=lambda w: [f"{R}/data/{ds}/labels.npy" for ds in VTAB_TASKS[w.task]],
    output:
        **study_outputs("convergence", "vtab"),
    log:
        log_path("probe_vtab_task", "{task}"),
    benchmark:
        bench_path("probe_vtab_task", "{task}")
    wildcard_constraints:
        task=one_of(VTAB_TASKS),
    threads: 4
    resources:
        **JOB_SIZES["probe_vtab_task"],
    params:
        tasks=lambda w, input: json_param(
            {w.task: {"train": os.path.dirname(input.labels[0]), "test": os.path.dirname(input.labels[1])}}
        ),
        names=model_set(CONV_FIG2_VSET),
        # results/features/<dataset>/<model>.safetensors -> results/features
        features_root=lambda w, input: os.path.dirname(os.path.dirname(input.features[0])),
        seed=config["seed"],
    shell:
        "OMP_NUM_THREADS={threads} prh probe-splits --tasks {params.tasks} --names {params.names}"
        " --features-root {params.features_root} --seed {params.seed} --out {output} > {log} 2>&1"


rule probe_vtab:
    input:
        expand(rules.probe_vtab_task.output.vtab, task=VTAB_TASKS),
    output:
        **study_outputs("convergence", "vtab_probes"),
    log:
        log_path("probe_vtab", "probe_vtab"),
    benchmark:
        bench_path("probe_vtab", "probe_vtab")
    resources:
        **JOB_SIZES["probe_vtab"],
    shell:
        "prh merge-probe-splits --inputs {input} --out {output} > {log} 2>&1"


rule lm_score_merge:
    input:
        [lm_score_json(m) for m in model_set(CONV_LSET)],
    output:
        **study_outputs("convergence", "lm_scores"),
    log:
        log_path("lm_score_merge", "lm_score_merge"),
    benchmark:
        bench_path("lm_score_merge", "lm_score_merge")
    resources:
        **JOB_SIZES["lm_score_merge"],
    shell:
        "prh merge-lm-scores --scores {input} --out {output} > {log} 2>&1"


rule convergence:
    input:
        probes=CONV_PROBES,
        vision=f"{R}/alignment/{SUITE_CFG['vision_dataset']}/mutual_knn/{CONV_FIG2_VSET}__{CONV_FIG2_VSET}.json",
        cross=f"{R}/alignment/{SUITE_CFG['paired_dataset']}/mutual_knn/{CONV_LSET}__{CONV_VSET}.json",
        language=CONV_LANGUAGE,
        lm_competence=ZOO_COMPETENCE if SUITE == "offline" else [],
    output:
        **study_outputs("convergence", "competence", "model_map", "language_vision", "metrics"),
    log:
        log_path("convergence", "convergence"),
    benchmark:
        bench_path("convergence", "convergence")
    resources:
        **JOB_SIZES["convergence"],
    params:
        families=json_param({m: MODELS[m].get("family", m) for m in model_set(CONV_FIG2_VSET) + model_set(CONV_VSET)}),
        config=CONV_CONFIG["run-convergence"],
        bins=CONV_CFG["bins"][SUITE],  # per suite
        # offline: the pre-registered one-point-per-LM test over the vision set named in params
        # and the amendment of 2026-11-26 beside it: one point per training run (prh.config.language_runs);
        # paper: Fig 2's coverage of the paper's 78 models (CONV_COVERAGE)
        preregistered=lambda w, input: (
            f"--preregistered-competence {input.lm_competence} --preregistered-vision-models "
            + " ".join(model_set(CONV_CFG["preregistered"]["vision_models"]))
            + f" --amended-runs {json_param(language_runs(config))}"
            if input.lm_competence
            else CONV_COVERAGE
        ),
    shell:
        "OMP_NUM_THREADS={threads} prh run-convergence --probes {input.probes} --vision-alignment {input.vision}"
        " --cross-alignment {input.cross} --language {input.language} --families {params.families}"
        " --competence {output.competence} --model-map {output.model_map} --language-vision {output.language_vision}"
        " --metrics {output.metrics} --config {params.config} --bins {params.bins} {params.preregistered} > {log} 2>&1"


TARGETS += [
    rules.convergence.output.metrics,
    *figure_targets(
        "convergence_fig02_competence_alignment", "convergence_fig02_model_map", "convergence_fig03_language_vision"
    ),
]


if SUITE == "offline":

    # The amendment's world-derived gate (prh.evaluation.world_gate; convergence.amended.gate): the attributes whose
    # later sentences depend on them in the world's generator, each run's final checkpoint (layers alignment
    # reads) against its untrained same-size model's layer 0 (a random-embedding bag of words as wide) on one
    # split, a one-sided McNemar test per model, a pre-registered fraction that must pass.
    GATE_RUNS = {
        run: {k: r[k] for k in ("final", "untrained", "seed")}
        for run, r in language_runs(config).items()
        if r["final"] in ZOO_CAUSAL and r["untrained"] in ZOO_CAUSAL
    }

    # (no run with both models in the zoo_language set: no gate job; the ledger's claim is then not testable)
    rule world_gate:
        input:
            scenes=shapes_files(LM_EVAL_DATASET)["scenes"],
            feats=sorted(
                {feature_file(LM_EVAL_DATASET, r[k]) for r in GATE_RUNS.values() for k in ("final", "untrained")}
            ),
        output:
            **study_outputs("convergence", "world_gate"),
        log:
            log_path("world_gate", "language"),
        benchmark:
            bench_path("world_gate", "language")
        resources:
            **JOB_SIZES["world_gate"],
        params:
            data=lambda w, input: os.path.dirname(input.scenes),
            feats_dir=lambda w, input: os.path.dirname(input.feats[0]),
            runs=json_param(GATE_RUNS),
            config=slice_arg(config, WORLD_GATE_CONFIG),
            skip="--skip-embedding" if config["alignment"]["skip_language_embedding"]["offline"] else "",
            seed=config["seed"],
        shell:
            "prh world-gate --data {params.data} --features-dir {params.feats_dir} --runs {params.runs}"
            " --config {params.config} --seed {params.seed} {params.skip} --out {output} > {log} 2>&1"

    TARGETS += [rules.world_gate.output[0]] if GATE_RUNS else []

    rule convergence_platonic:
        input:
            vision=set_features(SUITE_CFG["vision_dataset"], CONV_VSET),
            language=set_features(SUITE_CFG["paired_dataset"], CONV_LSET),
            vision_scenes=shapes_files(SUITE_CFG["vision_dataset"])["scenes"],
            paired_scenes=shapes_files(SUITE_CFG["paired_dataset"])["scenes"],
            probes=CONV_PROBES,
            bpb=CONV_LANGUAGE,
        output:
            **study_outputs("convergence", "platonic", "platonic_metrics"),
        log:
            log_path("convergence_platonic", "convergence_platonic"),
        benchmark:
            bench_path("convergence_platonic", "convergence_platonic")
        resources:
            **JOB_SIZES["convergence_platonic"],
        params:
            config=CONV_CONFIG["run-platonic"],
        shell:
            "OMP_NUM_THREADS={threads} prh run-platonic --vision-features {input.vision}"
            " --vision-scenes {input.vision_scenes} --language-features {input.language}"
            " --paired-scenes {input.paired_scenes} --probes {input.probes} --language {input.bpb}"
            " --platonic {output.platonic} --metrics {output.platonic_metrics} --config {params.config}"
            " > {log} 2>&1"

    TARGETS += [
        rules.convergence_platonic.output.platonic_metrics,
        *figure_targets("convergence_platonic_reference", "convergence_fig03_preregistered"),
    ]


if SUITE == "offline" and REL_MODELS:

    # The relational test, pre-registered 2026-11-27 (presets/language.yaml): the run as unit, strata = sizes
    rule relational_test:
        input:
            relational=rules.score_relational.output[0],
            bpb=rules.lm_eval_relational.output[0],
            cross=f"{R}/alignment/{LM_EVAL_DATASET}/mutual_knn/{REL_CFG['model_set']}__"
            f"{CONV_CFG['preregistered']['vision_models']}.json",
        output:
            **study_outputs("convergence", "relational"),
        log:
            log_path("relational_test", "language"),
        benchmark:
            bench_path("relational_test", "language")
        resources:
            **JOB_SIZES["relational_test"],
        params:
            zoo=json_param(ZOO_RUNS),
            models=" ".join(REL_MODELS),
            config=slice_arg(config, RELATIONAL_CONFIG),
        shell:
            "prh relational-test --relational {input.relational} --bpb {input.bpb} --cross {input.cross} --zoo {params.zoo}"
            " --model-set {params.models} --config {params.config} --out {output} > {log} 2>&1"

    TARGETS += [rules.relational_test.output[0], *figure_targets("convergence_relational")]
