"""What a whole default run costs, and where the CPU outside the benchmark files goes.

Runs ``snakemake --cores C`` in a checkout from an empty ``results/`` (use a clone: this deletes its results/ and
.snakemake/), waits for it with ``os.wait4`` and prints one JSON object:

- ``wall_s``: the run's wall time;
- ``tree_cpu_s``: user + system CPU of Snakemake and every process it waited for (jobs, their shells, children);
- ``sampled_cpu_s``: the sum of the jobs' Snakemake ``benchmark:`` files (psutil samples of each job's process
  tree, every 0.5 s for 30 s, then every 30 s: what runs after a job's last sample is missed);
- ``exact_cpu_s``: the sum of ``results/benchmarks/commands.jsonl`` (prh.bench.record_rusage: every prh command's
  own CPU and its children's, read by ``getrusage`` as it exits), when the checkout writes it;
- ``outside_exact_s``: tree - exact: Snakemake itself, torchrun's launchers and the job shells;
- ``snakemake_cpu_s``: the Snakemake process's own CPU (``/proc/<pid>/stat``, read every 2 s until it exits: the
  last 2 s are missed), which includes its ``benchmark:`` sampling threads.

    git clone -q . /tmp/run && python benchmarks/bench_default_run.py /tmp/run --cores 2 [--json out.json]

Run two checkouts back to back on the same idle machine to compare them (the README of this folder records them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path


def own_cpu(pid: int) -> float | None:
    """User + system CPU seconds of one process, not its children (fields 14 and 15 of /proc/<pid>/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(checkout: Path, *, cores: int, snakemake: str) -> dict:
    for path in ("results", ".snakemake"):
        shutil.rmtree(checkout / path, ignore_errors=True)
    start = time.perf_counter()
    # the checkout's own prh (the venv's editable install may point at another tree), the venv's tools on PATH
    env = {**os.environ, "PYTHONPATH": str(checkout / "src"),
           "PATH": f"{Path(snakemake).parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.Popen([snakemake, "--cores", str(cores)], cwd=checkout, env=env,
                            stdout=open(checkout / "run.log", "w"), stderr=subprocess.STDOUT)
    master = {"cpu": 0.0}

    def poll():
        while proc.returncode is None:
            cpu = own_cpu(proc.pid)
            if cpu is not None:
                master["cpu"] = cpu
            time.sleep(2)

    threading.Thread(target=poll, daemon=True).start()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    from prh.bench import read_benchmarks, read_commands

    root = checkout / "results" / "benchmarks"
    sampled = sum(job.cpu_s for job in read_benchmarks(root))
    commands = root / "commands.jsonl"
    exact = sum(c["cpu_s"] for c in read_commands(commands).values()) if commands.exists() else None
    tree = usage.ru_utime + usage.ru_stime
    return {"checkout": str(checkout), "status": os.waitstatus_to_exitcode(status), "cores": cores,
            "wall_s": round(wall, 1), "tree_cpu_s": round(tree, 1), "sampled_cpu_s": round(sampled, 1),
            "exact_cpu_s": None if exact is None else round(exact, 1),
            "outside_sampled_share": round(1 - sampled / tree, 3),
            "outside_exact_s": None if exact is None else round(tree - exact, 1),
            "outside_exact_share": None if exact is None else round(1 - exact / tree, 3),
            "snakemake_cpu_s": round(master["cpu"], 1), "benchmark_files": len(list(root.rglob("*.tsv")))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", type=Path, help="a clone to run in (its results/ and .snakemake/ are deleted)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--snakemake", default=str(Path(sys.executable).with_name("snakemake")))
    ap.add_argument("--json", type=Path, help="also write the result here")
    a = ap.parse_args()
    result = run(a.checkout.resolve(), cores=a.cores, snakemake=a.snakemake)
    print(json.dumps(result, indent=1))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
