# The offline language zoo (issue 4): a byte-level BPE tokenizer trained on the training
# captions, one training job per GPT-2 / BERT model of `zoo.language` in params.yaml, the
# packaged all-MiniLM-L6-v2 copied in after a SHA-256 check, each a save_pretrained dir
# results/models/<model>/ (DESIGN.md, language checkpoint contract); then held-out
# bits-per-byte of every causal LM of the `zoo_language` set against a byte-unigram baseline.
import os

ZOO_LANGUAGE_SET = (config.get("model_sets") or {}).get("zoo_language", [])
ZOO_TRAINED = [n for n, s in ZOO_LANGUAGE.items() if s["arch"] in ("gpt2", "bert")]
ZOO_PACKAGED = [n for n, s in ZOO_LANGUAGE.items() if s["arch"] == "minilm"]
ZOO_CAUSAL = [n for n in ZOO_LANGUAGE_SET if ZOO_LANGUAGE.get(n, {}).get("arch") == "gpt2"]
LM_EVAL_DATASET = config["suites"]["offline"]["paired_dataset"]
# 256 items x every density: enough captions that the standard error of a mean bits-per-byte
# is far below the gaps between models, at a sixth of the cost of all 1024 items.
LM_EVAL_ITEMS = 256
# The unigram baseline is fit on the captions the causal LMs trained on (those of the first one).
LM_TRAIN_DATASET = ZOO_LANGUAGE[ZOO_CAUSAL[0]]["data"] if ZOO_CAUSAL else "shapes_train"


rule train_tokenizer:
    input:
        unpack(lambda w: shapes_files(w.data)),
    output:
        tokenizer=f"{R}/models/_tokenizer/{{data}}-v{{vocab}}/tokenizer.json",
    wildcard_constraints:
        data=one_of(SHAPES_DATASETS),
        vocab=r"\d+",
    params:
        data=lambda w, input: os.path.dirname(input.captions),
        out=lambda w, output: os.path.dirname(output.tokenizer),
    log:
        log_path("train_tokenizer", "{data}-v{vocab}"),
    benchmark:
        bench_path("train_tokenizer", "{data}-v{vocab}")
    threads: 1
    resources:
        mem_mb=2000,
        runtime=10,
    conda:
        CONDA_ENV
    shell:
        "prh train-tokenizer --data {params.data} --vocab-size {wildcards.vocab} --out {params.out} > {log} 2>&1"


rule train_language:
    input:
        unpack(train_language_inputs),
    output:
        **checkpoint_files("{model}"),
    wildcard_constraints:
        model=one_of(ZOO_TRAINED),
    params:
        data=lambda w, input: os.path.dirname(input.captions),
        tokenizer=lambda w, input: os.path.dirname(input.tokenizer),
        out=lambda w, output: os.path.dirname(output.config),
        flags=train_language_flags,
    log:
        log_path("train_language", "{model}"),
    benchmark:
        bench_path("train_language", "{model}")
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        CONDA_ENV
    shell:
        "prh train-language --data {params.data} --tokenizer {params.tokenizer} --out {params.out}"
        " {params.flags} --threads {threads} > {log} 2>&1"


rule minilm:
    output:
        **checkpoint_files("{model}"),
    wildcard_constraints:
        model=one_of(ZOO_PACKAGED),
    params:
        out=lambda w, output: os.path.dirname(output.config),
    log:
        log_path("minilm", "{model}"),
    benchmark:
        bench_path("minilm", "{model}")
    resources:
        mem_mb=500,
        runtime=5,
    conda:
        CONDA_ENV
    shell:
        "prh package-minilm --out {params.out} > {log} 2>&1"


rule lm_eval:
    input:
        **shapes_files(LM_EVAL_DATASET),
        train=list(shapes_files(LM_TRAIN_DATASET).values()),
        models=[checkpoint_files(m)["config"] for m in ZOO_CAUSAL],
    output:
        f"{R}/experiments/zoo/language.json",
    params:
        data=lambda w, input: os.path.dirname(input.captions),
        train=lambda w, input: os.path.dirname(input.train[0]),
        names=" ".join(ZOO_CAUSAL),
        models=" ".join(os.path.dirname(checkpoint_files(m)["config"]) for m in ZOO_CAUSAL),
        max_items=LM_EVAL_ITEMS,
    log:
        log_path("lm_eval", "language"),
    benchmark:
        bench_path("lm_eval", "language")
    threads: 1
    resources:
        mem_mb=2000,
        runtime=15,
    conda:
        CONDA_ENV
    shell:
        "prh eval-lm --data {params.data} --train-data {params.train} --names {params.names}"
        " --models {params.models} --max-items {params.max_items} --out {output} --threads {threads} > {log} 2>&1"


if SUITE == "offline" and ZOO_CAUSAL:
    TARGETS.append(f"{R}/experiments/zoo/language.json")
