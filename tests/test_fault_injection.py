"""Kill the workflow at random jobs, resume, and get the same outputs.

A seeded test: a small sub-DAG of the smoke config (the 200-scene vision dataset, two random
zoo vision models, their features and one mutual-kNN alignment table: 7 jobs of seconds each)
is run once uninterrupted and once with three SIGKILLs of the whole Snakemake process group.
Each kill targets a seeded-random job of that run (the m-th to start, read from the log's rule
lines) and lands a seeded-random fraction (0.1-0.6) of that rule's wall time in the
uninterrupted run after the job started, so it always falls inside the job: a kill timed by a
count of finished jobs plus a fixed delay could miss every job when two finish together and the
last is short. After each kill the run resumes as a user would (`snakemake --unlock`, then
`--rerun-incomplete`). Every output file, byte for byte, must equal the uninterrupted run's,
and a dry run then plans nothing.

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

from prh.bench import read_benchmarks
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


RULE_LINE = re.compile(r"^(?:local)?rule (\w+):$", flags=re.MULTILINE)


def rule_wall_seconds(work: Path) -> dict[str, float]:
    """Shortest wall time per rule in the last run, from its ``benchmark:`` files."""
    walls: dict[str, float] = {}
    for job in read_benchmarks(work / "results" / "benchmarks"):
        walls[job.family] = min(job.wall_s, walls.get(job.family, job.wall_s))
    return walls


def snakemake_killed_at(work: Path, *, start: int, fraction: float, walls: dict[str, float],
                        log: Path, wait_s: float) -> tuple[int, int]:
    """Start `snakemake --cores 2 --rerun-incomplete TARGET` in its own process group; SIGKILL the
    group ``fraction`` of the rule's wall time (``walls``) after the ``start``-th job of this run
    started, waiting at most ``wait_s`` for that job to start. Return (jobs this run finished, jobs it
    had started but not finished: killed)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    with open(log, "w") as out:
        proc = subprocess.Popen(["snakemake", "--cores", "2", "--rerun-incomplete", TARGET], cwd=work, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def counts() -> tuple[int, int]:
        text = log.read_text()
        return len(re.findall(r"^Finished jobid", text, flags=re.MULTILINE)), len(RULE_LINE.findall(text))

    deadline = time.monotonic() + wait_s
    while proc.poll() is None and counts()[1] < start and time.monotonic() < deadline:
        time.sleep(0.02)
    rules = RULE_LINE.findall(log.read_text())
    if proc.poll() is None and len(rules) >= start:
        # snakemake logs the rule line before it spawns the job, so the job runs at least this long
        time.sleep(fraction * walls[rules[start - 1]])
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
    # hub models by name; plain-URL checkpoints (prh.models.checkpoints) as checkpoints; the seeded random
    # ResNet-50 needs nothing fetched, so it is in neither list
    for name, spec in cfg["paper"]["models"].items():
        source = spec.get("source")
        assert (f"model {name}: " in err) == (source is None), name
        assert (f"checkpoint {name}: " in err) == (source == "url"), name
    for name, spec in cfg["datasets"].items():
        assert (f"dataset {name}: " in err) == (spec["kind"] == "hub"), name


def test_killed_three_times_and_resumed_equals_an_uninterrupted_run(repo, tmp_path):
    assert sum(planned_jobs(repo, TARGET).values()) == N_JOBS
    began = time.monotonic()
    run(["snakemake", "--cores", "2", TARGET], repo)
    # a slow machine must not fail the test; a run waits 10x the uninterrupted run's wall for a job
    wait_s = max(300.0, 10 * (time.monotonic() - began))
    reference = output_hashes(repo)
    walls = rule_wall_seconds(repo)
    assert TARGET in reference and len([k for k in reference if k.startswith("results/features/")]) == 2 * len(MODELS)
    run(["snakemake", "--cores", "1", "--delete-all-output", TARGET], repo)
    assert not (repo / TARGET).exists()

    rng = random.Random(SEED)
    remaining = N_JOBS
    for i in range(3):
        # kill inside the m-th job to start, m < remaining: jobs finished before the kill all
        # started before it, so at least two jobs are left for the next run
        start = rng.randint(1, remaining - 1)
        done, killed = snakemake_killed_at(repo, start=start, fraction=rng.uniform(0.1, 0.6), walls=walls,
                                           log=tmp_path / f"killed{i}.log", wait_s=wait_s)
        assert killed >= 1, f"kill {i} (inside job {start} of the {remaining} left) interrupted no running job"
        assert not (repo / TARGET).exists()
        remaining -= done
        run(["snakemake", "--unlock"], repo)  # the killed run's lock stays behind
        assert sum(planned_jobs(repo, "--rerun-incomplete", TARGET).values()) == remaining
    resumed = run(["snakemake", "--cores", "2", "--rerun-incomplete", TARGET], repo)
    assert re.search(r"^Finished jobid", resumed.stdout + resumed.stderr, flags=re.MULTILINE)

    assert output_hashes(repo) == reference
    assert "Nothing to be done" in run(["snakemake", "-n", "--cores", "1", TARGET], repo).stdout
