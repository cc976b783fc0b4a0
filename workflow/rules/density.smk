# Caption density (PRH section 6, Fig 9). Language features of every language model at
# each caption density level, aligned with the vision models on the same images.
# Offline: the shapes captions' nested levels (texts[0..5]). Paper: the dense DCI
# captions summarised by an instruct LLM to each num_words (summarise_captions, one GPU
# job, cached and DVC-tracked; rerun only when the captioner, prompt or num_words change),
# the dense caption itself last.
from prh.data.captions import LEVELS as SHAPES_LEVELS
from prh.metrics.memory import align_memory_mb
from prh.studies.density.design import CONFIG as DENS_CONFIG
from prh.studies.density.design import SUMMARISE_CONFIG
from prh.studies.density.design import prompt_sha256

DENS = config["density"]
DENS_DATASET = SUITE_CFG.get("density_dataset", SUITE_CFG["paired_dataset"])
if SUITE == "offline":
    DENS_LEVELS = DENS.get("levels") or list(range(len(SHAPES_LEVELS)))
    DENS_CAPTIONS = f"{R}/data/{DENS_DATASET}/captions.jsonl"
else:
    DENS_LEVELS = list(range(len(DENS["num_words"]) + 1))
    DENS_CAPTIONS = f"{R}/data/{DENS_DATASET}/density/captions.jsonl"
DENS_LSET, DENS_VSET = LANGUAGE_PANEL, SUITE_CFG["vision_models"]


rule summarise_captions:
    input:
        **PREFLIGHT_INPUT,
        captions=f"{R}/data/{DENS_DATASET}/captions.jsonl",
    output:
        captions=f"{R}/data/{DENS_DATASET}/density/captions.jsonl",
        meta=f"{R}/data/{DENS_DATASET}/density/meta.json",
    log:
        log_path("summarise_captions", DENS_DATASET),
    benchmark:
        bench_path("summarise_captions", DENS_DATASET)
    threads: 4
    resources:
        mem_mb=32000,
        runtime=GPU_RUNTIME("summarise_captions", 600),
        gpu=gpus_for(DENS["captioner"]) if SUITE == "paper" else 1,
    params:
        data=lambda w, input: os.path.dirname(input.captions),
        out=lambda w, output: os.path.dirname(output.meta),
        model=MODELS[DENS["captioner"]]["repo"] if SUITE == "paper" else "",
        revision=MODELS[DENS["captioner"]].get("revision") if SUITE == "paper" else "",
        config=slice_arg(config, SUMMARISE_CONFIG),
        # the prompt lives in code; its hash as a param reruns the summaries when it changes
        prompt_sha256=prompt_sha256(),
        device=config["device"],
        # a captioner larger than one GPU is spread over the job's GPUs (the same formula as its gpu count)
        device_map=device_map_arg(DENS["captioner"]) if SUITE == "paper" else "",
    shell:
        "prh --gpus {resources.gpu} summarise-captions --data {params.data} --model {params.model:q} --revision {params.revision:q}"
        " --config {params.config} --device {params.device} {params.device_map} --out {params.out} > {log} 2>&1"


# One job per model for every level: the model is loaded once and each level written to
# its own file, exactly what a job per (model, level) wrote.
use rule extract_language as extract_language_density with:
    input:
        unpack(lambda w: ZOO_CHECKPOINT.get(w.model, {})),
        **PREFLIGHT_INPUT,
        data=DENS_CAPTIONS,
    output:
        feats=[f"{R}/features/{{dataset}}/density{level}/{{model}}.safetensors" for level in DENS_LEVELS],
        meta=[f"{R}/features/{{dataset}}/density{level}/{{model}}.json" for level in DENS_LEVELS],
    log:
        log_path("extract_language_density", "{dataset}", "{model}"),
    benchmark:
        bench_path("extract_language_density", "{dataset}", "{model}")
    resources:
        **MODEL_JOB,
        runtime=GPU_RUNTIME("extract_language_density", lambda w: EXTRACT_RUNTIME[w.model] * len(DENS_LEVELS)),
    params:
        **{
            **EXTRACT_PARAMS["language"],
            "options": lambda w: f"{LANGUAGE_OPTIONS} --text-field texts --text-index {' '.join(map(str, DENS_LEVELS))} --no-bpb",
        },


rule density:
    input:
        captions=DENS_CAPTIONS,
        language=[
            f"{R}/features/{DENS_DATASET}/density{level}/{m}.safetensors"
            for level in DENS_LEVELS
            for m in model_set(DENS_LSET)
        ],
        vision=set_features(DENS_DATASET, DENS_VSET),
        scenes=world_scenes(DENS_DATASET),
    output:
        **study_outputs("density"),
    log:
        log_path("density", DENS_DATASET),
    benchmark:
        bench_path("density", DENS_DATASET)
    threads: 2
    resources:
        # one layer of one file in memory at a time (align_memory_mb), not a whole feature file
        mem_mb=lambda w, input: align_memory_mb(
            x_features=list(input.language),
            y_features=list(input.vision),
            metric=ALIGN["metric"],
            **ALIGN_MEMORY,
        ),
        runtime=60,
    params:
        config=slice_arg(config, DENS_CONFIG),
        language_names=model_set(DENS_LSET),
        vision_names=model_set(DENS_VSET),
        levels=DENS_LEVELS,
        scenes=scenes_arg,
        device=config["device"],
    shell:
        "prh run-density --captions {input.captions} --language-names {params.language_names}"
        " --language-features {input.language} --vision-names {params.vision_names}"
        " --vision-features {input.vision} --levels {params.levels} {params.scenes} --config {params.config}"
        " --threads {threads} --device {params.device}"
        " --density {output.density} --metrics {output.metrics} > {log} 2>&1"


TARGETS += [rules.density.output.metrics, *figure_targets("density_fig09_caption_density")]
