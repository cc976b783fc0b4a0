# Helpers shared by every rule file: names from params.yaml -> file paths.
from prh.config import all_models

SUITE = config["suite"]
SUITE_CFG = config["suites"][SUITE]
MODELS = all_models(config)
R = "results"

# Every rule file appends what the default run must build (figures, experiment
# metrics) to TARGETS; `rule all` asks for all of it.
TARGETS = []


def model_set(name):
    """Members of a model set, by name."""
    return config["model_sets"][name]


def suite_models(modality):
    """The vision or language models of the active suite."""
    return model_set(SUITE_CFG[f"{modality}_models"])


def log_path(rule_name, *parts):
    return f"results/logs/{rule_name}/" + "/".join(parts) + ".log"


def bench_path(rule_name, *parts):
    return f"results/benchmarks/{rule_name}/" + "/".join(parts) + ".tsv"


def all_targets(wildcards):
    """Everything `snakemake --cores all` builds: every figure and the experiment metrics."""
    return TARGETS
