"""Kill the workflow at random jobs, resume, and get the same outputs (issue 17, "Done when").

A seeded test: a small sub-DAG of the smoke config (the 200-scene vision dataset, two random
zoo vision models, their features and one mutual-kNN alignment table: 7 jobs of seconds each)
is run once uninterrupted and once with three SIGKILLs of the whole Snakemake process group,
each once a seeded-random number of jobs have finished (read from the log's "Finished jobid"
lines) plus a seeded-random delay, so that the kill lands inside a job. After each kill the run
resumes as a user would (`snakemake --unlock`, then `--rerun-incomplete`). Every output file,
byte for byte, must equal the uninterrupted run's, and a dry run then plans nothing.

The same repository copy also checks what the Snakefile checks before any job: a bad value names
the layer it came from (`--config`, `--configfile`); offline, the paper suite lists every hub model
and dataset missing from the cache in one error.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from test_workflow import BIN, copy_repo, git_commit, planned_jobs, run

from prh.config import merge

pytestmark = pytest.mark.slow

SEED = 17
MODELS = ["resnet_xs_random", "vit_xs_random"]
TARGET = "results/alignment/shapes_vision/mutual_knn/fault__fault.json"
N_JOBS = 7  # 2 x shapes_dataset (random models train on shapes_train), 2 x train_vision, 2 x extract_vision, align


@pytest.fixture(scope="module")
def repo(repo_root, tmp_path_factory) -> Path:
    """A repository copy whose params.yaml is the smoke config plus the two-model set ``fault``."""
    work = copy_repo(repo_root, tmp_path_factory.mktemp("fault") / "repo")
    merged = merge(yaml.safe_load((work / "params.yaml").read_text()),
                   yaml.safe_load((work / "tests" / "smoke" / "params.yaml").read_text()))
    merged["model_sets"]["fault"] = MODELS
    (work / "params.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
    run(["git", "init", "-q"], work)
    git_commit(work, "fault-injection copy")
    return work


def output_hashes(work: Path) -> dict[str, str]:
    """SHA-256 of every file under results/ that DVC tracks: not logs and benchmarks (which hold
    timings), nor what .dvcignore leaves out (a killed job's hidden temporaries and ``.partial`` batches)."""
    root = work / "results"
    return {
        str(p.relative_to(work)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] not in ("logs", "benchmarks")
        and not any(part.startswith(".") or part.endswith(".partial") for part in p.relative_to(root).parts)
    }


def snakemake_killed_after(work: Path, *, finished: int, delay: float, log: Path) -> tuple[int, int]:
    """Start `snakemake --cores 2 --rerun-incomplete TARGET` in its own process group; SIGKILL the
    group once ``finished`` jobs of this run have finished, ``delay`` seconds more have passed and a
    job is running. Return (jobs this run finished, jobs it had started but not finished: killed)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    with open(log, "w") as out:
        proc = subprocess.Popen(["snakemake", "--cores", "2", "--rerun-incomplete", TARGET], cwd=work, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def counts() -> tuple[int, int]:
        text = log.read_text()
        return (len(re.findall(r"^Finished jobid", text, flags=re.MULTILINE)),
                len(re.findall(r"^(?:local)?rule \w+:$", text, flags=re.MULTILINE)))

    deadline = time.monotonic() + 300
    while proc.poll() is None and counts()[0] < finished and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(delay)
    while proc.poll() is None and counts()[1] <= counts()[0] and time.monotonic() < deadline:
        time.sleep(0.1)  # between jobs: wait for the next one to start, so the kill lands inside it
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # no job outlives the kill (they share the group), so nothing writes after this point
    for _ in range(50):
        if subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True, check=False).returncode == 1:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"jobs of the killed process group {proc.pid} are still running")
    done, started = counts()
    return done, started - done


def test_bad_value_names_the_layer_it_came_from(repo, tmp_path):
    nested = run(["snakemake", "-n", "--cores", "1", "--config", "alignment={topk: 5}"], repo, check=False)
    assert nested.returncode != 0
    err = nested.stdout + nested.stderr
    assert "the merged configuration (params.yaml + --config" in err
    assert "alignment.topk: '5' is not of type 'integer'" in err  # Snakemake reads nested values as strings
    assert "comes from the command line (--config)" in err and "--configfile FILE" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("alignment: {quantile: 3e-3}\n")
    sci = run(["snakemake", "-n", "--cores", "1", "--configfile", str(bad)], repo, check=False)
    err = sci.stdout + sci.stderr
    assert sci.returncode != 0
    assert f"the merged configuration (params.yaml + --configfile {bad}) is invalid" in err
    assert "alignment.quantile: '3e-3' is not of type 'number'" in err and "3.0e-3" in err
    assert f"comes from --configfile {bad}" in err


def test_offline_paper_suite_lists_every_missing_hub_item_before_any_job(repo, tmp_path):
    env = {"HF_HOME": str(tmp_path / "empty_hf_home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    # allow_unpinned: the shipped revisions are branches, which a real run refuses first (tests/test_run_safety.py)
    proc = run(["snakemake", "--cores", "1", "--config", "suite=paper", "allow_unpinned=True"], repo, check=False,
               env=env)
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Finished jobid" not in err
    assert "hub items of the paper suite are not in the Hugging Face cache" in err
    # every paper model and every hub dataset in the one message
    cfg = yaml.safe_load((repo / "params.yaml").read_text())
    for name in cfg["paper"]["models"]:
        assert f"model {name}: " in err, name
    for name, spec in cfg["datasets"].items():
        assert (f"dataset {name}: " in err) == (spec["kind"] == "hub"), name


def test_killed_three_times_and_resumed_equals_an_uninterrupted_run(repo, tmp_path):
    assert sum(planned_jobs(repo, TARGET).values()) == N_JOBS
    run(["snakemake", "--cores", "2", TARGET], repo)
    reference = output_hashes(repo)
    assert TARGET in reference and len([k for k in reference if k.startswith("results/features/")]) == 2 * len(MODELS)
    run(["snakemake", "--cores", "1", "--delete-all-output", TARGET], repo)
    assert not (repo / TARGET).exists()

    rng = random.Random(SEED)
    thresholds = sorted(rng.sample(range(1, N_JOBS - 1), 3))  # kill after the k-th job of the DAG, k = 1..5
    total = 0
    for i, threshold in enumerate(thresholds):
        done, killed = snakemake_killed_after(repo, finished=threshold - total, delay=rng.uniform(0.5, 2.0),
                                              log=tmp_path / f"killed{i}.log")
        total += done
        assert killed >= 1, f"kill {i} (after {total} of {N_JOBS} jobs) interrupted no running job"
        assert not (repo / TARGET).exists()
        run(["snakemake", "--unlock"], repo)  # the killed run's lock stays behind
    resumed = run(["snakemake", "--cores", "2", "--rerun-incomplete", TARGET], repo)
    assert re.search(r"^Finished jobid", resumed.stdout + resumed.stderr, flags=re.MULTILINE)

    assert output_hashes(repo) == reference
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "1", TARGET], repo).stdout
