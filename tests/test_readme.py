"""README.md is the manual, not a results log: at most 300 lines, no result numbers outside its generated
blocks, a Quickstart of exactly the two commands that exist, and every relative link of it and of docs/*.md resolves.

Generated blocks are delimited by ``<!-- generated:NAME -->`` ... ``<!-- /generated:NAME -->``; a generator (or a
test) owns what is between them. The numbers of each study live on its page under docs/ for now."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from prh.studies.ledger import STUDIES

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_LINES = 300

BLOCK = re.compile(r"^<!-- generated:(?P<name>[\w-]+) -->\n(?P<body>.*?)^<!-- /generated:(?P=name) -->$", re.M | re.S)
MARKER = re.compile(r"<!-- (/?)generated:([\w-]+) -->")
# A result, in prose: a decimal (0.31, p = 0.071, 1.17x), a percentage (29 %, 0.8%), a measured time (26 min, 1.8 s).
RESULT_NUMBERS = {
    "decimal": re.compile(r"\d+\.\d+"),
    "percentage": re.compile(r"\d+\s?%"),
    "time": re.compile(r"(?<![\w.])(?<![A-Za-z]-)\d+(?:[.,]\d+)?\s?(?:ms|s|min|minutes|h|hours|CPU-s|CPU-minutes|GPU-hours)\b"),
}
# Numbers that are not results, each allowed only in exactly this wording.
ALLOWED = (
    "Python 3.11",  # the interpreter the Makefile's venv needs
    "(write `3.0e-3` or `0.003`)",  # the YAML trap's fix, in Configuration
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def generated_block(text: str, name: str) -> str:
    """The body of ``<!-- generated:NAME -->`` ... ``<!-- /generated:NAME -->`` in ``text`` (exactly one)."""
    bodies = [m["body"] for m in BLOCK.finditer(text) if m["name"] == name]
    assert len(bodies) == 1, f"expected one generated:{name} block, found {len(bodies)}"
    return bodies[0]


def outside_generated(text: str) -> str:
    return BLOCK.sub("", text)


def result_numbers(text: str) -> list[str]:
    """Each result number of ``text`` outside its generated blocks, with its line."""
    prose = outside_generated(text)
    for allowed in ALLOWED:
        prose = prose.replace(allowed, "")
    found = []
    for line in prose.splitlines():
        for kind, pattern in RESULT_NUMBERS.items():
            found += [f"{kind} {m.group(0)!r} in: {line.strip()}" for m in pattern.finditer(line)]
    return found


def marker_problems(text: str) -> list[str]:
    """Generated markers that do not pair up: every opening closed by its own name, none nested."""
    problems, open_name = [], None
    for m in MARKER.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        if not closing and open_name is None:
            open_name = name
        elif closing and open_name == name:
            open_name = None
        else:
            problems.append(f"{m.group(0)} while generated:{open_name} is open")
    if open_name is not None:
        problems.append(f"generated:{open_name} is never closed")
    return problems


def section(text: str, heading: str) -> str:
    """The text under ``## heading`` up to the next heading of level 2 or above."""
    m = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^#{{1,2}} |\Z)", text, re.M | re.S)
    assert m, f"no section '## {heading}'"
    return m.group(1)


def fenced_lines(text: str) -> list[str]:
    """Non-blank lines inside fenced code blocks."""
    out, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif inside and line.strip():
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, inside, seen = set(), False, {}
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            inside = not inside
        elif not inside and (m := re.match(r"^#{1,6} (.+)$", line)):
            s = slug(m.group(1))
            found.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Relative links of a markdown file whose file (or, into markdown, heading) does not exist."""
    broken, inside = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        if inside:
            continue
        for m in LINK.finditer(line):
            target = m["target"]
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(root)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{path.relative_to(root)}: {target} (no such heading in {dest.name})")
    return broken


def quickstart_commands(text: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in fenced_lines(section(text, "Quickstart"))]


# --- the README ---------------------------------------------------------------------------------------------------


def test_readme_is_at_most_300_lines():
    n = len(README.read_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; move detail into docs/ (at most {MAX_LINES})"


def test_readme_has_no_result_numbers_outside_generated_blocks():
    found = result_numbers(README.read_text())
    assert not found, "results belong in docs/<study>.md or a generated block:\n" + "\n".join(found)


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_generated_markers_pair_up(path):
    assert not marker_problems(path.read_text())


def test_the_claims_block_is_there_to_fill():
    text = README.read_text()
    generated_block(text, "claims")
    assert "results/claims.json" in section(text, "Claims and verdicts")


def test_quickstart_has_exactly_the_two_commands():
    assert quickstart_commands(README.read_text()) == ["make figures", "make test"]
    makefile = (ROOT / "Makefile").read_text()
    figures = re.search(r"^figures:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert figures and "snakemake --cores all" in figures.group(1), "make figures runs the main job"
    assert re.search(r"^test:.*\n\t.*pytest", makefile, re.M), "make test runs the tests"
    assert re.search(r"^make test$", (ROOT / ".ci" / "run").read_text(), re.M), "CI runs the README's test command"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert not broken_links(path)


def test_every_study_has_its_page_linked_from_the_readme():
    readme = README.read_text()
    for study in STUDIES:  # prh.studies.ledger's, the one list: one name each, prh.studies.<study> and docs/<study>.md
        package = ROOT / "src" / "prh" / "studies" / study
        assert package.is_dir() or package.with_suffix(".py").exists(), f"prh.studies.{study}"
        assert (ROOT / "docs" / f"{study}.md").exists(), f"docs/{study}.md"
        assert f"[{study}](docs/{study}.md)" in readme, f"README's table of studies has no row for {study}"
    for page in DOCS:
        assert f"(docs/{page.name}" in readme, f"README links no docs/{page.name}"


# --- the checks can fail ------------------------------------------------------------------------------------------


def test_the_checks_catch_a_results_log():
    log = ("Spearman r = 0.87, p = 0.071; 29 % of pairs fail; the run took 26 min 22 s, 3-6 minutes on GPT-2s.\n"
           "<!-- generated:claims -->\n| C1 | 0.31 | reproduced |\n<!-- /generated:claims -->\n")
    found = " ".join(result_numbers(log))
    for expected in ("'0.87'", "'0.071'", "'29 %'", "'26 min'", "'22 s'", "'6 minutes'"):
        assert expected in found, expected
    assert "'0.31'" not in found and "'2s'" not in found  # inside the generated block; a model name
    assert result_numbers("Python 3.11 and Python 3.12") == ["decimal '3.12' in: and Python 3.12"]
    assert marker_problems("<!-- generated:a -->\n<!-- generated:b -->\n<!-- /generated:a -->\n")
    assert quickstart_commands("## Quickstart\n\n```bash\nmake figures\nmake test\ndvc pull\n```\n") != \
        ["make figures", "make test"]


def test_the_link_check_catches_a_missing_file_and_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Some section (here)\n\n```\n# not a heading\n```\n"
                                   "[ok](#some-section-here) [ok](a.md#title) [web](https://x.org/y)\n"
                                   "[bad](missing.md) [bad](a.md#not-a-heading) [bad](#nope)\n")
    broken = broken_links(tmp_path / "a.md", root=tmp_path)
    assert [b.split(": ", 1)[1] for b in broken] == [
        "missing.md (no such file)", "a.md#not-a-heading (no such heading in a.md)", "#nope (no such heading in a.md)"]


# --- the first screen ----------------------------------------------------------------------------------

FIRST_SCREEN = 40


def costs_block(root: Path = ROOT) -> str:
    """The README's ``generated:costs`` block, from the records in benchmarks/: what the install, the default run and
    the tests cost (a value no record holds is "not measured")."""
    import json

    install = json.loads((root / "benchmarks" / "install.json").read_text())
    run = json.loads((root / "benchmarks" / "default_costs.json").read_text())
    jobs = sum(f["jobs"] for f in run["families"].values()) + 1  # and `all`, which has no benchmark file
    low, high = install["install_min"]
    results = "not measured" if install["results_gib"] is None else f"{install['results_gib']:.1f} GiB"
    return "\n".join([
        "| step | wall time | disk |", "| --- | --- | --- |",
        f"| install: the first `make figures` or `make test` (needs Python 3.11 and `make`) | {low}-{high} min "
        f"| {install['venv_gib']:.1f} GiB in `.venv/` |",
        f"| `make figures`: the default run, {jobs} jobs | {run['wall_s'] / 60:.0f} min on {run['cores']} cores "
        f"| under `results/`: {results} |",
        f"| `make test` on a clean clone, the install included | {install['make_test_wall_s'] / 60:.0f} min | |", ""])


def test_the_first_screen_says_the_commands_their_costs_progress_and_the_ledger():
    text = README.read_text()
    assert generated_block(text, "costs") == costs_block(), "rewrite the README's costs block as:\n" + costs_block()
    first = "\n".join(text.splitlines()[:FIRST_SCREEN])
    assert "<!-- /generated:costs -->" in first, f"the costs block ends after line {FIRST_SCREEN}"
    for needed in ("make figures", "make test", "results/logs/<rule>/", "steps (x%) done", "--printshellcmds",
                   "make replicate", "(#claims-and-verdicts)", "make plan"):
        assert needed in first, f"the README's first {FIRST_SCREEN} lines do not say {needed!r}"
    assert re.search(r"^plan:.*\n\t.*snakemake --dry-run", (ROOT / "Makefile").read_text(), re.M)


def test_the_costs_block_follows_its_records(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    for name in ("install.json", "default_costs.json"):
        (tmp_path / "benchmarks" / name).write_text((ROOT / "benchmarks" / name).read_text())
    before = costs_block(tmp_path)
    import json

    record = json.loads((tmp_path / "benchmarks" / "default_costs.json").read_text())
    record["wall_s"] *= 2
    (tmp_path / "benchmarks" / "default_costs.json").write_text(json.dumps(record))
    assert costs_block(tmp_path) != before
    install = json.loads((tmp_path / "benchmarks" / "install.json").read_text())
    (tmp_path / "benchmarks" / "install.json").write_text(json.dumps({**install, "results_gib": None}))
    assert "under `results/`: not measured" in costs_block(tmp_path)  # no record: said so, never a number
