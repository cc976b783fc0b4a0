"""The precision table in docs/metrics.md and the report is the one benchmarks/precision_study.json holds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from test_readme import generated_block

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("precision_study", ROOT / "benchmarks" / "precision_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows() -> list[str]:
    return _module().rows(json.loads((ROOT / "benchmarks" / "precision_study.json").read_text()))


def test_docs_and_report_show_the_measured_table():
    rows = _rows()
    assert len(rows) == 4 and all(r.count("|") == 6 for r in rows)
    block = generated_block((ROOT / "docs" / "metrics.md").read_text(), "precision")
    report = (ROOT / "workflow" / "report" / "workflow.rst").read_text()
    assert block == "\n".join([*_module().HEADER, *rows]) + "\n", "rerun precision_study.py --render --docs docs/metrics.md"
    for row in rows:
        assert f"- {row.strip('| ').replace(' | ', '; ')}" in report, row
    study = json.loads((ROOT / "benchmarks" / "precision_study.json").read_text())
    for table in study["tables"]:  # docs/metrics.md's reading of it: scores move by thousandths at most
        assert table["bfloat16"]["max_abs_change"] < 0.01 and table["float16"]["max_abs_change"] < 0.01
