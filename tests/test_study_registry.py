"""The studies are their packages' manifests, and every list of studies is derived from them: the ledger's
``STUDIES``, the Snakefile's includes of the rule files (tests/test_layout.py reads that order), the study blocks of
params.schema.yaml and the study commands of ``prh``. A new study adds its own files and extends no list."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from prh import cli
from prh.config import SCHEMA, load, load_schema, validate_schema
from prh.errors import ConfigError
from prh.manifest import STUDIES_DIR, study_commands, study_names
from prh.studies.ledger import STUDIES

ROOT = Path(__file__).resolve().parents[1]


def _manifest(root: Path, name: str, order, **extra) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "manifest.yaml").write_text(yaml.safe_dump({"name": name, "order": order, "commands": [], **extra}))


def test_the_studies_are_the_packages_with_a_manifest_in_their_declared_order():
    assert STUDIES == study_names()
    assert set(STUDIES) == {p.parent.name for p in STUDIES_DIR.glob("*/manifest.yaml")}
    orders = [yaml.safe_load((STUDIES_DIR / s / "manifest.yaml").read_text())["order"] for s in STUDIES]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)


def test_the_order_is_each_manifest_s_and_is_checked(tmp_path):
    _manifest(tmp_path / "a", "late", 20)
    _manifest(tmp_path / "a", "early", 10)
    _manifest(tmp_path / "a", "middle", 15)
    assert study_names(tmp_path / "a") == ("early", "middle", "late")  # not the folders' alphabetical order
    _manifest(tmp_path / "b", "one", 10)
    _manifest(tmp_path / "b", "two", 10)
    with pytest.raises(ValueError, match="studies one and two both declare order 10"):
        study_names(tmp_path / "b")
    _manifest(tmp_path / "c", "unordered", None)
    with pytest.raises(ValueError, match="`order`"):
        study_names(tmp_path / "c")
    _manifest(tmp_path / "d", "folder", 1)
    (tmp_path / "d" / "folder" / "manifest.yaml").write_text("name: other\norder: 1\ncommands: []\n")
    with pytest.raises(ValueError, match="not its package's"):
        study_names(tmp_path / "d")


def test_prh_lists_each_study_command_from_its_manifest():
    declared = study_commands()
    assert declared, "the manifests declare commands"
    for stage, name, target, summary in declared:
        assert cli.STAGES[stage][name] == (target, summary) and cli.COMMANDS[name] == target
        module, func = target.split(":")
        assert callable(getattr(__import__(module, fromlist=[func]), func)), target
    assert set(cli.STAGES["studies"]) == {name for stage, name, *_ in declared if stage == "studies"}
    usage = cli.usage()
    assert all(f"  {name} " in usage for _, name, *_ in declared)


def test_a_command_declared_twice_is_refused(monkeypatch):
    import prh.manifest

    twice = [("studies", "run-x", "prh.studies.ledger:main", "x"), ("data", "run-x", "prh.studies.ledger:main", "y")]
    monkeypatch.setattr(prh.manifest, "study_commands", lambda: twice)
    cli.stages.cache_clear()
    try:
        with pytest.raises(ValueError, match="run-x is declared twice"):
            cli.stages()
        monkeypatch.setattr(prh.manifest, "study_commands", lambda: [("nowhere", "run-y", "m:f", "z")])
        cli.stages.cache_clear()
        with pytest.raises(ValueError, match="no stage 'nowhere'"):
            cli.stages()
    finally:
        monkeypatch.undo()
        cli.stages.cache_clear()
        cli.commands.cache_clear()


def test_a_library_command_starts_without_reading_the_manifests():
    """Every job runs `prh`: a command of prh.cli's own list dispatches before the manifests are parsed."""
    code = ("import sys; from prh import cli; from prh import manifest as m\n"
            "try:\n    cli.main(['bench-summary', '--help'])\nexcept SystemExit:\n    pass\n"
            "print(m._documents.cache_info().currsize, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert proc.stderr.strip().splitlines()[-1] == "0", proc.stderr


def test_the_root_schema_holds_each_study_block_from_the_registry(tmp_path):
    written = yaml.safe_load(SCHEMA.read_text())["properties"]
    assert not set(written) & set(STUDIES), "a study's block in params.schema.yaml by hand"
    root = load_schema(SCHEMA)
    for name in STUDIES:
        assert root["properties"][name] == {"$ref": f"{name}.schema.yaml", "default": {}}
        assert (SCHEMA.parent / f"{name}.schema.yaml").exists()
    # written by hand as well: refused, so the registry stays the one list
    copy = tmp_path / SCHEMA.name
    doc = yaml.safe_load(SCHEMA.read_text())
    doc["properties"][STUDIES[0]] = {"$ref": f"{STUDIES[0]}.schema.yaml"}
    copy.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match=f"{STUDIES[0]} are studies"):
        load_schema(copy)


@pytest.mark.parametrize("name", STUDIES)
def test_a_study_without_a_block_in_params_yaml_gets_its_schema_defaults(name):
    """A study whose schema gives every default needs no params.yaml block: the schema fills it."""
    full = validate_schema(load(ROOT / "params.yaml"))
    schema = load_schema(SCHEMA.parent / f"{name}.schema.yaml")
    if schema.get("required"):
        pytest.skip(f"{name}'s schema requires {schema['required']}")
    params = load(ROOT / "params.yaml")
    given = params.pop(name, None)
    filled = validate_schema(params)
    assert name in filled
    if not given:  # params.yaml says nothing the schema does not (e.g. `sample_size: {}`)
        assert filled[name] == full[name]
