"""What a run cost, per rule family: ``prh bench-summary``.

Every rule of the workflow writes a Snakemake ``benchmark:`` file at
``results/benchmarks/<rule>/<wildcards...>.tsv`` (``bench_path`` in
workflow/rules/common.smk): one header line, then one row per repeat, with
the columns ``s`` (wall seconds), ``max_rss`` (MB) and ``cpu_time`` (user +
system CPU seconds of the job and its children), among others. This module
sums them per rule family (the first folder under the root) so that the run's
cost can be cut where the count says, not where one guesses:

    prh bench-summary                       # table on stdout, sorted by CPU seconds
    prh bench-summary --out results/benchmarks/summary.md

A job benchmarked with ``repeat(n)`` contributes the mean of its repeats.
Snakemake writes ``NA`` (or ``-``) where it could not measure a value (jobs
shorter than its sampling interval); those count as 0 s and are reported per
family as ``unmeasured``.
"""

from __future__ import annotations

import argparse
import csv
import os
from dataclasses import dataclass
from pathlib import Path

from prh.io import atomic_path

MISSING = {"", "NA", "-", "nan"}


@dataclass(frozen=True)
class JobCost:
    """One benchmark file: the rule family it belongs to and its mean over repeats."""

    family: str
    path: str
    wall_s: float
    cpu_s: float
    max_rss_mb: float
    measured: bool


@dataclass(frozen=True)
class FamilyCost:
    family: str
    jobs: int
    cpu_s: float
    wall_s: float
    max_rss_mb: float
    unmeasured: int


def _value(row: dict[str, str], column: str) -> float | None:
    raw = (row.get(column) or "").strip()
    return None if raw in MISSING else float(raw)


def read_job(path: Path, *, root: Path) -> JobCost:
    """Parse one Snakemake benchmark TSV into a :class:`JobCost`.

    Raises ValueError naming the file when it has no ``s`` column or no rows.
    """
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    if not rows or "s" not in rows[0]:
        raise ValueError(f"{path} is not a Snakemake benchmark file (no 's' column or no rows); delete it and rerun its job")
    walls = [_value(r, "s") for r in rows]
    cpus = [_value(r, "cpu_time") for r in rows]
    rss = [_value(r, "max_rss") for r in rows]
    measured = all(c is not None for c in cpus)

    def mean(xs: list[float | None]) -> float:
        known = [x for x in xs if x is not None]
        return sum(known) / len(known) if known else 0.0

    rel = path.relative_to(root)
    family = rel.parts[0] if len(rel.parts) > 1 else rel.stem
    return JobCost(family=family, path=str(rel), wall_s=mean(walls), cpu_s=mean(cpus), max_rss_mb=max((x for x in rss if x is not None), default=0.0), measured=measured)


def read_benchmarks(root: str | os.PathLike) -> list[JobCost]:
    """Every ``*.tsv`` under ``root`` (recursively), parsed; raises if ``root`` is not a folder."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"no benchmark folder at {root}: run the workflow first (`snakemake --cores all`), or pass --root")
    return [read_job(p, root=root) for p in sorted(root.rglob("*.tsv"))]


def summarise(jobs: list[JobCost]) -> list[FamilyCost]:
    """Per-family sums (jobs, CPU seconds, wall seconds), the largest ``max_rss``; sorted by CPU seconds, largest first."""
    by: dict[str, list[JobCost]] = {}
    for job in jobs:
        by.setdefault(job.family, []).append(job)
    families = [
        FamilyCost(
            family=name,
            jobs=len(js),
            cpu_s=sum(j.cpu_s for j in js),
            wall_s=sum(j.wall_s for j in js),
            max_rss_mb=max(j.max_rss_mb for j in js),
            unmeasured=sum(not j.measured for j in js),
        )
        for name, js in by.items()
    ]
    return sorted(families, key=lambda f: (-f.cpu_s, f.family))


def format_table(families: list[FamilyCost]) -> str:
    """A Markdown table: one row per family, then the total and each family's share of the CPU seconds."""
    total_cpu = sum(f.cpu_s for f in families)
    lines = [
        "| rule family | jobs | CPU s | share | wall s (sum) | max RSS MB | unmeasured |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for f in families:
        share = f.cpu_s / total_cpu if total_cpu else 0.0
        lines.append(f"| {f.family} | {f.jobs} | {f.cpu_s:.0f} | {share:.1%} | {f.wall_s:.0f} | {f.max_rss_mb:.0f} | {f.unmeasured} |")
    lines.append(
        f"| **total** | {sum(f.jobs for f in families)} | {total_cpu:.0f} | 100.0% | {sum(f.wall_s for f in families):.0f} "
        f"| {max((f.max_rss_mb for f in families), default=0):.0f} | {sum(f.unmeasured for f in families)} |"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="prh bench-summary", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="results/benchmarks", help="folder of the benchmark TSVs (default: results/benchmarks)")
    ap.add_argument("--out", help="also write the table to this file (Markdown)")
    args = ap.parse_args(argv)
    try:
        table = format_table(summarise(read_benchmarks(args.root)))
    except ValueError as err:
        raise SystemExit(f"prh bench-summary: {err}") from None
    print(table, end="")
    if args.out:
        with atomic_path(args.out) as tmp:
            tmp.write_text(table)
