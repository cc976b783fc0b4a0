"""The workflow on a real SLURM cluster: one node started by ``tests/slurm/cluster.sh``.

- One study's branch of the smoke DAG (simplicity: its three experiments, metrics.json and one figure,
  5 jobs) runs through ``profiles/slurm`` unchanged, given only this cluster's partition file
  (``--slurm-partition-config``), the status command a cluster without accounting needs
  (``--slurm-status-command squeue``: sacct answers "accounting storage is disabled") and a first status check
  after 2 s instead of the plugin's 40 (a check that finds no job finished waits 10 s longer for the next, and one
  that finds one starts again at 2: the jobs here take about 10 s each). Every job is its own SLURM job; each
  job's ``mem_mb``, ``runtime`` and threads are its ``--mem``, ``--time`` and ``--cpus-per-task`` (read back
  from squeue); the figure job, given ``gpu=1`` and 2 threads on the command line, goes to the ``gpu`` partition
  with ``--gpus=1`` (a fake GRES whose device file is /dev/null); one job cancelled mid-run with scancel is
  resubmitted once (``retries: 1``) and the run finishes; the outputs equal a local run's byte for byte; a
  second invocation submits nothing.
- LoRA-the-Explorer as one SLURM job of 2 tasks (srun, c10d rendezvous, gloo) equals the local torchrun.
- Sharded exact k-NN as a SLURM job array and a merge job equals the unsharded search, ties included.

All tests of the cluster are in this one module, so that under xdist's ``--dist loadfile`` one worker
starts and stops it. No test asserts a time; every wait has a generous timeout (TIMEOUT).
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from test_workflow import BIN, copy_repo, free_port, run

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
            "--slurm-status-command", "squeue", "--slurm-init-seconds-before-status-checks", "2",
            "--set-resources", f"{PLOT}:gpu=1", "--set-threads", f"{PLOT}=2"]


def cluster_jobs(cluster) -> list[dict]:
    """Every job slurmctld still knows (MinJobAge=3600 s keeps finished ones), oldest first."""
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


def wait_for(cluster, job_id: int, timeout: float = TIMEOUT) -> str:
    """The final state of a SLURM job (polled with squeue; MinJobAge keeps it visible)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = cluster.run("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T").stdout.strip()
        if state and state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
            return state
        time.sleep(1)
    cluster.run("scancel", str(job_id), check=False)
    raise AssertionError(f"SLURM job {job_id} did not finish in {timeout} s")


def test_lte_as_one_slurm_job_of_two_tasks(slurm, repo_root, tmp_path):
    """LoRA-the-Explorer's least-squares experiment (2 heads) launched as the lte rules launch it across
    nodes: srun starts one torchrun agent per task, the agents meet at a c10d rendezvous on the job's
    first node and run one gloo rank each. Its numbers equal the local 2-process torchrun's."""
    import json
    import shlex

    from prh.cluster.launch import torchrun_launcher

    merged = merge(yaml.safe_load((repo_root / "params.yaml").read_text()),
                   yaml.safe_load((repo_root / "tests" / "smoke" / "params.yaml").read_text()))
    cfg = merged["lte"]["least_squares"]
    assert len(cfg["heads"]) > 1 and max(cfg["heads"]) >= 2  # two heads: the ranks' all-reduce is used
    args = (f"-m prh.cli run-lte --experiment least_squares --config {shlex.quote(json.dumps(cfg))} "
            f"--seed {merged['seed']}")
    env = {**slurm.env, "PATH": f"{BIN}:{slurm.env['PATH']}", "OMP_NUM_THREADS": "1"}
    local = tmp_path / "local.json"
    run(f"{torchrun_launcher(1, 2)} {args} --out {local}", tmp_path, env=env)

    launcher = torchrun_launcher(1, 1, tasks_per_node=2, port=free_port())
    assert launcher.startswith("srun --ntasks-per-node 2 torchrun --nnodes 2 ")
    script = tmp_path / "lte.sh"
    script.write_text(f"#!/bin/bash\nset -e\n{launcher} {args} --out {tmp_path / 'slurm.json'}\n")
    submitted = slurm.run("sbatch", "--parsable", "--ntasks", "2", "--cpus-per-task", "1", "--mem", "3000",
                          "-t", "30", "-o", str(tmp_path / "lte.log"), "-D", str(tmp_path), str(script))
    job = int(submitted.stdout.strip().split(";")[0])
    state = wait_for(slurm, job)
    log = (tmp_path / "lte.log").read_text() if (tmp_path / "lte.log").exists() else ""
    assert state == "COMPLETED", f"{state}:\n{log[-4000:]}"
    info = slurm.run("scontrol", "show", "job", str(job)).stdout
    assert "NumTasks=2" in info, info

    on_slurm, on_one = (json.loads(p.read_text()) for p in (tmp_path / "slurm.json", local))
    assert on_slurm.pop("run")["world_size"] == on_one.pop("run")["world_size"] == 2
    assert on_slurm == on_one


def test_sharded_knn_through_slurm_equals_the_unsharded_search(slurm, tmp_path):
    """A model's k-NN lists as a SLURM job array, one job per row shard (`prh knn-shard`), merged by a job
    that waits for them (`prh knn-merge`, --dependency=afterok): the same lists as one unsharded search,
    ties included (a third of the items are exact copies)."""
    import torch
    from test_knn_shard import features_with_ties

    from prh.metrics.knn_shard import read_lists

    feats = features_with_ties(tmp_path / "model.safetensors", n=3000, layers=2, dim=16)
    k, shards, block_rows = 10, 4, 256
    shard = tmp_path / "shard_%a.safetensors"
    array = slurm.run(
        "sbatch", "--parsable", f"--array=0-{shards - 1}", "--ntasks", "1", "--cpus-per-task", "1", "--mem", "1000",
        "-t", "30", "-D", str(tmp_path), "-o", str(tmp_path / "shard_%a.log"),
        "--wrap", f"prh knn-shard --features {feats} --shard $SLURM_ARRAY_TASK_ID --shards {shards} --topk {k} "
                  f"--block-rows {block_rows} --threads 1 --out {str(shard).replace('%a', '$SLURM_ARRAY_TASK_ID')}",
    ).stdout.strip().split(";")[0]
    parts = " ".join(str(shard).replace("%a", str(s)) for s in range(shards))
    merge = slurm.run(
        "sbatch", "--parsable", f"--dependency=afterok:{array}", "--ntasks", "1", "--mem", "1000", "-t", "30",
        "-D", str(tmp_path), "-o", str(tmp_path / "merge.log"),
        "--wrap", f"prh knn-merge {parts} --out {tmp_path / 'merged.safetensors'}",
    ).stdout.strip().split(";")[0]
    state = wait_for(slurm, int(merge))
    logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("*.log")))
    assert state == "COMPLETED", f"{state}:\n{logs[-4000:]}"
    tasks = slurm.run("squeue", "-h", "-t", "all", "-j", array, "-o", "%i %T").stdout.split("\n")
    assert sorted(line.split()[0] for line in tasks if line) == [f"{array}_{s}" for s in range(shards)], tasks

    idx, sims, meta = read_lists(tmp_path / "merged.safetensors")
    assert meta["shards"] == shards and meta["n"] == 3000
    env = {**slurm.env, "PATH": f"{BIN}:{slurm.env['PATH']}"}
    run(["prh", "knn-shard", "--features", str(feats), "--shard", "0", "--shards", "1", "--topk", str(k),
         "--block-rows", str(block_rows), "--threads", "1", "--out", str(tmp_path / "whole.safetensors")], tmp_path, env=env)
    whole_idx, whole_sims, _ = read_lists(tmp_path / "whole.safetensors")
    assert torch.equal(idx, whole_idx) and torch.equal(sims, whole_sims)
    assert int((sims[:, :, 1:] == sims[:, :, :-1]).sum()) > 100  # exact ties, in the same order
