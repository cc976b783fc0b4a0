"""Issue 22, run safety of the paper suite on a cluster: keep going past a failed job, a conda
environment that installs this package wherever Snakemake copies the env file, and a refusal to run
with unpinned hub revisions."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _snakemake_args(argv, cwd):
    """The options Snakemake's own command line parser makes of ``argv`` (profiles applied)."""
    from snakemake.cli import parse_args

    old = Path.cwd()
    os.chdir(cwd)
    try:
        return parse_args(argv)[1]
    finally:
        os.chdir(old)


# ---------------------------------------------------------------- keep going


def test_slurm_profile_keeps_going_after_a_failed_job():
    """One failed family (e.g. a tokenizer error) must not stop the other independent jobs of the run."""
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    assert profile.get("keep-going") is True
    args = _snakemake_args(["--profile", "profiles/slurm", "-n"], ROOT)
    assert args.keep_going is True and args.executor == "slurm"
