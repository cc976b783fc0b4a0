# The shapes world (PRH section 4.1): one dataset dir per `kind: shapes` dataset of
# params.yaml (images, captions at every density, latent scenes, meta), and the
# sample sheet that shows the world in the report.
from prh.data.shapes import DATA_CONFIG as WORLD_DATA

SHAPES_DATASETS = [name for name, d in config["datasets"].items() if d["kind"] == "shapes"]
SHAPES_DATASET = one_of(SHAPES_DATASETS)  # the wildcard constraint of a rule per shapes dataset
SAMPLE_SHEET_DATASET = config["suites"].get("offline", {}).get("paired_dataset")


rule shapes_dataset:
    output:
        **shapes_files("{dataset}"),
    log:
        log_path("shapes_dataset", "{dataset}"),
    benchmark:
        bench_path("shapes_dataset", "{dataset}")
    wildcard_constraints:
        dataset=SHAPES_DATASET,
    resources:
        **JOB_SIZES["shapes_dataset"],
    params:
        out=lambda w: f"{R}/data/{w.dataset}",
        n=lambda w: config["datasets"][w.dataset]["n"],
        seed=lambda w: config["datasets"][w.dataset]["seed"],
        config=slice_arg(config, WORLD_DATA),  # the kernel changes no data: editing it reruns no dataset
    shell:
        "prh make-shapes --out {params.out} --n {params.n} --seed {params.seed} --config {params.config} > {log} 2>&1"


if SUITE == "offline" and SAMPLE_SHEET_DATASET in SHAPES_DATASETS:
    TARGETS += figure_targets("world_sample_sheet")
