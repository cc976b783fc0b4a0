# Included first, it holds what the rule files share. Names from params.yaml -> file paths, wildcard
# constraints, the resources of a job that loads a model, and the plan's GPU-hours. A study's or
# stage's own names live in its rule file, which may read what an earlier-included file defines
# (the Snakefile's include order), never a later one. Functions live here (snakemake --lint wants
# rules and functions apart), so a rule file's own helpers are dicts, path templates and lambdas.
import atexit
import json
import os
import re
import shlex

from prh.cluster import emit_plan_cost, gpus_needed, plan_cost, plan_rates
from prh.cluster.launch import torchrun_launcher
from prh.cluster.sizes import JOB_SIZES  # a fixed-size rule's resources: **JOB_SIZES[its name]
from prh.config import all_models
from prh.figures import FIGURES
from prh.manifest import output_paths
from prh.metrics import SUPPORTED_METRICS
from prh.report import ReportNumbers  # figures.smk's rule param for the report captions
from prh.slices import slice_arg  # a command's params.yaml keys as its one --config argument

SUITE = config["suite"]
SUITE_CFG = config["suites"][SUITE]
MODELS = all_models(config)
# The results root: "results", or results/replicates/seed<S> for a replicate of the DAG (claims.smk)
R = config["results"]

# With --software-deployment-method conda every rule runs in this environment (the same pins as
# requirements.lock; tests/test_packaging.py checks they agree): the Snakefile gives it to every shell rule.
# Snakemake reads a rule's conda path relative to the file that defines the rule,
# so this points from workflow/rules/ to envs/prh.yaml at the repository root.
CONDA_ENV = "../../envs/prh.yaml"
# Its post-deploy script (envs/prh.post-deploy.sh) installs this package from the absolute path
# exported here: Snakemake runs the script from a copy under the conda prefix, not from envs/.
# (update(): snakemake --lint reads an item assignment as a variable the user must set, for an envvars: directive)
os.environ.update(PRH_PROJECT_ROOT=workflow.basedir)

# Every rule file appends what the default run must build (figures, experiment metrics) to
# TARGETS; `rule all` (the Snakefile, after every include) asks for all of it.
TARGETS = []


def one_of(names):
    """A wildcard constraint matching exactly one of ``names`` (longest first, so no prefix wins)."""
    return "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True)) or "(?!)"


# Wildcard constraints, set once for all rules (those with a narrower set declare theirs). File names join datasets,
# metrics and model sets with "_", which they contain too, so each wildcard may only be one of the configured names.
DATASET = one_of(config["datasets"])
MODEL_SET = one_of(config["model_sets"])
METRIC = one_of(SUPPORTED_METRICS)


wildcard_constraints:
    dataset=DATASET,
    metric=METRIC,
    xset=MODEL_SET,
    yset=MODEL_SET,


def json_param(obj):
    """A params.yaml block as one shell-quoted JSON argument (sorted keys: the same block, the same string)."""
    return shlex.quote(json.dumps(obj, sort_keys=True))


def model_set(name):
    """Members of a model set, by name."""
    return config["model_sets"][name]


def suite_models(modality):
    """The vision or language models of the active suite."""
    return model_set(SUITE_CFG[f"{modality}_models"])


# The language models of the secondary studies (density, metric agreement, phase, bridge): a panel
# of the suite's language models, so the 29-model offline zoo enters only the analyses that need it.
LANGUAGE_PANEL = SUITE_CFG.get("language_panel", SUITE_CFG["language_models"])


def log_path(rule_name, *parts):
    return os.path.join(R, "logs", rule_name, *parts) + ".log"


def bench_path(rule_name, *parts):
    return os.path.join(R, "benchmarks", rule_name, *parts) + ".tsv"


def shapes_files(dataset):
    """The files of a shapes dataset dir (its data contract), by name (data.smk writes them)."""
    files = {"images": "images.npy", "captions": "captions.jsonl", "scenes": "scenes.jsonl", "meta": "meta.json"}
    return {key: f"{R}/data/{dataset}/{name}" for key, name in files.items()}


def world_scenes(dataset):
    """Offline, the world's scenes of a shapes dataset, which a study reads beside its features (density,
    sample_size: `--scenes`, scenes_arg); the paper suite has none."""
    return shapes_files(dataset)["scenes"] if SUITE == "offline" else []


def scenes_arg(wildcards, input):
    return f"--scenes {input.scenes}" if input.scenes else ""


def model_dir(model):
    """Where a zoo model's checkpoint lives (a save_pretrained dir; zoo_vision.smk, zoo_language.smk)."""
    return f"{R}/models/{model}"


def study_outputs(study, *keys):
    """A study's files (those of ``keys``, or all) by their keys in its manifest.yaml, the one place each is named."""
    return output_paths(study, R, keys)


def lm_score_json(model):
    """One hub LM's 1 - bits-per-byte (paper_data.smk), read by the convergence and downstream studies."""
    return f"{R}/experiments/lm_score/{model}.json"


# ---- Jobs that load one model: GPUs, device map, host memory ----

# One GPU-count formula (prh.cluster.gpus_needed) for every rule that loads a hub model, read with
# the card memory of params.yaml `cluster.gpu_memory_gb`; `--device-map auto` exactly when it gives > 1.
CLUSTER = config["cluster"]


def gpus_for(model):
    """GPUs a model needs: 0 for zoo models or with device: cpu; a hub model as many cards of
    cluster.gpu_memory_gb as its bf16 weights plus 20% for activations fill (prh.cluster.gpus_needed)."""
    spec = MODELS[model]
    if spec["source"] == "zoo" or config["device"] == "cpu":
        return 0
    return gpus_needed(n_params=spec["n_params"], gpu_memory_gb=CLUSTER["gpu_memory_gb"])


def device_map_arg(model):
    """`--device-map auto` spreads a model over several GPUs when one cannot hold it."""
    return "--device-map auto" if gpus_for(model) > 1 else ""


def host_mem_mb(model):
    """Host memory (MB) of a job that loads one model: 4 GB for a zoo model; for a hub model the
    Python process, the data and one batch (8 GB) plus its bf16 weights passing through on load
    (2.5 MB per million parameters: 2 bytes each and a quarter more)."""
    spec = MODELS[model]
    return 4000 if spec["source"] == "zoo" else int(8000 + spec["n_params"] * 2.5e-6)


# The host memory and GPUs of a job that loads one model, the {model} wildcard (extraction, lm_score, the harness)
MODEL_JOB = dict(mem_mb=lambda w: host_mem_mb(w.model), gpu=lambda w: gpus_for(w.model))


# ---- Alignment tables (alignment.smk), read by the density, downstream and metric-agreement studies ----

ALIGN = config["alignment"]


def alignment_json(dataset, xset, yset, metric=ALIGN["metric"]):
    return f"{R}/alignment/{dataset}/{metric}/{xset}__{yset}.json"


def feature_file(dataset, model):
    """One model's features on one dataset (features.smk writes them; "{dataset}", "{model}": its pattern)."""
    return f"{R}/features/{dataset}/{model}.safetensors"


def set_features(dataset, set_name):
    return [feature_file(dataset, m) for m in model_set(set_name)]


def figure_targets(*names):
    """The files of registered figures (PDF and PNG; CSV for a table), by name (``prh plot --list``)."""
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise ValueError(f"figures {unknown} are not in prh.figures.FIGURES; register them there")
    return [f"{R}/figures/{n}.{ext}" for n in names for ext in FIGURES[n].formats]


# ---- GPU-hours of the plan: printed at the end of a dry run that plans GPU jobs ----


def planned_jobs(dag):
    """Rule, wildcards and resources of every job the DAG would run (what prh.cluster.plan_cost reads)."""
    simple = lambda res: {k: v for k, v in res.items() if isinstance(v, (int, float, str))}  # noqa: E731
    jobs = dag.needrun_jobs(exclude_finished=False)
    return [{"rule": j.rule.name, "wildcards": dict(j.wildcards_dict), "resources": simple(j.resources)} for j in jobs]


def report_plan_cost():
    """`snakemake -n`: GPU-hours reserved vs estimated per rule family, once Snakemake has printed its plan
    (prh.cluster.emit_plan_cost: a table on stderr, or JSON for `prh plan-cost`)."""
    # At exit Snakemake has chosen its executor, so workflow.dryrun is known (it is not while this file is parsed)
    if workflow.dryrun and workflow.dag is not None and len(workflow.dag):
        emit_plan_cost(plan_cost(jobs=planned_jobs(workflow.dag), config=config, results=R, **plan_rates(config)))


if workflow.is_main_process and R == "results":  # once, not again for each replicate module
    atexit.register(report_plan_cost)
