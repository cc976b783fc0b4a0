# Seed 001 (Luo & Shen): random-label "bridge" training of a language-pretrained transformer
# on images. One job per arm (stage 1 + stage-2 probes), one for the arms' mutual k-NN with the
# strongest vision model and the world, one for the outlier statistics of the zoo's checkpoints
# (Fig 2), one for the verdicts; the figures are the registry's (prh.figures).


rule bridge_arm:
    input:
        unpack(bridge_arm_inputs),
    output:
        result=f"{BRIDGE}/arms/{{arm}}/result.json",
        feats=f"{BRIDGE}/arms/{{arm}}/features.safetensors",
    wildcard_constraints:
        arm=one_of(BRIDGE_ARMS),
    params:
        arm=lambda w: json_param(BRIDGE_ARMS[w.arm]),
        config=json_param(BRIDGE_SUITE.get("config") or {}),
        train=lambda w, input: os.path.dirname(input.train_meta),
        probe=lambda w, input: os.path.dirname(input.probe_meta),
        out_dir=lambda w, output: os.path.dirname(output.result),
        seed=config["seed"],
        device=config["device"],
    log:
        log_path("bridge_arm", "{arm}"),
    benchmark:
        bench_path("bridge_arm", "{arm}")
    threads: 1
    resources:
        mem_mb=3000,
        runtime=lambda w: 15 if SUITE == "offline" else 600,
        gpu=lambda w: 0 if SUITE == "offline" else 1,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh run-bridge-arm --name {wildcards.arm} --arm {params.arm} --config {params.config}"
        " --train-data {params.train} --probe-data {params.probe} --seed {params.seed}"
        " --device {params.device} --out-dir {params.out_dir} > {log} 2>&1"


rule bridge_outliers:
    input:
        [f"{spec}/model.safetensors" for spec in BRIDGE_OUTLIER_MODELS.values() if spec.startswith(R)],
    output:
        f"{BRIDGE}/outliers.json",
    params:
        models=" ".join(f"{k}={v}" for k, v in BRIDGE_OUTLIER_MODELS.items()),
        families=json_param(BRIDGE_FAMILIES),
        config=json_param(BRIDGE_CFG.get("outliers") or {}),
    log:
        log_path("bridge_outliers", "outliers"),
    benchmark:
        bench_path("bridge_outliers", "outliers")
    threads: 1
    resources:
        mem_mb=3000,
        runtime=10,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh run-bridge-outliers --models {params.models} --families {params.families}"
        " --config {params.config} --out {output} > {log} 2>&1"


rule bridge_align:
    input:
        unpack(bridge_align_inputs),
    output:
        f"{BRIDGE}/alignment.json",
    params:
        probe=lambda w, input: os.path.dirname(input.probe_meta),
        flags=bridge_align_flags,
    log:
        log_path("bridge_align", "align"),
    benchmark:
        bench_path("bridge_align", "align")
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh run-bridge-align --arms {input.feats} --probe-data {params.probe} {params.flags}"
        " --out {output} > {log} 2>&1"


rule bridge_analyse:
    input:
        arms=expand(f"{BRIDGE}/arms/{{arm}}/result.json", arm=sorted(BRIDGE_ARMS)),
        outliers=rules.bridge_outliers.output[0],
        alignment=rules.bridge_align.output[0],
    output:
        metrics=f"{BRIDGE}/metrics.json",
        figures=f"{BRIDGE}/figures.json",
    params:
        config=json_param(BRIDGE_CFG.get("analysis") or {}),
        out_dir=lambda w, output: os.path.dirname(output.metrics),
    log:
        log_path("bridge_analyse", "analyse"),
    benchmark:
        bench_path("bridge_analyse", "analyse")
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh run-bridge-analysis --arms {input.arms} --outliers {input.outliers} --alignment {input.alignment}"
        " --config {params.config}"
        " --out-dir {params.out_dir} > {log} 2>&1"


if BRIDGE_ARMS:
    TARGETS += figure_targets("bridge_fig02_outliers", "bridge_fig03_random_labels", "bridge_fig08_partial_bridge",
                              "bridge_fig10_outliers_after")
    TARGETS.append(rules.bridge_analyse.output.metrics)
