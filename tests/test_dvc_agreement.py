"""DVC and Snakemake agree on what is stale (issue 49).

- dvc.yaml's stage tracks every top-level block of params.yaml (one missing: an edit DVC, `make repro` and
  `prh check-lock` call up to date while Snakemake plans jobs);
- byte-code caches are not part of the code dep;
- a library change reruns the jobs whose command runs that code, and only those (Snakemake's own `code` trigger
  sees only rule text);
- `prh check-lock` compares the code deps dvc.lock records too, and fails when there is nothing to compare.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from test_workflow import copy_repo, git_commit, run

from prh.errors import ConfigError
from prh.lock import check_lock

ROOT = Path(__file__).resolve().parents[1]


def test_dvc_tracks_every_block_of_params_yaml():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["workflow"]
    tracked = {p for p in stage["params"] if isinstance(p, str)}
    assert not set(params) - tracked, f"dvc.yaml's params miss {sorted(set(params) - tracked)}"
    assert not tracked - set(params), f"dvc.yaml tracks keys params.yaml lacks: {sorted(tracked - set(params))}"
    assert {"src/prh", "workflow", "Snakefile"} <= set(stage["deps"])


@pytest.fixture(scope="module")
def dvc_copy(tmp_path_factory):
    work = copy_repo(ROOT, tmp_path_factory.mktemp("dvc-agree") / "repo")
    run(["git", "init", "-q"], work)
    git_commit(work, "copy")
    run(["dvc", "init", "-q", "-f"], work)
    return work


def test_byte_code_is_not_a_dep(dvc_copy):
    cache = dvc_copy / "src" / "prh" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "cli.cpython-311.pyc").write_bytes(b"\0")
    (dvc_copy / "src" / "prh" / "stray.pyc").write_bytes(b"\0")
    proc = run(["dvc", "check-ignore", "src/prh/__pycache__/cli.cpython-311.pyc", "src/prh/stray.pyc"], dvc_copy,
               check=False)
    assert proc.returncode == 0 and "stray.pyc" in proc.stdout, proc.stdout + proc.stderr
    assert run(["dvc", "check-ignore", "src/prh/cli.py"], dvc_copy, check=False).returncode != 0


def test_a_library_change_reruns_exactly_the_jobs_that_run_it(tmp_path):
    work = copy_repo(ROOT, tmp_path / "repo")
    env = {"PYTHONPATH": str(work / "src")}  # the rules' `prh` and the Snakefile read the copy's library
    target = ["results/data/shapes_eval/meta.json", "--cores", "1", "--configfile", "tests/smoke/params.yaml"]
    run(["snakemake", *target], work, env=env)

    def planned():
        out = run(["snakemake", "-n", *target], work, env=env)
        return "Nothing to be done" not in out.stdout + out.stderr

    assert not planned()
    with open(work / "src" / "prh" / "metrics" / "knn.py", "a") as f:  # the alignment's code, not the data's
        f.write("\n# edited\n")
    assert not planned()
    with open(work / "src" / "prh" / "data" / "shapes.py", "a") as f:  # what `prh make-shapes` runs
        f.write("\n# edited\n")
    assert planned()


def test_code_hash_follows_imports():
    from prh.cli import code_files

    names = {f.relative_to(ROOT / "src").as_posix() for f in code_files("align")}
    assert {"prh/metrics/knn.py", "prh/metrics/engine.py"} <= names
    assert not any("__pycache__" in n or n.startswith(("prh/studies/", "prh/plots/")) for n in names)
    assert "prh/cli.py" not in names  # the dispatcher: a new command must not rerun every job
    plots = {f.relative_to(ROOT / "src").as_posix() for f in code_files("plot")}
    assert "prh/plots/convergence.py" in plots  # loaded by name through the figure registry


@pytest.mark.skipif(shutil.which("dvc") is None, reason="needs dvc")
def test_check_lock_compares_the_code_too(tmp_path):
    """A tiny DVC project: after `dvc repro`, an edit of the code dep fails check-lock, naming the path."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "a.py").write_text("x = 1\n")
    (tmp_path / "params.yaml").write_text("seed: 0\n")
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"workflow": {
        "cmd": "echo done > out.txt", "deps": ["code"], "params": ["seed"], "outs": ["out.txt"]}}}))
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "repro", "-q"]):
        subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True)
    lock = str(tmp_path / "dvc.lock")
    assert check_lock(params=str(tmp_path / "params.yaml"), lock=lock) == ["workflow"]
    (tmp_path / "code" / "a.py").write_text("x = 2\n")
    with pytest.raises(ConfigError, match="workflow: code: modified since dvc.lock"):
        check_lock(params=str(tmp_path / "params.yaml"), lock=lock)


def test_make_push_writes_the_lock_before_it_pushes():
    """After a first `make figures` there is no dvc.lock and `dvc push` sends nothing: `make push` runs `dvc repro`
    first (it plans nothing for up-to-date results, and writes the lock), and the README says `make push`."""
    recipe = (ROOT / "Makefile").read_text().split("\npush:", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("dvc repro") < recipe.index("dvc push")
    assert "commit" not in recipe  # `dvc commit` would certify results nobody checked against params and code
    assert "make push" in (ROOT / "README.md").read_text()


def test_the_effective_config_is_recorded_and_compared_after_a_pull(tmp_path):
    """dvc.lock records params.yaml alone: results built with a preset (`make replicate`) were stamped as params.yaml's.
    The run records its effective config (a DVC out, a target of every run) and `make pull` compares it."""
    from prh.checks import check_config
    from prh.config import load, merge
    from prh.io import write_json
    from prh.lock import check_effective

    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["workflow"]
    assert any("results/config.json" in out for out in stage["outs"])
    recipe = (ROOT / "Makefile").read_text().split("\npull:", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("dvc pull") < recipe.index("check-lock --effective results/config.json") < recipe.index("--touch")

    params = str(ROOT / "params.yaml")
    recorded = tmp_path / "config.json"
    assert check_effective(str(recorded), params=params) is False  # results from before it was recorded
    write_json(recorded, check_config(load(params)))
    assert check_effective(str(recorded), params=params)
    preset = ROOT / "presets" / "replicate.yaml"
    write_json(recorded, check_config(merge(load(params), load(preset))))
    with pytest.raises(ConfigError, match=r"claims\.replicates: \[.*\] in config\.json, \[\] now"):
        check_effective(str(recorded), params=params)
    assert check_effective(str(recorded), params=params, configfiles=[str(preset)])  # pulled with the same layers
