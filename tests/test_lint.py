"""The habits of a well-kept Python project: the package, tests and benchmarks pass `ruff check` (its
configuration in pyproject.toml), the Snakefile and rule files are as `snakefmt` writes them, and `snakemake --lint`
finds nothing. Both tools are in the `test` extra and pinned in requirements.lock; .pre-commit-config.yaml runs them
at those versions (tests/test_packaging.py checks the pins agree)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(tool: str, *args: str) -> subprocess.CompletedProcess:
    exe = BIN / tool
    assert exe.exists(), f"{tool} is not installed beside {sys.executable}: `make test` installs the test extra"
    return subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True)


def test_ruff_finds_nothing():
    proc = run("ruff", "check", "--no-cache", "--output-format", "concise", "src", "tests", "benchmarks")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_workflow_files_are_snakefmt_formatted():
    rules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    proc = run("snakefmt", "--check", "Snakefile", *rules)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_snakemake_lint_finds_nothing():
    """Snakemake's own linter (log directives, envs, path composition, env variables, rules mixed with functions) on
    the default workflow: no lint, so a new one fails here rather than joining a list nobody reads (docs/tests.md)."""
    proc = run("snakemake", "--lint", "--cores", "1")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Lints for" not in out, out[-6000:]


def test_ruff_would_catch_an_undefined_name(tmp_path):
    """The check can fail: the same configuration on a file with an undefined name and an unused import."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f():\n    return undefined_name\n")
    proc = run("ruff", "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert proc.returncode == 1 and "F821" in proc.stdout and "F401" in proc.stdout
