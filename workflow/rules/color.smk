# Colour from co-occurrence (PRH section 4, Figure 8, appendices D and F): pixel PMI and
# colour-term embeddings, each MDS-embedded and aligned to CIELAB; and the section 4 check
# that binary NCE and InfoNCE learn the PMI kernel. Offline: seconds on one core.
import json
import os
import shlex

from prh.experiments.color import language_specs

COLOR = f"{R}/experiments/color"
COLOR_CFG = config.get("color", {})
COLOR_IMAGES = COLOR_CFG["images"][SUITE]
COLOR_LANG = COLOR_CFG["language_models"][SUITE]
COLOR_LANG = model_set(COLOR_LANG) if isinstance(COLOR_LANG, str) else COLOR_LANG
COLOR_SPECS = language_specs(COLOR_LANG, MODELS, COLOR_CFG["recipes"])
COLOR_FIGURES = {"fig08_color_pmi": "pmi", "fig_sec4_nce_pmi": "nce"}  # stem -> report/color_<x>.rst


rule color_vision:
    input:
        # packaged photos come with scikit-image / scikit-learn; a dataset is built by its own rule
        **({} if COLOR_IMAGES == "packaged" else {"images": f"{R}/data/{COLOR_IMAGES}/images.npy"}),
    output:
        vision=f"{COLOR}/vision.json",
    params:
        images=lambda w, input: input.get("images", "packaged"),
        config=shlex.quote(json.dumps(COLOR_CFG["vision"], sort_keys=True)),
        seed=config["seed"],
    log:
        log_path("color_vision", "color_vision"),
    benchmark:
        bench_path("color_vision", "color_vision")
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh color vision --images {params.images} --out {output.vision} --config {params.config}"
        " --seed {params.seed} > {log} 2>&1"


rule color_language:
    input:
        # zoo checkpoints trained by the workflow; packaged and hub models need no input file
        models=[f"{R}/models/{m}/config.json" for m, s in COLOR_SPECS.items() if s["source"].startswith(R)],
    output:
        language=f"{COLOR}/language.json",
    params:
        models=shlex.quote(json.dumps(COLOR_SPECS, sort_keys=True)),
        config=shlex.quote(json.dumps(COLOR_CFG["language"], sort_keys=True)),
        seed=config["seed"],
        device=config.get("device", "auto"),
    log:
        log_path("color_language", "color_language"),
    benchmark:
        bench_path("color_language", "color_language")
    threads: 1
    resources:
        mem_mb=4000 if SUITE == "offline" else 16000,
        runtime=15 if SUITE == "offline" else 60,
        gpu=0 if SUITE == "offline" else 1,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh color language --models {params.models} --out {output.language} --config {params.config}"
        " --seed {params.seed} --device {params.device} > {log} 2>&1"


rule color_nce:
    output:
        nce=f"{COLOR}/nce.json",
    params:
        config=shlex.quote(json.dumps(COLOR_CFG["nce"], sort_keys=True)),
        seed=config["seed"],
    log:
        log_path("color_nce", "color_nce"),
    benchmark:
        bench_path("color_nce", "color_nce")
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh color nce --out {output.nce} --config {params.config} --seed {params.seed}"
        " > {log} 2>&1"


rule color_metrics:
    input:
        vision=rules.color_vision.output.vision,
        language=rules.color_language.output.language,
        nce=rules.color_nce.output.nce,
    output:
        metrics=f"{COLOR}/metrics.json",
    params:
        in_dir=lambda w, input: os.path.dirname(input.vision),
    log:
        log_path("color_metrics", "color_metrics"),
    benchmark:
        bench_path("color_metrics", "color_metrics")
    threads: 1
    resources:
        mem_mb=500,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh color metrics --in-dir {params.in_dir} --out {output.metrics} > {log} 2>&1"


rule plot_color:
    input:
        vision=rules.color_vision.output.vision,
        language=rules.color_language.output.language,
        nce=rules.color_nce.output.nce,
    output:
        **{
            f"{stem}_{ext}": report(
                f"{R}/figures/{stem}.{ext}",
                caption=f"../report/color_{caption}.rst",
                category="Colour",
            )
            for stem, caption in COLOR_FIGURES.items()
            for ext in ("pdf", "png")
        },
    params:
        in_dir=lambda w, input: os.path.dirname(input.vision),
        out_dir=lambda w, output: os.path.dirname(output[0]),
    log:
        log_path("plot_color", "plot_color"),
    benchmark:
        bench_path("plot_color", "plot_color")
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh plot-color --in-dir {params.in_dir} --out-dir {params.out_dir} > {log} 2>&1"


TARGETS += [f"{R}/figures/{stem}.{ext}" for stem in COLOR_FIGURES for ext in ("pdf", "png")]
TARGETS.append(rules.color_metrics.output.metrics)
