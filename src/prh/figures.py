"""The figure registry: every figure the workflow draws, in one table.

Each entry names the figure (its file stem in ``results/figures/``), the plot
function that draws it, the experiment files it reads, its report caption
(``workflow/report/<caption>.rst``) and its report category. The rule files
generate one plot rule per entry from this table (``workflow/rules/figures.smk``),
``prh plot NAME`` draws any entry by hand, and a test checks ``dvc.yaml``'s plots,
the README's figure table and the smoke run's figures against it.

An input path may hold ``{fields}``: those named in the rule file's context (e.g.
``{sample_sheet_dataset}``) are filled from params.yaml, the others are Snakemake
wildcards (the alignment figures are one entry for every alignment table).

    prh plot --list
    prh plot imani_fig10_peaks_alignment --out results/figures/imani_fig10_peaks_alignment.pdf
"""

from __future__ import annotations

import argparse
import importlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from prh.errors import UsageError, did_you_mean

__all__ = ["Figure", "FIGURES", "find", "load_input", "draw", "draw_from", "main"]

E = "results/experiments"


@dataclass(frozen=True)
class Figure:
    """One figure: ``draw(*inputs, out, **kwargs)`` writes ``results/figures/<name>.<format>`` for each format
    (a figure: PDF and PNG; a table: CSV)."""

    name: str
    draw: str  # "module:function" in prh.plots
    inputs: dict[str, str]  # argument name -> path (in argument order)
    caption: str  # workflow/report/<caption>.rst
    category: str  # the report's section
    study: str  # the package of src/prh/studies (or the stage) whose numbers it plots
    kwargs: dict = field(default_factory=dict)
    formats: tuple[str, ...] = ("pdf", "png")  # the files it writes; the first is the one the report shows

    @property
    def rule(self) -> str:
        """The Snakemake rule that draws it: ``plot_<name>``, wildcards dropped, other non-identifier characters ``_``."""
        stem = re.sub(r"_+", "_", re.sub(r"\W", "_", re.sub(r"\{\w+\}", "", self.name))).strip("_")
        return f"plot_{stem}"

    def paths(self, context: dict | None = None) -> dict[str, str]:
        """The input paths with the ``{fields}`` found in ``context`` filled in (the rest stay wildcards)."""
        context = context or {}
        return {k: re.sub(r"\{(\w+)\}", lambda m: str(context.get(m.group(1), m.group(0))), v)
                for k, v in self.inputs.items()}


def _figures(*figs: Figure) -> dict[str, Figure]:
    return {f.name: f for f in figs}


FIGURES: dict[str, Figure] = _figures(
    # ---- the shapes world and the alignment tables
    Figure("world_sample_sheet", "prh.plots.sample_sheet:plot_sample_sheet",
           {"data": "results/data/{sample_sheet_dataset}/images.npy"}, "sample_sheet", "Shapes world", "data",
           {"n_items": 4}),
    Figure("alignment_{dataset}_{metric}_{xset}__{yset}", "prh.plots.alignment:plot_alignment",
           {"table": "results/alignment/{dataset}/{metric}/{xset}__{yset}.json"}, "alignment", "Alignment", "metrics"),
    # ---- PRH: convergence (Figs 2, 3), downstream (Fig 4), colour (Fig 8), density (Fig 9), metrics (Figs 10, 12-14)
    Figure("fig02_competence_alignment", "prh.plots.convergence:plot_competence",
           {"competence": f"{E}/convergence/competence.json"}, "convergence_competence", "Convergence", "prh"),
    Figure("fig02_model_map", "prh.plots.convergence:plot_model_map",
           {"model_map": f"{E}/convergence/model_map.json"}, "convergence_model_map", "Convergence", "prh"),
    Figure("fig03_language_vision", "prh.plots.convergence:plot_language_vision",
           {"language_vision": f"{E}/convergence/language_vision.json"}, "convergence_language_vision",
           "Convergence", "prh"),
    Figure("fig03_preregistered", "prh.plots.convergence:plot_preregistered",
           {"metrics": f"{E}/convergence/metrics.json"}, "convergence_preregistered", "Convergence", "prh"),
    Figure("fig_platonic_reference", "prh.plots.convergence:plot_platonic",
           {"platonic": f"{E}/convergence/platonic.json"}, "convergence_platonic", "Convergence", "prh"),
    Figure("fig04_downstream", "prh.plots.downstream:plot_downstream",
           {"downstream": f"{E}/downstream/downstream.json"}, "downstream", "Convergence", "prh"),
    Figure("fig08_color_pmi", "prh.plots.color:plot_color_pmi",
           {"vision": f"{E}/color/vision.json", "language": f"{E}/color/language.json"}, "color_pmi", "Colour", "prh"),
    Figure("fig_sec4_nce_pmi", "prh.plots.color:plot_nce_pmi", {"nce": f"{E}/color/nce.json"}, "color_nce",
           "Colour", "prh"),
    Figure("fig09_caption_density", "prh.plots.density:plot_density", {"density": f"{E}/density/density.json"},
           "density", "Caption density", "prh"),
    Figure("fig10_locality", "prh.plots.metrics_agreement:fig10_locality",
           {"locality": f"{E}/metrics_agreement/locality.json"}, "locality", "Metrics", "prh"),
    Figure("fig12_metric_agreement", "prh.plots.metrics_agreement:fig12_metric_agreement",
           {"agreement": f"{E}/metrics_agreement/metric_agreement.json"}, "metric_agreement", "Metrics", "prh"),
    Figure("fig13_cross_metrics", "prh.plots.metrics_agreement:fig13_cross_metrics",
           {"cross": f"{E}/metrics_agreement/cross_metrics.json"}, "cross_metrics", "Metrics", "prh"),
    Figure("fig14_cross_metrics", "prh.plots.metrics_agreement:fig14_cross_metrics",
           {"cross": f"{E}/metrics_agreement/cross_metrics.json"}, "cross_metrics", "Metrics", "prh"),
    # ---- Imani, Hu & White: representation alignment and transfer
    Figure("imani_fig02_shuffled_emergence", "prh.plots.transfer:plot_shuffled_emergence",
           {"emergence": f"{E}/transfer/emergence_shuffled.json"}, "transfer_shuffled_emergence", "Transfer", "imani"),
    Figure("imani_fig07_layerwise", "prh.plots.transfer:plot_layerwise",
           {"layerwise": f"{E}/transfer/layerwise.json"}, "transfer_layerwise", "Transfer", "imani"),
    Figure("imani_fig10_peaks_alignment", "prh.plots.transfer:plot_peaks_alignment",
           {"peaks": f"{E}/transfer/peaks_alignment.json"}, "transfer_peaks_alignment", "Transfer", "imani"),
    Figure("imani_fig11_peaks_transfer", "prh.plots.transfer:plot_peaks_transfer",
           {"peaks": f"{E}/transfer/peaks_transfer.json"}, "transfer_peaks_transfer", "Transfer", "imani"),
    Figure("imani_fig12_peaks_layers", "prh.plots.transfer:plot_peaks_layers",
           {"peaks": f"{E}/transfer/peaks_deep.json"}, "transfer_peaks_layers", "Transfer", "imani"),
    # ---- Seed 001: random-label bridge training of a language-pretrained transformer
    Figure("seed001_fig2_outliers", "prh.plots.bridge:plot_fig2",
           {"outliers": f"{E}/bridge/outliers.json", "figures": f"{E}/bridge/figures.json"}, "bridge_fig2_outliers",
           "Seed 001: bridge", "seed001"),
    Figure("seed001_fig3_random_labels", "prh.plots.bridge:plot_fig3", {"figures": f"{E}/bridge/figures.json"},
           "bridge_fig3_random_labels", "Seed 001: bridge", "seed001"),
    Figure("seed001_fig8_partial_bridge", "prh.plots.bridge:plot_fig8", {"figures": f"{E}/bridge/figures.json"},
           "bridge_fig8_partial_bridge", "Seed 001: bridge", "seed001"),
    Figure("seed001_fig10_outliers_after", "prh.plots.bridge:plot_fig10", {"figures": f"{E}/bridge/figures.json"},
           "bridge_fig10_outliers_after", "Seed 001: bridge", "seed001"),
    # ---- Seed 000: phase incompatibility (NTK cross-similarity, AGOP)
    Figure("seed000_fig1a_phase_landscape", "prh.plots.phase:plot_fig1a",
           {"pairs": f"{E}/phase/pairs.csv", "metrics": f"{E}/phase/metrics.json"}, "phase_fig1a",
           "Seed 000: phase", "phase"),
    Figure("seed000_fig1b_families", "prh.plots.phase:plot_fig1b", {"table1": f"{E}/phase/table1.csv"},
           "phase_fig1b", "Seed 000: phase", "phase"),
    Figure("seed000_fig2_histograms", "prh.plots.phase:plot_fig2",
           {"pairs": f"{E}/phase/pairs.csv", "metrics": f"{E}/phase/metrics.json"}, "phase_fig2",
           "Seed 000: phase", "phase"),
    # ---- Huh's thesis, chapter 4: LoRA-the-Explorer
    Figure("thesis_fig8.1_lte_least_squares", "prh.plots.lte:plot_least_squares",
           {"least_squares": f"{E}/lte/least_squares.json"}, "lte_least_squares", "LoRA-the-Explorer", "thesis"),
    Figure("thesis_fig4.6_lte_vs_standard", "prh.plots.lte:plot_lte_vs_standard", {"vision": f"{E}/lte/vision.json"},
           "lte_vs_standard", "LoRA-the-Explorer", "thesis"),
    Figure("thesis_fig4.7_head_orthogonality", "prh.plots.lte:plot_head_orthogonality",
           {"orthogonality": f"{E}/lte/orthogonality.json"}, "lte_orthogonality", "LoRA-the-Explorer", "thesis"),
    Figure("thesis_fig8.5_update_rank", "prh.plots.lte:plot_update_rank", {"vision": f"{E}/lte/vision.json"},
           "lte_update_rank", "LoRA-the-Explorer", "thesis"),
    Figure("thesis_table4.9_mini", "prh.plots.lte:write_table", {"table": f"{E}/lte/table.json"}, "lte_table",
           "LoRA-the-Explorer", "thesis", formats=("csv",)),
    # ---- Huh's thesis, chapter 2: simplicity bias
    Figure("thesis_fig2.2_random_net_rank", "prh.plots.simplicity:plot_random_net_rank",
           {"random_nets": f"{E}/simplicity/random_nets.json"}, "simplicity_random_nets", "Simplicity bias", "thesis"),
    Figure("thesis_fig2.5_optimizer_rank", "prh.plots.simplicity:plot_optimizer_rank",
           {"trained": f"{E}/simplicity/trained.json"}, "simplicity_optimizers", "Simplicity bias", "thesis"),
    Figure("thesis_fig2.6_trained_linear_rank", "prh.plots.simplicity:plot_trained_linear_rank",
           {"trained": f"{E}/simplicity/trained.json"}, "simplicity_trained", "Simplicity bias", "thesis"),
    Figure("thesis_fig7.1_gaussian_product_rank", "prh.plots.simplicity:plot_gaussian_product_rank",
           {"products": f"{E}/simplicity/products.json"}, "simplicity_products", "Simplicity bias", "thesis"),
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
        raise ValueError(f"figure {name}: {unknown} are not its inputs; it reads {sorted(fig.inputs)}")
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
