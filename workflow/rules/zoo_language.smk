# The offline language zoo: a word-level tokenizer over the training text's closed
# vocabulary, one training job per GPT-2 / BERT run of `zoo.language` in params.yaml (a run with
# `checkpoints` saves one model per checkpoint, <run>_<steps>), the packaged all-MiniLM-L6-v2 copied
# in after a SHA-256 check, each a save_pretrained dir results/models/<model>/ (weights, config and
# tokenizer); then the competence of every causal LM of the `zoo_language` set: held-out
# bits per byte on the alignment density against a word-unigram baseline and the generator's
# exact entropy floor.
import os

from prh.evaluation.lm_eval import CONFIG as LM_EVAL_CONFIG
from prh.evaluation.relational import CONFIG as RELATIONAL_SCORE_CONFIG

# Training runs (zoo.language entries); a run with `checkpoints` yields one model per checkpoint,
# <run>_<steps> (prh.config.run_models). ZOO_LANGUAGE: every language zoo model by name.
ZOO_RUNS = (config.get("zoo") or {}).get("language") or {}
ZOO_LANGUAGE = {m: s for m, s in MODELS.items() if s["source"] == "zoo" and s["modality"] == "language"}
# The files of a language checkpoint dir (config.json is what the feature rule asks for).
CHECKPOINT_FILES = {
    "config": "config.json",
    "weights": "model.safetensors",
    "tokenizer": "tokenizer.json",
    "info": "training.json",
}
# Spec keys passed to `prh train-language` as --<key> flags (see workflow/schemas/zoo_language.schema.yaml).
TRAIN_LANGUAGE_KEYS = (
    "arch",
    "n_layer",
    "n_embd",
    "n_head",
    "steps",
    "context",
    "batch_size",
    "lr",
    "warmup",
    "weight_decay",
    "qa_pairs",
    "relational",
)
# Architecture, budget, checkpoints, seed and hyperparameters of each zoo run, as CLI flags.
TRAIN_LANGUAGE_FLAGS = {
    run: " ".join(
        [f"--{k.replace('_', '-')} {spec[k]}" for k in TRAIN_LANGUAGE_KEYS if spec.get(k) is not None]
        + (["--checkpoints " + " ".join(str(k) for k in spec["checkpoints"])] if spec.get("checkpoints") else [])
        + [f"--seed {config['seed'] + spec['seed']}"]
    )
    for run, spec in ZOO_RUNS.items()
}
ZOO_LANGUAGE_SET = (config.get("model_sets") or {}).get("zoo_language", [])
ZOO_TRAINED_RUNS = [r for r, s in ZOO_RUNS.items() if s["arch"] in ("gpt2", "bert")]
ZOO_PACKAGED = [n for n, s in ZOO_LANGUAGE.items() if s["arch"] == "minilm"]
ZOO_CAUSAL = [n for n in ZOO_LANGUAGE_SET if ZOO_LANGUAGE.get(n, {}).get("arch") == "gpt2"]
LM_EVAL_DATASET = config["suites"]["offline"]["paired_dataset"]
# 256 items: enough captions that the standard error of a mean bits-per-byte is far below the
# gaps between models, at a quarter of the cost of all 1024 items.
LM_EVAL_ITEMS = 256
# The unigram baseline is fit on the text the causal LMs trained on (that of the first one).
LM_TRAIN_DATASET = ZOO_LANGUAGE[ZOO_CAUSAL[0]]["data"] if ZOO_CAUSAL else "shapes_train"
# Each causal LM's competence, the pre-registered test's x-axis: written by figures.smk's zoo_metrics, read by convergence
ZOO_COMPETENCE = f"{R}/experiments/zoo/language_competence.json"


rule train_tokenizer:
    input:
        unpack(lambda w: shapes_files(w.data)),
    output:
        tokenizer=f"{R}/models/_tokenizer/{{data}}/tokenizer.json",
    log:
        log_path("train_tokenizer", "{data}"),
    benchmark:
        bench_path("train_tokenizer", "{data}")
    wildcard_constraints:
        data=SHAPES_DATASET,
    resources:
        **JOB_SIZES["train_tokenizer"],
    params:
        data=lambda w, input: os.path.dirname(input.captions),
        out=lambda w, output: os.path.dirname(output.tokenizer),
    shell:
        "prh train-tokenizer --data {params.data} --out {params.out} > {log} 2>&1"


# One rule per run: a run's outputs (its checkpoints) differ in number from run to run.
for _run in ZOO_TRAINED_RUNS:

    rule:
        name:
            f"train_language_{_run}"
        input:
            **shapes_files(ZOO_RUNS[_run]["data"]),
            # one word-level tokenizer per training dataset, shared by every model trained on it
            tokenizer=f"{R}/models/_tokenizer/{ZOO_RUNS[_run]['data']}/tokenizer.json",
        output:
            # every checkpoint's directory
            **{
                f"{key}_{m}": f"{model_dir(m)}/{name}"
                for m, s in ZOO_LANGUAGE.items()
                if s["run"] == _run
                for key, name in CHECKPOINT_FILES.items()
            },
        log:
            log_path("train_language", _run),
        benchmark:
            bench_path("train_language", _run)
        resources:
            **JOB_SIZES["train_language"],
        params:
            data=lambda w, input: os.path.dirname(input.captions),
            tokenizer=lambda w, input: os.path.dirname(input.tokenizer),
            # results/models/<run>_{steps} (the CLI fills in each checkpoint's steps), or <run>
            out=lambda w, output, run=_run: os.path.join(
                os.path.dirname(os.path.dirname(output[0])),
                run + ("_{steps}" if ZOO_RUNS[run].get("checkpoints") else ""),
            ),
            flags=TRAIN_LANGUAGE_FLAGS[_run],
        shell:
            "prh train-language --data {params.data} --tokenizer {params.tokenizer} --out '{params.out}'"
            " {params.flags} --threads {threads} > {log} 2>&1"


rule minilm:
    output:
        **{key: f"{model_dir('{model}')}/{name}" for key, name in CHECKPOINT_FILES.items()},
    log:
        log_path("minilm", "{model}"),
    benchmark:
        bench_path("minilm", "{model}")
    wildcard_constraints:
        model=one_of(ZOO_PACKAGED),
    resources:
        **JOB_SIZES["minilm"],
    params:
        out=lambda w, output: os.path.dirname(output.config),
    shell:
        "prh package-minilm --out {params.out} > {log} 2>&1"


# What every bits-per-byte evaluation reads and passes beside its models (lm_eval, lm_eval_relational)
LM_EVAL_INPUT = dict(**shapes_files(LM_EVAL_DATASET), train=list(shapes_files(LM_TRAIN_DATASET).values()))
LM_EVAL_PARAMS = dict(
    data=lambda w, input: os.path.dirname(input.captions),
    train=lambda w, input: os.path.dirname(input.train[0]),
    max_items=LM_EVAL_ITEMS,
    config=slice_arg(config, LM_EVAL_CONFIG),
)


rule lm_eval:
    input:
        **LM_EVAL_INPUT,
        models=[f"{model_dir(m)}/config.json" for m in ZOO_CAUSAL],
    output:
        f"{R}/experiments/zoo/language.json",
    log:
        log_path("lm_eval", "language"),
    benchmark:
        bench_path("lm_eval", "language")
    resources:
        **JOB_SIZES["lm_eval"],
    params:
        **LM_EVAL_PARAMS,
        names=" ".join(ZOO_CAUSAL),
        models=" ".join(model_dir(m) for m in ZOO_CAUSAL),
    shell:
        "prh eval-lm --data {params.data} --train-data {params.train} --names {params.names}"
        " --models {params.models} --config {params.config} --max-items {params.max_items} --out {output}"
        " --threads {threads} > {log} 2>&1"


# The validity gate's probes: background, count and largest colour read from each causal
# LM's features of the paired set (what alignment reads), the layer chosen on validation items,
# accuracy on held-out test scenes. Thresholds: convergence.preregistered.gate (zoo_metrics).
rule probe_language:
    input:
        scenes=shapes_files(LM_EVAL_DATASET)["scenes"],
        feats=[feature_file(LM_EVAL_DATASET, m) for m in ZOO_CAUSAL],
    output:
        f"{R}/experiments/zoo/language_probes.json",
    log:
        log_path("probe_language", "language"),
    benchmark:
        bench_path("probe_language", "language")
    resources:
        **JOB_SIZES["probe_language"],
    params:
        data=lambda w, input: os.path.dirname(input.scenes),
        names=" ".join(ZOO_CAUSAL),
        tasks=" ".join(config["convergence"]["preregistered"]["gate"]),
        seed=config["seed"],
    shell:
        "prh probe --data {params.data} --names {params.names} --features {input.feats} --tasks {params.tasks}"
        " --layer best --seed {params.seed} --out {output} > {log} 2>&1"


if SUITE == "offline" and ZOO_CAUSAL:
    TARGETS += [rules.lm_eval.output[0], rules.probe_language.output[0]]


# The relational predictor and left-most gate (prh.evaluation.relational) on held-out scenes, for the causal
# LMs of convergence.relational.model_set (presets/language.yaml); off in the default run (model_set null).
REL_CFG = config["convergence"].get("relational") or {}
REL_MODELS = (
    [m for m in model_set(REL_CFG["model_set"]) if ZOO_LANGUAGE.get(m, {}).get("arch") == "gpt2"]
    if REL_CFG.get("model_set")
    else []
)

if SUITE == "offline" and REL_MODELS:

    rule score_relational:
        input:
            scenes=shapes_files(LM_EVAL_DATASET)["scenes"],
            models=[f"{model_dir(m)}/config.json" for m in REL_MODELS],
        output:
            f"{R}/experiments/zoo/relational.json",
        log:
            log_path("score_relational", "language"),
        benchmark:
            bench_path("score_relational", "language")
        resources:
            **JOB_SIZES["score_relational"],
        params:
            data=lambda w, input: os.path.dirname(input.scenes),
            names=" ".join(REL_MODELS),
            models=" ".join(model_dir(m) for m in REL_MODELS),
            config=slice_arg(config, RELATIONAL_SCORE_CONFIG),
        shell:
            "prh score-relational --data {params.data} --models {params.models} --names {params.names}"
            " --config {params.config} --out {output} > {log} 2>&1"

    # the secondary predictor (reported, not in the verdict): held-out bits per byte of the same models
    use rule lm_eval as lm_eval_relational with:
        input:
            **LM_EVAL_INPUT,
            models=[f"{model_dir(m)}/config.json" for m in REL_MODELS],
        output:
            f"{R}/experiments/zoo/relational_bpb.json",
        log:
            log_path("lm_eval", "relational"),
        benchmark:
            bench_path("lm_eval", "relational")
        params:
            **LM_EVAL_PARAMS,
            names=" ".join(REL_MODELS),
            models=" ".join(model_dir(m) for m in REL_MODELS),
