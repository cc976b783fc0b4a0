# Colour from co-occurrence (PRH section 4, Figure 8, appendices D and F): pixel PMI and
# colour-term embeddings, each MDS-embedded and aligned to CIELAB; and the section 4 check
# that binary NCE and InfoNCE learn the PMI kernel. Offline: seconds on one core.
import json
import os
import shlex

from prh.studies.color.design import CONFIG as COLOR_CONFIG
from prh.studies.color.design import language_specs

COLOR_CFG = config["color"]
COLOR_IMAGES = COLOR_CFG["images"][SUITE]
COLOR_LANG = COLOR_CFG["language_models"][SUITE]
COLOR_LANG = model_set(COLOR_LANG) if isinstance(COLOR_LANG, str) else COLOR_LANG
COLOR_SPECS = language_specs(COLOR_LANG, MODELS, COLOR_CFG["recipes"])


rule color_vision:
    input:
        # packaged photos come with scikit-image / scikit-learn; a dataset is built by its own rule
        **({} if COLOR_IMAGES == "packaged" else {"images": f"{R}/data/{COLOR_IMAGES}/images.npy"}),
    output:
        **study_outputs("color", "vision"),
    log:
        log_path("color_vision", "color_vision"),
    benchmark:
        bench_path("color_vision", "color_vision")
    resources:
        **JOB_SIZES["color_vision"],
    params:
        images=lambda w, input: input.get("images", "packaged"),
        config=slice_arg(config, COLOR_CONFIG["vision"]),
        seed=config["seed"],
    shell:
        "OMP_NUM_THREADS={threads} prh run-color vision --images {params.images} --out {output.vision} --config {params.config}"
        " --seed {params.seed} > {log} 2>&1"


rule color_language:
    input:
        **PREFLIGHT_INPUT,
        # zoo checkpoints trained by the workflow; packaged and hub models need no input file
        models=[f"{model_dir(m)}/config.json" for m, s in COLOR_SPECS.items() if s["source"].startswith(R)],
    output:
        **study_outputs("color", "language"),
    log:
        log_path("color_language", "color_language"),
    benchmark:
        bench_path("color_language", "color_language")
    resources:
        **(dict(mem_mb=4000, runtime=15, gpu=0) if SUITE == "offline" else dict(mem_mb=16000, runtime=60, gpu=1)),
    params:
        models=json_param(COLOR_SPECS),
        config=slice_arg(config, COLOR_CONFIG["language"]),
        seed=config["seed"],
        device=config["device"],
    shell:
        "OMP_NUM_THREADS={threads} prh --gpus {resources.gpu} run-color language --models {params.models} --out {output.language} --config {params.config}"
        " --seed {params.seed} --device {params.device} > {log} 2>&1"


rule color_nce:
    output:
        **study_outputs("color", "nce"),
    log:
        log_path("color_nce", "color_nce"),
    benchmark:
        bench_path("color_nce", "color_nce")
    resources:
        **JOB_SIZES["color_nce"],
    params:
        config=slice_arg(config, COLOR_CONFIG["nce"]),
        seed=config["seed"],
    shell:
        "OMP_NUM_THREADS={threads} prh run-color nce --out {output.nce} --config {params.config} --seed {params.seed}"
        " > {log} 2>&1"


rule color_metrics:
    input:
        vision=rules.color_vision.output.vision,
        language=rules.color_language.output.language,
        nce=rules.color_nce.output.nce,
    output:
        **study_outputs("color", "metrics"),
    log:
        log_path("color_metrics", "color_metrics"),
    benchmark:
        bench_path("color_metrics", "color_metrics")
    resources:
        **JOB_SIZES["color_metrics"],
    shell:
        "prh run-color metrics --vision {input.vision} --language {input.language} --nce {input.nce}"
        " --out {output.metrics} > {log} 2>&1"


TARGETS += figure_targets("color_fig08_pmi", "color_sec4_nce_pmi")
TARGETS.append(rules.color_metrics.output.metrics)
