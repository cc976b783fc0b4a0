"""The paper suite, executed. Every rule of the paper DAG runs for real, offline, on the
stand-in hub (``prh standin-hub``: tiny random models, synthetic rows, the real formats), through the
same loaders, rules and commands as a run on the hub; only the cache location and sizes differ
(``presets/replay.yaml``). Its numbers mean nothing; what is checked is that the DAG runs:

- every rule the replay plans (the same rules as the 1,027-job paper plan: tests/test_replay_plan.py)
  ran at least one job, by its ``benchmark:`` files, and a second run plans nothing;
- every paper figure (PDF + PNG) and the report exist;
- ``make pull`` in a fresh clone, with paper results on a DVC remote, no network and an empty hub
  cache, touches and plans nothing (the pre-run checks do not refuse it).
"""

from __future__ import annotations

import json
import re

import pytest
import yaml
from test_workflow import copy_repo, git_commit, job_stats, planned_jobs, push_clone_pull, run, run_served

from prh.config import merge

pytestmark = pytest.mark.slow

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


@pytest.fixture(scope="module")
def replay(repo_root, tmp_path_factory):
    """A repository copy whose params.yaml is params.yaml + presets/replay.yaml with suite: paper, after
    building the stand-in hub in its own HF_HOME and running the whole DAG once (offline)."""
    work = copy_repo(repo_root, tmp_path_factory.mktemp("replay") / "repo")
    merged = merge(yaml.safe_load((work / "params.yaml").read_text()),
                   yaml.safe_load((work / "presets" / "replay.yaml").read_text()))
    # the shipped revisions are branches (`prh pin-revisions` needs the hub), and stand-ins are built at them
    merged.update(suite="paper", allow_unpinned=True)
    (work / "params.yaml").write_text(yaml.safe_dump(merged, sort_keys=False))
    # 8 pretend cards (prh.gpus): each GPU job claims its own ids, as on an 8-GPU machine, and runs on the CPU
    env = {**OFFLINE, "HF_HOME": str(work.parent / "standin_hf_home"), "PRH_FAKE_GPU_COUNT": "8",
           "PRH_GPU_LOCK_DIR": str(work.parent / "gpu_locks")}
    run(["prh", "standin-hub", "--downloads-root", "."], work, env=env)
    dry = run(["snakemake", "--dry-run", "--cores", "1"], work, env=env)  # one dry run: the job table and its jobs
    plan, benchmarks = job_stats(dry.stdout + dry.stderr), _benchmarks(dry.stdout + dry.stderr)
    run(["git", "init", "-q"], work)
    git_commit(work, "replay copy")
    run_served(["dvc", "repro"], work, env=env)  # dvc.yaml's one stage: snakemake --cores all, then the report
    return {"work": work, "plan": plan, "benchmarks": benchmarks, "env": env}


def _benchmarks(log: str) -> dict[str, list[str]]:
    """Rule -> the benchmark files of its planned jobs, from a dry run's job blocks."""
    found: dict[str, list[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", log):
        head = re.match(r"(?:local)?rule (\S+):\n", block)
        bench = re.search(r"^\s+benchmark: (\S+)$", block, re.M)
        if head:
            found.setdefault(head.group(1), []).extend([bench.group(1)] if bench else [])
    return found


def test_every_rule_of_the_paper_plan_ran(replay):
    """Each planned rule (tests/test_replay_plan.py: the paper plan's rules) left a benchmark file of a job."""
    work, benchmarks = replay["work"], replay["benchmarks"]
    assert set(benchmarks) == set(replay["plan"]) and len(benchmarks) > 50  # the ~60 rules, not a handful
    missing = sorted(rule for rule, files in benchmarks.items()
                     if rule != "all" and not any((work / f).is_file() for f in files))
    assert missing == [], f"rules that ran no job: {missing}"
    assert planned_jobs(replay["work"]) == {}  # a second run plans nothing


def test_the_preflight_ran_before_every_gpu_job_and_checked_the_stand_in_hub(replay):
    """The pre-flight is an input of every GPU rule (ancient), so it ran first; offline it checked the
    cache for the gated repos, the first row of every hub dataset and one batch per model family."""
    report = json.loads((replay["work"] / "results" / "preflight.json").read_text())
    assert report["online"] is False and len(report["gated"]) >= 5 and len(report["datasets"]) >= 20
    assert len(report["models"]) >= 10 and report["models"]["spread"].startswith("not run")
    first_gpu = min(p.stat().st_mtime for p in (replay["work"] / "results" / "features").rglob("*.safetensors"))
    assert (replay["work"] / "results" / "preflight.json").stat().st_mtime <= first_gpu


def test_every_gpu_job_claimed_its_own_cards(replay):
    """A GPU rule's job takes its cards (prh --gpus) before it runs: its log names them."""
    logs = sorted((replay["work"] / "results" / "logs" / "extract_language").rglob("*.log"))
    assert logs
    for log in logs:
        ids = re.findall(r"this job's GPUs: CUDA_VISIBLE_DEVICES=([\d,]+)", log.read_text())
        assert len(ids) == 1 and set(ids[0].split(",")) <= set(map(str, range(8))), log


def test_every_paper_figure_and_the_report_exist(replay):
    work = replay["work"]
    plots = [r for r in replay["plan"] if r.startswith("plot_")]
    figures = sorted((work / "results" / "figures").glob("*.pdf"))
    assert len(figures) >= len(plots) >= 25, (len(figures), len(plots))
    report = (work / "results" / "report.html").read_text()
    for pdf in figures:
        assert pdf.stat().st_size > 1000 and pdf.with_suffix(".png").stat().st_size > 1000, pdf
        assert pdf.with_suffix(".png").name in report or pdf.name in report, f"{pdf.name} is not in the report"


def test_stand_ins_say_what_they_are(replay):
    work = replay["work"]
    meta = yaml.safe_load((work / "results" / "data" / "wit_1024" / "meta.json").read_text())
    assert meta["repo"] == "minhuh/prh" and meta["count"] == 24
    summary = yaml.safe_load((work.parent / "standin_hf_home" / "standin-hub.json").read_text())
    assert "STAND-IN" in summary["note"] and len(summary["models"]) >= 60 and len(summary["datasets"]) >= 20


def test_make_pull_of_paper_results_offline_plans_nothing(replay, tmp_path):
    """`make pull` runs --touch --forceall: with the hub offline, an empty hub cache and paper params."""
    work = replay["work"]
    clone = push_clone_pull(work, tmp_path, env={**OFFLINE, "HF_HOME": str(tmp_path / "empty_hf_home")})
    assert sorted(p.name for p in (clone / "results" / "figures").iterdir()) == sorted(
        p.name for p in (work / "results" / "figures").iterdir())
    assert planned_jobs(clone) == {}
