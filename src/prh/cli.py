"""``prh <command> [args]``: the one entry point every Snakemake rule calls.

Each command lives in the module that implements it, as a function
``main(argv: list[str]) -> None`` that parses its own arguments with argparse
and calls one library function. Modules are imported only when their command
runs, so ``prh --help`` stays fast and a command never pays for torch it does
not use.

    prh --help
    prh <command> --help
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

# command name -> "module:function"; keep sorted by pipeline stage.
COMMANDS: dict[str, str] = {
    "check-config": "prh.config:main",
    "make-shapes": "prh.data.shapes:main",
    "hub-dataset": "prh.data.hub:main",
    "summarise-captions": "prh.data.summarise:main",
    "train-vision": "prh.models.train_vision:main",
    "train-tokenizer": "prh.models.language_zoo:tokenizer_main",
    "train-language": "prh.models.language_zoo:main",
    "minilm": "prh.models.minilm:main",
    "extract-vision": "prh.extract:vision_main",
    "extract-language": "prh.extract:language_main",
    "pin-revisions": "prh.pin:main",
    "lm-sample": "prh.experiments.lm_score:sample_main",
    "lm-score": "prh.experiments.lm_score:main",
    "lm-score-merge": "prh.experiments.lm_score:merge_main",
    "align": "prh.metrics.engine:main",
    "probe": "prh.experiments.probes:main",
    "probe-splits": "prh.experiments.probes:splits_main",
    "plot-alignment": "prh.plots.alignment:main",
    "zoo-metrics": "prh.experiments.zoo_metrics:main",
    "lm-eval": "prh.experiments.zoo_language:main",
    "plot-sample-sheet": "prh.plots.sample_sheet:main",
    "transfer": "prh.experiments.transfer:main",
    "plot-transfer": "prh.plots.transfer:main",
    "simplicity": "prh.experiments.simplicity:main",
    "plot-simplicity": "prh.plots.simplicity:main",
    "color": "prh.experiments.color:main",
    "plot-color": "prh.plots.color:main",
    "convergence": "prh.experiments.convergence:main",
    "convergence-platonic": "prh.experiments.convergence:platonic_main",
    "plot-convergence": "prh.plots.convergence:main",
    "locality": "prh.experiments.locality:main",
    "metric-agreement": "prh.experiments.metric_agreement:main",
    "plot-metrics-agreement": "prh.plots.metrics_agreement:main",
    "downstream-mc": "prh.experiments.downstream:mc_main",
    "downstream": "prh.experiments.downstream:main",
    "plot-downstream": "prh.plots.downstream:main",
    "density": "prh.experiments.density:main",
    "plot-density": "prh.plots.density:main",
    "phase": "prh.studies.phase.run:main",
    "plot-phase": "prh.plots.phase:main",
}


def json_object(text: str) -> dict:
    """argparse ``type=``: a JSON object, e.g. a params.yaml block that a rule passes on."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err}): {text[:80]!r}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object {{...}}, got {type(value).__name__}")
    return value


def _usage() -> str:
    lines = ["usage: prh <command> [args]", "", "commands:"]
    lines += [f"  {name}" for name in COMMANDS]
    lines += ["", "`prh <command> --help` describes a command's arguments."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        sys.exit(f"prh: unknown command {name!r}; choose one of: {', '.join(COMMANDS)}")
    module, func = COMMANDS[name].split(":")
    getattr(importlib.import_module(module), func)(rest)


if __name__ == "__main__":
    main()
