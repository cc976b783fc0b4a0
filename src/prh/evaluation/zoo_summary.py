"""``results/experiments/zoo/metrics.json``: did the offline zoo learn?

Merges the vision probes (``prh probe``: per model, per task, test accuracy and
the majority-class chance level) and the causal LMs' held-out bits-per-byte
(``prh eval-lm``, with the byte-unigram baseline) into the one small file that
``dvc metrics show`` reads, with two summary margins:

- vision: best mean probe accuracy of a trained model minus that of an untrained
  (random-init) one;
- language: bits-per-byte of the best untrained causal LM minus that of the best
  trained one, and the unigram baseline minus the best trained one.

    prh summarise-zoo --vision vision.json --language language.json \
        --untrained resnet_xs_random gpt2_m_0 --out metrics.json
"""

from __future__ import annotations

import argparse

from prh.io import read_json, write_json


def zoo_metrics(vision: dict, language: dict, *, untrained: list[str]) -> dict:
    """Summarise the probe and bits-per-byte results.

    Parameters
    ----------
    vision : the JSON ``prh probe`` writes (``models.<m>.mean_accuracy``, ``models.<m>.tasks``, ``tasks.<t>.chance``)
    language : the JSON ``prh eval-lm`` writes (``models.<m>.bpb``, ``unigram.bpb``)
    untrained : names of the models left at their random initialisation (either modality)

    Returns
    -------
    dict with ``vision`` (per model: mean accuracy and per-task accuracy; per task: chance;
    ``trained_minus_untrained``) and ``language`` (per model: bpb; ``unigram_bpb``;
    ``untrained_minus_trained_bpb``, ``unigram_minus_trained_bpb``).
    """
    untrained = set(untrained)
    v_models = vision["models"]
    acc = {m: r["mean_accuracy"] for m, r in v_models.items()}
    v_trained = [a for m, a in acc.items() if m not in untrained]
    v_random = [a for m, a in acc.items() if m in untrained]
    out_vision = {
        "chance": {t: r["chance"] for t, r in vision["tasks"].items()},
        "mean_accuracy": acc,
        "accuracy": {m: {t: r["accuracy"] for t, r in v["tasks"].items()} for m, v in v_models.items()},
    }
    if v_trained and v_random:
        out_vision["trained_minus_untrained"] = max(v_trained) - max(v_random)

    bpb = {m: r["bpb"] for m, r in language["models"].items()}
    l_trained = [b for m, b in bpb.items() if m not in untrained]
    l_random = [b for m, b in bpb.items() if m in untrained]
    out_language = {"bpb": bpb, "unigram_bpb": language["unigram"]["bpb"]}
    if l_trained:
        out_language["unigram_minus_trained_bpb"] = out_language["unigram_bpb"] - min(l_trained)
        if l_random:
            out_language["untrained_minus_trained_bpb"] = min(l_random) - min(l_trained)
    return {"vision": out_vision, "language": out_language}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh summarise-zoo", description=__doc__.splitlines()[0])
    p.add_argument("--vision", required=True, help="probe results (prh probe)")
    p.add_argument("--language", required=True, help="bits-per-byte results (prh eval-lm)")
    p.add_argument("--untrained", nargs="*", default=[], help="models left at random initialisation")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    summary = zoo_metrics(read_json(args.vision), read_json(args.language), untrained=args.untrained)
    write_json(args.out, summary)
