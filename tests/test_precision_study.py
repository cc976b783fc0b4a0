"""The precision table (issue 34) in the README and the report is the one benchmarks/precision_study.json holds."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rows() -> list[str]:
    spec = importlib.util.spec_from_file_location("precision_study", ROOT / "benchmarks" / "precision_study.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.rows(json.loads((ROOT / "benchmarks" / "precision_study.json").read_text()))


def test_readme_and_report_show_the_measured_table():
    rows = _rows()
    assert len(rows) == 4 and all(r.count("|") == 6 for r in rows)
    readme = (ROOT / "README.md").read_text()
    report = (ROOT / "workflow" / "report" / "workflow.rst").read_text()
    for row in rows:
        assert row in readme, row
        assert f"- {row.strip('| ').replace(' | ', '; ')}" in report, row
    study = json.loads((ROOT / "benchmarks" / "precision_study.json").read_text())
    for table in study["tables"]:  # the README's reading of it: scores move by thousandths at most
        assert table["bfloat16"]["max_abs_change"] < 0.01 and table["float16"]["max_abs_change"] < 0.01
