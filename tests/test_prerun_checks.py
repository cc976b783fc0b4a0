"""The paper suite's pre-run checks read the run as Snakemake does.

The checks (every revision pinned; every hub item cached when the hub cannot be reached; a token
for the gated repos) run in the Snakefile's ``onstart:``, which Snakemake calls only when it is
about to execute jobs. They once ran while the Snakefile was parsed and guessed the mode from a
literal ``-n``/``--dry-run`` in argv: ``-np`` was refused as unpinned, and ``--touch`` (``make
pull``), ``--report``, ``--dag``, ``--rulegraph``, ``--summary`` and ``--list-rules`` were refused
offline. Each of those modes must now plan, touch or report without a refusal; a real run is still
stopped before any job.

The checks read only the config's hub items (``prh.pin.hub_entries``, the plain-URL checkpoints), never the
plan, so the runs here plan the paper suite with the replay preset layered on (``--configfile
presets/replay.yaml``: the same hub items, every rule of the paper plan, ~130 jobs instead of ~2,000;
``test_the_replay_preset_leaves_every_checked_hub_item`` holds it to that). A dry run of the full plan costs
~8 CPU-s, its ``--touch --forceall`` ~23 s; tests/test_paper_dryrun.py and others plan it in full.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_workflow import copy_repo

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
REFUSALS = ("not a commit SHA", "not in the Hugging Face cache", "are gated and no hub token is set")
REPLAY = ("--configfile", "presets/replay.yaml")  # the paper suite's hub items and rules, at the replay's size


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A copy of the repository with the shipped params.yaml (revisions are branches until pinned)."""
    return copy_repo(ROOT, tmp_path_factory.mktemp("prerun") / "repo")


def _snakemake(work, *args, config=("suite=paper",), preset=REPLAY, **env):
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HOME": str(work / "empty_hf_home"),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env}
    env = {k: v for k, v in env.items() if v is not None}
    proc = subprocess.run([sys.executable, "-m", "snakemake", *args, *preset, "--config", *config],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("flags", [["-np"], ["-pn"], ["-nF"], ["--dry-run", "-p"]])
def test_every_spelling_of_a_dry_run_plans_the_unpinned_paper_suite(work, flags):
    rc, log = _snakemake(work, *flags, "--quiet", "rules")
    assert rc == 0, log[-3000:]
    assert not any(r in log for r in REFUSALS)
    assert "extract_vision" in log and "GPU-hours of the planned jobs" in log  # the plan and its cost


@pytest.mark.parametrize("flags", [["--touch", "--forceall", "--cores", "1", "--quiet"], ["--dag"], ["--rulegraph"],
                                   ["--summary"], ["--list-rules"]])
def test_modes_that_execute_nothing_are_not_refused_offline(work, flags):
    """`make pull` runs --touch --forceall: with the hub offline, an empty cache and unpinned revisions."""
    rc, log = _snakemake(work, *flags)
    assert rc == 0, log[-3000:]
    assert not any(r in log for r in REFUSALS)


def test_report_is_not_refused_offline(work):
    """--report renders what exists; here nothing was computed, so Snakemake (not our checks) says what is missing."""
    rc, log = _snakemake(work, "--report", "report.html")
    assert not any(r in log for r in REFUSALS), log[-3000:]
    assert rc == 0 or "marked for report but does not exist" in log


def test_real_run_is_still_stopped_before_any_job(work):
    rc, log = _snakemake(work, "--cores", "1")
    assert rc != 0 and "Finished jobid" not in log and "not a commit SHA" in log


def test_cache_check_runs_when_the_hub_is_unreachable_without_hf_hub_offline(work):
    """No HF_HUB_OFFLINE, and an endpoint nothing listens on (port 9 of the loopback refuses at once):
    the run stops before any job with the list of every missing item, including the streamed LM-score
    corpus and the bridge's GPT-2, which the cache check once did not know."""
    rc, log = _snakemake(work, "--cores", "1", config=("suite=paper", "allow_unpinned=True"),
                         HF_HUB_OFFLINE=None, HF_DATASETS_OFFLINE=None, TRANSFORMERS_OFFLINE=None,
                         HF_ENDPOINT="http://127.0.0.1:9")
    assert rc != 0 and "Finished jobid" not in log
    assert "the hub cannot be reached" in log and "hub items of the paper suite are not in the Hugging Face cache" in log
    assert "Skylion007/openwebtext" in log and "model bridge.paper.config source: gpt2" in log


def test_hub_reachable_reads_offline_mode_and_a_refused_endpoint(monkeypatch):
    from huggingface_hub import constants

    from prh.models.hub_cache import hub_reachable

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert not hub_reachable()
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    assert not hub_reachable(timeout=2)


def test_missing_items_come_from_the_one_hub_list():
    """Every item prh.pin.hub_entries lists (what pinning and the manifest read) is checked in the cache."""
    from prh.models.hub_cache import missing_hub_items
    from prh.pin import hub_entries

    cfg = yaml.safe_load((ROOT / "params.yaml").read_text())
    missing = "\n".join(missing_hub_items(cfg, cache_dir="/nonexistent", datasets_cache_dir="/nonexistent"))
    for e in hub_entries(cfg, include_unset=True):
        assert f"{e['repo_id']} (revision {e['revision'] or 'main'})" in missing, e["key"]


def test_the_replay_preset_leaves_every_checked_hub_item():
    """The runs above plan with presets/replay.yaml: layered on params.yaml it names the same hub items (the
    pin, cache and gated checks' input) and the same missing list as params.yaml alone."""
    from prh.config import merge
    from prh.models.hub_cache import missing_hub_items
    from prh.pin import hub_entries

    cfg = yaml.safe_load((ROOT / "params.yaml").read_text())
    replay = merge(yaml.safe_load((ROOT / "params.yaml").read_text()), yaml.safe_load((ROOT / REPLAY[1]).read_text()))
    assert replay["model_sets"] != cfg["model_sets"]  # the preset is layered (a smaller plan), not ignored
    assert hub_entries(replay, include_unset=True) == hub_entries(cfg, include_unset=True)
    caches = {"cache_dir": "/nonexistent", "datasets_cache_dir": "/nonexistent"}
    assert missing_hub_items(replay, **caches) == missing_hub_items(cfg, **caches)


def test_gated_repos_need_a_token_before_a_real_run(tmp_path):
    from prh.errors import ConfigError
    from prh.models.hub_cache import check_gated_access, gated_repos

    manifest = yaml.safe_load((ROOT / "workflow" / "resources" / "hub_manifest.yaml").read_text())
    gated = gated_repos(manifest)
    assert {"meta-llama/Meta-Llama-3-8B", "meta-llama/Meta-Llama-3-70B", "meta-llama/Meta-Llama-3-8B-Instruct",
            "google/gemma-2b", "google/gemma-7b", "mistralai/Mixtral-8x7B-v0.1"} <= gated
    cfg = yaml.safe_load((ROOT / "params.yaml").read_text())
    with pytest.raises(ConfigError) as err:
        check_gated_access(cfg, manifest, token="", cache_dir=tmp_path)
    msg = str(err.value)
    assert all(repo in msg for repo in gated) and "hf auth login" in msg and "HF_TOKEN" in msg
    assert check_gated_access(cfg, manifest, token="hf_x", cache_dir=tmp_path) is cfg
    # a config without gated repos needs no token
    open_only = {"paper": {"models": {"b": cfg["paper"]["models"]["bloomz-560m"]}}}
    assert check_gated_access(open_only, manifest, token="", cache_dir=tmp_path) is open_only


def test_reachable_hub_without_a_token_stops_on_the_gated_repos(work):
    """A hub that answers (a loopback HTTP server standing in for HF_ENDPOINT) and no token: the run stops
    before any job naming the gated repos, read from the manifest beside the Snakefile."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rc, log = _snakemake(work, "--cores", "1", config=("suite=paper", "allow_unpinned=True"),
                             HF_HUB_OFFLINE=None, HF_DATASETS_OFFLINE=None, TRANSFORMERS_OFFLINE=None,
                             HF_TOKEN=None, HUGGING_FACE_HUB_TOKEN=None,
                             HF_ENDPOINT=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
    assert rc != 0 and "Finished jobid" not in log
    assert "hub repos the paper suite loads are gated and no hub token is set" in log, log[-2500:]
    assert "meta-llama/Meta-Llama-3-70B" in log and "hf auth login" in log
    assert "not in the Hugging Face cache" not in log
