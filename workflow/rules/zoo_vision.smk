# The offline vision zoo: one training job per model of `zoo.vision` in
# params.yaml, each writing a timm checkpoint dir results/models/<model>/ (a timm
# model name and its state dict); then linear probes of every model of the `zoo_vision`
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
# Architecture, objective, seed and hyperparameters of each zoo model, as CLI flags. Keys left out
# of a spec take the CLI defaults, which equal the schema defaults (a test checks).
TRAIN_VISION_FLAGS = {
    model: " ".join(
        [f"--arch {spec['arch']}", f"--objective {spec['objective']}", f"--seed {config['seed'] + spec['seed']}"]
        + [
            f"--{k.replace('_', '-')} {spec[k]}"
            for k in TRAIN_VISION_KEYS[spec["objective"]]
            if spec.get(k) is not None
        ]
    )
    for model, spec in ZOO_VISION.items()
}


rule train_vision:
    input:
        # the shapes dataset the model trains on
        unpack(lambda w: shapes_files(ZOO_VISION[w.model]["data"])),
    output:
        config=f"{model_dir('{model}')}/config.json",
        weights=f"{model_dir('{model}')}/model.safetensors",
    log:
        log_path("train_vision", "{model}"),
    benchmark:
        bench_path("train_vision", "{model}")
    wildcard_constraints:
        model=one_of(ZOO_VISION),
    resources:
        **JOB_SIZES["train_vision"],
    params:
        data=lambda w, input: os.path.dirname(input.images),
        out=lambda w, output: os.path.dirname(output.config),
        flags=lambda w: TRAIN_VISION_FLAGS[w.model],
    shell:
        "prh train-vision --data {params.data} --out {params.out} {params.flags} --threads {threads}" " > {log} 2>&1"


rule probe_vision:
    input:
        scenes=shapes_files(PROBE_DATASET)["scenes"],
        feats=[feature_file(PROBE_DATASET, m) for m in ZOO_VISION_SET],
    output:
        f"{R}/experiments/zoo/vision.json",
    log:
        log_path("probe_vision", "vision"),
    benchmark:
        bench_path("probe_vision", "vision")
    resources:
        **JOB_SIZES["probe_vision"],
    params:
        data=lambda w, input: os.path.dirname(input.scenes),
        names=" ".join(ZOO_VISION_SET),
        seed=config["seed"],
    shell:
        "prh probe --data {params.data} --names {params.names} --features {input.feats}"
        " --seed {params.seed} --out {output} > {log} 2>&1"


if SUITE == "offline" and ZOO_VISION_SET:
    TARGETS.append(rules.probe_vision.output[0])
