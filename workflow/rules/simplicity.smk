# Simplicity bias (Huh's thesis, chapter 2): effective rank falls with depth, for
# random networks, products of Gaussian matrices and trained deep linear networks.
# One job computes every number (minutes on one core); one job draws every figure.
import json
import os
import shlex

SIMPLICITY = f"{R}/experiments/simplicity"


rule simplicity:
    output:
        random_nets=f"{SIMPLICITY}/random_nets.json",
        products=f"{SIMPLICITY}/products.json",
        trained=f"{SIMPLICITY}/trained.json",
        metrics=f"{SIMPLICITY}/metrics.json",
    params:
        config=json_param(config["simplicity"]),
        seed=config["seed"],
        out_dir=lambda w, output: os.path.dirname(output.metrics),
    log:
        log_path("simplicity", "simplicity"),
    benchmark:
        bench_path("simplicity", "simplicity")
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        CONDA_ENV
    shell:
        "OMP_NUM_THREADS={threads} prh run-simplicity --out-dir {params.out_dir} --config {params.config}"
        " --seed {params.seed} > {log} 2>&1"


TARGETS += figure_targets("thesis_fig2.2_random_net_rank", "thesis_fig2.5_optimizer_rank", "thesis_fig2.6_trained_linear_rank",
                          "thesis_fig7.1_gaussian_product_rank")
TARGETS.append(rules.simplicity.output.metrics)
