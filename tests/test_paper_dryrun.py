"""The paper suite on a SLURM cluster, planned without one.

A dry run of the full DAG with ``--profile profiles/slurm --config suite=paper``
(the default target and the suite's two alignments) must plan one GPU job per
(model, dataset) for feature extraction, one LM-score job per language model, and every planned job
must fit a partition of the profile's ``partitions.yaml``: GPU jobs the GPU partition,
the rest the CPU partition (decided by the executor plugin's own partition scoring).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _params() -> dict:
    """params.yaml as the workflow sees it: the schema's defaults filled in (params.yaml leaves them out)."""
    from prh.checks import check_config
    from prh.config import load

    return check_config(load(ROOT / "params.yaml"))


BIN = Path(sys.executable).parent
FEATURES = re.compile(r"results/features/([^/\s,]+)/([^/\s,]+)\.safetensors")


def _jobs(text: str) -> list[dict]:
    """The jobs of a dry run's log: rule, outputs, resources (one dict per job block)."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", text):
        head = re.match(r"(?:local)?rule (\S+):\n", block)
        if not head:
            continue
        out = re.search(r"^\s+output: (.*)$", block, re.M)
        res = re.search(r"^\s+resources: (.*)$", block, re.M)
        resources = {}
        for item in (res.group(1).split(", ") if res else []):
            key, _, value = item.partition("=")
            resources[key] = int(value) if value.isdigit() else value
        jobs.append({"rule": head.group(1), "output": out.group(1) if out else "", "resources": resources})
    return jobs


def _copy_workflow(tmp):
    """The workflow (Snakefile, params.yaml, workflow/, profiles/) copied into ``tmp``; returns ``tmp``."""
    for folder in ("workflow", "profiles"):
        shutil.copytree(ROOT / folder, tmp / folder)
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(ROOT / name, tmp / name)
    return tmp


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    """Dry-run log of the paper suite with the SLURM profile, in a copy of the workflow."""
    tmp = _copy_workflow(tmp_path_factory.mktemp("paper"))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    cfg = _params()
    suite, metric = cfg["suites"]["paper"], cfg["alignment"]["metric"]
    # the default target, plus the two alignments the paper's figures 2 and 3 rest on
    targets = [
        "all",
        f"results/alignment/{suite['vision_dataset']}/{metric}/{suite['vision_models']}__{suite['vision_models']}.json",
        f"results/alignment/{suite['paired_dataset']}/{metric}/{suite['language_models']}__{suite['vision_models']}.json",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--dry-run", "--profile", "profiles/slurm",
         "--config", "suite=paper", "--", *targets],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    return log


def test_one_gpu_job_per_model_and_dataset(plan):
    cfg = _params()
    suite, sets = cfg["suites"]["paper"], cfg["model_sets"]
    expected = {(suite["vision_dataset"], m) for m in sets[suite["vision_models"]]}
    expected |= {(suite["paired_dataset"], m) for m in sets[suite["vision_models"]] + sets[suite["language_models"]]}

    extraction = [j for j in _jobs(plan) if FEATURES.search(j["output"])]
    pairs = [FEATURES.search(j["output"]).groups() for j in extraction]
    assert len(pairs) == len(set(pairs)), "a (dataset, model) pair is extracted by more than one job"
    assert expected <= set(pairs), f"missing extraction jobs: {sorted(expected - set(pairs))[:5]}"
    for j in extraction:
        assert j["resources"].get("gpu", 0) >= 1, f"{j['rule']} for {j['output']} asks for no GPU"
        assert j["resources"]["mem_mb"] > 0 and j["resources"]["runtime"] > 0


def test_lm_score_planned_per_language_model(plan):
    cfg = _params()
    lms = set(cfg["model_sets"][cfg["suites"]["paper"]["language_models"]]) | set(cfg["model_sets"]["prh_test_language"])
    scored = {Path(j["output"]).stem for j in _jobs(plan) if j["rule"] == "lm_score"}
    assert scored == lms
    assert all(j["resources"]["gpu"] >= 1 for j in _jobs(plan) if j["rule"] == "lm_score")


def test_every_job_fits_a_partition(plan):
    """The plugin's partition scoring sends GPU jobs to `gpu` and the rest to `cpu`."""
    from snakemake_executor_plugin_slurm.partitions import (
        get_best_partition,
        read_partition_file,
    )
    from snakemake_executor_plugin_slurm.utils import set_gres_string

    partitions = read_partition_file(ROOT / "profiles" / "slurm" / "partitions.yaml")
    logger = SimpleNamespace(debug=lambda *a: None, info=lambda *a: None, warning=lambda *a: None)
    jobs = [j for j in _jobs(plan) if j["rule"] != "all"]
    assert jobs
    for j in jobs:
        # what the plugin reads of a Snakemake job: name, threads, resources
        job = SimpleNamespace(name=j["rule"], threads=1, resources=j["resources"])
        want = "gpu" if j["resources"].get("gpu", 0) else "cpu"
        assert get_best_partition(partitions, job, logger) == want, j
        if want == "gpu":
            assert set_gres_string(job).strip() == f"--gpus={j['resources']['gpu']}"


def test_fig4_scores_and_aligns_every_fig4_language_model(plan):
    """Fig 4 once aligned only the 4 scored models of prh_val_language (n = 4). Before the offline replay its
    scores came from a CSV of mixed settings with 8 empty rows; now every Fig 4 LM gets one harness job."""
    cfg = _params()
    down, suite, metric = cfg["downstream"], cfg["suites"]["paper"], cfg["alignment"]["metric"]
    xset, yset = down["language_models"]["paper"], down["vision_models"]["paper"]
    fig4 = set(cfg["model_sets"][xset])
    assert len(fig4) == 20
    jobs = _jobs(plan)
    harness = {Path(j["output"]).stem for j in jobs if j["rule"] == "downstream_harness"}
    assert harness == fig4
    merge = [j for j in jobs if j["rule"] == "downstream_harness_merge"]
    assert len(merge) == 1
    extracted = {FEATURES.search(j["output"]).groups() for j in jobs if FEATURES.search(j["output"])}
    assert {(suite["paired_dataset"], m) for m in fig4} <= extracted
    out = f"results/alignment/{suite['paired_dataset']}/{metric}/{xset}__{yset}.json"
    assert any(j["rule"] == "align" and j["output"] == out for j in jobs), f"no align job writes {out}"
    assert down["strongest_vision"] in cfg["model_sets"][yset]
    # the bits-per-byte of every Fig-4 model colours its point: one lm_score job each
    assert fig4 <= {Path(j["output"]).stem for j in jobs if j["rule"] == "lm_score"}


def test_probe_vtab_is_one_job_per_task_and_a_gather(plan):
    """The ~4-5 CPU-hour probe_vtab became one job per VTAB task plus a cheap gather."""
    cfg = _params()
    tasks = {n[len("vtab_"):-len("_train")] for n in cfg["datasets"] if n.startswith("vtab_") and n.endswith("_train")}
    jobs = _jobs(plan)
    per_task = {Path(j["output"]).stem: j for j in jobs if j["rule"] == "probe_vtab_task"}
    assert set(per_task) == tasks and len(tasks) == 19
    assert all(j["resources"]["runtime"] <= 60 and j["resources"].get("gpu", 0) == 0 for j in per_task.values())
    gather = [j for j in jobs if j["rule"] == "probe_vtab"]
    assert len(gather) == 1 and gather[0]["resources"]["runtime"] <= 10


def test_dry_run_prints_gpu_hours_reserved_and_estimated(plan):
    table = plan[plan.index("GPU-hours of the planned jobs"):]
    rows = {m.group(1).strip(): (int(m.group(2)), float(m.group(3)), float(m.group(4)))
            for m in re.finditer(r"^(\S[^\n]*?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)", table, re.M)}
    gpu_jobs = [j for j in _jobs(plan) if j["resources"].get("gpu", 0)]
    assert rows["total"][0] == len(gpu_jobs)
    # lte_paper asks for its GPUs per node and holds every node's
    nnodes = _params()["lte"]["paper"]["nnodes"]
    reserved = sum(j["resources"]["gpu"] * j["resources"]["runtime"] * (nnodes if j["rule"] == "lte_paper" else 1)
                   for j in gpu_jobs) / 60
    assert rows["total"][1] == pytest.approx(reserved, abs=0.1)
    for family in ("extract_vision", "extract_language", "lm_score"):
        assert 0 < rows[family][2] < rows[family][1], family  # estimated use below the reservation


@pytest.fixture(scope="module")
def paper_copy(tmp_path_factory):
    return _copy_workflow(tmp_path_factory.mktemp("paper_copy"))


def test_gpu_count_follows_the_configured_card_memory(paper_copy):
    """cluster.gpu_memory_gb drives both the job's GPUs and --device-map auto (one formula)."""
    tmp_path = paper_copy
    (tmp_path / "cards.yaml").write_text("cluster: {gpu_memory_gb: 40}\n")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    targets = [f"results/experiments/lm_score/{m}.json" for m in ("llama3-70b", "llama-30b", "bloomz-560m")]
    found = {}
    for cards, extra in ((80, []), (40, ["--configfile", "cards.yaml"])):
        proc = subprocess.run([sys.executable, "-m", "snakemake", "--dry-run", "--printshellcmds", "--profile", "profiles/slurm",
                               *extra, "--config", "suite=paper", "--", *targets],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        log = proc.stdout + proc.stderr
        assert proc.returncode == 0, log[-4000:]
        for block in re.split(r"\n(?=(?:local)?rule \S+:\n)", log):
            out = re.search(r"results/experiments/lm_score/(\S+)\.json", block)
            gpu = re.search(r"^\s+resources: .*\bgpu=(\d+)", block, re.M)
            if block.startswith("rule lm_score:") and out and gpu:
                found[cards, out.group(1)] = (int(gpu.group(1)), "--device-map auto" in block)
    assert found == {(80, "llama3-70b"): (3, True), (80, "llama-30b"): (1, False), (80, "bloomz-560m"): (1, False),
                     (40, "llama3-70b"): (5, True), (40, "llama-30b"): (2, True), (40, "bloomz-560m"): (1, False)}


def test_plan_cost_command_saves_the_dry_runs_table(paper_copy):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(BIN / "prh"), "plan-cost", "--json", "cost.json", "--", "--profile", "profiles/slurm",
                           "--config", "suite=paper", "--", "results/experiments/lm_score/llama3-70b.json"],
                          cwd=paper_copy, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    cost = json.loads((paper_copy / "cost.json").read_text())
    # one job: 3 GPUs x its time limit, twice its estimate at the plan's rates (the fixed 30 + 70.55 minutes
    # is the floor)
    from prh.cluster import runtime_minutes

    cfg = _params()
    cfg["suite"] = "paper"
    limit = runtime_minutes(rule="lm_score", wildcards={"model": "llama3-70b"}, config=cfg, results=paper_copy / "results",
                            floor=100)
    lm = cost["families"]["lm_score"]
    assert limit > 100 and lm["gpu_jobs"] == 1 and lm["reserved_gpu_h"] == pytest.approx(3 * limit / 60)
    assert 0 < lm["estimated_gpu_h"] < lm["reserved_gpu_h"]
    assert set(cost["families"]) == {"lm_score", "preflight"}  # the pre-flight comes before any GPU job
    assert "lm_score" in proc.stdout and "reserved" in proc.stdout
