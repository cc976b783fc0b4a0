# Representation alignment and transfer (Imani, Hu & White, TMLR): the peaks task
# (Figs 10-12) and the digits experiments (Figs 2, 7). One job computes every
# number (minutes on one core at the paper's scale); one job draws every figure.
import json
import os
import shlex

TRANSFER = f"{R}/experiments/transfer"


rule transfer:
    output:
        peaks_alignment=f"{TRANSFER}/peaks_alignment.json",
        peaks_transfer=f"{TRANSFER}/peaks_transfer.json",
        peaks_deep=f"{TRANSFER}/peaks_deep.json",
        emergence=f"{TRANSFER}/emergence_shuffled.json",
        layerwise=f"{TRANSFER}/layerwise.json",
        metrics=f"{TRANSFER}/metrics.json",
    params:
        config=json_param(config["transfer"]),
        seed=config["seed"],
        device=config["device"],
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
        "OMP_NUM_THREADS={threads} prh run-transfer --out-dir {params.out_dir} --config {params.config} "
        "--seed {params.seed} --device {params.device} > {log} 2>&1"


TARGETS += figure_targets("imani_fig02_shuffled_emergence", "imani_fig07_layerwise", "imani_fig10_peaks_alignment",
                          "imani_fig11_peaks_transfer", "imani_fig12_peaks_layers")
TARGETS.append(rules.transfer.output.metrics)
