"""``results/experiments/zoo/metrics.json``: did the offline zoo learn?

Merges the vision probes (``prh probe``: per model, per task, test accuracy and
the majority-class chance level) and the causal LMs' held-out bits-per-byte
(``prh eval-lm``, with the byte-unigram baseline) into the one small file that
``dvc metrics show`` reads, with two summary margins:

- vision: best mean probe accuracy of a trained model minus that of an untrained
  (random-init) one;
- language: bits-per-byte of the best untrained causal LM minus that of the best
  trained one, and the unigram baseline minus the best trained one.

It adds the language models' competence, shown before any alignment is read:

- ``language.mc_accuracy``: multiple-choice accuracy on the HellaSwag-style caption
  completion (``prh score-mc``; chance 1 / choices);
- ``language.gate``: per causal LM the held-out probe accuracies of the gate's tasks
  (background, count, largest colour; ``prh probe --tasks ...`` on the features alignment
  reads) and ``passed`` (every accuracy at least its threshold); ``gate.passed`` holds when
  every model trained for at least ``min_steps`` steps passed (the pre-registered validity
  gate: a null result is meaningful only then);
- ``language.competence``: per LM the predictors of the pre-registered test
  (``reducible_fraction``, ``mc_accuracy``, ``neg_bits_per_byte``) with its steps.

    prh summarise-zoo --vision vision.json --language language.json --language-probes probes.json \
        --mc shapes_mc.json --gate '{"background": 0.9, "count": 0.8, "largest_color": 0.6}' \
        --gate-min-steps 1000 --untrained resnet_xs_random gpt2_s_r0_0 --out metrics.json
"""

from __future__ import annotations

import argparse

from prh.io import json_object, read_json, write_json


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
    out_language = {"bpb": bpb, "unigram_bpb": language["unigram"]["bpb"], "floor_bpb": language["floor"]["bpb"],
                    "reducible_fraction": {m: r["reducible_fraction"] for m, r in language["models"].items()}}
    if l_trained:
        out_language["unigram_minus_trained_bpb"] = out_language["unigram_bpb"] - min(l_trained)
        if l_random:
            out_language["untrained_minus_trained_bpb"] = min(l_random) - min(l_trained)
    return {"vision": out_vision, "language": out_language}


def language_gate(probes: dict, language: dict, *, thresholds: dict[str, float], min_steps: int) -> dict:
    """The validity gate: per causal LM its probe accuracy on each gate task and ``passed``.

    ``passed`` (overall) is True when every LM with ``steps >= min_steps`` passed, None
    when there is no such LM (the gate cannot be judged).
    """
    missing = [t for t in thresholds if t not in probes["tasks"]]
    if missing:
        raise ValueError(f"the language probes lack the gate task(s) {missing}: run `prh probe --tasks "
                         f"{' '.join(thresholds)}`")
    models = {}
    for name, r in probes["models"].items():
        acc = {t: r["tasks"][t]["accuracy"] for t in thresholds}
        steps = language["models"].get(name, {}).get("steps")
        models[name] = {**acc, "steps": steps, "passed": all(acc[t] >= v for t, v in thresholds.items()),
                        "judged": steps is not None and steps >= min_steps}
    judged = [m["passed"] for m in models.values() if m["judged"]]
    return {"thresholds": dict(thresholds), "min_steps": min_steps, "models": models,
            "passed": all(judged) if judged else None, "n_judged": len(judged)}


def language_competence(language: dict, mc: dict | None) -> dict:
    """Per causal LM the competence measures the pre-registered test uses as predictors."""
    table = {}
    for name, r in language["models"].items():
        row = {"reducible_fraction": r["reducible_fraction"], "neg_bits_per_byte": -r["bpb"], "steps": r["steps"]}
        if mc is not None:
            row["mc_accuracy"] = mc["models"][name]["acc"] if name in mc["models"] else None
        table[name] = row
    return table


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh summarise-zoo", description=__doc__.splitlines()[0])
    p.add_argument("--vision", required=True, help="probe results (prh probe)")
    p.add_argument("--language", required=True, help="bits-per-byte results (prh eval-lm)")
    p.add_argument("--language-probes", help="the gate tasks probed on the LMs' features (prh probe --tasks)")
    p.add_argument("--mc", help="multiple-choice results (prh score-mc)")
    p.add_argument("--gate", type=json_object, default="{}", help="JSON task -> least probe accuracy")
    p.add_argument("--gate-min-steps", type=int, default=0, help="LMs trained this long must pass the gate")
    p.add_argument("--untrained", nargs="*", default=[], help="models left at random initialisation")
    p.add_argument("--out", required=True)
    p.add_argument("--competence-out", help="also write the pre-registered test's competence file (prh run-convergence)")
    args = p.parse_args(argv)
    language = read_json(args.language)
    summary = zoo_metrics(read_json(args.vision), language, untrained=args.untrained)
    mc = read_json(args.mc) if args.mc else None
    if mc is not None:
        summary["language"]["mc_accuracy"] = {m: r["acc"] for m, r in mc["models"].items()}
    if args.language_probes:
        summary["language"]["gate"] = language_gate(read_json(args.language_probes), language, thresholds=args.gate,
                                                    min_steps=args.gate_min_steps)
    summary["language"]["competence"] = language_competence(language, mc)
    write_json(args.out, summary)
    if args.competence_out:
        table = summary["language"]["competence"]
        write_json(args.competence_out, {
            "gate_passed": summary["language"].get("gate", {}).get("passed"),
            # the units of the test: trained causal LMs (untrained ones are references outside it)
            "language_models": [m for m, r in table.items() if r["steps"]],
            "models": {m: {k: v for k, v in r.items() if k != "steps"} for m, r in table.items()},
        })
