"""One set of GPUs per job on one machine (prh.gpus), exercised on the CPU with pretend cards."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from prh.errors import ConfigError
from prh.gpus import FAKE_COUNT_ENV, LOCK_DIR_ENV, check_cuda, claim, release, visible_pool

ROOT = Path(__file__).resolve().parents[1]
HOLD = ("import os, sys, time; print(os.environ.get('CUDA_VISIBLE_DEVICES', ''), flush=True); "
        "time.sleep(float(sys.argv[1]))")


def _env(tmp_path, count=4, **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")}
    return {**env, FAKE_COUNT_ENV: str(count), LOCK_DIR_ENV: str(tmp_path / "locks"), **extra}


def _job(env, gpus, seconds):
    """A GPU job as a rule runs it: prh --gpus N -- <program> (here a Python that prints its cards and sleeps)."""
    return subprocess.Popen(["prh", "--gpus", str(gpus), "--", sys.executable, "-c", HOLD, str(seconds)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_concurrent_jobs_get_disjoint_cards_and_a_third_waits_for_one_to_finish(tmp_path):
    env = _env(tmp_path, count=4)
    a = _job(env, 2, 600)  # holds its cards from its first line until it is killed below
    try:
        ids_a = set(a.stdout.readline().strip().split(","))
        b = _job(env, 2, 0)
        ids_b = set(b.stdout.readline().strip().split(","))
        c = _job(env, 1, 0)  # 4 cards, 4 held while b runs: c waits for b, and can never get one of a's
        assert b.wait(timeout=600) == 0
        third = c.stdout.readline().strip()
        assert c.wait(timeout=600) == 0
    finally:
        a.kill()
    assert len(ids_a) == len(ids_b) == 2 and not ids_a & ids_b and ids_a | ids_b == {"0", "1", "2", "3"}
    assert third in ids_b
    assert "this job's GPUs: CUDA_VISIBLE_DEVICES=" in a.communicate()[1]


def test_a_killed_job_frees_its_cards(tmp_path):
    env = _env(tmp_path, count=1)
    a = _job(env, 1, 600)
    assert a.stdout.readline().strip() == "0"
    a.kill()
    a.wait()
    b = _job(env, 1, 0)
    assert b.stdout.readline().strip() == "0" and b.wait(timeout=600) == 0


def test_pool_is_cuda_visible_devices_and_slurm_jobs_claim_nothing(tmp_path):
    env = {LOCK_DIR_ENV: str(tmp_path), "CUDA_VISIBLE_DEVICES": "2, 5"}
    assert visible_pool(env) == ["2", "5"]
    try:
        assert claim(1, environ=env) == ["2"] and env["CUDA_VISIBLE_DEVICES"] == "2"
    finally:
        release()
    slurm = {"SLURM_JOB_ID": "7", "CUDA_VISIBLE_DEVICES": "0"}  # the scheduler gave the job its card
    assert claim(1, environ=slurm) == [] and slurm["CUDA_VISIBLE_DEVICES"] == "0"
    assert claim(0, environ={}) == []


def test_too_few_cards_and_bad_flags_are_one_line_errors(tmp_path):
    env = _env(tmp_path, count=2)
    for args, message in ((["--gpus", "3", "check-config"], "needs 3 GPU(s) but the machine has 2 (PRH_FAKE_GPU_COUNT=2)"),
                          (["--gpus", "x", "check-config"], "--gpus needs a whole number")):
        proc = subprocess.run(["prh", *args], env=env, capture_output=True, text=True)
        assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="whole number of pretend GPUs"):
        visible_pool({FAKE_COUNT_ENV: "two"})


def test_a_gpu_job_without_cuda_fails_at_once_naming_driver_and_cuda_build(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError) as err:
        check_cuda(1, environ={})
    text = str(err.value)
    assert f"built for CUDA {torch.version.cuda}" in text and "NVIDIA driver:" in text and "device: cpu" in text
    check_cuda(0, environ={})  # a CPU job asks nothing
    check_cuda(2, environ={FAKE_COUNT_ENV: "2"})  # pretend cards run on the CPU by design


def test_every_rule_that_asks_for_gpus_claims_them():
    """A rule with a gpu resource runs `prh --gpus {resources.gpu} ...` (use-rule copies inherit the shell)."""
    for smk in (ROOT / "workflow" / "rules").glob("*.smk"):
        for block in re.split(r"\n(?=(?:use )?rule )", smk.read_text()):
            if not re.search(r"^\s+gpu=", block, re.M) or block.startswith("use rule"):
                continue
            shell = block[block.index("shell:"):]
            assert "prh --gpus {resources.gpu} " in shell, f"{smk.name}: {block.splitlines()[0]} claims no GPUs"


def test_the_8_gpu_preset_runs_lte_as_one_8_rank_torchrun_holding_8_cards(tmp_path):
    """presets/paper_8gpu.yaml: lte_paper asks for 8 cards on one node, claims them, and launches torchrun locally."""
    for folder in ("workflow", "profiles", "presets"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    # --until lte_paper: the plan up to the LTE jobs, not the other ~2,000 (half the CPU of the dry run)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--dry-run", "--printshellcmds", "--cores", "8",
                           "--configfile", "presets/paper_8gpu.yaml", "--config", "suite=paper", "--until", "lte_paper"],
                          cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    blocks = [b for b in re.split(r"\n(?=rule \S+:\n)", proc.stdout) if b.startswith("rule lte_paper:")]
    assert blocks
    for block in blocks:
        assert re.search(r"^\s+resources: .*\bgpu=8\b", block, re.M)
        assert "prh --gpus 8 -- torchrun --standalone --nproc_per_node 8 -m prh.cli run-lte" in block
        assert "srun" not in block
