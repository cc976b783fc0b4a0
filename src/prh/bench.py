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

The same table, saved with the run's wall time (``--costs-out``), prices a plan
before it runs: ``benchmarks/default_costs.json`` is one measured default run, and
``snakemake`` prints the expected duration of the jobs it is about to start
(``expected_duration``; the Snakefile's ``onstart:``):

    prh bench-summary --costs-out benchmarks/default_costs.json --wall-s 1582 --cores 2 --run "main at ..., idle VM"
"""

from __future__ import annotations

import argparse
import atexit
import csv
import json
import logging
import os
import resource
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

COSTS_FILE = "benchmarks/default_costs.json"  # one measured default run: what `snakemake` prices a plan with
COMMANDS_LOG = "commands.jsonl"  # beside the benchmark files: every prh command's exact costs (prh.cli, PRH_RUSAGE_LOG)
RUSAGE_ENV = "PRH_RUSAGE_LOG"  # a JSONL file: one line of exact costs per prh command run (prh.cli sets none)


def proc_status_kib(field: str) -> int | None:
    """A memory field of /proc/self/status in KiB (``VmHWM``, ``RssAnon``, ...); None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss_kib() -> int:
    """This process's peak resident memory in KiB: ``VmHWM``, the high-water mark of its own address space.
    ``ru_maxrss`` is not that on Linux: a process started by fork (or vfork) and exec keeps the larger of its own
    peak and its parent's RSS at the fork, so a command run from a 2 GB pytest worker read 2 GB."""
    peak = proc_status_kib("VmHWM")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if peak is None else peak


def record_rusage(path: str, *, command: str, argv: list[str], wall_s: float, status: int) -> None:
    """Append this process's exact costs to ``path`` as one JSON line (``prh.cli`` calls it as a command exits when
    ``PRH_RUSAGE_LOG`` is set): CPU seconds of the process (start-up and imports included) and of the children it
    waited for, wall seconds of the command, peak memory, exit status. One ``write`` of an O_APPEND file: lines of
    concurrent jobs do not interleave."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    line = json.dumps({"command": command, "argv": argv, "rank": os.environ.get("RANK"), "status": status,
                       "wall_s": round(wall_s, 6),  # microseconds: a command that fails at once takes < 1 ms
                       "cpu_s": round(me.ru_utime + me.ru_stime, 3), "children_cpu_s": round(kids.ru_utime + kids.ru_stime, 3),
                       "max_rss_mb": round(max(peak_rss_kib(), kids.ru_maxrss) / 1024, 1)}) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def start_run(benchmarks: list, *, results: str, cores: int | None, costs_path: str | os.PathLike | None,
              jobids: list[int] | None = None, handlers=()) -> None:
    """Before a run's first job (the Snakefile's onstart): its prh commands log their exact costs to
    ``<results>/benchmarks/commands.jsonl`` (jobs inherit ``PRH_RUSAGE_LOG``; replicate modules' commands land there
    too), and, given the committed costs file, the jobs about to run (their benchmark paths) are priced on stderr;
    given their ``jobids`` and Snakemake's log ``handlers``, every progress line then says the time left
    (``TimeLeft``)."""
    os.environ.setdefault(RUSAGE_ENV, os.path.abspath(os.path.join(results, "benchmarks", COMMANDS_LOG)))
    if benchmarks and costs_path is not None and os.path.exists(costs_path):
        costs = read_costs(costs_path)
        families = [family_of(b) for b in benchmarks]
        print(format_expected(expected_duration(families, costs=costs, cores=cores)), file=sys.stderr, flush=True)
        terminal = next((h for h in handlers if h.name == TERMINAL_HANDLER), None)
        if jobids is not None and terminal is not None:
            # on a terminal the progress line is rewritten in place (PRH_PROGRESS=lines: one line per step)
            isatty = getattr(getattr(terminal, "stream", None), "isatty", None)
            in_place = bool(isatty and isatty()) and os.environ.get(PROGRESS_ENV) != "lines"
            terminal.setFormatter(TimeLeft(terminal.formatter, dict(zip(jobids, families)), costs=costs, cores=cores,
                                           in_place=in_place))
            if in_place:
                terminal.terminator = ""
                # a run that stops before its last step (an error, Ctrl-C) still ends its progress line
                atexit.register(lambda fmt=terminal.formatter: fmt.bottom and terminal.stream.write("\n"))


def dry_run_duration(workflow, costs_path: str | os.PathLike) -> None:
    """At the exit of ``snakemake -n`` (atexit; the Snakefile registers it): the plan's expected duration, after its
    job table. ``workflow`` is Snakemake's; nothing for a real run (onstart printed it) or an empty plan."""
    if not (getattr(workflow, "dryrun", False) and workflow.dag is not None and len(workflow.dag)):
        return
    jobs = list(workflow.dag.needrun_jobs(exclude_finished=False))
    if jobs and os.path.exists(costs_path):
        costs = read_costs(costs_path)
        cores = workflow.cores if isinstance(workflow.cores, int) and workflow.cores > 0 else costs["cores"]
        est = expected_duration([family_of(j.benchmark and str(j.benchmark)) for j in jobs], costs=costs, cores=cores)
        print(format_expected(est), file=sys.stderr, flush=True)


TERMINAL_HANDLER = "DefaultStreamHandler"  # the name of Snakemake's terminal log handler (snakemake.logging)
PROGRESS_ENV = "PRH_PROGRESS"  # "lines": the progress as one line per step even on a terminal


class TimeLeft(logging.Formatter):
    """A local run's progress line says the time left: Snakemake's "N of M steps (x%) done", then the
    steps left and the jobs not yet finished priced as ``expected_duration`` prices a plan (with the costs file).
    Wraps the formatter of Snakemake's terminal handler; every other line is formatted as before. Snakemake's log
    records carry ``event`` (``job_finished`` with ``job_id``, ``progress`` with ``done`` and ``total``).

    In ``in_place`` mode (a terminal: ``start_run`` sets it and the handler's terminator to "") the progress line
    stays at the bottom of the screen, rewritten in place: every other message clears it, prints above it, and
    puts it back; the last step's line ends the run with its newline."""

    CLEAR = "\r\x1b[2K"  # carriage return, erase the line

    def __init__(self, inner: logging.Formatter, jobs: dict[int, str | None], *, costs: dict, cores: int,
                 in_place: bool = False):
        super().__init__()
        self.inner, self.left, self.costs, self.cores = inner, dict(jobs), costs, cores
        self.in_place, self.bottom = in_place, ""  # the progress line now on screen (in place)

    def format(self, record: logging.LogRecord) -> str:
        event = str(getattr(record, "event", "") or "")
        if event == "job_finished":
            self.left.pop(getattr(record, "job_id", None), None)
        line = self.inner.format(record)
        progress = event == "progress" and isinstance(getattr(record, "total", None), int)
        if progress:
            steps = record.total - record.done
            wall = expected_duration(list(self.left.values()), costs=self.costs, cores=self.cores)["wall_s"]
            line += f", {steps} left, about {wall / 60:.0f} min to go" if wall >= 60 else f", {steps} left"
        if not self.in_place or not line or line == "None":
            return line
        if progress:
            self.bottom = "" if record.done >= record.total else line
            return self.CLEAR + line + ("" if self.bottom else "\n")
        return (self.CLEAR if self.bottom else "") + line + "\n" + self.bottom


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
    return JobCost(family=_family(rel), path=str(rel), wall_s=mean(walls), cpu_s=mean(cpus), max_rss_mb=max((x for x in rss if x is not None), default=0.0), measured=measured)


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


def read_commands(path: str | os.PathLike) -> dict[str, dict]:
    """Exact costs per prh command from a ``PRH_RUSAGE_LOG`` file (prh.cli): ``{command: {"runs", "cpu_s", "wall_s"}}``,
    CPU including waited-for children. A job run again (same command, arguments and torchrun rank) counts once, its
    last run."""
    last: dict[tuple, dict] = {}
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        try:
            rec = json.loads(line)
            last[(rec["command"], tuple(rec["argv"]), rec.get("rank"))] = rec  # torchrun's ranks share argv
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path}, line {n}: not a prh command record; delete the file (it is rewritten as jobs run)") from None
    out: dict[str, dict] = {}
    for (command, _, _), rec in last.items():
        row = out.setdefault(command, {"runs": 0, "cpu_s": 0.0, "wall_s": 0.0})
        row["runs"] += 1
        row["cpu_s"] += rec["cpu_s"] + rec["children_cpu_s"]
        row["wall_s"] += rec["wall_s"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["cpu_s"]))


def format_commands(commands: dict[str, dict], *, sampled_cpu_s: float) -> str:
    """The exact CPU of the prh commands against what the benchmark files sampled."""
    exact = sum(c["cpu_s"] for c in commands.values())
    lines = ["", f"prh commands, exact (process CPU incl. start-up and children, {COMMANDS_LOG}): "
                 f"{exact:.0f} CPU s in {sum(c['runs'] for c in commands.values())} runs; the benchmark files sampled "
                 f"{sampled_cpu_s:.0f} CPU s ({exact - sampled_cpu_s:+.0f} s unsampled)", "",
             "| command | runs | CPU s | wall s (sum) |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {c['runs']} | {c['cpu_s']:.0f} | {c['wall_s']:.0f} |" for name, c in commands.items()]
    return "\n".join(lines) + "\n"


def write_costs(path: str | os.PathLike, families: list[FamilyCost], *, wall_s: float, cores: int, run: str) -> dict:
    """Save a measured run's per-family costs with its wall time and cores (what ``expected_duration`` reads)."""
    if wall_s <= 0 or cores < 1:
        raise ValueError(f"--wall-s ({wall_s}) must be > 0 and --cores ({cores}) >= 1: the measured run's wall time and cores")
    from prh.io import write_json  # numpy: kept out of prh.cli's import, which every command pays

    costs = {"run": run, "wall_s": float(wall_s), "cores": int(cores),
             "families": {f.family: {k: v for k, v in asdict(f).items() if k != "family"} for f in families}}
    write_json(path, costs)
    return costs


def read_costs(path: str | os.PathLike) -> dict:
    """A ``write_costs`` file; a missing key is an error naming the file and how to rewrite it."""
    costs = json.loads(Path(path).read_text())
    if not isinstance(costs, dict) or not {"wall_s", "cores", "families"} <= set(costs) or not costs["families"]:
        raise ValueError(f"{path} is not a costs file (wall_s, cores, families); rewrite it with "
                         "`prh bench-summary --costs-out ...` after a full run")
    return costs


def family_of(benchmark: str | os.PathLike | None) -> str | None:
    """A job's rule family: the folder under ``benchmarks/`` of its benchmark file (None: a job without one)."""
    if not benchmark:
        return None
    path = Path(benchmark)
    if "benchmarks" not in path.parts[:-1]:
        return None
    return _family(Path(*path.parts[path.parts.index("benchmarks") + 1:]))


def _family(rel: Path) -> str:
    """The family of a benchmark file, from its path below the benchmarks folder: the first folder, or the file's
    own name for a file right under it."""
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def expected_duration(families: list[str | None], *, costs: dict, cores: int) -> dict:
    """Price a plan (one rule family per job) with a measured run's costs.

    CPU seconds: the sum of each job's family mean (a family the run did not measure costs the median
    family mean, and is counted in ``unpriced``; a job without a benchmark file, such as ``all``, costs 0). Wall seconds: those CPU seconds spread over
    ``min(cores, jobs)`` cores at the measured run's utilisation (its job CPU over wall x cores:
    dependencies, Snakemake and start-up keep cores idle), and never less than the longest job.
    """
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    per_job = {name: f["cpu_s"] / f["jobs"] for name, f in costs["families"].items() if f["jobs"]}
    fallback = statistics.median(per_job.values())
    prices = [0.0 if f is None else per_job.get(f, fallback) for f in families]  # no benchmark file: a target rule
    cpu = sum(prices)
    measured_cpu = sum(f["cpu_s"] for f in costs["families"].values())
    utilisation = min(1.0, measured_cpu / (costs["wall_s"] * costs["cores"]))
    wall = max([cpu / (min(cores, max(1, len(prices))) * utilisation), *prices]) if prices else 0.0
    return {"jobs": len(prices), "cpu_s": cpu, "wall_s": wall, "utilisation": utilisation, "cores": cores,
            "unpriced": sum(f is not None and f not in per_job for f in families), "run": costs.get("run", "?")}


def format_expected(est: dict) -> str:
    """One line for the start of a run."""
    unpriced = f"; {est['unpriced']} of them priced at the median family" if est["unpriced"] else ""
    return (f"Expected duration: about {est['wall_s'] / 60:.0f} min on {est['cores']} core{'s' * (est['cores'] != 1)} for {est['jobs']} jobs "
            f"({est['cpu_s'] / 60:.0f} CPU-min at the measured run's {est['utilisation']:.0%} core utilisation{unpriced}; "
            f"costs: {COSTS_FILE}, {est['run']})")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="prh bench-summary", description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default="results/benchmarks", help="folder of the benchmark TSVs (default: results/benchmarks)")
    ap.add_argument("--out", help="also write the table to this file (Markdown)")
    ap.add_argument("--costs-out", help=f"also save the costs, for pricing plans (the committed one: {COSTS_FILE})")
    ap.add_argument("--wall-s", type=float, help="with --costs-out: the run's wall seconds")
    ap.add_argument("--cores", type=int, help="with --costs-out: the cores it ran on")
    ap.add_argument("--run", default="", help="with --costs-out: what run and machine it was")
    args = ap.parse_args(argv)
    if args.costs_out and (args.wall_s is None or args.cores is None):
        ap.error("--costs-out needs --wall-s and --cores (the measured run's wall time and cores)")
    try:
        families = summarise(read_benchmarks(args.root))
        table = format_table(families)
        if (Path(args.root) / COMMANDS_LOG).exists():
            table += format_commands(read_commands(Path(args.root) / COMMANDS_LOG),
                                     sampled_cpu_s=sum(f.cpu_s for f in families))
        if args.costs_out:
            write_costs(args.costs_out, families, wall_s=args.wall_s, cores=args.cores, run=args.run)
    except ValueError as err:
        raise SystemExit(f"prh bench-summary: {err}") from None
    print(table, end="")
    if args.out:
        from prh.io import atomic_path

        with atomic_path(args.out) as tmp:
            tmp.write_text(table)
