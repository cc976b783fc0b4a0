"""DVC and Snakemake agree on what is stale.

- dvc.yaml's stage tracks params.yaml whole, so every top-level block (one missing: an edit DVC, `make repro` and
  `prh check-lock` call up to date while Snakemake plans jobs), and `dvc status` sees an edit of any block;
- byte-code caches are not part of the code dep;
- a library change reruns the jobs whose command runs that code, and only those (Snakemake's own `code` trigger
  sees only rule text);
- `prh check-lock` compares the code deps dvc.lock records too, and fails when there is nothing to compare.
"""

from __future__ import annotations

import json
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
    """The stage tracks params.yaml whole (``- params.yaml:``), not a second list of its keys that a new block could be
    missing from (sample_size was). A study may leave its block out of params.yaml (its schema then gives every value):
    the schemas are in the stage's ``workflow`` dep, so an edit of a default is seen too, and a block added later is
    part of params.yaml's."""
    stage = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["workflow"]
    assert stage["params"] == [{"params.yaml": None}], f"dvc.yaml lists params keys by hand: {stage['params']}"
    assert {"src/prh", "workflow", "Snakefile"} <= set(stage["deps"])


@pytest.fixture(scope="module")
def dvc_copy(tmp_path_factory):
    work = copy_repo(ROOT, tmp_path_factory.mktemp("dvc-agree") / "repo")
    run(["git", "init", "-q"], work)
    git_commit(work, "copy")
    run(["dvc", "init", "-q", "-f"], work)
    return work


def _edit_first_leaf(params: dict, block: str) -> str:
    """Set the first leaf of ``params[block]`` (the block itself when it is a scalar; else the first entry of each
    mapping or list down to a scalar) to a value no params.yaml holds; return its dotted path."""
    node, key, path = params, block, [block]
    while isinstance(node[key], (dict, list)) and node[key]:
        node, key = node[key], next(iter(node[key])) if isinstance(node[key], dict) else 0
        path.append(str(key))
    node[key] = "<edited by the test>"
    return ".".join(path)


def test_an_edit_of_any_block_of_params_yaml_changes_the_stage(dvc_copy):
    """The check above through DVC itself: with a dvc.lock of the stage as it is (empty outs,
    `dvc commit`, no run), the stage is up to date; an edit of one key in every top-level block of params.yaml makes
    `dvc status` name each block as a changed param (sample_size once went unnoticed: `make repro` did nothing).
    One status call for all the blocks: DVC names every changed tracked key, so a block it does not track is absent."""
    params_file = dvc_copy / "params.yaml"
    original = params_file.read_text()
    outs = [next(iter(o)) if isinstance(o, dict) else o
            for o in yaml.safe_load((dvc_copy / "dvc.yaml").read_text())["stages"]["workflow"]["outs"]]
    for out in outs:
        if Path(out).suffix:
            (dvc_copy / out).write_text("{}")
        else:
            (dvc_copy / out).mkdir(parents=True, exist_ok=True)
    try:
        run(["dvc", "commit", "-f", "-q"], dvc_copy)

        def status():
            return json.loads(run(["dvc", "status", "--json"], dvc_copy).stdout or "{}")

        assert status() == {}, "the stage is not up to date right after dvc commit"
        params = yaml.safe_load(original)
        edited = {block: _edit_first_leaf(params, block) for block in list(params)}
        params_file.write_text(yaml.safe_dump(params, sort_keys=False))
        changes = [c for c in status().get("workflow", []) if isinstance(c, dict) and "changed deps" in c]
        changed = changes[0]["changed deps"].get("params.yaml", {}) if changes else {}
        missed = {b: k for b, k in edited.items() if changed.get(b) != "modified"}
        assert not missed, f"dvc status does not see these edits (block: key): {missed}; it reports {changed}"
        assert set(changed) == set(edited)
    finally:
        params_file.write_text(original)
        (dvc_copy / "dvc.lock").unlink(missing_ok=True)


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


def _ast_imports(path: Path) -> list[tuple[str, bool]]:
    """What ``prh.cli._imports`` returns, from a walk of the whole syntax tree (the slow way it replaces)."""
    import ast

    from prh.cli import import_names

    return import_names(ast.walk(ast.parse(path.read_text())))


@pytest.mark.parametrize("package", ["src/prh"])
def test_the_import_lines_read_give_the_imports_of_the_syntax_tree(package):
    """The code hash reads only each file's import statements (a regular expression, then ``ast`` on those lines):
    over every file of the package they must be the imports a full syntax-tree walk finds, or a job would not rerun
    after an edit of a module it imports. A statement the expression misses fails here, naming the file."""
    from prh.cli import _imports

    files = sorted((ROOT / package).rglob("*.py"))
    assert len(files) > 100
    differ = {f.relative_to(ROOT).as_posix(): sorted(set(_ast_imports(f)) ^ set(_imports(f))) for f in files}
    assert {f: d for f, d in differ.items() if d} == {}


def test_an_import_the_line_reader_could_miss_is_found(tmp_path):
    """The shapes the expression must cover: parenthesised names over lines, a backslash continuation, an import
    indented in a function, and a docstring that only mentions an import (not one)."""
    from prh.cli import _imports

    path = tmp_path / "m.py"
    path.write_text('"""import prh.not_this"""\nfrom prh.metrics import (\n    knn,\n    engine,\n)\n'
                    "import prh.io, \\\n    prh.stats\ndef f():\n    from prh.data import shapes\n")
    got = {m for m, _ in _imports(path)}
    assert got == {m for m, _ in _ast_imports(path)} - {"prh.not_this"}
    assert {"prh.metrics.knn", "prh.metrics.engine", "prh.io", "prh.stats", "prh.data.shapes"} <= got


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
