# Names from params.yaml -> file paths, shared by every rule file, and the input,
# param and resource functions of each rule family (so the rule files hold only rules).
import atexit
import json
import os
import re
import shlex

from prh.cluster import emit_plan_cost, gpus_needed, plan_cost, plan_rates
from prh.config import all_models, vtab_tasks
from prh.figures import FIGURES
from prh.metrics import SUPPORTED_METRICS
from prh.metrics.memory import align_memory_mb
from prh.studies.phase.design import choose_pairs
from prh.studies.bridge.design import expand_arms

SUITE = config["suite"]
SUITE_CFG = config["suites"][SUITE]
MODELS = all_models(config)
R = "results"

# With --software-deployment-method conda every rule runs in this environment
# (the same pins as requirements.lock; tests/test_packaging.py checks they agree).
# Snakemake reads a rule's conda path relative to the file that defines the rule,
# so this points from workflow/rules/ to envs/prh.yaml at the repository root.
CONDA_ENV = "../../envs/prh.yaml"
# Its post-deploy script (envs/prh.post-deploy.sh) installs this package from the absolute path
# exported here: Snakemake runs the script from a copy under the conda prefix, not from envs/.
# (snakemake --lint asks for an envvars directive: that is for variables the user must set, not this one)
os.environ["PRH_PROJECT_ROOT"] = workflow.basedir

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


def json_param(obj):
    """A params.yaml block as one shell-quoted JSON argument (sorted keys: the same block, the same string)."""
    return shlex.quote(json.dumps(obj, sort_keys=True))


def families_param(set_name):
    """Each model of a set with its family (the colour of its points), as one JSON argument."""
    return json_param({m: MODELS[m].get("family", m) for m in model_set(set_name)})


def model_set(name):
    """Members of a model set, by name."""
    return config["model_sets"][name]


def suite_models(modality):
    """The vision or language models of the active suite."""
    return model_set(SUITE_CFG[f"{modality}_models"])


# The language models of the secondary studies (density, metric agreement, seeds 000/001): a panel
# of the suite's language models, so the 29-model offline zoo enters only the analyses that need it.
LANGUAGE_PANEL = SUITE_CFG.get("language_panel", SUITE_CFG["language_models"])


def log_path(rule_name, *parts):
    return os.path.join("results/logs", rule_name, *parts) + ".log"


def bench_path(rule_name, *parts):
    return os.path.join("results/benchmarks", rule_name, *parts) + ".tsv"


def all_targets(wildcards):
    """Everything `snakemake --cores all` builds: every figure and the experiment metrics."""
    return TARGETS


# ---- Shapes world (data.smk) ----


def shapes_files(dataset):
    """The files of a shapes dataset dir (DESIGN.md, data contracts), by name."""
    files = {"images": "images.npy", "captions": "captions.jsonl", "scenes": "scenes.jsonl", "meta": "meta.json"}
    return {key: f"{R}/data/{dataset}/{name}" for key, name in files.items()}


# ---- Paper suite data and LM scores (paper_data.smk) ----

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


def hub_mem_mb(model):
    """Host memory to load a hub model: its bf16 weights once, plus the Python process."""
    return int(8000 + MODELS[model]["n_params"] * 2.5e-6)


def _lm_models():
    """Causal LMs whose score the figures plot: the suite's language set, PRH's test set and Fig 4's set."""
    if SUITE != "paper":
        return []
    fig4 = (config.get("downstream") or {}).get("language_models", {}).get("paper")
    names = list(suite_models("language")) + list(config["model_sets"].get("prh_test_language", []))
    names += list(model_set(fig4)) if fig4 else []
    return list(dict.fromkeys(n for n in names if MODELS[n]["source"] == "hub"))


def lm_score_json(model):
    return f"{R}/experiments/lm_score/{model}.json"


def harness_json(model):
    """One LM's lm-evaluation-harness scores (Fig 4, downstream.smk)."""
    return f"{R}/experiments/downstream/harness/{model}.json"


# ---- Offline vision zoo (zoo_vision.smk) ----

ZOO_VISION = (config.get("zoo") or {}).get("vision") or {}
# Spec keys passed to `prh train-vision` as --<key> flags, per objective: only the keys an
# objective uses, so editing e.g. a SimCLR setting reruns no supervised model.
_COMMON_KEYS = ("epochs", "batch_size", "lr", "weight_decay", "n_train")
TRAIN_VISION_KEYS = {
    "random": (),
    "supervised": _COMMON_KEYS,
    "simclr": _COMMON_KEYS + ("temperature", "crop_min", "jitter"),
    "denoise": _COMMON_KEYS + ("mask_ratio", "noise_std"),
}


def train_vision_data(wildcards):
    """The shapes dataset files a zoo vision model trains on."""
    return shapes_files(ZOO_VISION[wildcards.model]["data"])


def train_vision_flags(wildcards):
    """Architecture, objective, seed and hyperparameters of one zoo model, as CLI flags.

    Keys left out of a spec take the CLI defaults, which equal the schema defaults (a test checks).
    """
    spec = ZOO_VISION[wildcards.model]
    flags = [f"--arch {spec['arch']}", f"--objective {spec['objective']}",
             f"--seed {config['seed'] + spec['seed']}"]
    flags += [f"--{k.replace('_', '-')} {spec[k]}" for k in TRAIN_VISION_KEYS[spec["objective"]]
              if spec.get(k) is not None]
    return " ".join(flags)


# ---- Offline language zoo (zoo_language.smk) ----

# Training runs (zoo.language entries); a run with `checkpoints` yields one model per checkpoint,
# <run>_<steps> (prh.config.run_models). ZOO_LANGUAGE: every language zoo model by name.
ZOO_RUNS = (config.get("zoo") or {}).get("language") or {}
ZOO_LANGUAGE = {m: s for m, s in MODELS.items() if s["source"] == "zoo" and s["modality"] == "language"}
# Spec keys passed to `prh train-language` as --<key> flags (see workflow/schemas/zoo_language.schema.yaml).
TRAIN_LANGUAGE_KEYS = ("arch", "n_layer", "n_embd", "n_head", "steps", "context", "batch_size", "lr", "warmup",
                       "weight_decay", "qa_pairs")


def model_dir(model):
    """Where a zoo model's checkpoint lives (a save_pretrained dir)."""
    return f"{R}/models/{model}"


def checkpoint_files(model):
    """The files of a zoo language checkpoint dir (config.json is what the feature rule asks for)."""
    d = model_dir(model)
    return {"config": f"{d}/config.json", "weights": f"{d}/model.safetensors",
            "tokenizer": f"{d}/tokenizer.json", "info": f"{d}/training.json"}


def run_outputs(run):
    """Every file a language training run writes: each of its checkpoints' directories."""
    models = [m for m, s in ZOO_LANGUAGE.items() if s["run"] == run]
    return {f"{key}_{m}": path for m in models for key, path in checkpoint_files(m).items()}


def tokenizer_file(spec):
    """One word-level tokenizer per training dataset, shared by every model trained on it."""
    return f"{R}/models/_tokenizer/{spec['data']}/tokenizer.json"


def train_language_flags(run):
    """Architecture, budget, checkpoints, seed and hyperparameters of one zoo run, as CLI flags."""
    spec = ZOO_RUNS[run]
    flags = [f"--{k.replace('_', '-')} {spec[k]}" for k in TRAIN_LANGUAGE_KEYS if spec.get(k) is not None]
    if spec.get("checkpoints"):
        flags.append("--checkpoints " + " ".join(str(k) for k in spec["checkpoints"]))
    return " ".join(flags + [f"--seed {config['seed'] + spec['seed']}"])


# ---- Per-layer features (features.smk) ----

FEAT = config["features"]  # defaults filled in by the schema


def _names_regex(modality):
    return one_of(m for m, s in MODELS.items() if s.get("modality") == modality)


def _spec(wildcards):
    return MODELS[wildcards.model]


def _is_zoo(wildcards):
    return _spec(wildcards)["source"] == "zoo"


def zoo_checkpoint(modality):
    """Input function: the zoo checkpoint files of a zoo model; nothing for a hub model."""

    def inputs(wildcards):
        if not _is_zoo(wildcards):
            return {}
        d = model_dir(wildcards.model)
        files = {"config": f"{d}/config.json"}
        if modality == "vision":
            files["weights"] = f"{d}/model.safetensors"
        return files

    return inputs


def model_arg(wildcards):
    """What `--model` gets: the zoo checkpoint dir, or the hub name (timm name or repo id)."""
    spec = _spec(wildcards)
    return model_dir(wildcards.model) if spec["source"] == "zoo" else spec["repo"]


def revision_arg(wildcards):
    rev = _spec(wildcards).get("revision")
    return f"--revision {rev}" if rev and not _is_zoo(wildcards) else ""


def _gb_params(wildcards):
    """Billions of parameters (zoo models: ~0)."""
    return float(_spec(wildcards).get("n_params") or 0) / 1e9


def n_gpus(wildcards):
    return gpus_for(wildcards.model)


def device_args(wildcards):
    return device_map_arg(wildcards.model)


def mem_mb(wildcards):
    # Host memory: the dataset, one batch, and the bf16 weights passing through on load.
    return 4000 if _is_zoo(wildcards) else int(8000 + 2200 * _gb_params(wildcards))


def runtime(wildcards):
    # Minutes: loading ~1 min per 10 GB of weights plus the forward passes.
    return 20 if _is_zoo(wildcards) else int(30 + 4 * _gb_params(wildcards))


# VTAB task -> (train, test) dataset names (convergence.smk's probes): convergence.vtab_tasks, or every
# vtab_<task>_train with its _test (prh.config.vtab_tasks; prh.checks.check_references named any task without both)
VTAB_TASKS = vtab_tasks(config)
# Datasets whose features only a linear probe reads (probe_vtab_task: VTAB_TASKS' splits) and that no
# suite aligns: their extraction keeps the last layer only (`--layers last`), ~30x less disk than every layer.
_SUITE_DATASETS = {v for cfg in config["suites"].values() for v in cfg.values() if isinstance(v, str)}
PROBE_ONLY_DATASETS = {name for pair in VTAB_TASKS.values() for name in pair if name not in _SUITE_DATASETS}


def layers_arg(wildcards):
    return "last" if wildcards.dataset in PROBE_ONLY_DATASETS else "all"


def language_args(wildcards):
    """Optional flags; a function, not a string, so the template's {caption} is not read as a wildcard."""
    args = []
    if FEAT.get("prompt_template"):
        args.append(f"--prompt-template {shlex.quote(FEAT['prompt_template'])}")
    if FEAT.get("max_batch_tokens"):
        args.append(f"--max-batch-tokens {int(FEAT['max_batch_tokens'])}")
    if FEAT.get("gpu_memory_budget_gb"):
        args.append(f"--gpu-memory-budget-gb {FEAT['gpu_memory_budget_gb']}")
    return " ".join(args)


def caption_args(wildcards):
    """Shapes datasets (offline) store several independently drawn densest captions per scene
    (captions.jsonl `samples`, world.caption_samples): a scene's features are the mean over them.
    Hub datasets have one caption per item (`text`). Density features (density.smk) replace
    these options: one caption per level."""
    kind = config["datasets"].get(wildcards.dataset, {}).get("kind")
    return "--text-field samples --average-samples" if kind == "shapes" else ""


def n_threads(wildcards):
    return 1 if _is_zoo(wildcards) else 4


# ---- Alignment between model sets (alignment.smk) ----

ALIGN = config["alignment"]


def align_mem_mb(wildcards, input):
    """Host memory of one `prh align` job, from the feature files' headers: one layer at a time
    is read (prh.metrics.memory.align_memory_mb), so it follows one layer's size, not the file's."""
    return align_memory_mb(x_features=list(input.x), y_features=list(input.y), metric=wildcards.metric,
                           topk=ALIGN["topk"], cca_dim=ALIGN["cca_dim"], dtype=ALIGN["dtype"])


def skip_language_embedding(xset):
    """1 when every row model is a language model and the suite leaves their token-embedding layer out."""
    return int(ALIGN["skip_language_embedding"][SUITE] and all(MODELS[m]["modality"] == "language" for m in model_set(xset)))


def alignment_json(dataset, xset, yset, metric=ALIGN["metric"]):
    return f"{R}/alignment/{dataset}/{metric}/{xset}__{yset}.json"


def set_features(dataset, set_name):
    return [f"{R}/features/{dataset}/{m}.safetensors" for m in model_set(set_name)]


# ---- Seed 000: phase incompatibility (phase.smk) ----

PHASE = f"{R}/experiments/phase"
PHASE_CFG = config["phase"]
PHASE_VISION = model_set(PHASE_CFG["vision_models"][SUITE]) if PHASE_CFG["vision_models"][SUITE] else suite_models("vision")
PHASE_LANGUAGE = (model_set(PHASE_CFG["language_models"][SUITE]) if PHASE_CFG["language_models"][SUITE]
                  else model_set(LANGUAGE_PANEL))
PHASE_MODELS = PHASE_VISION + PHASE_LANGUAGE
PHASE_DATA = PHASE_CFG["paired_dataset"][SUITE] or SUITE_CFG["paired_dataset"]
PHASE_FIGURES = ("phase_fig01a_landscape", "phase_fig01b_families", "phase_fig02_histograms")


def phase_group(model):
    """Table 1 family of a model: the first `phase.groups` key its arch (zoo) or family (hub) starts with."""
    spec = MODELS[model]
    key = str(spec.get("arch") or spec.get("family") or model).lower()
    return next((g for k, g in PHASE_CFG["groups"].items() if key.startswith(k.lower())), key)


def phase_model_inputs(wildcards):
    d = f"{R}/data/{PHASE_DATA}"
    files = {"images": f"{d}/images.npy", "captions": f"{d}/captions.jsonl"}
    if config["datasets"][PHASE_DATA]["kind"] == "shapes":
        files.update(shapes_files(PHASE_DATA))  # scenes.jsonl: the world's task labels of the stability steps
    if MODELS[wildcards.model]["source"] == "zoo":
        files["checkpoint"] = f"{R}/models/{wildcards.model}/config.json"
    return files


def phase_ntk(model):
    return f"{PHASE}/models/{model}.json"


def phase_features(model):
    return f"{R}/features/{PHASE_DATA}/{model}.safetensors"


def phase_path(model):
    spec = MODELS[model]
    return f"{R}/models/{model}" if spec["source"] == "zoo" else spec["repo"]


PHASE_LR_PAIRS = choose_pairs(PHASE_VISION, PHASE_LANGUAGE, n_pairs=PHASE_CFG["adaptive_lr"]["n_pairs"],
                              seed=config["seed"])


# ---- Seed 001: bridge training (bridge.smk) ----

BRIDGE = f"{R}/experiments/bridge"
BRIDGE_CFG = config.get("bridge") or {}
BRIDGE_SUITE = BRIDGE_CFG.get(SUITE) or {}
BRIDGE_ARMS = expand_arms(BRIDGE_SUITE.get("arms"), BRIDGE_SUITE.get("sweeps"))
if BRIDGE_SUITE.get("run_arms") is not None:
    _unknown = sorted(set(BRIDGE_SUITE["run_arms"]) - set(BRIDGE_ARMS))
    if _unknown:
        raise ValueError(f"bridge.{SUITE}.run_arms: unknown arms {_unknown}; defined: {sorted(BRIDGE_ARMS)}")
    BRIDGE_ARMS = {name: BRIDGE_ARMS[name] for name in BRIDGE_SUITE["run_arms"]}


def bridge_data(key):
    """images.npy and meta.json of the bridge's stage-1 (train_data) or stage-2 (probe_data) dataset."""
    name = BRIDGE_SUITE[key]
    return {"images": f"{R}/data/{name}/images.npy", "meta": f"{R}/data/{name}/meta.json"}


def bridge_arm_inputs(wildcards):
    inputs = {f"train_{k}": v for k, v in bridge_data("train_data").items()}
    inputs.update({f"probe_{k}": v for k, v in bridge_data("probe_data").items()})
    return inputs


def bridge_align_inputs(wildcards):
    """Every arm's features, the probe set, and the vision features to align with."""
    probe = BRIDGE_SUITE["probe_data"]
    inputs = {"feats": expand(f"{BRIDGE}/arms/{{arm}}/features.safetensors", arm=sorted(BRIDGE_ARMS)),
              "probe_meta": bridge_data("probe_data")["meta"]}
    if SUITE == "offline":
        inputs["vision_probes"] = f"{R}/experiments/zoo/vision.json"
        inputs["vision_feats"] = [f"{R}/features/{probe}/{m}.safetensors" for m in model_set("zoo_vision")]
    elif BRIDGE_SUITE.get("strongest_vision"):
        inputs["vision_feats"] = [f"{R}/features/{probe}/{BRIDGE_SUITE['strongest_vision']}.safetensors"]
    return inputs


def bridge_align_flags(wildcards, input):
    flags = []
    if input.get("vision_probes"):
        flags.append(f"--vision-probes {input.vision_probes}")
    elif BRIDGE_SUITE.get("strongest_vision"):
        flags.append(f"--vision-model {BRIDGE_SUITE['strongest_vision']}")
    if input.get("vision_feats"):
        flags.append(f"--vision-features {os.path.dirname(input.vision_feats[0])}")
    cfg = BRIDGE_SUITE.get("config") or {}
    return " ".join(flags + [f"--topk {cfg.get('topk', 10)} --quantile {cfg.get('quantile', 0.95)}"])


def bridge_outlier_models():
    """name=checkpoint specs and families for Fig 2 (the offline zoo, or GPT-2 from the hub)."""
    if SUITE != "offline":
        src = BRIDGE_SUITE["config"]
        return {"gpt2": f"hub:{src['source']}@{src.get('revision') or 'main'}",
                "gpt2_init": f"hubinit:{src['source']}@{src.get('revision') or 'main'}"}, {
                    "gpt2": "language_pretrained", "gpt2_init": "language_init"}
    models = {"minilm": "pkg:minilm", "minilm_init": "init:minilm"}
    families = {"minilm": "language_pretrained", "minilm_init": "language_init"}
    for m in model_set("zoo_vision"):
        models[m] = model_dir(m)
        families[m] = "vision_random" if ZOO_VISION[m].get("objective") == "random" else "vision_trained"
    for m in model_set(LANGUAGE_PANEL):
        if ZOO_LANGUAGE.get(m, {}).get("arch") == "gpt2":
            models[m] = model_dir(m)
            families[m] = "language_init" if ZOO_LANGUAGE[m].get("steps") == 0 else "language_trained"
    return models, families


BRIDGE_OUTLIER_MODELS, BRIDGE_FAMILIES = bridge_outlier_models() if BRIDGE_SUITE else ({}, {})



# ---- LoRA-the-Explorer, thesis ch. 4 (lte.smk) ----

def lte_launcher(nproc, nnodes=1):
    """torchrun on one machine, or under srun across nnodes with a c10d rendezvous on the first node."""
    if nnodes == 1:
        return f"torchrun --standalone --nproc_per_node {nproc}"
    return (f"srun --ntasks-per-node 1 torchrun --nnodes {nnodes} --nproc_per_node {nproc} "
            "--rdzv_backend c10d --rdzv_id $SLURM_JOB_ID "
            '--rdzv_endpoint "$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1):29500"')


def lte_slice(drop):
    """The vision block without the keys of other experiments (prefixes in ``drop``): editing the
    table's or Fig 4.7's keys reruns only that experiment."""
    block = {k: v for k, v in LTE_CFG["vision"].items() if not k.startswith(tuple(drop))}
    return json_param(block)


# ---- Figures (figures.smk: one plot rule per entry of prh.figures.FIGURES) ----


def figure_targets(*names):
    """The files of registered figures (PDF and PNG; CSV for a table), by name (``prh plot --list``)."""
    unknown = [n for n in names if n not in FIGURES]
    if unknown:
        raise ValueError(f"figures {unknown} are not in prh.figures.FIGURES; register them there")
    return [f"{R}/figures/{n}.{ext}" for n in names for ext in FIGURES[n].formats]


def figure_inputs(input):
    """`--input key=path` for each input of a plot rule (the registry's keys, in its order)."""
    return " ".join(f"--input {k}={shlex.quote(v)}" for k, v in input.items())


def alignment_figure(path):
    """results/alignment/<ds>/<metric>/<x>__<y>.json -> its heatmap's PDF and PNG"""
    dataset, metric, name = path.split("/")[-3:]
    stem = f"alignment_{dataset}_{metric}_{name[:-len('.json')]}"
    return [f"{R}/figures/{stem}.{ext}" for ext in ("pdf", "png")]


def untrained_zoo_models():
    """Zoo models of the run's sets left at their random initialisation: the baselines of 'the models learn'."""
    sets = config["model_sets"]
    vision = [m for m in sets.get("zoo_vision", []) if ZOO_VISION.get(m, {}).get("objective") == "random"]
    language = [m for m in sets.get("zoo_language", []) if ZOO_LANGUAGE.get(m, {}).get("steps") == 0]
    return vision + language


# ---- Report captions that quote measured numbers ----


class ReportNumbers:
    """A rule param that lets a report caption quote the numbers of a finished run.

    Captions are rendered by `snakemake --report` after the run, with the job's params:
    ``{{ snakemake.params.numbers.get("results/.../metrics.json", "trend", "spearman_r") }}``
    reads the JSON then. Its repr is constant, so it never triggers a rerun.
    """

    def load(self, path):
        """The whole JSON (an empty dict before the run), for loops in a caption."""
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def fmt(self, value, spec=".3g"):
        """A number as the caption shows it; JSON null (an undefined statistic) as NaN."""
        if value is None:
            return "NaN"
        return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)

    def get(self, path, *keys, fmt=".3g"):
        value = self.load(path)
        try:
            for key in keys:
                value = value[key]
        except (KeyError, IndexError, TypeError):
            return "n/a"
        return self.fmt(value, fmt)

    def __repr__(self):
        return "ReportNumbers()"


REPORT_NUMBERS = ReportNumbers()


# ---- GPU-hours of the plan (issue 22): printed at the end of a dry run that plans GPU jobs ----


def planned_jobs(dag):
    """Rule, wildcards and resources of every job the DAG would run (what prh.cluster.plan_cost reads)."""
    return [{"rule": job.rule.name, "wildcards": dict(job.wildcards_dict),
             "resources": {k: v for k, v in job.resources.items() if isinstance(v, (int, float, str))}}
            for job in dag.needrun_jobs(exclude_finished=False)]


def report_plan_cost():
    """`snakemake -n`: GPU-hours reserved vs estimated per rule family, once Snakemake has printed its plan
    (prh.cluster.emit_plan_cost: a table on stderr, or JSON for `prh plan-cost`)."""
    # At exit Snakemake has chosen its executor, so workflow.dryrun is known (it is not while this file is parsed)
    if workflow.dryrun and workflow.dag is not None and len(workflow.dag):
        emit_plan_cost(plan_cost(jobs=planned_jobs(workflow.dag), config=config, results=R, **plan_rates(config)))


if workflow.is_main_process:
    atexit.register(report_plan_cost)
