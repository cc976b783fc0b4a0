"""Shared fixtures. Tests run on the CPU with small sizes; the whole suite must stay under 30 minutes on 2 cores."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# No test may reach the Hugging Face hub: everything loads from local files.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# One torch (OpenMP) thread per test process. pytest-xdist runs one worker per core, and a worker's torch would start
# a thread per core: on 2 cores, 2 workers made 4 threads, which spin while they wait for each other. With 2 threads
# tests/test_vision_zoo.py, test_phase.py, test_bridge.py and test_probes.py took 52 CPU-s, with one 26
# (benchmarks/README.md). Snakemake sets OMP_NUM_THREADS to each job's `threads` itself; a job of 2 threads beside
# the other worker waits passively instead of spinning.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# The modules that take minutes (whole-DAG fixtures, the 200 mutations, the kills, the SLURM runs), longest first.
# pytest-xdist (--dist loadfile --no-loadscope-reorder in pyproject.toml) hands files to workers in this order, so
# the long ones start at once, side by side, and the many short modules fill the workers after them; by test count
# (xdist's default) they started last and the suite waited on one of them alone.
LONGEST_FIRST = ("tests/test_replay.py", "tests/test_workflow.py", "tests/test_mutations.py",
                 "tests/test_fault_injection.py", "tests/slurm/test_slurm.py")


def pytest_collection_modifyitems(config, items):
    """The modules of LONGEST_FIRST first, then the rest by test count, most first; a module's own order is kept."""
    def module(item) -> str:
        return item.nodeid.split("::", 1)[0]

    counts = Counter(module(item) for item in items)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: (rank.get(module(item), len(rank)), -counts[module(item)], module(item)))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def paper_dry_run(tmp_path_factory) -> dict:
    """`snakemake --dry-run -p --config suite=paper`, the full paper plan (~2,000 jobs, ~8 CPU-s), in a copy of the
    repository, once per session for every test that reads it: ``returncode``, ``log`` (each job's block and shell
    command, the job table) and ``cost`` (the plan-cost summary the dry run writes to ``PLAN_COST_ENV``; None if
    it wrote none). pytest-xdist's workers share one run: the first to ask runs it under a lock in the folder
    above their temporary folders; the others read what it left."""
    from test_workflow import copy_repo

    from prh.cluster import PLAN_COST_ENV

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = shared / "paper_dry_run"
    with open(shared / "paper_dry_run.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (out / "returncode").exists():
            work = copy_repo(ROOT, out / "repo")
            env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                   PLAN_COST_ENV: str(out / "cost.json")}
            proc = subprocess.run([sys.executable, "-m", "snakemake", "--dry-run", "-p", "--config", "suite=paper"],
                                  cwd=work, env=env, capture_output=True, text=True, timeout=600)
            (out / "log.txt").write_text(proc.stdout + proc.stderr)
            (out / "returncode").write_text(str(proc.returncode))  # last: its presence says the run is complete
    cost = out / "cost.json"
    return {"returncode": int((out / "returncode").read_text()), "log": (out / "log.txt").read_text(),
            "cost": json.loads(cost.read_text()) if cost.exists() else None}


from s3_env import S3_CREDENTIALS, S3_ISOLATED  # noqa: E402  (a module of its own: tests/slurm has a conftest too)


@pytest.fixture(scope="session")
def s3_server():
    """An S3-compatible server on a free localhost port (moto's, in a thread of this process) with one bucket, ``prh``:
    ``(endpoint URL, environment with fake credentials)``. A DVC remote reaches it as ``s3://prh/<folder>`` with
    ``endpointurl`` set, as it would reach MinIO."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **{k.lower(): v for k, v in S3_CREDENTIALS.items()}
                 ).create_bucket(Bucket="prh")
    yield endpoint, {**S3_ISOLATED, **S3_CREDENTIALS}
    server.stop()
