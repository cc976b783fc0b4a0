"""The figure registry (prh.figures) is the one home of every figure: its plot
function, inputs and caption exist, and dvc.yaml and the figure table (docs/figures.md) agree with it."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import yaml

from prh.figures import FIGURES, draw, main
from prh.io import write_json
from test_readme import generated_block


@pytest.mark.parametrize("name", list(FIGURES))
def test_entry_points_at_real_things(name, repo_root):
    fig = FIGURES[name]
    module, func = fig.draw.split(":")
    assert module.startswith("prh.plots.") and callable(getattr(importlib.import_module(module), func))
    assert (repo_root / "workflow" / "report" / f"{fig.caption}.rst").exists(), fig.caption
    assert re.fullmatch(r"plot_\w+", fig.rule)
    assert all(p.startswith("results/") for p in fig.inputs.values())


def test_rules_are_unique():
    assert len({f.rule for f in FIGURES.values()}) == len(FIGURES)


def test_dvc_plots_are_the_registered_figures(repo_root):
    plots = yaml.safe_load((repo_root / "dvc.yaml").read_text())["plots"]
    stems = [p.removeprefix("results/figures/").removesuffix(".png") for p in plots]
    patterns = [re.compile(re.sub(r"\\\{\w+\\\}", ".+", re.escape(n)) + "$") for n in FIGURES]
    assert all(any(p.match(s) for p in patterns) for s in stems), stems
    # a preset's figure (presets/<name>.yaml) is not an output of the default `dvc repro`
    assert {n for n, f in FIGURES.items() if "{" not in n and "png" in f.formats and not f.preset} <= set(stems)


def test_figure_table_names_each_figure_with_its_rule_and_code(repo_root):
    rows = generated_block((repo_root / "docs" / "figures.md").read_text(), "figures").splitlines()
    named = [line.split("`")[1] for line in rows if line.startswith("| `")]
    assert sorted(named) == sorted(FIGURES), "docs/figures.md has one row per registered figure, and no other"
    for fig in FIGURES.values():
        row = next((line for line in rows if line.startswith(f"| `{fig.name}`")), None)
        assert row, f"docs/figures.md's figure table has no row for {fig.name}"
        assert f"`{fig.rule}`" in row and f"`{fig.draw}`" in row, row


def test_draw_names_what_is_wrong(tmp_path):
    with pytest.raises(ValueError, match="unknown figure 'fig99'"):
        draw("fig99", tmp_path / "x.pdf")
    with pytest.raises(ValueError, match=r"\['bogus'\] are not its inputs"):
        draw("downstream_fig04", tmp_path / "x.pdf", {"bogus": "x.json"})
    with pytest.raises(ValueError, match="give these inputs as --input KEY=PATH"):
        draw("world_sample_sheet", tmp_path / "x.pdf")
    with pytest.raises(FileNotFoundError, match="missing.json is missing: run `snakemake"):
        draw("downstream_fig04", tmp_path / "x.pdf", {"downstream": str(tmp_path / "missing.json")})


def test_a_pattern_entry_draws_a_concrete_figure(tmp_path):
    table = {"scores": [[0.5, 0.2]], "x_names": ["a"], "y_names": ["b", "c"], "best_pairs": [[[0, 1], [1, 1]]],
             "settings": {"metric": "mutual_knn", "topk": 5, "n": 40}}
    write_json(tmp_path / "t.json", table)
    name = "alignment_shapes_eval_mutual_knn_zoo_language__zoo_vision"
    main([name, "--input", f"table={tmp_path / 't.json'}", "--out", str(tmp_path / f"{name}.pdf")])
    assert (tmp_path / f"{name}.pdf").stat().st_size > 1000 and (tmp_path / f"{name}.png").exists()


def test_list_prints_every_figure(capsys):
    main(["--list"])
    out = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in out] == list(FIGURES)


def test_alignment_heatmap_draws_null_cells(tmp_path):
    """One dead model (null scores and layer pairs) used to break the figure job with a TypeError: the
    cells are drawn blank and marked n/a, the rest as before."""
    from prh.plots.alignment import plot_alignment

    table = {"scores": [[0.5, None], [None, None]], "best_pairs": [[[0, 1], None], [None, None]],
             "x_names": ["a", "b"], "y_names": ["c", "d"], "settings": {"metric": "mutual_knn", "topk": 3, "n": 10}}
    written = plot_alignment(table, str(tmp_path / "t.pdf"))
    assert all(p.exists() and p.stat().st_size > 0 for p in map(Path, written))
    plot_alignment({**table, "scores": [[None, None], [None, None]], "best_pairs": None}, str(tmp_path / "u.pdf"))
