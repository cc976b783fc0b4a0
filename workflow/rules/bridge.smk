# Seed 001 (Luo & Shen): random-label "bridge" training of a language-pretrained transformer
# on images. One job per arm (stage 1 + stage-2 probes), one for the arms' mutual k-NN with the
# strongest vision model and the world, one for the outlier statistics of the zoo's checkpoints
# (Fig 2), one for the verdicts; the figures are the registry's (prh.figures).
from prh.studies.bridge.design import ANALYSIS_CONFIG, OUTLIERS_CONFIG, expand_arms, select_arms

BRIDGE_CFG = config.get("bridge") or {}
BRIDGE_SUITE = BRIDGE_CFG.get(SUITE) or {}
with user_errors():  # an unknown arm or key: one line, as the config check's
    BRIDGE_ARMS = select_arms(
        expand_arms(BRIDGE_SUITE.get("arms"), BRIDGE_SUITE.get("sweeps")),
        BRIDGE_SUITE.get("run_arms"),
        where=f"bridge.{SUITE}.run_arms",
    )
# images.npy and meta.json of the stage-1 (train_data) and stage-2 (probe_data) datasets
BRIDGE_DATA = {
    key: {"images": f"{R}/data/{BRIDGE_SUITE[key]}/images.npy", "meta": f"{R}/data/{BRIDGE_SUITE[key]}/meta.json"}
    for key in ("train_data", "probe_data")
    if key in BRIDGE_SUITE
}
# The vision features the arms are aligned with: offline, every zoo vision model's (the strongest by the
# zoo's probes is read); the paper suite names one
if not BRIDGE_SUITE:
    BRIDGE_VISION = {}
elif SUITE == "offline":
    BRIDGE_VISION = {
        "vision_probes": rules.probe_vision.output[0],
        "vision_feats": set_features(BRIDGE_SUITE["probe_data"], "zoo_vision"),
    }
elif BRIDGE_SUITE.get("strongest_vision"):
    BRIDGE_VISION = {"vision_feats": [feature_file(BRIDGE_SUITE["probe_data"], BRIDGE_SUITE["strongest_vision"])]}
else:
    BRIDGE_VISION = {}
# name=checkpoint specs and families for Fig 2: the offline zoo (MiniLM, the zoo's vision models, the
# language panel's GPT-2s), or GPT-2 from the hub
if not BRIDGE_SUITE:
    BRIDGE_OUTLIER_MODELS, BRIDGE_FAMILIES = {}, {}
elif SUITE != "offline":
    _ref = f"{BRIDGE_SUITE['config']['source']}@{BRIDGE_SUITE['config'].get('revision') or 'main'}"
    BRIDGE_OUTLIER_MODELS = {"gpt2": f"hub:{_ref}", "gpt2_init": f"hubinit:{_ref}"}
    BRIDGE_FAMILIES = {"gpt2": "language_pretrained", "gpt2_init": "language_init"}
else:
    _gpt2 = [m for m in model_set(LANGUAGE_PANEL) if ZOO_LANGUAGE.get(m, {}).get("arch") == "gpt2"]
    BRIDGE_OUTLIER_MODELS = {
        "minilm": "pkg:minilm",
        "minilm_init": "init:minilm",
        **{m: model_dir(m) for m in model_set("zoo_vision") + _gpt2},
    }
    BRIDGE_FAMILIES = {
        "minilm": "language_pretrained",
        "minilm_init": "language_init",
        **{
            m: "vision_random" if ZOO_VISION[m].get("objective") == "random" else "vision_trained"
            for m in model_set("zoo_vision")
        },
        **{m: "language_init" if ZOO_LANGUAGE[m].get("steps") == 0 else "language_trained" for m in _gpt2},
    }


rule bridge_arm:
    input:
        **{f"train_{k}": v for k, v in BRIDGE_DATA.get("train_data", {}).items()},
        **{f"probe_{k}": v for k, v in BRIDGE_DATA.get("probe_data", {}).items()},
        **PREFLIGHT_INPUT,
    output:
        **study_outputs("bridge", "arm_result", "arm_features"),
    log:
        log_path("bridge_arm", "{arm}"),
    benchmark:
        bench_path("bridge_arm", "{arm}")
    wildcard_constraints:
        arm=one_of(BRIDGE_ARMS),
    resources:
        mem_mb=3000,
        runtime=lambda w: 15 if SUITE == "offline" else 600,
        gpu=lambda w: 0 if SUITE == "offline" else 1,
    params:
        arm=lambda w: json_param(BRIDGE_ARMS[w.arm]),
        config=json_param(BRIDGE_SUITE.get("config") or {}),
        train=lambda w, input: os.path.dirname(input.train_meta),
        probe=lambda w, input: os.path.dirname(input.probe_meta),
        seed=config["seed"],
        device=config["device"],
    shell:
        "OMP_NUM_THREADS={threads} prh --gpus {resources.gpu} run-bridge-arm --name {wildcards.arm} --arm {params.arm} --config {params.config}"
        " --train-data {params.train} --probe-data {params.probe} --seed {params.seed}"
        " --device {params.device} --result {output.arm_result} --features {output.arm_features} > {log} 2>&1"


rule bridge_outliers:
    input:
        [f"{spec}/model.safetensors" for spec in BRIDGE_OUTLIER_MODELS.values() if spec.startswith(R)],
    output:
        **study_outputs("bridge", "outliers"),
    log:
        log_path("bridge_outliers", "outliers"),
    benchmark:
        bench_path("bridge_outliers", "outliers")
    resources:
        **JOB_SIZES["bridge_outliers"],
    params:
        models=" ".join(shlex.quote(f"{k}={v}") for k, v in BRIDGE_OUTLIER_MODELS.items()),
        families=json_param(BRIDGE_FAMILIES),
        config=slice_arg(config, OUTLIERS_CONFIG),
    shell:
        "OMP_NUM_THREADS={threads} prh run-bridge-outliers --models {params.models} --families {params.families}"
        " --config {params.config} --out {output} > {log} 2>&1"


rule bridge_align:
    input:
        **BRIDGE_VISION,
        feats=expand(rules.bridge_arm.output.arm_features, arm=sorted(BRIDGE_ARMS)),
        probe_meta=BRIDGE_DATA.get("probe_data", {}).get("meta", []),
    output:
        **study_outputs("bridge", "alignment"),
    log:
        log_path("bridge_align", "align"),
    benchmark:
        bench_path("bridge_align", "align")
    resources:
        **JOB_SIZES["bridge_align"],
    params:
        probe=lambda w, input: os.path.dirname(input.probe_meta),
        # the strongest vision model: the zoo's probes pick it (offline), or the suite names it
        which=lambda w, input: (
            f"--vision-probes {input.vision_probes}"
            if input.get("vision_probes")
            else (f"--vision-model {BRIDGE_SUITE['strongest_vision']}" if BRIDGE_SUITE.get("strongest_vision") else "")
        ),
        vision_feats=lambda w, input: (
            f"--vision-features {' '.join(input.vision_feats)}" if input.get("vision_feats") else ""
        ),
        topk=BRIDGE_SUITE["config"]["topk"],  # schema-filled (bridge.schema.yaml)
        quantile=BRIDGE_SUITE["config"]["quantile"],
    shell:
        "OMP_NUM_THREADS={threads} prh run-bridge-align --arms {input.feats} --probe-data {params.probe}"
        " {params.which} {params.vision_feats} --topk {params.topk} --quantile {params.quantile} --out {output} > {log} 2>&1"


rule bridge_analyse:
    input:
        arms=expand(rules.bridge_arm.output.arm_result, arm=sorted(BRIDGE_ARMS)),
        outliers=rules.bridge_outliers.output[0],
        alignment=rules.bridge_align.output[0],
    output:
        **study_outputs("bridge", "metrics", "figures"),
    log:
        log_path("bridge_analyse", "analyse"),
    benchmark:
        bench_path("bridge_analyse", "analyse")
    resources:
        **JOB_SIZES["bridge_analyse"],
    params:
        config=slice_arg(config, ANALYSIS_CONFIG),
    shell:
        "prh run-bridge-analysis --arms {input.arms} --outliers {input.outliers} --alignment {input.alignment}"
        " --config {params.config} --metrics {output.metrics} --figures {output.figures} > {log} 2>&1"


if BRIDGE_ARMS:
    TARGETS += figure_targets(
        "bridge_fig02_outliers",
        "bridge_fig03_random_labels",
        "bridge_fig08_partial_bridge",
        "bridge_fig10_outliers_after",
    )
    TARGETS.append(rules.bridge_analyse.output.metrics)
