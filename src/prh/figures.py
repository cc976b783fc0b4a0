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
    prh plot transfer_fig10_peaks_alignment --out results/figures/transfer_fig10_peaks_alignment.pdf
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
    Figure("convergence_fig02_competence_alignment", "prh.plots.convergence:plot_competence",
           {"competence": f"{E}/convergence/competence.json"}, "convergence/competence", "Convergence", "convergence"),
    Figure("convergence_fig02_model_map", "prh.plots.convergence:plot_model_map",
           {"model_map": f"{E}/convergence/model_map.json"}, "convergence/model_map", "Convergence", "convergence"),
    Figure("convergence_fig03_language_vision", "prh.plots.convergence:plot_language_vision",
           {"language_vision": f"{E}/convergence/language_vision.json"}, "convergence/language_vision", "Convergence", "convergence"),
    Figure("convergence_fig03_preregistered", "prh.plots.convergence:plot_preregistered",
           {"metrics": f"{E}/convergence/metrics.json"}, "convergence/preregistered", "Convergence", "convergence"),
    Figure("convergence_platonic_reference", "prh.plots.convergence:plot_platonic",
           {"platonic": f"{E}/convergence/platonic.json"}, "convergence/platonic", "Convergence", "convergence"),
    Figure("downstream_fig04", "prh.plots.downstream:plot_downstream",
           {"downstream": f"{E}/downstream/downstream.json"}, "downstream/downstream", "Convergence", "downstream"),
    Figure("color_fig08_pmi", "prh.plots.color:plot_color_pmi",
           {"vision": f"{E}/color/vision.json", "language": f"{E}/color/language.json"}, "color/pmi", "Colour", "color"),
    Figure("color_sec4_nce_pmi", "prh.plots.color:plot_nce_pmi", {"nce": f"{E}/color/nce.json"}, "color/nce", "Colour", "color"),
    Figure("density_fig09_caption_density", "prh.plots.density:plot_density", {"density": f"{E}/density/density.json"},
           "density/density", "Caption density", "density"),
    Figure("metric_agreement_fig10_locality", "prh.plots.metric_agreement:metric_agreement_fig10_locality",
           {"locality": f"{E}/metric_agreement/locality.json"}, "metric_agreement/locality", "Metrics", "metric_agreement"),
    Figure("metric_agreement_fig12", "prh.plots.metric_agreement:metric_agreement_fig12",
           {"agreement": f"{E}/metric_agreement/metric_agreement.json"}, "metric_agreement/metric_agreement", "Metrics", "metric_agreement"),
    Figure("metric_agreement_fig13_cross_metrics", "prh.plots.metric_agreement:metric_agreement_fig13_cross_metrics",
           {"cross": f"{E}/metric_agreement/cross_metrics.json"}, "metric_agreement/cross_metrics", "Metrics", "metric_agreement"),
    Figure("metric_agreement_fig14_cross_metrics", "prh.plots.metric_agreement:metric_agreement_fig14_cross_metrics",
           {"cross": f"{E}/metric_agreement/cross_metrics.json"}, "metric_agreement/cross_metrics", "Metrics", "metric_agreement"),
    # ---- Imani, Hu & White: representation alignment and transfer
    Figure("transfer_fig02_shuffled_emergence", "prh.plots.transfer:plot_shuffled_emergence",
           {"emergence": f"{E}/transfer/emergence_shuffled.json"}, "transfer/shuffled_emergence", "Transfer", "transfer"),
    Figure("transfer_fig07_layerwise", "prh.plots.transfer:plot_layerwise",
           {"layerwise": f"{E}/transfer/layerwise.json"}, "transfer/layerwise", "Transfer", "transfer"),
    Figure("transfer_fig10_peaks_alignment", "prh.plots.transfer:plot_peaks_alignment",
           {"peaks": f"{E}/transfer/peaks_alignment.json"}, "transfer/peaks_alignment", "Transfer", "transfer"),
    Figure("transfer_fig11_peaks_transfer", "prh.plots.transfer:plot_peaks_transfer",
           {"peaks": f"{E}/transfer/peaks_transfer.json"}, "transfer/peaks_transfer", "Transfer", "transfer"),
    Figure("transfer_fig12_peaks_layers", "prh.plots.transfer:plot_peaks_layers",
           {"peaks": f"{E}/transfer/peaks_deep.json"}, "transfer/peaks_layers", "Transfer", "transfer"),
    # ---- Seed 001: random-label bridge training of a language-pretrained transformer
    Figure("bridge_fig02_outliers", "prh.plots.bridge:plot_fig2",
           {"outliers": f"{E}/bridge/outliers.json", "figures": f"{E}/bridge/figures.json"}, "bridge/fig2_outliers",
           "Seed 001: bridge", "bridge"),
    Figure("bridge_fig03_random_labels", "prh.plots.bridge:plot_fig3", {"figures": f"{E}/bridge/figures.json"},
           "bridge/fig3_random_labels", "Seed 001: bridge", "bridge"),
    Figure("bridge_fig08_partial_bridge", "prh.plots.bridge:plot_fig8", {"figures": f"{E}/bridge/figures.json"},
           "bridge/fig8_partial_bridge", "Seed 001: bridge", "bridge"),
    Figure("bridge_fig10_outliers_after", "prh.plots.bridge:plot_fig10", {"figures": f"{E}/bridge/figures.json"},
           "bridge/fig10_outliers_after", "Seed 001: bridge", "bridge"),
    # ---- Seed 000: phase incompatibility (NTK cross-similarity, AGOP)
    Figure("phase_fig01a_landscape", "prh.plots.phase:plot_fig1a",
           {"pairs": f"{E}/phase/pairs.csv", "metrics": f"{E}/phase/metrics.json"}, "phase/fig1a",
           "Seed 000: phase", "phase"),
    Figure("phase_fig01b_families", "prh.plots.phase:plot_fig1b", {"table1": f"{E}/phase/table1.csv"},
           "phase/fig1b", "Seed 000: phase", "phase"),
    Figure("phase_fig02_histograms", "prh.plots.phase:plot_fig2",
           {"pairs": f"{E}/phase/pairs.csv", "metrics": f"{E}/phase/metrics.json"}, "phase/fig2",
           "Seed 000: phase", "phase"),
    # ---- Huh's thesis, chapter 4: LoRA-the-Explorer
    Figure("lte_fig8.1_least_squares", "prh.plots.lte:plot_least_squares",
           {"least_squares": f"{E}/lte/least_squares.json"}, "lte/least_squares", "LoRA-the-Explorer", "lte"),
    Figure("lte_fig4.6_vs_standard", "prh.plots.lte:plot_lte_vs_standard", {"vision": f"{E}/lte/vision.json"},
           "lte/vs_standard", "LoRA-the-Explorer", "lte"),
    Figure("lte_fig4.7_head_orthogonality", "prh.plots.lte:plot_head_orthogonality",
           {"orthogonality": f"{E}/lte/orthogonality.json"}, "lte/orthogonality", "LoRA-the-Explorer", "lte"),
    Figure("lte_fig8.5_update_rank", "prh.plots.lte:plot_update_rank", {"vision": f"{E}/lte/vision.json"},
           "lte/update_rank", "LoRA-the-Explorer", "lte"),
    Figure("lte_table4.9_mini", "prh.plots.lte:write_table", {"table": f"{E}/lte/table.json"}, "lte/table", "LoRA-the-Explorer", "lte", formats=("csv",)),
    # ---- Huh's thesis, chapter 2: simplicity bias
    Figure("simplicity_fig2.2_random_net_rank", "prh.plots.simplicity:plot_random_net_rank",
           {"random_nets": f"{E}/simplicity/random_nets.json"}, "simplicity/random_nets", "Simplicity bias", "simplicity"),
    Figure("simplicity_fig2.5_optimizer_rank", "prh.plots.simplicity:plot_optimizer_rank",
           {"trained": f"{E}/simplicity/trained.json"}, "simplicity/optimizers", "Simplicity bias", "simplicity"),
    Figure("simplicity_fig2.6_trained_linear_rank", "prh.plots.simplicity:plot_trained_linear_rank",
           {"trained": f"{E}/simplicity/trained.json"}, "simplicity/trained", "Simplicity bias", "simplicity"),
    Figure("simplicity_fig7.1_gaussian_product_rank", "prh.plots.simplicity:plot_gaussian_product_rank",
           {"products": f"{E}/simplicity/products.json"}, "simplicity/products", "Simplicity bias", "simplicity"),
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
