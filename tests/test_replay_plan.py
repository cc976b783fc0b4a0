"""The replay preset (presets/replay.yaml) plans every rule of the paper suite, in far fewer jobs.

The preset replays the paper DAG on CPU against the stand-in hub: it may shrink sizes and model
sets, never drop a rule. Two dry runs in copies of the workflow: the full paper plan (``snakemake -n -p
--config suite=paper``, ~8 CPU-s: conftest's ``paper_dry_run``, shared with the other tests that read it) and
the replay plan (``snakemake -n --quiet rules`` with ``allow_unpinned=True --configfile presets/replay.yaml``);
their job tables must name the same rules, and the replay's total must stay under ``MAX_REPLAY_JOBS``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_workflow import copy_repo

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PRESET = "presets/replay.yaml"
# The replay plan had 292 jobs when the preset was written, 171 of them for the 19 VTAB tasks (38
# hub_dataset, 19 probe_vtab_task, 38 x 3 extract_vision); convergence.vtab_tasks then cut them to 2 tasks
# (136 jobs; 147 with Fig 2's ResNets and SmallAlexNet), and the target of a 15-minute test suite to 1 task, one
# test-set LM and one sample-size LM (130 jobs: each job is a process whose imports cost seconds of CPU in
# tests/test_replay.py's fixture).
MAX_REPLAY_JOBS = 132
# Keys that name what is loaded (a hub repo, its revision, a bridged backbone): the preset never sets them.
FORBIDDEN_KEYS = {"repo", "revision", "source", "mnist_revision", "tasks"}
TABLE_ROW = re.compile(r"^(\w+)\s+(\d+)$")


def _job_table(log: str) -> dict[str, int]:
    """Rule -> job count from the "Job stats" table of a dry run; "total" kept under its own key."""
    lines = log.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() == ["job", "count"])
    table = {}
    for line in lines[start + 2:]:  # past the header and its dashes
        row = TABLE_ROW.match(line.strip())
        if not row:
            break
        table[row.group(1)] = int(row.group(2))
    return table


@pytest.fixture(scope="module")
def plans(tmp_path_factory, paper_dry_run) -> dict[str, dict[str, int]]:
    """Job tables of the full paper plan (conftest's shared dry run) and the replay plan (dry-run in a copy of the
    workflow)."""
    tmp = copy_repo(ROOT, tmp_path_factory.mktemp("replay"))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--dry-run", "--quiet", "rules", "--config", "suite=paper",
                           "allow_unpinned=True", "--configfile", PRESET],
                          cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    tables = {}
    for name, rc, log in (("full", paper_dry_run["returncode"], paper_dry_run["log"]),
                          ("replay", proc.returncode, proc.stdout)):
        assert rc == 0, f"{name} dry run failed:\n{log[-6000:]}"
        tables[name] = _job_table(log)
        assert tables[name].get("total"), f"no job table in the {name} dry run:\n{log[-3000:]}"
    return tables


def test_replay_plans_every_rule_of_the_paper_plan(plans):
    full = set(plans["full"]) - {"total"}
    replay = set(plans["replay"]) - {"total"}
    assert replay == full, f"rules the replay drops: {sorted(full - replay)}; rules it adds: {sorted(replay - full)}"


def test_replay_plan_is_small(plans):
    total = plans["replay"]["total"]
    assert total < MAX_REPLAY_JOBS, f"the replay plans {total} jobs (limit {MAX_REPLAY_JOBS}): {plans['replay']}"
    grown = {r: (n, plans["full"][r]) for r, n in plans["replay"].items() if r != "total" and n > plans["full"][r]}
    assert not grown, f"rules with more jobs in the replay than in the full plan (replay, full): {grown}"


def test_preset_sets_no_repo_or_revision():
    """Sizes and model sets only: no key that picks what is downloaded or which version of it."""
    def keys(node, path=()):
        if isinstance(node, dict):
            for key, value in node.items():
                yield path + (str(key),)
                yield from keys(value, path + (str(key),))
        elif isinstance(node, list):
            for item in node:
                yield from keys(item, path)

    preset = yaml.safe_load((ROOT / PRESET).read_text())
    bad = [".".join(p) for p in keys(preset) if p[-1] in FORBIDDEN_KEYS]
    assert not bad, f"{PRESET} sets {bad}: repo ids and revisions stay params.yaml's"
