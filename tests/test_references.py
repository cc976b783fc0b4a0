"""Every reference in the repository is one a reader can follow.

The project's own issue tracker is not public, and neither are the files beside this repository, so
a phrase naming an issue of it, a bare ``#<number>``, a path into the directory above the checkout or
the design card kept there means nothing to a reader. History is said in words (what was decided, when,
why) or by the docs page that records it; upstream references are full URLs or ``owner/repo#N``.
"""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Vendored third-party code, kept byte for byte.
VENDORED = ("tests/reference/",)

# A phrase naming an issue: the word, singular or plural, any case, then a number (a hash before it optional).
ISSUE_PHRASE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
# A bare hash and number: not after a word character ("owner/repo#N" names its repository), a path or URL
# separator, a closing bracket (C++ lambdas in profiler traces: "lambda(int)" then a hash and 1) or another hash.
BARE_NUMBER = re.compile(r"(?<![\w/.\-#)\]}&])#(\d+)\b")
# Paths outside the repository: the directory above the checkout and the design card kept there.
OUTSIDE = re.compile(r"\.\./shared|\bDESIGN\.md\b")


def is_colour(line: str, match: re.Match) -> bool:
    """A hex colour that happens to be all digits: six or eight of them ("#000000"), or three in quotes."""
    digits = match.group(1)
    quoted = match.start() > 0 and line[match.start() - 1] in "\"'"
    return len(digits) in (6, 8) or (len(digits) == 3 and quoted)


def problems(line: str) -> list[str]:
    """What in one line a reader cannot follow."""
    found = [m.group(0) for m in OUTSIDE.finditer(line)]
    found += [m.group(0) for m in ISSUE_PHRASE.finditer(line)]
    found += [m.group(0) for m in BARE_NUMBER.finditer(line) if not is_colour(line, m)]
    return found


def tracked_text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [n for n in out.decode().split("\0") if n]
    return [n for n in names if not n.startswith(VENDORED)]


def text_lines(name: str) -> list[tuple[int, str]]:
    """(line number, line) of a text file; none for a binary one or a file the checkout lacks."""
    path = ROOT / name
    if not path.is_file():
        return []
    data = path.read_bytes()
    if b"\0" in data:
        return []
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return []
    numbered = list(enumerate(lines, 1))
    return numbered


def test_the_patterns_catch_what_they_should_and_nothing_else():
    issue, h = "is" + "sue", "#"  # apart, so that this file does not flag itself
    for bad in (f"fixed in {issue} 47.", f"({issue.title()} 53's goals)", f"{issue}s 4 and 16", f"{issue} {h}5",
                f"see {h}35", f"({h}4)", f"| {h}3, {h}50 |", f"hub discussion org/repo {h}204",
                "../" + "shared/seeds/000.txt", "DESIGN" + ".md, Execution"):
        assert problems(bad), bad
    for fine in (f"huggingface/datasets{h}6837", "https://huggingface.co/org/repo/discussions/204", "colour #1f3a93",
                 'color: "#000000"', "fill='#333'", f"{{lambda(int){h}1}}", "# 1. a numbered comment", "tissue 4",
                 "docs/paper_suite.md#replaying-the-paper-suite-offline-stand-in-hub", "shared/ paths inside it"):
        assert not problems(fine), fine


def test_no_reference_a_reader_cannot_follow():
    """Every git-tracked text file (vendored code aside), line by line."""
    bad = [f"{name}:{i}: {', '.join(found)}" for name in tracked_text_files()
           for i, line in text_lines(name) if (found := problems(line))]
    assert not bad, ("references a reader cannot follow (say it in words, point to a docs page, or write an "
                     "upstream reference as a URL or owner/repo#N):\n" + "\n".join(bad))
