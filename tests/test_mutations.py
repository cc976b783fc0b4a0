"""Seeded mutations of params.yaml: every one either plans, or fails before any job with one line that
names the key. No traceback, no job started.

200 mutations drawn with a fixed seed: a value of another type, a value out of range, a name that refers to nothing
or has characters a name may not have, a list entry duplicated, a key deleted. Each is written over params.yaml in a
copy of the repository and planned through Snakemake's own API in this process (a dry run: no job can start), which
runs the Snakefile exactly as `snakemake -n` does, at about a third of the cost of a subprocess. The Snakefile turns a
user error into SystemExit(one line); anything else escaping is a defect and fails the test with its mutation.
"""

from __future__ import annotations

import copy
import os
import random
import re
from pathlib import Path

import pytest
import yaml
from test_workflow import copy_repo

ROOT = Path(__file__).resolve().parents[1]
N_MUTATIONS = 200
SEED = int(os.environ.get("PRH_MUTATION_SEED", 37))  # another seed explores further (CI uses 37)
OPS = ("type", "range", "name", "duplicate", "delete")
OTHER_TYPES = ["text", 7, 0.5, True, None, [1, 2], {"a": 1}]
OUT_OF_RANGE = [-1, 0, -0.5, 10**9, 1e12]
BAD_NAMES = ["no_such_name", "bad name;x"]
# libyaml writes each mutated params.yaml: the pure-Python dumper took 0.033 CPU-s a mutation, libyaml 0.008
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def nodes(value, path=()):
    """Every (path, value) below the root, containers included."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield path + (k,), v
            yield from nodes(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield path + (i,), v
            yield from nodes(v, path + (i,))


def _set(cfg, path, value):
    node = cfg
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value


def _delete(cfg, path):
    node = cfg
    for p in path[:-1]:
        node = node[p]
    del node[path[-1]]


def mutate(cfg: dict, rng: random.Random) -> tuple[dict, str, tuple]:
    """One mutation of ``cfg``: (the mutated copy, a description, the path it touched)."""
    new = copy.deepcopy(cfg)
    every = list(nodes(new))
    while True:
        op = rng.choice(OPS)
        if op == "type":
            path, value = rng.choice([(p, v) for p, v in every if not isinstance(v, (dict, list))])
            repl = rng.choice([t for t in OTHER_TYPES if type(t) is not type(value)])
        elif op == "range":
            cands = [(p, v) for p, v in every if isinstance(v, (int, float)) and not isinstance(v, bool)]
            path, value = rng.choice(cands)
            repl = rng.choice([r for r in OUT_OF_RANGE if r != value])
        elif op == "name":
            cands = [(p, v) for p, v in every if isinstance(v, str) and re.fullmatch(r"[A-Za-z][\w.-]*", v)]
            path, value = rng.choice(cands)
            repl = rng.choice(BAD_NAMES + [value + "_"])
        elif op == "duplicate":
            cands = [(p, v) for p, v in every if isinstance(v, list) and v]
            if not cands:
                continue
            path, value = rng.choice(cands)
            repl = value + [value[0]]
        else:
            cands = [(p, v) for p, v in every if not isinstance(p[-1], int)]
            path, value = rng.choice(cands)
            _delete(new, path)
            return new, f"delete {'.'.join(map(str, path))}", path
        _set(new, path, repl)
        return new, f"{op}: {'.'.join(map(str, path))} = {repl!r} (was {value!r})", path


def plan(repo: Path) -> str | None:
    """Dry-run the workflow in ``repo`` through Snakemake's API; None when it plans, else the SystemExit message."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.enums import Quietness
    from snakemake.settings.types import DAGSettings, OutputSettings, ResourceSettings

    cwd = os.getcwd()
    try:
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            wf = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=repo / "Snakefile", workdir=repo)
            wf.dag(DAGSettings()).execute_workflow(executor="dryrun")
    except SystemExit as e:
        return str(e.code)
    finally:
        os.chdir(cwd)
    return None


@pytest.mark.slow
def test_every_mutation_plans_or_fails_with_one_line_naming_the_key(tmp_path):
    repo = copy_repo(ROOT, tmp_path / "repo")
    base = yaml.safe_load((repo / "params.yaml").read_text())
    rng = random.Random(SEED)
    outcomes, defects = {"planned": 0, "refused": 0}, []
    for i in range(N_MUTATIONS):
        cfg, what, path = mutate(base, rng)
        (repo / "params.yaml").write_text(yaml.dump(cfg, Dumper=DUMPER, sort_keys=False))
        try:
            message = plan(repo)
        except Exception as e:  # a traceback reaches the user: a defect
            defects.append(f"{i} {what}: {type(e).__name__}: {e}"[:400])
            continue
        if message is None:
            outcomes["planned"] += 1
            continue
        outcomes["refused"] += 1
        names = {str(p) for p in path if not isinstance(p, int)}
        if "\n" in message or not any(n in message for n in names) or "Traceback" in message:
            defects.append(f"{i} {what}: not one line naming the key: {message[:400]}")
        assert not (repo / "results").exists() or not any((repo / "results").rglob("*.json")), what  # no job ran
    print(f"{N_MUTATIONS} mutations (seed {SEED}): {outcomes}")
    assert not defects, f"{len(defects)} of {N_MUTATIONS} mutations:\n" + "\n".join(defects)
    assert outcomes["refused"] >= N_MUTATIONS // 4 and outcomes["planned"] >= 10  # the draw exercises both ways
