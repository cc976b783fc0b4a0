# Representation alignment and transfer (Imani, Hu & White, TMLR): the peaks task
# (Figs 10-12) and the digits experiments (Figs 2, 7). One job per part, each with only
# its slice of the `transfer:` block (prh.studies.transfer.transfer.SLICES), so editing one
# figure's parameter reruns only its part; one job reads the parts' JSON files and
# decides the claims (metrics.json) and joins Fig 7 (layerwise.json).
from prh.studies.transfer.transfer import FILES as TRANSFER_FILES
from prh.studies.transfer.transfer import SLICES as TRANSFER_SLICES

# part -> the files it writes, by their keys in the manifest (the command's --<key> options)
TRANSFER_OUTPUTS = {part: study_outputs("transfer", *names) for part, names in TRANSFER_FILES.items()}


for _part in TRANSFER_SLICES:

    rule:
        name:
            f"transfer_{_part}"
        output:
            **TRANSFER_OUTPUTS[_part],
        log:
            log_path("transfer", _part),
        benchmark:
            bench_path("transfer", _part)
        resources:
            **JOB_SIZES["transfer"],
        params:
            part=_part,
            config=slice_arg(config, {"transfer": TRANSFER_SLICES[_part]}),
            seed=config["seed"],
            device=config["device"],
            # --<name> {output.<name>}: each file at the path the rule names
            paths=lambda w, output: " ".join(f"--{name.replace('_', '-')} {path}" for name, path in output.items()),
        shell:
            "OMP_NUM_THREADS={threads} prh run-transfer --part {params.part} {params.paths}"
            " --config {params.config} --seed {params.seed} --device {params.device} > {log} 2>&1"


rule transfer_claims:
    input:
        **{name: path for part in TRANSFER_SLICES for name, path in TRANSFER_OUTPUTS[part].items()},
    output:
        **TRANSFER_OUTPUTS["claims"],
    log:
        log_path("transfer", "claims"),
    benchmark:
        bench_path("transfer", "claims")
    resources:
        **JOB_SIZES["transfer_claims"],
    shell:
        "prh run-transfer --part claims --peaks-alignment {input.peaks_alignment} --peaks-transfer {input.peaks_transfer}"
        " --peaks-deep {input.peaks_deep} --emergence-shuffled {input.emergence_shuffled}"
        " --digits-layerwise {input.digits_layerwise} --layerwise {output.layerwise} --metrics {output.metrics} > {log} 2>&1"


TARGETS += figure_targets(
    "transfer_fig02_shuffled_emergence",
    "transfer_fig07_layerwise",
    "transfer_fig10_peaks_alignment",
    "transfer_fig11_peaks_transfer",
    "transfer_fig12_peaks_layers",
)
TARGETS.append(rules.transfer_claims.output.metrics)
