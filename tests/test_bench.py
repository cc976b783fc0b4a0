"""prh bench-summary: CPU seconds per rule family from Snakemake benchmark files."""

from __future__ import annotations

import pytest

from prh.bench import main, read_benchmarks, summarise

HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def bench(root, rel, *rows):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(HEADER + "".join(f"{wall}\t0:00:00\t{rss}\t0\t0\t0\t0\t0\t0\t{cpu}\n" for wall, rss, cpu in rows))


def test_families_are_summed_sorted_and_repeats_averaged(tmp_path):
    bench(tmp_path, "align/shapes/mutual_knn/a__b.tsv", (10, 500, 18.0))
    bench(tmp_path, "align/shapes/cka/a__b.tsv", (5, 700, 8.0), (7, 900, 12.0))  # repeat(2): mean 10 CPU s
    bench(tmp_path, "extract_vision/m1.tsv", (40, 2000, 70.0))
    bench(tmp_path, "plot/fig2.tsv", (0.5, 30, "NA"))
    families = summarise(read_benchmarks(tmp_path))
    assert [f.family for f in families] == ["extract_vision", "align", "plot"]
    align = families[1]
    assert (align.jobs, align.cpu_s, align.wall_s, align.max_rss_mb, align.unmeasured) == (2, 28.0, 16.0, 900.0, 0)
    assert families[2].unmeasured == 1 and families[2].cpu_s == 0.0


def test_cli_prints_and_writes_the_table(tmp_path, capsys):
    bench(tmp_path / "b", "train_language_r0/x.tsv", (100, 1000, 190.0))
    bench(tmp_path / "b", "align/y.tsv", (10, 100, 10.0))
    out = tmp_path / "summary.md"
    main(["--root", str(tmp_path / "b"), "--out", str(out)])
    printed = capsys.readouterr().out
    assert printed == out.read_text()
    lines = printed.splitlines()
    assert lines[2].startswith("| train_language_r0 | 1 | 190 | 95.0% |")
    assert lines[-1].startswith("| **total** | 2 | 200 | 100.0% |")


def test_bad_input_names_the_file_or_folder(tmp_path):
    with pytest.raises(SystemExit, match="no benchmark folder"):
        main(["--root", str(tmp_path / "missing")])
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x.tsv").write_text("not\ta benchmark\n")
    with pytest.raises(ValueError, match=r"x\.tsv is not a Snakemake benchmark file"):
        read_benchmarks(tmp_path / "r")
