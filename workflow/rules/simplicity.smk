# Simplicity bias (Huh's thesis, chapter 2): effective rank falls with depth, for
# random networks, products of Gaussian matrices and trained deep linear networks.
# One job per experiment, each with only its slice of the `simplicity:` block (editing
# one experiment's size reruns only it); one job summarises them in metrics.json.
# experiment -> the keys of the block it reads
SIMPLICITY_SLICES = {
    "random_nets": ("width", "random_nets"),
    "products": ("products",),
    "trained": ("width", "trained"),
}
# Its files by key (its manifest.yaml); one wildcard rule writes the experiments' (<experiment>.json beside metrics.json:
# a manifest name that differs leaves simplicity_metrics an input no rule makes, and the parse fails)
SIMPLICITY_OUT = study_outputs("simplicity")
SIMPLICITY_EXPERIMENT = os.path.join(os.path.dirname(SIMPLICITY_OUT["metrics"]), "{experiment}.json")


rule simplicity_experiment:
    output:
        SIMPLICITY_EXPERIMENT,
    log:
        log_path("simplicity", "{experiment}"),
    benchmark:
        bench_path("simplicity", "{experiment}")
    wildcard_constraints:
        experiment=one_of(SIMPLICITY_SLICES),
    resources:
        **JOB_SIZES["simplicity_experiment"],
    params:
        config=lambda w: slice_arg(config, {"simplicity": SIMPLICITY_SLICES[w.experiment]}),
        seed=config["seed"],
        flag=lambda w: w.experiment.replace("_", "-"),  # --random-nets, --products, --trained: the file it writes
    shell:
        "OMP_NUM_THREADS={threads} prh run-simplicity --part {wildcards.experiment} --{params.flag} {output}"
        " --config {params.config} --seed {params.seed} > {log} 2>&1"


rule simplicity_metrics:
    input:
        **study_outputs("simplicity", *SIMPLICITY_SLICES),
    output:
        **study_outputs("simplicity", "metrics"),
    log:
        log_path("simplicity", "metrics"),
    benchmark:
        bench_path("simplicity", "metrics")
    resources:
        **JOB_SIZES["simplicity_metrics"],
    shell:
        "prh run-simplicity --part metrics --random-nets {input.random_nets} --products {input.products}"
        " --trained {input.trained} --metrics {output} > {log} 2>&1"


TARGETS += figure_targets(
    "simplicity_fig2.2_random_net_rank",
    "simplicity_fig2.5_optimizer_rank",
    "simplicity_fig2.6_trained_linear_rank",
    "simplicity_fig7.1_gaussian_product_rank",
)
TARGETS.append(rules.simplicity_metrics.output[0])
