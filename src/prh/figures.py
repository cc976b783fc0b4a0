"""The figure registry: every figure the workflow draws, in one table.

Each entry names the figure (its file stem in ``results/figures/``), the plot
function that draws it, the experiment files it reads, its report caption
(``workflow/report/<caption>.rst``) and its report category. The rule files
generate one plot rule per entry from this table (``workflow/rules/figures.smk``),
``prh plot NAME`` draws any entry by hand, and a test checks ``dvc.yaml``'s plots,
docs/figures.md's table and the smoke run's figures against it.

An input path may hold ``{fields}``: those named in the rule file's context (e.g.
``{sample_sheet_dataset}``) are filled from params.yaml, the others are Snakemake
wildcards (the alignment figures are one entry for every alignment table).

    prh plot --list
    prh plot transfer_fig10_peaks_alignment --out results/figures/transfer_fig10_peaks_alignment.pdf
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

from prh.errors import UsageError, did_you_mean
from prh.manifest import Figure
from prh.studies.ledger import manifests

__all__ = ["Figure", "FIGURES", "find", "load_input", "draw", "draw_from", "main"]


def _figures(*figs: Figure) -> dict[str, Figure]:
    return {f.name: f for f in figs}


FIGURES: dict[str, Figure] = _figures(
    # ---- stages: the shapes world, the alignment tables, the claims ledger
    Figure("world_sample_sheet", "prh.plots.sample_sheet:plot_sample_sheet",
           {"data": "results/data/{sample_sheet_dataset}/images.npy"}, "sample_sheet", "Shapes world", "data",
           {"n_items": 4}),
    Figure("alignment_{dataset}_{metric}_{xset}__{yset}", "prh.plots.alignment:plot_alignment",
           {"table": "results/alignment/{dataset}/{metric}/{xset}__{yset}.json"}, "alignment", "Alignment", "metrics"),
    Figure("claims_ledger", "prh.plots.claims:write_ledger", {"ledger": "results/claims.json"}, "claims", "Claims",
           "claims", formats=("csv",)),
    # ---- the studies, in the order of prh.studies.ledger.STUDIES
    *(fig for study in manifests().values() for fig in study.figures),
)


def load_input(path: str | Path):
    """A JSON input is read (plots take the numbers); any other file is passed as its path."""
    from prh.io import read_json

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `snakemake {path}` first")
    return read_json(path) if path.suffix == ".json" else path


def find(name: str) -> tuple[Figure, dict[str, str]]:
    """The registry entry of a figure name, and the values of its ``{fields}`` when the entry is a
    pattern (``alignment_shapes_eval_mutual_knn_zoo_language__zoo_vision`` -> the alignment entry).
    Names may hold "_" too, so the field values are a first guess: the rules pass every input."""
    if name in FIGURES:
        return FIGURES[name], {}
    for fig in FIGURES.values():
        if "{" in fig.name:
            regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>.+?)", re.escape(fig.name))
            match = re.fullmatch(regex, name)
            if match:
                return fig, match.groupdict()
    raise UsageError(did_you_mean(name, FIGURES, kind="figure", listing="`prh plot --list` names them all"))


def draw(name: str, out: str | Path, inputs: dict[str, str] | None = None) -> list[Path]:
    """Draw figure ``name`` into ``out`` (.pdf, and the .png beside it) from ``inputs`` (default: the registry's)."""
    fig, fields = find(name)
    paths = {**fig.paths(fields), **(inputs or {})}
    unknown = sorted(set(paths) - set(fig.inputs))
    if unknown:
        raise UsageError(f"figure {name}: {unknown} are not its inputs; it reads {sorted(fig.inputs)}")
    unfilled = {k: v for k, v in paths.items() if "{" in v}
    if unfilled:
        raise ValueError(f"figure {name}: give these inputs as --input KEY=PATH: {unfilled}")
    module, func = fig.draw.split(":")
    plot = getattr(importlib.import_module(module), func)
    return plot(*[load_input(paths[k]) for k in fig.inputs], out, **fig.kwargs)


def draw_from(in_dir: str | Path, names: list[str], out_dir: str | Path) -> list[Path]:
    """Draw figures ``names`` from a folder holding their input files (matched by file name) into ``out_dir``."""
    paths = []
    for name in names:
        fig = FIGURES.get(name)
        if fig is None:
            raise UsageError(did_you_mean(name, FIGURES, kind="figure", listing="`prh plot --list` names them all"))
        inputs = {k: str(Path(in_dir) / Path(v).name) for k, v in fig.inputs.items()}
        paths += draw(name, Path(out_dir) / f"{name}.{fig.formats[0]}", inputs)
    return paths


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--input takes KEY=PATH, got {text!r}")
    key, value = text.split("=", 1)
    return key, value


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="prh plot", description="Draw one figure of the registry (prh.figures).")
    p.add_argument("name", nargs="?", help="figure name (`--list` shows them)")
    p.add_argument("--out", help="figure path (.pdf; the .png is written beside it)")
    p.add_argument("--input", type=_key_value, action="append", default=[], metavar="KEY=PATH",
                   help="an input file, overriding the registry's path (repeatable)")
    p.add_argument("--list", action="store_true", help="list every figure with its inputs")
    args = p.parse_args(argv)
    if args.list or not args.name:
        for fig in FIGURES.values():
            print(f"{fig.name}\t{fig.draw}\t{' '.join(fig.inputs.values())}")
        return
    out = args.out or f"results/figures/{args.name}.{find(args.name)[0].formats[0]}"
    for path in draw(args.name, out, dict(args.input)):
        print(path)
