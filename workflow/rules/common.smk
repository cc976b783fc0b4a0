# Helpers shared by every rule file: names from params.yaml -> file paths.
import re

from prh.config import all_models
from prh.metrics import SUPPORTED_METRICS

SUITE = config["suite"]
SUITE_CFG = config["suites"][SUITE]
MODELS = all_models(config)
R = "results"

# Every rule file appends what the default run must build (figures, experiment
# metrics) to TARGETS; `rule all` asks for all of it.
TARGETS = []


def one_of(names):
    """A wildcard constraint matching exactly one of ``names`` (longest first, so no prefix wins)."""
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!)"


# Wildcard constraints: file names join datasets, metrics and model sets with "_",
# which they contain too, so each wildcard may only be one of the configured names.
DATASET = one_of(config["datasets"])
MODEL_SET = one_of(config["model_sets"])
METRIC = one_of(SUPPORTED_METRICS)


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
