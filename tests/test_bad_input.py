"""The bad-input table (docs/trust.md, linked from the README's Configuration) is true: every row's
command, run with bash from the root of a clean copy of the repository, fails, prints no traceback, and prints the
row's text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_readme import generated_block
from test_workflow import copy_repo, run

ROOT = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `(?P<cmd>.+?)` \| `(?P<out>.+?)` \|$")


def table_rows() -> list[tuple[str, str]]:
    block = generated_block((ROOT / "docs" / "trust.md").read_text(), "bad-input")
    rows = [ROW.match(line.strip()) for line in block.splitlines() if line.startswith("| `")]
    assert all(rows), "every row is | `command` | `text` |"
    return [(m["cmd"].replace("\\|", "|"), m["out"].replace("\\|", "|")) for m in rows]


ROWS = table_rows()


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return copy_repo(ROOT, tmp_path_factory.mktemp("bad-input") / "repo")


def test_the_table_covers_the_issue():
    assert len(ROWS) >= 15
    commands = " ".join(c for c, _ in ROWS)
    for needed in ("suite=ofline", "allow_unpinned=true", "topk: 999", "batch_sizes", "bins", "check-lock", "plot"):
        assert needed in commands
    # prh align's bad inputs, check-config on a directory or UTF-16, make-shapes --n 0, a dvc.lock that is
    # missing, conflicted or a list, a closed pipe, NaN features, duplicate keys, NaN and huge numbers in the config
    for needed in ("--x-features missing", "--x-features docs", "--topk 9", "a.st b.st", "--metric cknna", "--out docs",
                   "check-config docs", "utf-16", "make-shapes --n 0", "--lock missing.lock", "<<<<<<<", "'- a",
                   "| true", "float(\"nan\")", "seed: 7", ".nan", "seed=1200"):
        assert needed in commands, needed


@pytest.mark.parametrize("command, expected", ROWS, ids=[c[:60] for c, _ in ROWS])
def test_each_row(repo, command, expected):
    proc = run(["bash", "-c", command], repo, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, f"{command} succeeded:\n{out[-2000:]}"
    assert "Traceback" not in out and 'File "' not in out, out[-3000:]
    assert expected in " ".join(out.split()), f"{command}: {expected!r} not in\n{out[-3000:]}"
