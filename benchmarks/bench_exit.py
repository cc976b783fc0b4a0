"""What the interpreter's teardown costs a ``prh`` command, and what ``prh.cli.entry``'s fast exit saves.

Runs each command of a finished run's ``commands.jsonl`` sample alternately through ``prh.cli.main`` (a normal
exit: module teardown, garbage collection of torch/transformers/timm objects) and ``prh.cli.entry`` (atexit
handlers, thread joins and flushes, then ``os._exit``), ``--repeats`` times each, in fresh interpreters, and prints
per command the mean wall and process CPU (``os.wait4``) of both and their difference.

    python benchmarks/bench_exit.py /tmp/run --repeats 3

``/tmp/run`` is a scratch checkout with a finished default run (its ``results/benchmarks/commands.jsonl``): the
commands rewrite their outputs there, so do not point it at results you keep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# one job of each kind: the libraries a command imports decide what its teardown costs
KINDS = ("extract-language", "extract-vision", "align", "plot", "run-world-gate")


def timed(argv: list[str], cwd: Path) -> tuple[float, float]:
    """Wall seconds and user + system CPU seconds of one process (``os.wait4``: the process and its waited children)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:6])} ... exited {proc.returncode}")
    return time.perf_counter() - start, usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a checkout with a finished run (results/benchmarks/commands.jsonl)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--kinds", nargs="+", default=list(KINDS), help=f"prh commands to time (default: {' '.join(KINDS)})")
    a = p.parse_args()
    log = a.run / "results" / "benchmarks" / "commands.jsonl"
    if not log.exists():
        raise SystemExit(f"{log} does not exist: run the default workflow in {a.run} first")
    sample = {}
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        if rec["command"] in a.kinds and rec["status"] == 0:
            sample.setdefault(rec["command"], rec["argv"])
    rows = []
    for command, argv in sample.items():
        runs = {"main": [], "entry": []}
        for _ in range(a.repeats):
            for how in runs:  # alternated, so drift in the machine's load hits both alike
                code = f"import sys; from prh import cli; sys.argv = ['prh', *sys.argv[1:]]; cli.{how}()"
                runs[how].append(timed([sys.executable, "-c", code, command, *argv], a.run))
        mean = {how: [sum(x) / len(x) for x in zip(*r)] for how, r in runs.items()}
        rows.append({"command": command, "main_wall_s": mean["main"][0], "entry_wall_s": mean["entry"][0],
                     "main_cpu_s": mean["main"][1], "entry_cpu_s": mean["entry"][1]})
    print("| command | wall s: normal exit | fast exit | saved | CPU s: normal exit | fast exit | saved |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['command']} | {r['main_wall_s']:.2f} | {r['entry_wall_s']:.2f} | {r['main_wall_s'] - r['entry_wall_s']:.2f} "
              f"| {r['main_cpu_s']:.2f} | {r['entry_cpu_s']:.2f} | {r['main_cpu_s'] - r['entry_cpu_s']:.2f} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
