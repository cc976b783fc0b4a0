# Simplicity bias (Huh's thesis, chapter 2): effective rank falls with depth, for
# random networks, products of Gaussian matrices and trained deep linear networks.
# One job computes every number (minutes on one core); one job draws every figure.
import json
import os
import shlex

SIMPLICITY = f"{R}/experiments/simplicity"
SIMPLICITY_FIGURES = [
    "thesis_fig2.2_random_net_rank",
    "thesis_fig7.1_gaussian_product_rank",
    "thesis_fig2.6_trained_linear_rank",
    "thesis_fig2.5_optimizer_rank",
]
SIMPLICITY_CAPTIONS = {
    "thesis_fig2.2_random_net_rank": "random_nets",
    "thesis_fig7.1_gaussian_product_rank": "products",
    "thesis_fig2.6_trained_linear_rank": "trained",
    "thesis_fig2.5_optimizer_rank": "optimizers",
}


rule simplicity:
    output:
        random_nets=f"{SIMPLICITY}/random_nets.json",
        products=f"{SIMPLICITY}/products.json",
        trained=f"{SIMPLICITY}/trained.json",
        metrics=f"{SIMPLICITY}/metrics.json",
    params:
        config=shlex.quote(json.dumps(config["simplicity"], sort_keys=True)),
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
        "OMP_NUM_THREADS={threads} prh simplicity --out-dir {params.out_dir} --config {params.config}"
        " --seed {params.seed} > {log} 2>&1"


rule plot_simplicity:
    input:
        random_nets=rules.simplicity.output.random_nets,
        products=rules.simplicity.output.products,
        trained=rules.simplicity.output.trained,
    output:
        **{
            f"{stem}_{ext}": report(
                f"{R}/figures/{stem}.{ext}",
                caption=f"../report/simplicity_{SIMPLICITY_CAPTIONS[stem]}.rst",
                category="Simplicity bias",
            )
            for stem in SIMPLICITY_FIGURES
            for ext in ("pdf", "png")
        },
    params:
        in_dir=lambda w, input: os.path.dirname(input.random_nets),
        out_dir=lambda w, output: os.path.dirname(output[0]),
    log:
        log_path("plot_simplicity", "plot_simplicity"),
    benchmark:
        bench_path("plot_simplicity", "plot_simplicity")
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh plot-simplicity --in-dir {params.in_dir} --out-dir {params.out_dir} > {log} 2>&1"


TARGETS += [f"{R}/figures/{stem}.{ext}" for stem in SIMPLICITY_FIGURES for ext in ("pdf", "png")]
TARGETS.append(rules.simplicity.output.metrics)
