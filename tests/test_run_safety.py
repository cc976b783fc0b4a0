"""Run safety of the paper suite on a cluster: keep going past a failed job, a conda
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


# ---------------------------------------------------------------- conda environment

FAKE_CONDA = """#!/bin/sh
# Stand-in for conda (not installed here): answers what Snakemake asks before planning, and records
# the PRH_PROJECT_ROOT that a post-deploy script started by Snakemake would see.
echo "${PRH_PROJECT_ROOT:-unset}" > "$(dirname "$0")/project_root.txt"
case "$*" in
  "info --json") echo '{"conda_prefix": "/nonexistent/conda", "platform": "linux-64"}' ;;
  "--version") echo "conda 24.7.1" ;;
  "config --get channel_priority --json") echo '{"get": {"channel_priority": "strict"}}' ;;
  *) echo "stand-in conda cannot: $*" >&2; exit 1 ;;
esac
"""
FAKE_PYTHON = """#!/bin/sh
# Stand-in for the new environment's python: records the arguments of `python -m pip ...`.
echo "$@" >> "$(dirname "$0")/python_calls.txt"
"""


def _stub(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_conda_env_file_holds_only_pins():
    """Snakemake creates the env from a copy in .snakemake/conda/: a relative path in it points elsewhere."""
    env = yaml.safe_load((ROOT / "envs" / "prh.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    bad = [p for p in pip if not __import__("re").fullmatch(r"[A-Za-z0-9_.\-]+==[^\s/]+", str(p))]
    assert not bad, f"envs/prh.yaml pip entries that are not exact pins: {bad}"
    assert (ROOT / "envs" / "prh.post-deploy.sh").is_file()  # Snakemake runs it inside the new env


@pytest.mark.parametrize("where", ["snakemake_copy", "beside_env_file"])
def test_post_deploy_script_installs_this_checkout_wherever_it_runs(tmp_path, where):
    fake_bin = tmp_path / "bin"
    _stub(fake_bin, "python", FAKE_PYTHON)
    script = ROOT / "envs" / "prh.post-deploy.sh"
    env = {"PATH": f"{fake_bin}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path)}
    if where == "snakemake_copy":  # as Snakemake runs it: a copy under the conda prefix, from the workdir
        copy = tmp_path / "prefix" / "5c9f41c2_.post-deploy.sh"
        copy.parent.mkdir()
        shutil.copy(script, copy)
        script = copy
        env["PRH_PROJECT_ROOT"] = str(ROOT)
    proc = subprocess.run(["sh", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    calls = (fake_bin / "python_calls.txt").read_text().split("\n")
    assert calls[0].split() == ["-m", "pip", "install", "--no-deps", "--editable", str(ROOT)]


def test_post_deploy_script_without_project_root_names_the_fix(tmp_path):
    copy = tmp_path / "prefix" / "x_.post-deploy.sh"
    copy.parent.mkdir()
    shutil.copy(ROOT / "envs" / "prh.post-deploy.sh", copy)
    _stub(tmp_path / "bin", "python", FAKE_PYTHON)
    proc = subprocess.run(["sh", str(copy)], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"})
    assert proc.returncode != 0 and not (tmp_path / "bin" / "python_calls.txt").exists()
    assert "PRH_PROJECT_ROOT" in proc.stderr and "pyproject.toml" in proc.stderr


def test_conda_dry_run_plans_with_the_env_and_exports_the_project_root(tmp_path):
    """`snakemake --sdm conda -n` in a copy of the workflow: plans, names the env, and the env's
    post-deploy script would see PRH_PROJECT_ROOT = the copy's root (conda itself is stubbed)."""
    work = tmp_path / "repo"
    for folder in ("workflow", "profiles", "envs"):
        shutil.copytree(ROOT / folder, work / folder)
    for name in ("Snakefile", "params.yaml", "pyproject.toml"):
        shutil.copy(ROOT / name, work / name)
    fake_bin = tmp_path / "bin"
    _stub(fake_bin, "conda", FAKE_CONDA)
    env = {**os.environ, "PATH": f"{fake_bin}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--sdm", "conda", "--cores", "1",
                           "results/experiments/color/nce.json"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "Conda environment envs/prh.yaml will be created." in log and "rule color_nce:" in log
    assert (fake_bin / "project_root.txt").read_text().strip() == str(work)


# ---------------------------------------------------------------- unpinned revisions


@pytest.fixture(scope="module")
def paper_copy(tmp_path_factory):
    """A copy of the workflow with the shipped params.yaml (its revisions are branches until pinned)."""
    work = tmp_path_factory.mktemp("pinned") / "repo"
    for folder in ("workflow", "profiles", "envs", "presets"):
        shutil.copytree(ROOT / folder, work / folder)
    for name in ("Snakefile", "params.yaml"):
        shutil.copy(ROOT / name, work / name)
    return work


def _real_run(work, *config):
    """`snakemake --cores 1` (no -n) of the paper suite, offline with an empty hub cache. The plan is the replay
    preset's (~130 jobs, not ~2,000): the checks read only the hub items, which the preset leaves as params.yaml
    has them (tests/test_prerun_checks.py, test_the_replay_preset_leaves_every_checked_hub_item)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HOME": str(work / "empty_hf_home"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", "--configfile", "presets/replay.yaml",
                           "--config", "suite=paper", *config],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


def test_real_paper_run_with_unpinned_revisions_stops_first_with_every_item(paper_copy):
    """Before any job, and before the hub-cache check: pinning needs network and renames what to download."""
    from prh.pin import unpinned_entries

    rc, log = _real_run(paper_copy)
    assert rc != 0 and "Finished jobid" not in log
    cfg = yaml.safe_load((paper_copy / "params.yaml").read_text())
    unpinned = unpinned_entries(cfg)
    assert f"{len(unpinned)} hub items have a revision that is not a commit SHA" in log
    for name, spec in cfg["paper"]["models"].items():  # URL checkpoints pin a SHA-256, random ones nothing
        assert (f"  paper.models.{name}: model " in log) == (spec.get("source") is None), name
    for name, spec in cfg["datasets"].items():
        assert (f"  datasets.{name}: dataset " in log) == (spec["kind"] == "hub" and spec["revision"] is not None
                                                           and not spec["repo"].startswith(".")), name
    assert "  paper.lm_score: dataset Skylion007/openwebtext" in log
    assert "  bridge.paper.config: model gpt2 at revision 'main'" in log
    assert "`prh pin-revisions params.yaml`" in log and "allow_unpinned: true" in log
    assert "not in the Hugging Face cache" not in log  # the cache check has not run yet


def test_allow_unpinned_lets_the_run_go_on_to_the_next_check(paper_copy):
    rc, log = _real_run(paper_copy, "allow_unpinned=True")
    assert rc != 0 and "Finished jobid" not in log
    assert "not a commit SHA" not in log
    assert "hub items of the paper suite are not in the Hugging Face cache" in log
