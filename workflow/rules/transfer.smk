# Representation alignment and transfer (Imani, Hu & White, TMLR): the peaks task
# (Figs 10-12) and the digits experiments (Figs 2, 7). One job computes every
# number (minutes on one core at the paper's scale); one job draws every figure.
import json
import os
import shlex

TRANSFER = f"{R}/experiments/transfer"
TRANSFER_FIGURES = {  # figure stem -> caption file (workflow/report/transfer_<x>.rst)
    "imani_fig10_peaks_alignment": "peaks_alignment",
    "imani_fig11_peaks_transfer": "peaks_transfer",
    "imani_fig12_peaks_layers": "peaks_layers",
    "imani_fig02_shuffled_emergence": "shuffled_emergence",
    "imani_fig07_layerwise": "layerwise",
}


rule transfer:
    output:
        peaks_alignment=f"{TRANSFER}/peaks_alignment.json",
        peaks_transfer=f"{TRANSFER}/peaks_transfer.json",
        peaks_deep=f"{TRANSFER}/peaks_deep.json",
        emergence=f"{TRANSFER}/emergence_shuffled.json",
        layerwise=f"{TRANSFER}/layerwise.json",
        metrics=f"{TRANSFER}/metrics.json",
    params:
        config=shlex.quote(json.dumps(config["transfer"], sort_keys=True)),
        seed=config["seed"],
        device=config.get("device", "auto"),
        out_dir=lambda w, output: os.path.dirname(output.metrics),
    log:
        log_path("transfer", "transfer"),
    benchmark:
        bench_path("transfer", "transfer")
    threads: 1
    resources:
        mem_mb=3000,
        runtime=30,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh transfer --out-dir {params.out_dir} --config {params.config} "
        "--seed {params.seed} --device {params.device} > {log} 2>&1"


rule plot_transfer:
    input:
        peaks_alignment=rules.transfer.output.peaks_alignment,
        peaks_transfer=rules.transfer.output.peaks_transfer,
        peaks_deep=rules.transfer.output.peaks_deep,
        emergence=rules.transfer.output.emergence,
        layerwise=rules.transfer.output.layerwise,
    output:
        **{
            f"{stem}_{ext}": report(
                f"{R}/figures/{stem}.{ext}",
                caption=f"../report/transfer_{caption}.rst",
                category="Transfer",
            )
            for stem, caption in TRANSFER_FIGURES.items()
            for ext in ("pdf", "png")
        },
    params:
        in_dir=lambda w, input: os.path.dirname(input.peaks_alignment),
        out_dir=lambda w, output: os.path.dirname(output[0]),
    log:
        log_path("plot_transfer", "plot_transfer"),
    benchmark:
        bench_path("plot_transfer", "plot_transfer")
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh plot-transfer --in-dir {params.in_dir} --out-dir {params.out_dir} > {log} 2>&1"


TARGETS += [f"{R}/figures/{stem}.{ext}" for stem in TRANSFER_FIGURES for ext in ("pdf", "png")]
TARGETS.append(rules.transfer.output.metrics)
