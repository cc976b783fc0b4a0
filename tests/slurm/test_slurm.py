"""The workflow on a real SLURM cluster (issue 50): one node started by ``tests/slurm/cluster.sh``.

- One study's branch of the smoke DAG (simplicity: its three experiments, metrics.json and one figure,
  5 jobs) runs through ``profiles/slurm`` unchanged, given only this cluster's partition file
  (``--slurm-partition-config``), the status command a cluster without accounting needs
  (``--slurm-status-command squeue``: sacct answers "accounting storage is disabled") and a shorter
  first status check. Every job is its own SLURM job; each job's ``mem_mb``, ``runtime`` and
  threads are its ``--mem``, ``--time`` and ``--cpus-per-task`` (read back from squeue); the figure
  job, given ``gpu=1`` and 2 threads on the command line, goes to the ``gpu`` partition with
  ``--gpus=1`` (a fake GRES whose device file is /dev/null); one job cancelled mid-run with scancel
  is resubmitted once (``retries: 1``) and the run finishes; the outputs equal a local run's byte
  for byte; a second invocation submits nothing.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from test_workflow import BIN, copy_repo, run

from prh.config import merge

pytestmark = pytest.mark.slow

SIMPLICITY = "results/experiments/simplicity"
PLOT = "plot_simplicity_fig2_2_random_net_rank"
BRANCH = [f"{SIMPLICITY}/metrics.json", "results/figures/simplicity_fig2.2_random_net_rank.pdf"]
# rule job -> (mem_mb, runtime minutes, threads, partition, GPUs) as the rules (and the overrides below) ask
EXPECTED = {
    "rule_simplicity_experiment_wildcards_random_nets": (2000, 15, 1, "cpu", None),
    "rule_simplicity_experiment_wildcards_products": (2000, 15, 1, "cpu", None),
    "rule_simplicity_experiment_wildcards_trained": (2000, 15, 1, "cpu", None),
    "rule_simplicity_metrics": (1000, 5, 1, "cpu", None),
    f"rule_{PLOT}": (1000, 5, 2, "gpu", "gres:gpu:1"),
}
CANCELLED = "rule_simplicity_experiment_wildcards_trained"
TIMEOUT = 1800  # seconds for one Snakemake run through SLURM: generous, the machine may be loaded


def smoke_copy(repo_root: Path, dst: Path) -> Path:
    work = copy_repo(repo_root, dst)
    merged = merge(yaml.safe_load((work / "params.yaml").read_text()),
                   yaml.safe_load((work / "tests" / "smoke" / "params.yaml").read_text()))
    (work / "params.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
    return work


def hashes(work: Path, folder: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((work / folder).glob("*.json"))}


def slurm_args(cluster) -> list[str]:
    """profiles/slurm, plus what this cluster needs and the figure job's GPU and threads."""
    return ["--profile", "profiles/slurm", "--slurm-partition-config", str(cluster.partitions),
            "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "5",
            "--set-resources", f"{PLOT}:gpu=1", "--set-threads", f"{PLOT}=2"]


def cluster_jobs(cluster) -> list[dict]:
    """Every job slurmctld still knows (MinJobAge=600 s keeps finished ones), oldest first."""
    fields = ["JobID", "Comment", "NumCPUs", "MinMemory", "TimeLimit", "State", "Partition", "tres-per-job"]
    out = cluster.run("squeue", "-h", "-t", "all", "-O", ",".join(f"{f}:|" for f in fields)).stdout
    jobs = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        jobs.append(dict(id=int(parts[0]), comment=parts[1], cpus=int(parts[2]), mem=parts[3], time=parts[4],
                         state=parts[5], partition=parts[6], tres=parts[7]))
    return sorted(jobs, key=lambda j: j["id"])


def minutes(limit: str) -> int:
    """squeue's TimeLimit ([days-]hours:minutes:seconds or minutes:seconds) in minutes."""
    days, _, hms = limit.rpartition("-")
    parts = [int(p) for p in hms.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    return int(days or 0) * 1440 + parts[0] * 60 + parts[1] + (parts[2] > 0)


def test_smoke_branch_through_the_slurm_profile(slurm, repo_root, tmp_path):
    # the same branch run locally: the reference outputs
    local = smoke_copy(repo_root, tmp_path / "local")
    run(["snakemake", "--cores", "2", *BRANCH], local)

    work = smoke_copy(repo_root, tmp_path / "slurm")
    before = {j["id"] for j in cluster_jobs(slurm)}
    log = tmp_path / "slurm.log"
    env = {**slurm.env, "PATH": f"{BIN}:{slurm.env['PATH']}"}
    started = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(["snakemake", *BRANCH, *slurm_args(slurm)], cwd=work, env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    # cancel one job once it runs (its first seconds are the job's own Snakemake start-up: it is
    # cut off before its output exists)
    cancelled = None
    deadline = time.monotonic() + TIMEOUT
    try:
        while cancelled is None and proc.poll() is None and time.monotonic() < deadline:
            for job in cluster_jobs(slurm):
                if job["id"] not in before and job["comment"] == CANCELLED and job["state"] == "RUNNING":
                    assert not (work / SIMPLICITY / "trained.json").exists()
                    slurm.run("scancel", str(job["id"]))
                    cancelled = job["id"]
                    break
            time.sleep(0.2)
        proc.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the SLURM run took over {TIMEOUT} s:\n{log.read_text()[-4000:]}") from None
    finally:
        if proc.poll() is None:  # a failed assertion above: Snakemake must not outlive the test
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()  # Snakemake waits on SIGTERM for its jobs: they go with the cluster
                proc.wait()
    wall = time.monotonic() - started
    text = log.read_text()
    assert proc.returncode == 0, text[-6000:]
    assert cancelled is not None, "the job to cancel was never seen running"
    print(f"smoke branch through SLURM: {wall:.0f} s")

    jobs = [j for j in cluster_jobs(slurm) if j["id"] not in before]
    by_comment: dict[str, list[dict]] = {}
    for job in jobs:
        by_comment.setdefault(job["comment"], []).append(job)
    # every rule job is one SLURM job (the cancelled one twice: cancelled, then resubmitted once)
    assert set(by_comment) == set(EXPECTED), sorted(by_comment)
    for comment, runs in by_comment.items():
        if comment == CANCELLED:
            assert [j["state"] for j in runs] == ["CANCELLED", "COMPLETED"], runs
            assert runs[0]["id"] == cancelled
        else:
            assert [j["state"] for j in runs] == ["COMPLETED"], runs
        mem_mb, runtime, threads, partition, gpus = EXPECTED[comment]
        for job in runs:
            assert job["mem"] == f"{mem_mb}M", job
            assert minutes(job["time"]) == runtime, job
            assert job["cpus"] == threads, job
            assert job["partition"] == partition, job
            assert job["tres"] == (gpus or "N/A"), job
    assert text.count("has been submitted with SLURM jobid") == len(EXPECTED) + 1

    # the numbers are the local run's, byte for byte
    assert hashes(work, SIMPLICITY) == hashes(local, SIMPLICITY)
    assert len(hashes(work, SIMPLICITY)) == 4
    assert (work / BRANCH[1]).stat().st_size > 1000

    # a second invocation plans and submits nothing
    again = run(["snakemake", *BRANCH, *slurm_args(slurm)], work, env={"SLURM_CONF": slurm.env["SLURM_CONF"]})
    assert "Nothing to be done" in again.stdout + again.stderr
    assert len(cluster_jobs(slurm)) == len(before) + len(jobs)
