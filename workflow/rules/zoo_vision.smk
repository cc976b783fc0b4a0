# The offline vision zoo (issue 4): one training job per model of `zoo.vision` in
# params.yaml, each writing a timm checkpoint dir results/models/<model>/ (DESIGN.md,
# vision checkpoint contract); then linear probes of every model of the `zoo_vision`
# set on the offline suite's vision-only set: competence per task (PRH Fig. 2, left).
import os
import re

ZOO_VISION = (config.get("zoo") or {}).get("vision") or {}
ZOO_VISION_SET = (config.get("model_sets") or {}).get("zoo_vision", [])
PROBE_DATASET = config["suites"]["offline"]["vision_dataset"]
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
    return shapes_files(ZOO_VISION[wildcards.model].get("data", "shapes_train"))


def train_vision_flags(wildcards):
    """Architecture, objective, seed and hyperparameters of one zoo model, as CLI flags.

    Keys left out of a spec take the CLI defaults, which equal the schema defaults (a test checks).
    """
    spec = ZOO_VISION[wildcards.model]
    flags = [f"--arch {spec['arch']}", f"--objective {spec['objective']}",
             f"--seed {config['seed'] + spec.get('seed', 0)}"]
    flags += [f"--{k.replace('_', '-')} {spec[k]}" for k in TRAIN_VISION_KEYS[spec["objective"]]
              if spec.get(k) is not None]
    return " ".join(flags)


rule train_vision:
    input:
        unpack(train_vision_data),
    output:
        config=f"{R}/models/{{model}}/config.json",
        weights=f"{R}/models/{{model}}/model.safetensors",
    wildcard_constraints:
        model="|".join(re.escape(n) for n in sorted(ZOO_VISION, key=len, reverse=True)) or "(?!)",
    params:
        data=lambda w, input: os.path.dirname(input.images),
        out=lambda w, output: os.path.dirname(output.config),
        flags=train_vision_flags,
    log:
        log_path("train_vision", "{model}"),
    benchmark:
        bench_path("train_vision", "{model}")
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    shell:
        "prh train-vision --data {params.data} --out {params.out} {params.flags} --threads {threads}"
        " > {log} 2>&1"


rule probe_vision:
    input:
        scenes=shapes_files(PROBE_DATASET)["scenes"],
        feats=expand(f"{R}/features/{PROBE_DATASET}/{{model}}.safetensors", model=ZOO_VISION_SET),
    output:
        f"{R}/experiments/zoo/vision.json",
    params:
        data=f"{R}/data/{PROBE_DATASET}",
        names=" ".join(ZOO_VISION_SET),
        seed=config["seed"],
    log:
        log_path("probe_vision", "vision"),
    benchmark:
        bench_path("probe_vision", "vision")
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "prh probe --data {params.data} --names {params.names} --features {input.feats}"
        " --seed {params.seed} --out {output} > {log} 2>&1"


if SUITE == "offline" and ZOO_VISION_SET:
    TARGETS.append(f"{R}/experiments/zoo/vision.json")
