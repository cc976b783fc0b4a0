"""The studies are their packages' manifests, and the lists of studies are derived from them: the ledger's
``STUDIES``, the Snakefile's includes of the rule files (tests/test_layout.py reads that order) and the study commands
of ``prh``. params.schema.yaml's study blocks stay written in the file, since Snakemake's ``validate()`` reads it as
written; they are checked here against the manifests, so a study added or removed names the block to add or remove."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from prh import cli
from prh.config import SCHEMA, load, load_schema, validate_schema
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


def _study_block_problems(properties: dict, studies) -> list[str]:
    """What params.schema.yaml's ``properties`` lack or hold beyond the studies' blocks: each study needs
    ``<name>: {$ref: "<name>.schema.yaml", default: {}}``; a block named after what only a study has (a folder in
    src/prh/studies/ or workflow/report/) that is no study (no manifest.yaml), or a study's schema under another key,
    is one too many. (The library's blocks, cluster to world, have neither folder.)"""
    problems = []
    for name in studies:
        want = {"$ref": f"{name}.schema.yaml", "default": {}}
        if name not in properties:
            problems.append(f"study {name} has no block in {SCHEMA.name}: add `{name}:` with "
                            f'`$ref: "{name}.schema.yaml"` and `default: {{}}` under its properties')
        elif properties[name] != want:
            problems.append(f"study {name}'s block in {SCHEMA.name} is {properties[name]}; write {want}")
    leftovers = {p.name for d in (STUDIES_DIR, ROOT / "workflow" / "report") for p in d.iterdir()
                 if p.is_dir() and p.name != "__pycache__"}
    for key, block in properties.items():
        ref = (block or {}).get("$ref", "") if isinstance(block, dict) else ""
        if key in studies:
            continue
        if key in leftovers:
            problems.append(f"{SCHEMA.name} has a block `{key}:` but src/prh/studies/{key}/ has no manifest.yaml, so "
                            f"{key} is no study: remove the block, or add src/prh/studies/{key}/manifest.yaml")
        elif ref.removesuffix(".schema.yaml") in studies:
            problems.append(f"{SCHEMA.name}: `{key}:` refers to the study schema {ref}; a study's block is its own name")
    return problems


def test_the_root_schema_holds_a_block_for_each_study_of_the_manifests():
    """Snakemake's validate() reads params.schema.yaml as written, so each study's block is written there (the one
    shared edit of a study's settings); this keeps that list equal to the manifests' (prh.manifest.study_names)."""
    properties = yaml.safe_load(SCHEMA.read_text())["properties"]
    problems = _study_block_problems(properties, STUDIES)
    assert not problems, "\n".join(problems)
    for name in STUDIES:
        assert (SCHEMA.parent / f"{name}.schema.yaml").exists(), f"{name}: workflow/schemas/{name}.schema.yaml"
    assert load_schema(SCHEMA)["properties"] == properties  # prh.config validates the same file, adding nothing


def test_a_missing_or_extra_study_block_is_named():
    properties = yaml.safe_load(SCHEMA.read_text())["properties"]
    missing = {k: v for k, v in properties.items() if k != STUDIES[-1]}
    assert _study_block_problems(missing, STUDIES) == [
        f"study {STUDIES[-1]} has no block in {SCHEMA.name}: add `{STUDIES[-1]}:` with "
        f'`$ref: "{STUDIES[-1]}.schema.yaml"` and `default: {{}}` under its properties']
    no_default = {**properties, STUDIES[0]: {"$ref": f"{STUDIES[0]}.schema.yaml"}}
    assert "write" in _study_block_problems(no_default, STUDIES)[0]
    # a block left behind by a study whose manifest is gone
    extra = _study_block_problems(properties, STUDIES[:-1])
    assert len(extra) == 1 and f"src/prh/studies/{STUDIES[-1]}/ has no manifest.yaml" in extra[0], extra


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
    # the Snakefile's second pass, Snakemake's validate() (set_default=True), accepts it and changes nothing
    from snakemake.utils import validate

    before = copy.deepcopy(filled)
    validate(filled, schema=str(SCHEMA))
    assert filled == before
    # alone, it fills the block's `default: {}` (the nested defaults are prh.config's to fill)
    del before[name]
    validate(before, schema=str(SCHEMA))
    assert before[name] == {}
