"""No string from the config reaches a shell unquoted.

The field list is generated from the schema (workflow/schemas): every string value that is not an enum, and every
key of a free mapping. Each field, at every place the replay (paper suite) and smoke (offline) configs set it, gets a
payload that writes a file when a shell expands it. A field either is refused (by the config check, or in one line
when the DAG loads), or the dry run plans with it; then every shell command the dry run prints is executed by bash
with every program stubbed out (the command substitutions run, nothing else does), and no file may appear."""

from __future__ import annotations

import copy
import itertools
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from test_workflow import copy_repo, run

from prh.checks import check_config
from prh.config import load_schema, merge
from prh.errors import PRHError

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "workflow" / "schemas"
PAYLOAD = "x$(echo>PWNED)`echo>PWNED`;echo>PWNED"
TAG = re.compile(r"p(\d+)x\$\(echo>PWNED\)")


def _resolve(ref: str, doc: str):
    file, _, fragment = ref.partition("#")
    file = file or doc
    node = load_schema(SCHEMAS / file)
    for part in filter(None, fragment.split("/")):
        node = node[part]
    return node, file


def string_fields(node, path=(), doc="params.schema.yaml", seen=frozenset()):
    """Paths of the schema's free strings: ``*`` an entry of a mapping, ``[]`` of a list, ``<key>`` a mapping's keys."""
    if not isinstance(node, dict):
        return
    if "$ref" in node:
        key = (doc, node["$ref"])
        if key not in seen:
            sub, file = _resolve(node["$ref"], doc)
            yield from string_fields(sub, path, file, seen | {key})
    types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    if "string" in types and "enum" not in node and "const" not in node:
        yield path
    for name, sub in (node.get("properties") or {}).items():
        yield from string_fields(sub, path + (name,), doc, seen)
    if isinstance(node.get("additionalProperties"), dict):
        yield path + ("<key>",)
        yield from string_fields(node["additionalProperties"], path + ("*",), doc, seen)
    for sub in (node.get("patternProperties") or {}).values():
        yield from string_fields(sub, path + ("*",), doc, seen)
    if isinstance(node.get("items"), dict):
        yield from string_fields(node["items"], path + ("[]",), doc, seen)
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key) or []:
            yield from string_fields(sub, path, doc, seen)
    for key in ("then", "else"):
        yield from string_fields(node.get(key), path, doc, seen)


FIELDS = sorted(set(string_fields(load_schema(SCHEMAS / "params.schema.yaml"))))


def _nodes(cfg, parts):
    nodes = [(None, None, cfg)]
    for part in parts:
        nxt = []
        for _, _, node in nodes:
            if part == "*" and isinstance(node, dict):
                nxt += [(node, k, v) for k, v in node.items()]
            elif part == "[]" and isinstance(node, list):
                nxt += [(node, i, v) for i, v in enumerate(node)]
            elif isinstance(node, dict) and part in node:
                nxt.append((node, part, node[part]))
        nodes = nxt
    return nodes


def set_payload(cfg: dict, path: tuple, make) -> int:
    """Put ``make()`` at every place ``cfg`` sets ``path`` (a string or null there, or a mapping's keys); how many."""
    if path[-1] == "<key>":
        maps = [node for _, _, node in _nodes(cfg, path[:-1]) if isinstance(node, dict)]
        for mapping in maps:
            for key in list(mapping):
                mapping[make()] = mapping.pop(key)
        return sum(map(len, maps))
    places = [(parent, key) for parent, key, value in _nodes(cfg, path)
              if parent is not None and (isinstance(value, str) or value is None)]
    for parent, key in places:
        parent[key] = make()
    return len(places)


def test_the_field_list_comes_from_the_schema():
    names = {".".join(p) for p in FIELDS}
    for field in ("paper.lm_score.split", "paper.lm_score.repo", "paper.models.*.revision", "datasets.*.config",
                  "zoo.vision.<key>", "results", "features.prompt_template"):
        assert field in names, field


def test_names_refuse_a_trailing_newline():
    """Python's ``$`` matches before a final newline: every schema pattern ends in ``\\Z``, and a name with a newline
    is refused (a zoo model "evil\\n" used to split its shell command)."""
    patterns = re.findall(r'pattern: "([^"]*)"', "".join(p.read_text() for p in SCHEMAS.glob("*.yaml")))
    assert patterns and all(p.endswith("\\\\Z") for p in patterns), patterns
    base = yaml.safe_load((ROOT / "params.yaml").read_text())
    for edit in (lambda c: c["zoo"]["vision"].update({"evil\n": next(iter(c["zoo"]["vision"].values()))}),
                 lambda c: c.update(results="results\n")):
        cfg = copy.deepcopy(base)
        edit(cfg)
        with pytest.raises(PRHError, match="not a valid name"):
            check_config(cfg)


@pytest.mark.parametrize("preset, extra", [("presets/replay.yaml", {"suite": "paper", "allow_unpinned": True}),
                                           ("tests/smoke/params.yaml", {})], ids=["replay", "smoke"])
def test_no_config_string_reaches_a_shell_unquoted(tmp_path, preset, extra):
    base = merge(merge(yaml.safe_load((ROOT / "params.yaml").read_text()),
                       yaml.safe_load((ROOT / preset).read_text())), extra)
    check_config(base)  # defaults filled: fields left at their default get the payload too
    count = itertools.count()
    accepted, refused = [], []
    for path in FIELDS:
        cfg = copy.deepcopy(base)
        if not set_payload(cfg, path, lambda: f"p{next(count)}{PAYLOAD}"):
            continue
        try:
            check_config(cfg)
            accepted.append(path)
        except PRHError:
            refused.append(path)
    assert len(accepted) > 20 and refused, (accepted, refused)

    work = copy_repo(ROOT, tmp_path / "repo")
    while True:  # all accepted fields at once; a field the DAG refuses in one line is dropped (it cannot run)
        cfg, owner = copy.deepcopy(base), {}
        for path in accepted:
            set_payload(cfg, path, lambda p=path: (owner.setdefault(n := next(count), p), f"p{n}{PAYLOAD}")[1])
        (work / "inject.yaml").write_text(yaml.safe_dump(cfg))
        proc = run(["snakemake", "-n", "-p", "--cores", "1", "--configfile", "inject.yaml"], work, check=False)
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out and 'File "' not in out, out[-3000:]
        if proc.returncode == 0:
            break
        named = {owner[int(n)] for n in TAG.findall(out) if int(n) in owner}
        assert named, f"the dry run failed naming no field:\n{out[-3000:]}"
        accepted = [p for p in accepted if p not in named]

    commands = [line.removeprefix("Shell command: ") for line in out.splitlines() if line.startswith("Shell command: ")]
    assert len(commands) > 20, out[-2000:]
    assert any(TAG.search(c) for c in commands), "no payload reached a shell command: the test tests nothing"
    sandbox = tmp_path / "sandbox"
    (sandbox / "no-programs").mkdir(parents=True)
    leaks = []
    for command in commands:
        for target in re.findall(r">\s*([^\s&|;]+)", command):
            (sandbox / target).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["/bin/bash", "-c", "command_not_found_handle() { return 0; }\n" + command], cwd=sandbox,
                       env={"PATH": str(sandbox / "no-programs")}, capture_output=True, timeout=60)
        if (sandbox / "PWNED").exists():
            leaks.append(command)
            (sandbox / "PWNED").unlink()
    assert not leaks, "config strings reach the shell unquoted:\n" + "\n".join(c[:600] for c in leaks)
