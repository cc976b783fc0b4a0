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


def shell_expressions(text: str) -> list[tuple[int, str]]:
    """(line, first line) of each ``shell:`` directive's value in a Snakefile's text whose value is not a plain string
    literal: an f-string, a name or any other expression."""
    lines, found = text.splitlines(), []
    for i, line in enumerate(lines):
        if line.strip() == "shell:" and i + 1 < len(lines):
            value = lines[i + 1].strip()
            if not value.startswith(('"', "'")):
                found.append((i + 2, value))
        elif line.strip().startswith("shell:") and line.strip() != "shell:":
            value = line.strip()[len("shell:"):].strip()
            if not value.startswith(('"', "'")):
                found.append((i + 1, value))
    return found


def test_every_shell_directive_is_a_plain_string():
    """Snakemake evaluates a rule's shell: expression twice: when the rule is defined (what a dry run prints) and again
    when the job runs. A name in it (a loop variable, a dict entry) is read the second time from the module as it stands
    after every rule file ran: a rule defined in a loop ran the last iteration's command while its dry run showed the
    right one. What varies belongs in params:, which is evaluated once."""
    files = [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
    bad = [f"{p.relative_to(ROOT)}:{n}: {v}" for p in files for n, v in shell_expressions(p.read_text())]
    assert not bad, "\n".join(bad)
    loop = 'for _m in ("a", "b"):\n\n    rule:\n        shell:\n            f"prh {_m} > {{log}}"\n'
    assert shell_expressions(loop) == [(5, 'f"prh {_m} > {{log}}"')]  # the check can fail
