# LoRA-the-Explorer (thesis chapter 4, appendix 8): parallel low-rank heads merged every T
# steps, on a real distributed engine. Every experiment rule launches torchrun: one process
# per rank, one thread each, gloo on CPU (nccl with device cuda); rank 0 writes the JSON.
# With lte.nnodes > 1 (SLURM), the same command runs under srun with a c10d rendezvous.
from prh.studies.lte.verdicts import CONFIG as LTE_VERDICTS_CONFIG

LTE_OUT = study_outputs("lte")  # its files, by key (its manifest.yaml)
LTE_CFG = config["lte"]
# Paper suite (thesis Table 8.4): ViT-S/32 and MLP-Mixer on CIFAR-10/100 at 224 px, standard
# (DDP) against LTE, on lte.paper.nnodes x nproc GPUs. Not run here (no GPU, no network).
LTE_PAPER = LTE_CFG["paper"]
# torchrun on one machine, or under srun across nnodes with a c10d rendezvous on the first node,
# for the offline experiments (lte) and the paper's (lte.paper)
# (prh.cluster.launch; tests/slurm runs the srun form as one SLURM job of 2 tasks)
LTE_LAUNCHER = {
    name: torchrun_launcher(cfg["nnodes"], cfg["nproc"]) for name, cfg in (("lte", LTE_CFG), ("paper", LTE_PAPER))
}
LTE_RUN = LTE_LAUNCHER["lte"] + " -m prh.cli run-lte"
# Per experiment, the vision block without the keys of the others (prefixes): editing the
# table's or Fig 4.7's keys reruns only that experiment.
LTE_VISION_CONFIG = {
    exp: json_param({k: v for k, v in LTE_CFG["vision"].items() if not k.startswith(drop)})
    for exp, drop in (("vision", ("table_", "orth_")), ("table", ("orth_",)), ("orthogonality", ("table_",)))
}


# Per offline experiment: what it reads (the vision runs the shapes dataset; Table 4.9 mini and Fig 4.7 also
# the learning rate vision.json's sweep chose), its config and minutes of runtime. The shell is one constant: Snakemake
# evaluates a shell: expression again when the job runs, after the loop has ended, so a loop variable in it would give
# every job the last experiment's command (a dry run shows the right one); what varies is in params.
LTE_RUNS = {
    "least_squares": dict(input={}, config=json_param(LTE_CFG["least_squares"]), runtime=30),
    "vision": dict(
        input=shapes_files(LTE_CFG["dataset"]),
        config=LTE_VISION_CONFIG["vision"],
        runtime=60,
    ),
    **{
        exp: dict(
            input={**shapes_files(LTE_CFG["dataset"]), "lr": LTE_OUT["vision"]},
            config=LTE_VISION_CONFIG[exp],
            runtime=60,
        )
        for exp in ("table", "orthogonality")
    },
}


for _exp, _run in LTE_RUNS.items():

    rule:
        name:
            f"lte_{_exp}"
        input:
            **_run["input"],
        output:
            **study_outputs("lte", _exp),
        log:
            log_path("lte", _exp),
        benchmark:
            bench_path("lte", _exp)
        threads: LTE_CFG["nproc"]
        resources:
            mem_mb=1500 * LTE_CFG["nproc"],
            runtime=_run["runtime"],
            nodes=LTE_CFG["nnodes"],
        params:
            run=LTE_RUN,
            config=_run["config"],
            experiment=_exp,
            data=lambda w, input: f" --data {os.path.dirname(input.meta)}" if input.get("meta") else "",
            lr=lambda w, input: f" --lr-from {input.lr}" if input.get("lr") else "",
            seed=config["seed"],
        shell:
            "OMP_NUM_THREADS=1 {params.run} --experiment {params.experiment}{params.data}{params.lr} --config {params.config}"
            " --seed {params.seed} --out {output} > {log} 2>&1"


rule lte_verdicts:
    input:
        **study_outputs("lte", *LTE_RUNS),
    output:
        **study_outputs("lte", "metrics"),
    log:
        log_path("lte", "verdicts"),
    benchmark:
        bench_path("lte", "verdicts")
    resources:
        **JOB_SIZES["lte_verdicts"],
    params:
        config=slice_arg(config, LTE_VERDICTS_CONFIG),
    shell:
        "prh run-lte-verdicts --least-squares {input.least_squares} --vision {input.vision} --table {input.table} "
        "--orthogonality {input.orthogonality} --config {params.config} "
        "--out {output} > {log} 2>&1"


# The paper suite's runs (LTE_PAPER).
rule lte_paper:
    input:
        **PREFLIGHT_INPUT,
        meta=f"{R}/data/{{dataset}}/meta.json",
    output:
        **study_outputs("lte", "paper"),
    log:
        log_path("lte_paper", "{dataset}__{model}"),
    benchmark:
        bench_path("lte_paper", "{dataset}__{model}")
    wildcard_constraints:
        dataset=one_of(LTE_PAPER["datasets"]),
        model=one_of(LTE_PAPER["models"]),
    threads: 4 * LTE_PAPER["nproc"]
    resources:
        mem_mb=64000,
        runtime=2880,
        gpu=LTE_PAPER["nproc"] if LTE_PAPER["device"] == "cuda" else 0,  # per node (README of the SLURM profile)
        nodes=LTE_PAPER["nnodes"],
    params:
        config=lambda w: json_param({**LTE_PAPER["vision"], "model": LTE_PAPER["models"][w.model]}),
        data=lambda w, input: os.path.dirname(input.meta),
        seed=config["seed"],
        run=LTE_LAUNCHER["paper"],
        device=LTE_PAPER["device"],
    shell:
        "OMP_NUM_THREADS=4 prh --gpus {resources.gpu} -- {params.run} -m prh.cli run-lte --experiment vision --device {params.device} "
        "--data {params.data} --config {params.config} --seed {params.seed} --out {output} > {log} 2>&1"


if SUITE == "paper":
    TARGETS += expand(rules.lte_paper.output.paper, dataset=LTE_PAPER["datasets"], model=LTE_PAPER["models"])
else:
    TARGETS += figure_targets(
        "lte_fig8.1_least_squares",
        "lte_fig4.6_vs_standard",
        "lte_fig4.7_head_orthogonality",
        "lte_fig8.5_update_rank",
        "lte_table4.9_mini",
    )
    TARGETS.append(rules.lte_verdicts.output[0])
