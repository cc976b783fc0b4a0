# Representation alignment and transfer (Imani, Hu & White, TMLR): the peaks task
# (Figs 10-12) and the digits experiments (Figs 2, 7). One job per part, each with only
# its slice of the `transfer:` block (prh.studies.transfer.transfer.SLICES), so editing one
# figure's parameter reruns only its part; one job reads the parts' JSON files and
# decides the claims (metrics.json) and joins Fig 7 (layerwise.json).
from prh.studies.transfer.transfer import SLICES as TRANSFER_SLICES

TRANSFER = f"{R}/experiments/transfer"
TRANSFER_OUTPUTS = {  # part -> the JSON files it writes
    "peaks": ["peaks_alignment.json", "peaks_transfer.json"],
    "peaks_deep": ["peaks_deep.json"],
    "emergence": ["emergence_shuffled.json", "digits_layerwise.json"],
}


for _part, _files in TRANSFER_OUTPUTS.items():

    rule:
        name:
            f"transfer_{_part}"
        output:
            [f"{TRANSFER}/{f}" for f in _files],
        params:
            part=_part,
            config=json_param({k: config["transfer"][k] for k in TRANSFER_SLICES[_part]}),
            seed=config["seed"],
            device=config["device"],
            out_dir=lambda w, output: os.path.dirname(output[0]),
        log:
            log_path("transfer", _part),
        benchmark:
            bench_path("transfer", _part)
        threads: 1
        resources:
            mem_mb=3000,
            runtime=30,
        conda:
            CONDA_ENV
        shell:
            "OMP_NUM_THREADS={threads} prh run-transfer --part {params.part} --out-dir {params.out_dir}"
            " --config {params.config} --seed {params.seed} --device {params.device} > {log} 2>&1"


rule transfer_claims:
    input:
        [f"{TRANSFER}/{f}" for files in TRANSFER_OUTPUTS.values() for f in files],
    output:
        layerwise=f"{TRANSFER}/layerwise.json",
        metrics=f"{TRANSFER}/metrics.json",
    params:
        out_dir=lambda w, output: os.path.dirname(output.metrics),
    log:
        log_path("transfer", "claims"),
    benchmark:
        bench_path("transfer", "claims")
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh run-transfer --part claims --out-dir {params.out_dir} > {log} 2>&1"


TARGETS += figure_targets("transfer_fig02_shuffled_emergence", "transfer_fig07_layerwise", "transfer_fig10_peaks_alignment",
                          "transfer_fig11_peaks_transfer", "transfer_fig12_peaks_layers")
TARGETS.append(rules.transfer_claims.output.metrics)
